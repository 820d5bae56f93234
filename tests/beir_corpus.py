"""A tiny BEIR corpus (corpus.jsonl, queries.jsonl, qrels.tsv) for the retrieval-quality and scaling benchmarks."""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    {
        "_id": "d1",
        "title": "Annual leave",
        "text": "Employees receive 25 days of paid annual leave per calendar year. "
        "Unused leave may be carried over to the next year.",
    },
    {
        "_id": "d2",
        "title": "Remote work",
        "text": "Staff may work remotely up to three days a week with the approval of their manager.",
    },
    {
        "_id": "d3",
        "title": "Expense claims",
        "text": "Travel expenses must be claimed within 30 days, with the receipts attached to the claim.",
    },
    {
        "_id": "d4",
        "title": "Passwords",
        "text": "Passwords must be at least 14 characters long and must never be shared with anyone.",
    },
]
QUERIES = {
    "q1": "How many days of annual leave do employees get?",
    "q2": "How long do I have to claim travel expenses?",
    "q3": "How long must a password be?",
    "q4": "Can staff work from home?",
    "q5": "Who approves remote work?",
    "q6": "Can unused leave be carried over?",
}
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq2\td1\t0\nq3\td4\t1\nq4\td2\t1\n"


def write_beir(root: Path) -> Path:
    """The corpus, queries and qrels files under ``root``."""
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in QUERIES.items())
    )
    (root / "qrels.tsv").write_text(QRELS)
    return root
