"""Sentence-level training pairs for the reader's cross-encoder (``rag/models/reader-ce``).

    python -m evaluation.reader_ce_data --shared ../shared --out reader-ce.jsonl.gz [--nq 1500]

Groups in ``evaluation.ce_train``'s format ({src, q, pos, neg, near}), one per question, every passage a sentence
read with its heading (``heading: sentence``, as ``rag.models.sentences.reading_text`` writes it):

* ``nq``: NQ-Open (``lost-in-the-middle/nq-open-oracle.jsonl.gz``), the first ``--nq`` questions: the gold
  passage's sentences holding an answer string are positives, its other sentences negatives (same topic, no
  answer: the near miss a reader must refuse).
* ``hotpot``: HotpotQA's tune split (``evaluation.splits``): sentences of the supporting paragraphs holding
  the answer span are positives; their other sentences and two sentences of each other paragraph negatives.

No policy handbook is used, so every policy suite is held out from this model; the reader's linear layer over it
is validated leave-one-corpus-out (``evaluation.reader_train``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.graders import norm
from rag.models.sentences import reading_text
from rag.text import split_sentences


def _holds(sentence: str, answers: list[str]) -> bool:
    s = f" {norm(sentence)} "
    return any(a and f" {a} " in s for a in (norm(x) for x in answers))


def nq_groups(shared: Path, limit: int) -> Iterator[dict[str, Any]]:
    path = shared / "data/lost-in-the-middle/nq-open-oracle.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i >= limit:
                break
            r = json.loads(line)
            ctx = r["ctxs"][0]
            sents = [s for s in split_sentences(ctx["text"]) if len(s.split()) >= 4]
            pos = [reading_text(ctx["title"], s) for s in sents if _holds(s, r["answers"])]
            neg = [reading_text(ctx["title"], s) for s in sents if not _holds(s, r["answers"])][:6]
            if pos and neg:
                yield {"src": "nq", "q": r["question"], "pos": pos, "neg": neg, "near": []}


def hotpot_groups(shared: Path) -> Iterator[dict[str, Any]]:
    from evaluation.splits import split_ids

    keep = split_ids("hotpotqa", "tune")
    for name in ("dev-multihop.jsonl", "dev-mixed.jsonl"):
        for line in (shared / "data/hotpotqa" / name).read_text().splitlines():
            if not line.strip():
                continue
            r = json.loads(line)
            if str(r["question_id"]) not in keep:
                continue
            answers = [s for o in r.get("answers_objects", []) for s in o.get("spans", []) if s]
            if not answers or any(norm(a) in ("yes", "no") for a in answers):
                continue
            pos: list[str] = []
            neg: list[str] = []
            for c in r["contexts"]:
                sents = [s for s in split_sentences(c["paragraph_text"]) if len(s.split()) >= 4]
                if c.get("is_supporting"):
                    for s in sents:
                        (pos if _holds(s, answers) else neg).append(reading_text(c["title"], s))
                else:
                    neg += [reading_text(c["title"], s) for s in sents[:2] if not _holds(s, answers)]
            if pos and neg:
                yield {"src": "hotpot", "q": r["question_text"], "pos": pos, "neg": neg[:8], "near": []}


def policy_groups(examples: Sequence[dict[str, Any]], negatives: int = 10) -> Iterator[dict[str, Any]]:
    """The policy suites' tune questions as the reader saw them (``evaluation.reader_train`` examples): the
    sentences stating a gold quote are positives, the other sentences closest to the intent (cosine) negatives;
    every sentence of a near miss's evidence that comes close is a negative (topical, and not the answer)."""
    from rag.models.reader import FEATURES

    cos = FEATURES.index("cos")
    for g in examples:
        if g["corpus"] == "hotpotqa":
            continue
        order = np.argsort(-g["x"][:, cos], kind="stable")
        pos = [g["ce_texts"][i] for i in order if g["y"][i]]
        neg = [g["ce_texts"][i] for i in order if not g["y"][i]][:negatives]
        if (pos or not g["answerable"]) and neg:
            yield {"src": g["corpus"], "q": g["query"], "pos": pos, "neg": neg, "near": []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--nq", type=int, default=1500)
    parser.add_argument(
        "--examples", type=Path, help="Add the policy suites' groups from evaluation.reader_train --save."
    )
    parser.add_argument("--repeat", type=int, default=1, help="Each policy group this many times.")
    args = parser.parse_args(argv)
    groups = [*nq_groups(args.shared, args.nq), *hotpot_groups(args.shared)]
    if args.examples:
        import pickle

        groups += [
            g for g in policy_groups(pickle.loads(args.examples.read_bytes())) for _ in range(args.repeat)
        ]
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        for g in groups:
            f.write(json.dumps(g) + "\n")
    pairs = sum(len(g["pos"]) + len(g["neg"]) for g in groups)
    print(f"{len(groups)} groups, {pairs} pairs -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
