"""Train the sentence-dependency model (``rag/models/dependency.json``): does a sentence's meaning depend on the
sentence (or heading) before it in its passage? (``rag.models.dependency``.)

    python -m evaluation.training.dependency pool --work-dir /work/cache/suite --out pool.jsonl   # pairs to label
    python -m evaluation.training.dependency train [--write]                                      # LOCO, then fit

The labels (``evaluation/suites/dependency/pairs.jsonl``) are sentence pairs labelled by hand: 1 when the sentence,
read alone, loses what the one before it (or the heading above it) says (its examples, exception, condition or answer
belong to it; it is an item of the list the one before introduces; it points back at it), else 0. Two sources:
``pool``, pairs of the five policy corpora's documents (dev, GitLab, MoJ, Hypha, sample) drawn by ``pool`` with a
fixed seed; ``answer``, every sentence the extractive answers of the policy suites' tune questions showed without the
sentence or heading before it (the answers of ``main`` at the start of issue 54). Test-split questions and answers
are never read.

``validation.jsonl`` beside the labels holds, labelled the same way and never trained on, every sentence the
extractive answers of the branch that shipped the model (issue 54) showed on the same tune questions without the
sentence or heading before it: what the answer-text check (``evaluation.graders.cut_dependencies``) was validated on.

``train`` reports each corpus held out (trained on the other four, both sources): precision, recall and accuracy at
the bar, per source, and picks the bar: the highest whose held-out recall on the answer pairs reaches ``RECALL`` (a
missed dependency shows a sentence cut from its meaning; a false one costs a sentence of length). ``--write`` fits on every label and writes the model.
Each labelled pair also trains the "hidden" case (the sentence before is not at hand, ``PREV_KINDS``) with the same
label, so a passage's first sentence is judged by its own words.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag.models.dependency import DEFAULT_DEPENDENCY_MODEL, DependencyModel, dependency_features

POLICY = ("dev", "gitlab", "moj", "hypha", "sample")
LABELS = Path(__file__).resolve().parents[1] / "suites" / "dependency" / "pairs.jsonl"
SEED = 20261207
RECALL = 0.8  # the bar keeps at least this share of the held-out dependencies of answer sentences
C = 1.0
MIN_COUNT = 2  # a word feature seen fewer times in training is not kept


# ------------------------------------------------------------------------------------------------ the pool
def pool(work_dir: Path, per_corpus: int, seed: int = SEED) -> list[dict[str, Any]]:
    """``per_corpus`` sentence pairs from each policy corpus ingested under ``work_dir`` (the suite's folders):
    a chunk drawn at random, then one of its quotable sentences that has a sentence or heading before it."""
    from rag.stages.extractive import evidence_sentences
    from rag.stores.index import CURRENT, index_root, load_chunks
    from rag.types import Candidate, Evidence

    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for corpus in POLICY:
        root = index_root(work_dir / corpus)
        generation = root / "generations" / (root / CURRENT).read_text().strip()
        chunks, _ = load_chunks(generation)
        chunks = sorted(chunks, key=lambda c: c.chunk_id)
        rng.shuffle(chunks)
        taken = 0
        for chunk in chunks:
            if taken >= per_corpus:
                break
            sents = [
                s
                for s in evidence_sentences([Evidence(1, Candidate(chunk), 0)])
                if s.before and s.table is None
            ]
            if not sents:
                continue
            s = rng.choice(sents)
            out.append(
                {
                    "id": f"{corpus}-{taken:03d}",
                    "corpus": corpus,
                    "chunk_id": chunk.chunk_id,
                    "heading": s.heading,
                    "kind": "heading" if s.after_heading else "sentence",
                    "prev": s.before,
                    "cur": s.text,
                    "label": None,
                }
            )
            taken += 1
    return out


# ------------------------------------------------------------------------------------------------ training
def load_labels(path: Path = LABELS) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in rows if r.get("label") in (0, 1)]


def _examples(rows: Sequence[dict[str, Any]]) -> tuple[list[dict[str, float]], list[int]]:
    """Each pair as read (its kind), and again with the sentence before hidden."""
    x, y = [], []
    for r in rows:
        x.append(dependency_features(r["prev"], r["cur"], kind=r["kind"]))
        y.append(int(r["label"]))
        x.append(dependency_features("", r["cur"], kind="hidden"))
        y.append(int(r["label"]))
    return x, y


def fit(rows: Sequence[dict[str, Any]], *, c: float = C, bar: float = 0.5) -> DependencyModel:
    """A logistic model over the rows' features (word features seen at least ``MIN_COUNT`` times)."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression

    x, y = _examples(rows)
    counts: dict[str, int] = {}
    for f in x:
        for k in f:
            counts[k] = counts.get(k, 0) + 1
    keep = [{k: v for k, v in f.items() if not k.startswith("w") or counts[k] >= MIN_COUNT} for f in x]
    vec = DictVectorizer()
    matrix = vec.fit_transform(keep)
    lr = LogisticRegression(C=c, max_iter=5000)
    lr.fit(matrix, y)
    weights = {name: float(w) for name, w in zip(vec.get_feature_names_out(), lr.coef_[0], strict=True) if w}
    return DependencyModel(weights, float(lr.intercept_[0]), bar)


def held_out(rows: Sequence[dict[str, Any]], *, c: float = C) -> list[tuple[dict[str, Any], float]]:
    """Every labelled pair with the probability a model trained on the other corpora gives it."""
    out = []
    for corpus in POLICY:
        test = [r for r in rows if r["corpus"] == corpus]
        train = [r for r in rows if r["corpus"] != corpus]
        if not test or not train:
            continue
        model = fit(train, c=c)
        out += [(r, model.probability(r["prev"], r["cur"], kind=r["kind"])) for r in test]
    return out


def scores(pairs: Sequence[tuple[dict[str, Any], float]], bar: float) -> dict[str, Any]:
    tp = sum(1 for r, p in pairs if p >= bar and r["label"] == 1)
    fp = sum(1 for r, p in pairs if p >= bar and r["label"] == 0)
    fn = sum(1 for r, p in pairs if p < bar and r["label"] == 1)
    tn = len(pairs) - tp - fp - fn
    return {
        "pairs": len(pairs),
        "dependent": tp + fn,
        "precision": round(tp / (tp + fp), 3) if tp + fp else None,
        "recall": round(tp / (tp + fn), 3) if tp + fn else None,
        "accuracy": round((tp + tn) / len(pairs), 3) if pairs else None,
    }


def choose_bar(pairs: Sequence[tuple[dict[str, Any], float]], recall: float = RECALL) -> float:
    """The highest bar (0.05 steps) whose held-out recall reaches ``recall``."""
    for bar in np.round(np.arange(0.95, 0.0, -0.05), 2):
        r = scores(pairs, float(bar))["recall"]
        if r is not None and r >= recall:
            return float(bar)
    return 0.05


def auc(pairs: Sequence[tuple[dict[str, Any], float]]) -> float | None:
    pos = [p for r, p in pairs if r["label"] == 1]
    neg = [p for r, p in pairs if r["label"] == 0]
    if not pos or not neg:
        return None
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return round(wins / (len(pos) * len(neg)), 3)


def report(rows: Sequence[dict[str, Any]], *, c: float = C, recall: float = RECALL) -> dict[str, Any]:
    pairs = held_out(rows, c=c)
    answers = [(r, p) for r, p in pairs if r.get("source") == "answer"]
    bar = choose_bar(answers or pairs, recall)
    return {
        "labels": len(rows),
        "dependent": sum(r["label"] for r in rows),
        "c": c,
        "bar": bar,
        "auc": auc(pairs),
        "pooled": scores(pairs, bar),
        "by_source": {
            source: {**scores(sub, bar), "auc": auc(sub)}
            for source in ("pool", "answer")
            if (sub := [(r, p) for r, p in pairs if r.get("source", "pool") == source])
        },
        "by_corpus": {
            corpus: scores([(r, p) for r, p in pairs if r["corpus"] == corpus], bar) for corpus in POLICY
        },
        "by_kind": {
            kind: scores([(r, p) for r, p in pairs if r["kind"] == kind], bar)
            for kind in ("sentence", "heading")
        },
        "bars": {str(b): scores(answers or pairs, b) for b in (0.3, 0.4, 0.5, 0.6, 0.7)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m evaluation.training.dependency", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pool", help="Draw sentence pairs to label.")
    p.add_argument("--work-dir", type=Path, required=True, help="The suite's work dir (corpora ingested).")
    p.add_argument("--per-corpus", type=int, default=120)
    p.add_argument("--seed", type=int, default=SEED)
    p.add_argument("--out", type=Path, required=True)
    t = sub.add_parser("train", help="Report held-out figures; --write fits on every label.")
    t.add_argument("--labels", type=Path, default=LABELS)
    t.add_argument("--c", type=float, default=C)
    t.add_argument("--recall", type=float, default=RECALL, help="The held-out recall the bar keeps.")
    t.add_argument("--write", action="store_true", help=f"Write {DEFAULT_DEPENDENCY_MODEL}.")
    args = parser.parse_args(argv)
    if args.command == "pool":
        rows = pool(args.work_dir, args.per_corpus, args.seed)
        args.out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"wrote {len(rows)} pairs to {args.out}")
        return 0
    rows = load_labels(args.labels)
    result = report(rows, c=args.c, recall=args.recall)
    print(json.dumps(result, indent=2))
    if args.write:
        model = fit(rows, c=args.c, bar=result["bar"])
        model = DependencyModel(
            model.weights,
            model.intercept,
            model.bar,
            {
                "labels": len(rows),
                "dependent": result["dependent"],
                "c": args.c,
                "recall": args.recall,
                "held_out": result["pooled"],
                "auc": result["auc"],
                "trained_by": "python -m evaluation.training.dependency train --write",
            },
        )
        DEFAULT_DEPENDENCY_MODEL.write_text(json.dumps(model.to_json(), indent=1) + "\n")
        print(f"wrote {DEFAULT_DEPENDENCY_MODEL}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
