"""Retrieval quality on a BEIR dataset: nDCG@10, recall@10, recall@100 and ms per query of each leg, the fusion
and the full query path.

    rag bench retrieval --corpus corpus.jsonl --queries queries.jsonl --qrels qrels/train.tsv \\
        [--data-dir DIR] [--limit N] [--depth 100] [--json]

The corpus is ingested by the app's own ingestion (BEIR JSONL: one document per record, chunked like any other
document) into ``--data-dir``; ingestion is incremental, so an existing data directory whose corpus is unchanged
is reused in milliseconds. Without ``--data-dir`` a temporary one is used and removed (every run embeds the
corpus again: give a directory for anything but a small corpus).

Systems, each ranking documents by their best chunk (a document's first appearance in the chunk ranking):

- ``bm25``: the lexical leg alone (``IndexReader.lexical``: BM25 over title + section + chunk text).
- ``dense``: the dense leg alone (MiniLM query vector, ``IndexReader.dense``).
- ``hybrid``: both legs fused with the query path's ``rrf_fuse`` (k = ``rrf_k``).
- ``pipeline``: the ranking ``Pipeline.ask`` produces (its own retrieval, ``lexical_top_n``/``dense_top_n``
  per leg, fused and reranked by the default reranker), i.e. ``Result.candidates``. The pipeline only looks at
  its top-N candidates (40 per leg by default), so for recall@100 the ``hybrid`` order follows below them.

The legs are asked for ``depth * ceil(chunks per document) + depth`` chunks each, so at least ``depth``
documents are ranked whenever the leg finds that many. ``ms_per_query`` is wall time per query: the leg's
search (and query embedding for the dense leg), both legs plus fusion for ``hybrid``, and for ``pipeline`` the
query path's stages that produce the ranking (up to reranking, and the follow-up hops, which can add and move
candidates; evidence selection, the extractive answer and the citation check run but are not counted).

Metrics are BEIR's (pytrec_eval definitions): ``evaluation.metrics``; qrels files load with ``load_qrels``. ``reranker_training_split`` splits the
queries by ``evaluation.opendata.heldout``: the shipped reranker was trained on SciFact train-qrels queries of the
"trained_on" half, so on SciFact train qrels only the "held_out" half is an unbiased figure for ``pipeline``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from evaluation.metrics import first_occurrences, ndcg_at, recall_at

SYSTEMS = ("bm25", "dense", "hybrid", "pipeline")
RANKING_STAGES = ("index", "filters", "intents", "retrieve", "rerank")
METRICS = ("ndcg@10", "recall@10", "recall@100")


@dataclass(frozen=True)
class BeirQuery:
    qid: str
    text: str
    relevance: dict[str, int]


def load_qrels(path: Path) -> dict[str, dict[str, int]]:
    """BEIR qrels TSV (``query-id<TAB>corpus-id<TAB>score``, header line optional): query -> doc -> grade."""
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if not line.strip():
                continue
            if len(parts) < 3:
                raise ValueError(f"{path}: line {n + 1}: expected query-id, corpus-id, score")
            try:
                grade = int(float(parts[2]))
            except ValueError:
                if n == 0:  # the header
                    continue
                raise ValueError(f"{path}: line {n + 1}: score {parts[2]!r} is not a number") from None
            qrels.setdefault(parts[0], {})[parts[1]] = grade
    return qrels


def load_queries(queries: Path, qrels: Path, limit: int | None = None) -> list[BeirQuery]:
    """Queries that have at least one relevant document in the qrels, in qrels order; the first ``limit``."""
    judged = load_qrels(qrels)
    texts: dict[str, str] = {}
    with open(queries, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                record = json.loads(line)
                texts[str(record["_id"])] = str(record["text"])
    missing = [q for q in judged if q not in texts]
    if missing:
        raise SystemExit(f"{len(missing)} qrels query ids are not in {queries} (first: {missing[0]!r})")
    out = [BeirQuery(q, texts[q], rel) for q, rel in judged.items() if any(g > 0 for g in rel.values())]
    return out[:limit] if limit else out


def _score(ranked: Sequence[str], relevance: dict[str, int]) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at(ranked, relevance, 10),
        "recall@10": recall_at(ranked, relevance, 10),
        "recall@100": recall_at(ranked, relevance, 100),
    }


def _summary(rows: list[dict[str, float]], ms: list[float]) -> dict[str, float]:
    out = {m: round(statistics.fmean(r[m] for r in rows), 4) if rows else 0.0 for m in METRICS}
    out["ms_per_query"] = round(statistics.fmean(ms), 2) if ms else 0.0
    out["ms_p50"] = round(statistics.median(ms), 2) if ms else 0.0
    out["queries"] = len(rows)
    return out


def ingest_corpus(corpus: Path, data_dir: Path) -> dict[str, Any]:
    from ingest.indexer import ingest
    from rag.config import load_settings

    started = time.perf_counter()
    report = ingest([str(corpus)], load_settings(data_dir=data_dir))
    if not report.ok:
        raise SystemExit(f"ingesting {corpus} failed: {json.dumps(report.to_json()['files'])[:2000]}")
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "reused": not report.published,
        "embedded": report.embedded,
        "chunks": report.index_chunks,
    }


def run(
    data_dir: Path,
    queries: Sequence[BeirQuery],
    *,
    depth: int = 100,
    log: Any = None,
    per_query: bool = False,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score every system on ``queries`` over the index already ingested in ``data_dir``.

    ``per_query=True`` adds ``per_query``: every system's metrics for each query, in query order (for intervals).
    ``overrides`` are settings for the pipeline (``rag eval suite --set``), as for the other suites.
    """
    from evaluation.opendata import heldout
    from rag.config import load_settings
    from rag.factory import build_pipeline
    from rag.pipeline import PipelineOptions, Question
    from rag.stages.retrieve import rrf_fuse
    from rag.text import bm25_tokens
    from rag.types import Principal, SearchFilter

    settings = load_settings(data_dir=data_dir, **(overrides or {}))
    pipeline = build_pipeline(settings)
    reader = pipeline.reader
    n_chunks = len(reader.generation.chunks)
    n_docs = max(1, len(reader.generation.by_doc))
    leg_n = depth * math.ceil(n_chunks / n_docs) + depth
    principal = Principal("bench", frozenset())
    options = PipelineOptions(use_llm=False)
    pipeline.ask(Question("warm-up question about nothing in particular", principal), options)

    scores: dict[str, list[dict[str, float]]] = {s: [] for s in (*SYSTEMS, "pipeline_without_reranker")}
    ms: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    docs_ranked: dict[str, list[int]] = {s: [] for s in SYSTEMS}
    for i, q in enumerate(queries):
        filt = SearchFilter(principal, date.today())
        t = time.perf_counter()
        lexical = reader.lexical.search(bm25_tokens(q.text), filt, leg_n)
        bm25_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        vector = pipeline.embedder.embed_queries([q.text])[
            0
        ]  # not Pipeline.query_vector: that would cache it
        dense = reader.dense.search(vector, filt, leg_n)
        dense_ms = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        chunks = {cid: c for cid, _ in [*lexical, *dense] if (c := reader.get(cid)) is not None}
        fused = rrf_fuse(lexical, dense, chunks, k=settings.rrf_k)
        hybrid_ms = bm25_ms + dense_ms + (time.perf_counter() - t) * 1000

        result = pipeline.ask(Question(q.text, principal), options)
        pipeline_ms = sum(
            s.ms for s in result.stages if s.name in RANKING_STAGES or s.name.startswith("hop_")
        )

        rankings = {
            "bm25": first_occurrences(chunks[cid].doc_id for cid, _ in lexical if cid in chunks),
            "dense": first_occurrences(chunks[cid].doc_id for cid, _ in dense if cid in chunks),
            "hybrid": first_occurrences(c.chunk.doc_id for c in fused),
        }
        reranked = [c.chunk.doc_id for c in result.candidates]
        first_hop = [c for c in result.candidates if c.hop == 0]  # follow-up hits carry their own fused ranks
        fused_only = [c.chunk.doc_id for c in sorted(first_hop, key=lambda c: c.fused_rank or 1 << 30)]
        rankings["pipeline"] = first_occurrences([*reranked, *rankings["hybrid"]])
        rankings["pipeline_without_reranker"] = first_occurrences([*fused_only, *rankings["hybrid"]])
        for name, ranked in rankings.items():
            scores[name].append(_score(ranked, q.relevance))
        for name, value in zip(SYSTEMS, (bm25_ms, dense_ms, hybrid_ms, pipeline_ms), strict=True):
            ms[name].append(value)
            docs_ranked[name].append(len(rankings[name]))
        if log is not None and (i + 1) % 100 == 0:
            log(f"{i + 1}/{len(queries)} queries")

    systems = {s: _summary(scores[s], ms[s]) for s in SYSTEMS}
    for s in SYSTEMS:
        systems[s]["docs_ranked_min"] = min(docs_ranked[s], default=0)
    split: dict[str, Any] = {
        "rule": "evaluation.opendata.heldout(query id); the shipped reranker trained on SciFact train-qrels queries "
        "with heldout() False (and NQ-Open): only meaningful for SciFact train qrels",
    }
    for label, keep in (("trained_on", False), ("held_out", True)):
        idx = [i for i, q in enumerate(queries) if heldout(q.qid) == keep]
        split[label] = {"queries": len(idx)}
        for s in (*SYSTEMS, "pipeline_without_reranker"):
            split[label][s] = {
                m: round(statistics.fmean(scores[s][i][m] for i in idx), 4) if idx else 0.0 for m in METRICS
            }
    fused_40 = {
        m: round(statistics.fmean(r[m] for r in scores["pipeline_without_reranker"]), 4) if queries else 0.0
        for m in METRICS
    }
    pipeline.reader.close()
    extra = {"per_query": scores} if per_query else {}
    return {
        **extra,
        "systems": systems,
        "pipeline_without_reranker": fused_40,
        "reranker_training_split": split,
        "queries": len(queries),
        "index": {"chunks": n_chunks, "documents": n_docs, "leg_depth_chunks": leg_n},
        "settings": {
            "reranker": pipeline.reranker.name,
            "lexical_top_n": settings.lexical_top_n,
            "dense_top_n": settings.dense_top_n,
            "rrf_k": settings.rrf_k,
            "embedding_model": settings.embedding_model,
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", type=Path, required=True, help="BEIR corpus.jsonl")
    parser.add_argument("--queries", type=Path, required=True, help="BEIR queries.jsonl")
    parser.add_argument(
        "--qrels", type=Path, required=True, help="BEIR qrels TSV (query-id, corpus-id, score)"
    )
    parser.add_argument(
        "--data-dir", type=Path, help="Ingest into (or reuse) this directory; default: a temporary one."
    )
    parser.add_argument("--limit", type=int, help="Only the first N judged queries.")
    parser.add_argument(
        "--depth", type=int, default=100, help="Documents each leg must be able to rank (recall@100)."
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON object.")
    args = parser.parse_args(argv)
    from rag.config import library_defaults

    library_defaults({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TQDM_DISABLE": "1"})

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    queries = load_queries(args.queries, args.qrels, args.limit)
    data_dir, tmp = args.data_dir, None
    if data_dir is None:
        tmp = data_dir = Path(tempfile.mkdtemp(prefix="rag-bench-retrieval-"))
    started = time.perf_counter()
    try:
        ingestion = ingest_corpus(args.corpus, data_dir)
        log(f"index ready ({'reused' if ingestion['reused'] else 'ingested'}, {ingestion['seconds']} s)")
        result = run(data_dir, queries, depth=args.depth, log=log)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    result.update(
        corpus=str(args.corpus),
        qrels=str(args.qrels),
        ingestion=ingestion,
        date=date.today().isoformat(),
        machine=f"{platform.machine()}, {os.cpu_count()} cores",
        load_average=[round(x, 2) for x in os.getloadavg()],
        seconds=round(time.perf_counter() - started, 1),
    )
    if args.json:
        print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{result['queries']} queries, {result['index']['documents']} documents "
        f"({result['index']['chunks']} chunks), reranker {result['settings']['reranker']}"
    )
    for col in ("system", *METRICS, "ms/query"):
        table.add_column(col, justify="left" if col == "system" else "right")
    for name, row in result["systems"].items():
        table.add_row(name, *(f"{row[m]:.4f}" for m in METRICS), f"{row['ms_per_query']:.1f}")
    fused = result["pipeline_without_reranker"]
    table.add_row("(pipeline, fused order)", *(f"{fused[m]:.4f}" for m in METRICS), "")
    Console().print(table)
    split = result["reranker_training_split"]
    for label in ("trained_on", "held_out"):
        row = split[label]
        print(
            f"{label} ({row['queries']} queries): nDCG@10 "
            + ", ".join(f"{s} {row[s]['ndcg@10']:.4f}" for s in (*SYSTEMS, "pipeline_without_reranker"))
        )


if __name__ == "__main__":
    main()
