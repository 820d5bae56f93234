"""Reranker training groups from the quality suites' own corpora: the policy handbooks and HotpotQA.

``evaluation.rerank_train`` fits the feature reranker on SciFact and NQ-Open; neither looks like an employee asking a
handbook. This module asks every question of a suite's split through the query path (``build_pipeline`` over the
suite's ingested corpus, as ``rag eval suite`` does) and writes, per question, every feature the reranker computes
for its candidates (``FeatureReranker.all_features``: the stored sentence vectors, reading vectors and passage
tokens of the index), whatever the serving model weighs, with a label per candidate:

* policy suites: 1 when the candidate covers a gold quote (``covered``), -1 when it holds part of one (neither
  answer nor safe negative), else 0; ``quotes`` lists the quotes each candidate covers, so "every quote in the
  first k" can be scored;
* HotpotQA: 1 for the two supporting paragraphs.

Near-miss unanswerables carry no positive and give no training pair. Hop candidates (retrieved for a bridge
term, not for the question) are left out. ``python -m evaluation.rerank_groups --split tune --out F.npz``;
``python -m evaluation.rerank_train --extra F.npz`` trains with them (leave one corpus out with ``--exclude``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import EvalQuestion
from evaluation.graders import covered, may_cover
from evaluation.qa import as_asked
from evaluation.splits import split_ids
from evaluation.suite import POLICY_SUITES, Paths, hotpot_records, ingest_corpus, policy_questions

CORPORA = (*POLICY_SUITES, "hotpotqa")


def _ask(pipeline: Any, q: EvalQuestion) -> Any:
    """The query path's result for ``q`` (as ``rag eval`` asks it), without the LLM and without hops."""
    from rag.pipeline import PipelineOptions

    return pipeline.ask(as_asked(q), PipelineOptions(use_llm=False, max_hops=0))


def corpus_groups(paths: Paths, corpus: str, split: str, log=print) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """One record per question of ``corpus``'s ``split``: ``{set, qid, x, labels, quotes, ids, n_quotes, tokens}``."""
    from rag.config import load_settings
    from rag.factory import build_pipeline

    data_dir = ingest_corpus(paths, corpus, log)
    pipeline = build_pipeline(load_settings(data_dir=data_dir))
    out: list[dict[str, Any]] = []
    try:
        if corpus == "hotpotqa":
            from evaluation.multihop import paragraph_id

            keep = split_ids("hotpotqa", split)
            for r in hotpot_records(paths):
                if str(r["question_id"]) not in keep:
                    continue
                gold = {
                    paragraph_id(c["title"], c["paragraph_text"])
                    for c in r["contexts"]
                    if c.get("is_supporting")
                }
                result = _ask(pipeline, EvalQuestion(str(r["question_id"]), r["question_text"]))
                cands = [c for c in result.candidates if not c.hop]
                labels = [1 if c.chunk.doc_id in gold else 0 for c in cands]
                covers = [[0] if c.chunk.doc_id in gold else [] for c in cands]
                out.append(
                    _record(
                        pipeline,
                        "hotpotqa",
                        str(r["question_id"]),
                        r["question_text"],
                        cands,
                        labels,
                        covers,
                        2,
                    )
                )
        else:
            for q in policy_questions(paths, corpus, split):
                if not q.quotes:
                    continue  # unanswerable (or gold given as chunk ids): no positive to learn from
                result = _ask(pipeline, q)
                cands = [c for c in result.candidates if not c.hop]
                covers = [
                    [i for i, quote in enumerate(q.quotes) if covered(quote, [c.chunk.text])] for c in cands
                ]
                labels = [
                    1 if cov else (-1 if any(may_cover(quote, c.chunk.text) for quote in q.quotes) else 0)
                    for c, cov in zip(cands, covers, strict=True)
                ]
                out.append(_record(pipeline, corpus, q.id, q.question, cands, labels, covers, len(q.quotes)))
    finally:
        pipeline.reader.close()
    log(f"{corpus} {split}: {len(out)} questions")
    return out


