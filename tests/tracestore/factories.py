"""Realistic trace dicts (the `rag ask --json` shape: docs/schema/trace.schema.json, which
tests/test_trace_schema.py checks they match) and helpers that run in child processes."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

BASE_TIME = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def errors_in_threads(work: Callable[[int], None], workers: int = 4) -> list[BaseException]:
    """Run ``work(0)`` .. ``work(workers - 1)`` in as many threads at once; what they raised."""
    errors: list[BaseException] = []

    def run(worker: int) -> None:
        try:
            work(worker)
        except BaseException as exc:  # noqa: BLE001 - returned for the test to assert on
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


def chunk(
    doc_id: str, text: str, *, title: str = "Travel policy", page: int | None = 3, version: str = "v1"
) -> dict[str, Any]:
    return {
        "chunk_id": hashlib.sha256(f"{doc_id}\x000\x00{text}".encode()).hexdigest()[:24],
        "doc_id": doc_id,
        "source": f"policies/{doc_id}.pdf",
        "title": title,
        "page": page,
        "page_end": None if page is None else page + 1,
        "section": f"{title} > Reimbursement",
        "text": text,
        "doc_version": version,
    }


def candidate(c: dict[str, Any], rank: int, *, hop: int = 0, added_by: str | None = None) -> dict[str, Any]:
    return {
        **c,
        "rerank_rank": rank,
        "rerank_score": round(0.95 - rank * 0.031, 6),
        "bm25_rank": rank + 1 if rank % 3 else None,
        "bm25_score": 12.5 - rank * 0.7 if rank % 3 else None,
        "dense_rank": rank + 2,
        "dense_score": 0.81234567 - rank / 97,
        "fused_score": 1 / (60 + rank) + 1 / (62 + rank),
        "fused_rank": rank,
        "hop": hop,
        "added_by": added_by,
        "intents": [0] if rank % 2 else [0, 1],
    }


def make_trace(
    *,
    user: str = "alice",
    question: str = "How much can I claim for a taxi to the airport?",
    created_at: datetime | None = None,
    chunks: list[dict[str, Any]] | None = None,
    abstained: bool = False,
    failed_citation: bool = False,
    error: str | None = None,
    session_id: str | None = None,
    n_candidates: int = 12,
    seed: int = 0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    if chunks is None:
        chunks = [
            chunk(
                f"doc-{i % 4}",
                f"Passage {i} of seed {seed}: taxis are reimbursed up to {20 + i} EUR. " * 3,
                page=i + 1,
            )
            for i in range(n_candidates)
        ]
    candidates = [
        candidate(c, rank, hop=1 if rank >= 10 else 0, added_by="neighbour" if rank == 11 else None)
        for rank, c in enumerate(chunks)
    ]
    evidence = []
    for n, c in enumerate(candidates[:5], start=1):
        item = {k: v for k, v in c.items() if k != "intents"}
        evidence.append({"n": n, **item, "bundle": 0 if n <= 2 else n - 2, "cited": n in (1, 3)})
    citations = [
        {
            "n": 1,
            "chunk_id": evidence[0]["chunk_id"],
            "valid": True,
            "supported": True,
            "sentence": "Taxis are reimbursed [1].",
            "support_score": 0.91,
        },
        {
            "n": 3,
            "chunk_id": evidence[2]["chunk_id"],
            "valid": True,
            "supported": not failed_citation,
            "sentence": "Up to 22 EUR [3].",
            "support_score": 0.12 if failed_citation else 0.77,
        },
    ]
    if failed_citation:
        citations.append(
            {
                "n": 9,
                "chunk_id": None,
                "valid": False,
                "supported": False,
                "sentence": "Always [9].",
                "support_score": 0.0,
            }
        )
    timings = {"retrieve": 12.5, "rerank": 40.25, "pack": 0.5, "generate": 0.0 if error else 812.0}
    timings["total"] = sum(timings.values())
    created = created_at or BASE_TIME + timedelta(seconds=rng.randint(0, 10_000))
    return {
        "trace_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "created_at": created.isoformat(),
        "question": question,
        "user": user,
        "groups": ["staff", "finance"],
        "as_of": created.date().isoformat(),
        "tags": ["travel"],
        "session_id": session_id,
        "answer": "" if (abstained or error) else "Taxis to the airport are reimbursed up to 22 EUR [1][3].",
        "abstained": abstained,
        "abstain_reason": "below_threshold" if abstained else None,
        "intents": [{"index": 0, "text": question}, {"index": 1, "text": "airport taxi limit"}],
        "citations": [] if abstained else citations,
        "evidence": evidence,
        "candidates": candidates,
        "dropped": [
            {
                "chunk_id": candidates[7]["chunk_id"],
                "reason": f"near_duplicate_of:{candidates[2]['chunk_id']}",
                "stage": "dedup",
            },
            {"chunk_id": candidates[9]["chunk_id"], "reason": "over_budget", "stage": "pack"},
        ],
        "bundles": [
            {
                "bundle_id": 0,
                "chunk_ids": [evidence[0]["chunk_id"], evidence[1]["chunk_id"]],
                "reason": "rule_exception",
                "score": 0.95,
            },
            {"bundle_id": 1, "chunk_ids": [evidence[2]["chunk_id"]], "reason": "single", "score": 0.888},
        ],
        "hops": [
            {
                "hop": 1,
                "from": [candidates[0]["chunk_id"]],
                "queries": [
                    {
                        "term": "airport",
                        "query": "airport taxi cap",
                        "from": candidates[0]["chunk_id"],
                        "found": [c["chunk_id"] for c in candidates[-2:]],
                        "best_score": 0.5,
                    }
                ],
                "linked": [
                    {
                        "chunk_id": candidates[-1]["chunk_id"],
                        "from": candidates[0]["chunk_id"],
                        "term": "airport",
                        "score": 0.5,
                        "moved": False,
                    }
                ],
                "stopped": "nothing new: no follow-up passage beat the evidence it would displace",
            }
        ],
        "answer_check": {
            "complete": not abstained,
            "intents": [
                {
                    "index": 0,
                    "text": question,
                    "addressed": not abstained,
                    "coverage": 0.0 if abstained else 0.75,
                    "sentence": ""
                    if abstained
                    else "Taxis to the airport are reimbursed up to 22 EUR [1][3].",
                }
            ],
        },
        "claims": []
        if abstained
        else [
            {
                "index": 0,
                "text": "Taxis to the airport are reimbursed up to 22 EUR.",
                "sentence": "Taxis to the airport are reimbursed up to 22 EUR [1][3].",
                "cited": [1, 3],
                "verdict": "unsupported" if failed_citation else "supported",
                "n": 1,
                "chunk_id": evidence[0]["chunk_id"],
                "evidence_sentence": "taxis are reimbursed up to 20 EUR.",
                "score": 0.12 if failed_citation else 0.91,
                "reason": "",
                "conflicts": [],
                "attributed": True,
            }
        ],
        "verified": not (abstained or failed_citation),
        "verification": {"checked": 0 if abstained else 1, "repaired": False},
        "budgets": {
            "evidence_k": 6,
            "evidence_token_budget": 1800,
            "evidence_tokens": 912,
            "history_token_budget": 600,
            "history_tokens": 400,
            "facts": 0,
        },
        "prompt": {
            "system": "You answer from the evidence only.",
            "user": f"Evidence:\n[1] ...\nQuestion: {question}",
            "tokens": 1034,
        },
        "model": "qwen2.5-1.5b-instruct",
        "reranker": "cross-encoder",
        "packing": "edges",
        "generation_mode": "standard",
        "tokens": {"prompt": 1034, "completion": 0 if error else 41, "evidence": 912, "history": 0},
        "timings_ms": timings,
        "stages": [
            {
                "name": "retrieve",
                "ms": 12.5,
                "detail": {"lexical": 40, "dense": 40, "filter": {"user": user, "groups": ["staff"]}},
            },
            {"name": "rerank", "ms": 40.25, "detail": {"model": "cross-encoder", "kept": 12}},
            {
                "name": "generate",
                "ms": timings["generate"],
                "detail": {"finish_reason": "stop" if not error else None},
            },
        ],
        "error": error,
    }


def roundtrip(trace: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(trace))


# -- run in child processes (spawn): module-level, importable functions -------------------------------------------


def upgrade_in_child(url: str, barrier: Any) -> str | None:
    from rag.tracestore.db import upgrade

    barrier.wait(timeout=60)
    return upgrade(url)


def write_traces_in_child(url: str, worker: int, count: int, barrier: Any) -> list[str]:
    from rag.tracestore import TraceStore

    store = TraceStore(url)
    shared = [chunk("doc-shared", f"Shared passage {i}.") for i in range(12)]  # every worker snapshots these
    barrier.wait(timeout=60)
    ids = []
    try:
        for i in range(count):
            trace = make_trace(
                user=f"user{worker}", chunks=shared if i % 2 else None, seed=worker * 100_000 + i
            )
            ids.append(store.traces.save(trace))
    finally:
        store.close()
    return ids