def _record(
    pipeline: Any,
    name: str,
    qid: str,
    text: str,
    cands: Sequence[Any],
    labels: Sequence[int],
    covers: Sequence[Sequence[int]],
    n_quotes: int,
) -> dict[str, Any]:
    from rag.models.rerankers import FeatureReranker

    reranker = pipeline.reranker
    if not isinstance(reranker, FeatureReranker):
        raise ValueError("training groups need a feature reranker (RAG_RERANKER=features-v2 or features-v3)")
    # the reranker's own features: the index's stored sentence vectors, reading vectors and passage tokens
    x = reranker.all_features(text, cands)
    return {
        "set": name,
        "qid": qid,
        "x": x,
        "labels": np.asarray(labels, dtype=np.float64),
        "ids": [c.chunk_id for c in cands],
        "quotes": [list(c) for c in covers],
        "n_quotes": n_quotes,
        "tokens": [c.chunk.n_tokens for c in cands],
    }


def save(records: Sequence[dict[str, Any]], out: Path) -> None:
    """An .npz of the feature matrices (``x<i>``, ``labels<i>``) and a JSON index of the rest."""
    arrays: dict[str, np.ndarray] = {}
    index = []
    for i, r in enumerate(records):
        arrays[f"x{i}"] = r["x"]
        arrays[f"labels{i}"] = r["labels"]
        index.append({k: v for k, v in r.items() if k not in ("x", "labels")})
    arrays["index"] = np.frombuffer(json.dumps(index).encode(), dtype=np.uint8)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, **arrays)  # type: ignore[arg-type]


def load(path: Path) -> list[dict[str, Any]]:
    with np.load(path) as z:
        index = json.loads(bytes(z["index"]).decode())
        return [{**meta, "x": z[f"x{i}"], "labels": z[f"labels{i}"]} for i, meta in enumerate(index)]


# ------------------------------------------------------------------------------------ leave one corpus out
def _all_gold(order: Sequence[int], record: dict[str, Any], *, k: int | None, tokens: int | None) -> bool:
    """Every gold quote (HotpotQA: both paragraphs) covered by the first ``k`` candidates of ``order``, or by
    what a greedy fill of ``tokens`` takes in that order."""
    taken: list[int] = []
    used = 0
    for i in order:
        if k is not None and len(taken) >= k:
            break
        if tokens is not None and used + record["tokens"][i] > tokens:
            continue
        taken.append(i)
        used += record["tokens"][i]
    if record["set"] == "hotpotqa":
        return int(sum(record["labels"][i] == 1 for i in taken)) >= 2
    return {q for i in taken for q in record["quotes"][i]} >= set(range(record["n_quotes"]))


def figures(records: Sequence[dict[str, Any]], score: Any) -> dict[str, dict[str, int]]:
    """Per set: questions, all gold in the first 6, all gold within 1,500 tokens, by ``score``'s order."""
    out: dict[str, dict[str, int]] = {}
    for r in records:
        s = score(r["x"])
        order = sorted(range(len(s)), key=lambda i: (-s[i], i))
        cell = out.setdefault(r["set"], {"n": 0, "top6": 0, "tok1500": 0})
        cell["n"] += 1
        cell["top6"] += int(_all_gold(order, r, k=6, tokens=None))
        cell["tok1500"] += int(_all_gold(order, r, k=12, tokens=1500))
    return out


def loco(
    tune: Path, test: Path, *, data_dir: Path, cache_dir: Path, l2: float = 1e-4, log=print
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """Train the feature model with each policy corpus left out in turn and score that corpus (tune and test
    split), beside the committed models and the open-data-only retrain; also SciFact's and NQ's held-out halves.
    Every retrain is fitted twice: over features-v2's features and over features-v3's (the reading features
    added), so the reading features' worth is read off pairs trained alike."""
    from evaluation.rerank_train import (
        MODEL_FEATURES,
        _balanced_weights,
        _fit,
        _model_scores,
        _score_fn,
        app_reading_encoder,
        evaluate,
        load_extra_groups,
        open_data,
        policy_pool,
    )
    from rag.models.embedder import load_embedder
    from rag.models.rerankers import (
        DEFAULT_EMBEDDING_MODEL,
        FEATURE_MODELS,
        FEATURE_NAMES,
        FeatureModel,
    )

    open_train, open_dev = open_data(
        data_dir,
        cache_dir,
        load_embedder(DEFAULT_EMBEDDING_MODEL),
        reading_encoder=app_reading_encoder(),
        log=log,
    )
    records = {"tune": load(tune), "test": load(test)}

    def fitted(
        features: Sequence[str], exclude: Sequence[str], *, policy: bool = True, hotpot: bool = True
    ) -> Any:
        cols = [FEATURE_NAMES.index(f) for f in features]
        sets = dict(open_train)
        extra = load_extra_groups(tune, exclude=exclude, merge=policy_pool)
        sets.update(
            {k: v for k, v in extra.items() if (k == "policy" and policy) or (k == "hotpotqa" and hotpot)}
        )
        mean, scale, beta = _fit(*_balanced_weights(sets), cols, l2)
        return _score_fn(cols, mean, scale, beta)

    feature_sets = {m: MODEL_FEATURES[m] for m in ("features-v2", "features-v3")}
    variants: dict[str, Any] = {
        f"{m} (committed)": _model_scores(FeatureModel.load(FEATURE_MODELS[m]))
        for m in feature_sets
        if FEATURE_MODELS[m].exists()
    }
    for m, features in feature_sets.items():
        variants[f"{m} features, retrained: SciFact + NQ"] = fitted(features, (), policy=False, hotpot=False)
        variants[f"{m} features, + HotpotQA tune"] = fitted(features, (), policy=False)
        variants[f"{m} features, + HotpotQA + policy tune (all)"] = fitted(features, ())
    report: dict[str, Any] = {}
    for name, fn in variants.items():
        report[name] = {split: figures(rs, fn) for split, rs in records.items()}
        report[name]["heldout_ndcg10"] = {
            n: round(evaluate(g, fn)["ndcg@10"], 4) for n, g in open_dev.items()
        }
        log(f"{name}: {json.dumps(report[name])}")
    for corpus in POLICY_SUITES:
        if not any(r["set"] == corpus for rs in records.values() for r in rs):
            continue
        for m, features in feature_sets.items():
            fn = fitted(features, (corpus,))
            name = f"LOCO, {m} features: all but {corpus}"
            report[name] = {
                split: figures([r for r in rs if r["set"] == corpus], fn) for split, rs in records.items()
            }
            report[name]["heldout_ndcg10"] = {
                n: round(evaluate(g, fn)["ndcg@10"], 4) for n, g in open_dev.items()
            }
            log(f"{name}: {json.dumps(report[name])}")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evaluation.rerank_groups", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    ap.add_argument("--work-dir", type=Path, help="where the suites' corpora are ingested")
    ap.add_argument("--split", choices=("tune", "test"))
    ap.add_argument("--corpora", default=",".join(CORPORA))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--loco", nargs=2, type=Path, metavar=("TUNE", "TEST"), help="leave-one-corpus-out report"
    )
    ap.add_argument("--cache-dir", type=Path, default=Path("/tmp/rag-bench"))
    a = ap.parse_args(argv)
    if a.loco:
        report = loco(*a.loco, data_dir=a.shared / "data", cache_dir=a.cache_dir)
        a.out.write_text(json.dumps(report, indent=1) + "\n")
        return 0
    if a.work_dir is None or a.split is None:
        ap.error("--work-dir and --split are required (or --loco TUNE TEST)")
    paths = Paths(a.shared, a.work_dir)
    records = [r for c in a.corpora.split(",") if c for r in corpus_groups(paths, c, a.split)]
    save(records, a.out)
    print(json.dumps({c: sum(r["set"] == c for r in records) for c in a.corpora.split(",")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
