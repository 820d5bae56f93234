"""A peer, side by side: our query path and Haystack 2.x's equivalent, in one process, on the same chunks.

    bash scripts/peer_venv.sh                  # once: .venv-peer = the app + haystack-ai (never in .venv)
    .venv-peer/bin/python -m benchmarks.peer [--scifact-limit N] [--scifact-docs N] [--json]
    .venv-peer/bin/rag bench peer ...          # the same command through the CLI

Ours: ``rag.pipeline.Pipeline`` over indexes built by the project's own ingestion (``ingest.indexer.ingest``)
into ``--work-dir``: BM25 + MiniLM top 40 each, RRF, the default reranker (features-v2), dedup, budget,
bundling, edge packing; end to end = every traced stage except ``generate`` (as ``benchmarks/query.py``).

Theirs: InMemoryDocumentStore, InMemoryBM25Retriever + SentenceTransformersTextEmbedder/InMemoryEmbeddingRetriever
(top 40 each), DocumentJoiner(reciprocal_rank_fusion), LostInTheMiddleRanker(top_k=6), fed our chunks (the
text we embed and BM25-index: section path + chunk text), so chunking is held equal and only retrieval and
ranking differ. Same embedding model, loaded from the same packaged folder. No cross-encoder: none ships
offline (docs/rerankers.md); ``--cross-encoder-queries`` times both sides with a MiniLM-L6-sized cross-encoder
(random head: time only, its quality means nothing).

Quality: SciFact nDCG@10 (documents ranked by their best chunk: our reranked candidates, their joiner output,
as LostInTheMiddle deliberately reorders) on the held-out half of the train-qrels queries (features-v2 was
trained on the other half; ``rag.rerank_train.heldout``); evidence recall on the dev questions, graded with
``covered()`` from ../shared/tools/grade_evidence.py over each side's final evidence texts. Latency: per query,
measured in one loop, alternating which side goes first; the peer is timed with torch's default thread count
and with one thread (ours embeds queries with one), and the ratio uses its faster setting.

Corpus vectors are embedded once per system and cached in ``--work-dir`` (ours by ingestion's embedding cache,
theirs as a .npy keyed by model and texts); indexing time is reported apart from query latency, with what
each side actually embedded in this run. Delete ``--work-dir`` for a cold run. ``--peer-vectors ours`` gives
the peer the vectors our ingestion stored for the same texts instead (same model: max difference 1.3e-7
measured), for when embedding the corpus twice does not fit the time.

Time on the 2-core machine: with both indexes cached, the full run (407 SciFact queries, 40 dev questions,
10 cross-encoder timings) took 20 minutes under a load of 5-9. A cold full-corpus run embeds 10k SciFact
chunks and 46k sentence vectors (ours) plus the 10k chunks again (theirs): over an hour on a busy machine;
``--scifact-docs`` / ``--scifact-limit`` cut it. Results: docs/benchmarks-peer.md.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from rag.config import library_defaults

library_defaults(  # read by Haystack and the Hugging Face libraries at import; Haystack would otherwise phone home
    {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HAYSTACK_TELEMETRY_ENABLED": "False", "TQDM_DISABLE": "1"}
)

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SCIFACT = SHARED / "data" / "scifact"
DEV_QUESTIONS = SHARED / "data" / "questions" / "dev.jsonl"
DEV_CORPUS = (
    SHARED / "data" / "policies" / "epa-infosec",
    SHARED / "data" / "policies" / "civicactions-handbook" / "markdown" / "docs",
)
GRADER = SHARED / "tools" / "grade_evidence.py"
WORK_DIR = Path("/tmp/peer")
HAYSTACK_PIN = "haystack-ai==2.31.0"  # keep in step with scripts/peer_venv.sh

HAYSTACK_MISSING = (
    "benchmarks.peer needs Haystack 2.x, which is not installed in this environment (on purpose: it is never a "
    "dependency of the app).\n  Run `bash scripts/peer_venv.sh` once, then "
    "`.venv-peer/bin/python -m benchmarks.peer` (or `.venv-peer/bin/rag bench peer`)."
)

Log = Callable[[str], None]
EXCLUDED = ("generate",)  # as benchmarks/query.py: what an LLM would replace
AFTER_EVIDENCE = ("answer_type", "prompt", "generate", "citations")  # our stages past the peer's last one


def require_haystack() -> str:
    """Haystack's version, or exit with a message saying how to get the benchmark environment."""
    try:
        from haystack import __version__
    except ImportError:
        raise SystemExit(HAYSTACK_MISSING) from None
    return str(__version__)


def load_grader(path: Path = GRADER) -> ModuleType:
    """The reference evidence grader (its ``covered(quote, passages)`` defines evidence recall)."""
    if not path.is_file():
        raise SystemExit(f"The evidence grader {path} is missing; pass --grader PATH (or --no-dev).")
    spec = importlib.util.spec_from_file_location("grade_evidence", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------
# The two systems
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """What one system returned for one question."""

    ranked_docs: list[str]  # document ids by their best chunk, best first (for nDCG)
    evidence: list[tuple[str, str]]  # (chunk_id, chunk text) in the final evidence, in order
    ms: float  # end to end, generator excluded
    record: dict[str, Any]  # a grade_evidence.py results line (without the question id)
    stages_ms: dict[str, float] = field(default_factory=dict)  # ours only: each traced stage


def _docs_in_order(doc_ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(doc_ids))


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` torch threads (None: leave as is), restoring the previous count."""
    import torch

    previous = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def ingest_ours(paths: Sequence[str], data_dir: Path, log: Log) -> dict[str, Any]:
    """Index ``paths`` with the project's ingestion (model loading is not indexing); what it cost."""
    from ingest.indexer import ingest
    from rag.config import load_settings
    from rag.embedder import load_embedder

    settings = load_settings(data_dir=data_dir)
    embedder = load_embedder(settings.embedding_model, settings.embed_batch_size)
    log(f"ours: ingesting {', '.join(paths)} into {data_dir}")
    report = ingest(list(paths), settings, embedder=embedder)
    failed = [f for f in report.files if f.status == "failed"]
    if failed:
        log(f"ours: {len(failed)} files failed to ingest, e.g. {failed[0].path}: {failed[0].message}")
    return {
        "seconds": round(report.seconds, 2),
        "embedded_this_run": report.embedded,
        "files_failed": len(failed),
        "published": report.published,
        "timings_s": {k: round(v, 2) for k, v in report.timings.items()},
    }


def our_vectors(data_dir: Path, chunks: Sequence[Any]) -> np.ndarray:
    """The vectors our ingestion stored for the chunks' indexed texts (its embedding cache)."""
    from ingest.indexer import EmbeddingCache
    from rag.config import load_settings
    from rag.embedder import passage_text

    cache = EmbeddingCache(data_dir, load_settings(data_dir=data_dir).embedding_model)
    try:
        keys = [cache.key(passage_text(c.title, c.section, c.text)) for c in chunks]
        found = cache.get_many(keys)
    finally:
        cache.close()
    return np.stack([found[k] for k in keys])


class Ours:
    """``rag.pipeline.Pipeline`` with the settings' defaults over one data directory."""

    name = "ours"

    def __init__(self, data_dir: Path, **settings: Any) -> None:
        from rag.config import load_settings
        from rag.factory import build_pipeline

        self.pipeline = build_pipeline(load_settings(data_dir=data_dir, **settings))
        self.reranker = self.pipeline.reranker.name

    def chunks(self) -> list[Any]:
        return list(self.pipeline.reader.generation.chunks)

    def ask(self, question: str) -> Answer:
        from rag.pipeline import Question
        from rag.types import Principal

        result = self.pipeline.ask(Question(question, Principal("peer-bench")))
        stages: dict[str, float] = {}
        for stage in result.stages:
            stages[stage.name] = stages.get(stage.name, 0.0) + stage.ms
        ms = sum(v for k, v in stages.items() if k not in EXCLUDED)
        record = result.to_json()
        for key in ("prompt", "candidates", "stages"):  # large and not graded
            record.pop(key, None)
        return Answer(
            ranked_docs=_docs_in_order([c.chunk.doc_id for c in result.candidates]),
            evidence=[(e.candidate.chunk_id, e.candidate.chunk.text) for e in result.evidence],
            ms=ms,
            record=record,
            stages_ms=stages,
        )


class Peer:
    """Haystack 2.x: BM25 and embedding retrieval over an InMemoryDocumentStore, RRF, LostInTheMiddle."""

    name = "haystack"

    def __init__(
        self,
        chunks: Sequence[Any],
        *,
        model_dir: Path,
        cache_dir: Path,
        top_n: int,
        evidence_k: int,
        cross_encoder: Path | None = None,
        vectors: np.ndarray | None = None,
        log: Log = print,
    ) -> None:
        """``vectors``: the chunks' vectors as our ingestion stored them, instead of Haystack embedding them
        (same model, same texts: they differ by ~1e-7); for runs where embedding twice does not fit."""
        from haystack import Document, Pipeline
        from haystack.components.embedders import (
            SentenceTransformersDocumentEmbedder,
            SentenceTransformersTextEmbedder,
        )
        from haystack.components.joiners import DocumentJoiner
        from haystack.components.rankers import LostInTheMiddleRanker, SentenceTransformersSimilarityRanker
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.document_stores.types import DuplicatePolicy
        from haystack.utils import ComponentDevice

        from rag.embedder import passage_text

        cpu = ComponentDevice.from_str("cpu")
        self.text_of = {c.chunk_id: c.text for c in chunks}
        docs = [
            Document(
                content=passage_text(c.title, c.section, c.text),
                meta={"chunk_id": c.chunk_id, "doc_id": c.doc_id},
            )
            for c in chunks
        ]
        # Indexing: embed the chunks once (cached on disk by model and texts), then write the store.
        started = time.perf_counter()
        digest = hashlib.sha256(str(model_dir).encode())
        for d in docs:
            digest.update((d.content or "").encode() + b"\x00")
        cached = cache_dir / f"haystack-vectors-{digest.hexdigest()[:16]}.npy"
        embedded = 0
        if vectors is not None:
            reused = "ours"
        elif cached.exists():
            reused = "own cache"
            vectors = np.load(cached)
        if vectors is not None:
            docs = [
                Document(content=d.content, meta=d.meta, embedding=v.tolist())
                for d, v in zip(docs, vectors, strict=True)
            ]
        else:
            reused = "no"
            log(f"haystack: embedding {len(docs)} chunks (SentenceTransformersDocumentEmbedder)")
            doc_embedder = SentenceTransformersDocumentEmbedder(
                model=str(model_dir), device=cpu, normalize_embeddings=True, progress_bar=False
            )
            doc_embedder.warm_up()
            docs = doc_embedder.run(documents=docs)["documents"]
            embedded = len(docs)
            cache_dir.mkdir(parents=True, exist_ok=True)
            np.save(cached, np.asarray([d.embedding for d in docs], dtype=np.float32))
        self.vectors = np.asarray([d.embedding for d in docs], dtype=np.float32)
        self.store = InMemoryDocumentStore()
        self.store.write_documents(docs, policy=DuplicatePolicy.OVERWRITE)
        self.indexing = {
            "seconds": round(time.perf_counter() - started, 2),
            "embedded_this_run": embedded,
            "vectors_reused": reused,
            "documents": self.store.count_documents(),
        }

        pipe = Pipeline()
        pipe.add_component(
            "text_embedder",
            SentenceTransformersTextEmbedder(
                model=str(model_dir), device=cpu, normalize_embeddings=True, progress_bar=False
            ),
        )
        pipe.add_component("bm25", InMemoryBM25Retriever(self.store, top_k=top_n))
        pipe.add_component("dense", InMemoryEmbeddingRetriever(self.store, top_k=top_n))
        pipe.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
        pipe.add_component("litm", LostInTheMiddleRanker(top_k=evidence_k))
        pipe.connect("text_embedder.embedding", "dense.query_embedding")
        pipe.connect("bm25", "joiner")
        pipe.connect("dense", "joiner")
        if cross_encoder is None:
            pipe.connect("joiner", "litm")
        else:
            pipe.add_component(
                "cross_encoder",
                SentenceTransformersSimilarityRanker(model=cross_encoder, device=cpu, top_k=evidence_k),
            )
            pipe.connect("joiner", "cross_encoder")
            pipe.connect("cross_encoder", "litm")
        self.cross_encoder = cross_encoder is not None
        pipe.warm_up()
        self.pipeline = pipe

    def ask(self, question: str) -> Answer:
        inputs: dict[str, dict[str, Any]] = {"text_embedder": {"text": question}, "bm25": {"query": question}}
        if self.cross_encoder:
            inputs["cross_encoder"] = {"query": question}
        started = time.perf_counter()
        out = self.pipeline.run(inputs, include_outputs_from={"joiner"})
        ms = (time.perf_counter() - started) * 1000
        ranked = out["joiner"]["documents"]
        final = out["litm"]["documents"]
        evidence = [(d.meta["chunk_id"], self.text_of[d.meta["chunk_id"]]) for d in final]
        record = {
            "evidence": [
                {"n": i, "chunk_id": cid, "text": text} for i, (cid, text) in enumerate(evidence, start=1)
            ],
            "abstained": False,
            "citations": [],
        }
        return Answer(_docs_in_order([d.meta["doc_id"] for d in ranked]), evidence, ms, record)


# ---------------------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SciFactQuery:
    qid: str
    text: str
    relevant: frozenset[str]


def scifact_queries(root: Path, limit: int | None) -> list[SciFactQuery]:
    """The held-out half of the train-qrels queries (the reranker never trained on them), by query id."""
    from rag.rerank_train import heldout

    texts = {}
    for line in (root / "queries.jsonl").read_text().splitlines():
        if line.strip():
            d = json.loads(line)
            texts[str(d["_id"])] = d["text"]
    rel: dict[str, set[str]] = {}
    lines = (root / "qrels" / "train.tsv").read_text().splitlines()
    for line in lines[1:]:
        qid, pid, score = line.split("\t")
        if int(score) > 0:
            rel.setdefault(qid, set()).add(pid)
    queries = [
        SciFactQuery(q, texts[q], frozenset(p))
        for q, p in sorted(rel.items(), key=lambda kv: int(kv[0]) if kv[0].isdigit() else kv[0])
        if heldout(q)
    ]
    return queries[:limit] if limit else queries


def scifact_corpus(root: Path, queries: Sequence[SciFactQuery], docs: int | None, work_dir: Path) -> Path:
    """The corpus file to index: the full corpus, or (``docs``) the queries' relevant documents plus the first
    others in corpus order up to ``docs`` in all (a smaller, easier corpus: numbers are not comparable to full)."""
    corpus = root / "corpus.jsonl"
    if not docs:
        return corpus
    keep = {p for q in queries for p in q.relevant}
    lines = [line for line in corpus.read_text().splitlines() if line.strip()]
    chosen = [line for line in lines if str(json.loads(line)["_id"]) in keep]
    for line in lines:
        if len(chosen) >= docs:
            break
        if str(json.loads(line)["_id"]) not in keep:
            chosen.append(line)
    path = work_dir / f"scifact-corpus-{docs}" / "corpus.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(chosen) + "\n"
    if not path.exists() or path.read_text() != text:  # rewriting an unchanged file would re-ingest it
        path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------------------


def ndcg_at_10(ranked: Sequence[str], relevant: frozenset[str]) -> float:
    from rag.rerank_train import ndcg_at

    return ndcg_at(list(ranked), relevant, 10)


def paired_ci(ours: Sequence[float], theirs: Sequence[float], n: int = 2000) -> list[float]:
    """95% bootstrap interval of mean(ours - theirs) over questions."""
    diff = np.asarray(ours, dtype=float) - np.asarray(theirs, dtype=float)
    if len(diff) == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(0)
    means = diff[rng.integers(0, len(diff), size=(n, len(diff)))].mean(axis=1)
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def latency(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    return {
        "p50": round(float(np.percentile(arr, 50)), 2),
        "p95": round(float(np.percentile(arr, 95)), 2),
        "mean": round(float(arr.mean()), 2),
        "n": len(arr),
    }


def side_by_side(
    ours: Ours, peer: Peer, questions: Sequence[str], *, peer_threads: Sequence[int | None], log: Log
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Each question through both systems, the order rotating per question; the peer once per thread setting
    (its answers are the same whatever the threads: the first setting's are kept)."""

    def with_threads(n: int | None) -> Callable[[str], Answer]:
        def ask(q: str) -> Answer:
            with torch_threads(n):
                return peer.ask(q)

        return ask

    runs: list[tuple[str, Callable[[str], Answer]]] = [("ours", ours.ask)]
    runs += [(peer_label(n), with_threads(n)) for n in peer_threads]
    warm = "What is this about?"  # first-call costs (graphs, caches) are not per-query latency
    for _, first in runs:
        first(warm)
    ms: dict[str, list[float]] = {label: [] for label, _ in runs}
    mine: list[Answer] = []
    theirs: list[Answer] = []
    for i, q in enumerate(questions):
        got: dict[str, Answer] = {}
        for j in range(len(runs)):
            label, ask = runs[(i + j) % len(runs)]
            got[label] = ask(q)
            ms[label].append(got[label].ms)
        mine.append(got["ours"])
        theirs.append(got[peer_label(peer_threads[0])])
        if (i + 1) % 50 == 0:
            log(f"  {i + 1}/{len(questions)} questions")
    return mine, theirs, ms


def peer_label(threads: int | None) -> str:
    import torch

    return (
        f"haystack, {threads} torch thread"
        if threads
        else f"haystack, {torch.get_num_threads()} torch threads"
    )


def latency_block(ms: dict[str, list[float]], mine: Sequence[Answer]) -> dict[str, Any]:
    """p50/p95 per system, and ours/theirs against the peer's faster thread setting (by p50). Also ours up to
    its evidence (the peer's last step) and each of our stages, to show where the time goes."""
    table = {label: latency(v) for label, v in ms.items()}
    peers = [label for label in table if label != "ours"]
    best = min(peers, key=lambda label: table[label]["p50"])
    ours, theirs = table["ours"], table[best]
    to_evidence = latency([sum(v for k, v in a.stages_ms.items() if k not in AFTER_EVIDENCE) for a in mine])
    names = list(dict.fromkeys(k for a in mine for k in a.stages_ms))
    return {
        "ms": table,
        "peer_compared": best,
        "ratio_ours_over_theirs": {p: round(ours[p] / theirs[p], 3) for p in ("p50", "p95")},
        "speedup_p50": round(theirs["p50"] / ours["p50"], 2),
        "ours_through_evidence_ms": to_evidence,
        "ours_through_evidence_ratio": {p: round(to_evidence[p] / theirs[p], 3) for p in ("p50", "p95")},
        "ours_stages_ms": {k: latency([a.stages_ms[k] for a in mine if k in a.stages_ms]) for k in names},
    }


def run_scifact(
    root: Path,
    work_dir: Path,
    *,
    limit: int | None,
    docs: int | None,
    peer_threads: Sequence[int | None],
    peer_vectors: str,
    log: Log,
) -> dict[str, Any]:
    from rag.config import default_settings
    from rag.embedder import resolve_model_dir

    s = default_settings()
    queries = scifact_queries(root, limit)
    corpus = scifact_corpus(root, queries, docs, work_dir)
    data_dir = work_dir / (f"scifact-{docs}" if docs else "scifact")
    ours_indexing = ingest_ours([str(corpus)], data_dir, log)
    ours = Ours(data_dir)
    chunks = ours.chunks()
    peer = Peer(
        chunks,
        model_dir=resolve_model_dir(s.embedding_model),
        cache_dir=work_dir / "haystack-cache",
        top_n=s.lexical_top_n,
        evidence_k=s.evidence_k,
        vectors=our_vectors(data_dir, chunks) if peer_vectors == "ours" else None,
        log=log,
    )
    log(f"scifact: {len(queries)} held-out queries over {len(chunks)} chunks of {corpus}")
    mine, theirs, ms = side_by_side(ours, peer, [q.text for q in queries], peer_threads=peer_threads, log=log)
    ours_ndcg = [ndcg_at_10(a.ranked_docs, q.relevant) for a, q in zip(mine, queries, strict=True)]
    peer_ndcg = [ndcg_at_10(a.ranked_docs, q.relevant) for a, q in zip(theirs, queries, strict=True)]
    ours_mean, peer_mean = float(np.mean(ours_ndcg)), float(np.mean(peer_ndcg))
    return {
        "corpus": str(corpus),
        "full_corpus": not docs,
        "queries": len(queries),
        "chunks": len(chunks),
        "reranker": ours.reranker,
        "indexing": {"ours": ours_indexing, "haystack": peer.indexing},
        "quality": {
            "metric": "nDCG@10 (documents by best chunk)",
            "ours": round(ours_mean, 4),
            "haystack": round(peer_mean, 4),
            "ratio_ours_over_theirs": round(ours_mean / peer_mean, 3) if peer_mean else None,
            "delta": round(ours_mean - peer_mean, 4),
            "delta_ci95": paired_ci(ours_ndcg, peer_ndcg),
        },
        "latency": latency_block(ms, mine),
    }


def run_dev(
    questions_path: Path,
    corpus: Sequence[Path],
    work_dir: Path,
    grader: ModuleType,
    *,
    peer_threads: Sequence[int | None],
    peer_vectors: str,
    cross_encoder_queries: int,
    log: Log,
) -> dict[str, Any]:
    from rag.config import default_settings
    from rag.embedder import resolve_model_dir
    from rag.text import count_tokens

    s = default_settings()
    questions = [json.loads(line) for line in questions_path.read_text().splitlines() if line.strip()]
    data_dir = work_dir / "dev"
    ours_indexing = ingest_ours([str(p) for p in corpus], data_dir, log)
    ours = Ours(data_dir)
    chunks = ours.chunks()
    model_dir = resolve_model_dir(s.embedding_model)
    cache_dir = work_dir / "haystack-cache"
    peer = Peer(
        chunks,
        model_dir=model_dir,
        cache_dir=cache_dir,
        top_n=s.lexical_top_n,
        evidence_k=s.evidence_k,
        vectors=our_vectors(data_dir, chunks) if peer_vectors == "ours" else None,
        log=log,
    )
    log(f"dev: {len(questions)} questions over {len(chunks)} chunks")
    mine, theirs, ms = side_by_side(
        ours, peer, [q["question"] for q in questions], peer_threads=peer_threads, log=log
    )

    out_dir = work_dir / "graded"
    out_dir.mkdir(parents=True, exist_ok=True)
    found: dict[str, list[int]] = {"ours": [], "haystack": []}
    by_type: dict[str, dict[str, list[int]]] = {}
    per_question = []
    for side, answers in (("ours", mine), ("haystack", theirs)):
        with open(out_dir / f"dev-{side}.jsonl", "w") as fh:  # for ../shared/tools/grade_evidence.py as is
            for q, a in zip(questions, answers, strict=True):
                fh.write(json.dumps({"id": q["id"], **a.record}) + "\n")
    for q, a, b in zip(questions, mine, theirs, strict=True):
        if q["type"] == "unanswerable":
            continue
        row = {"id": q["id"], "type": q["type"]}
        for side, ans in (("ours", a), ("haystack", b)):
            texts = [t for _, t in ans.evidence]
            ok = int(all(grader.covered(g["quote"], texts) for g in q["evidence"]))
            found[side].append(ok)
            by_type.setdefault(q["type"], {"ours": [], "haystack": []})[side].append(ok)
            row[side] = ok
        per_question.append(row)

    def evidence_size(answers: Sequence[Answer]) -> dict[str, float]:
        return {
            "chunks": round(float(np.mean([len(a.evidence) for a in answers])), 2),
            "tokens": round(
                float(np.mean([sum(count_tokens(t) for _, t in a.evidence) for a in answers])), 1
            ),
        }

    ours_recall = float(np.mean(found["ours"])) if found["ours"] else float("nan")
    peer_recall = float(np.mean(found["haystack"])) if found["haystack"] else float("nan")
    unanswerable = [a for q, a in zip(questions, mine, strict=True) if q["type"] == "unanswerable"]
    result: dict[str, Any] = {
        "questions": len(questions),
        "answerable": len(found["ours"]),
        "chunks": len(chunks),
        "reranker": ours.reranker,
        "indexing": {"ours": ours_indexing, "haystack": peer.indexing},
        "quality": {
            "metric": "evidence recall (every gold quote covered by the final evidence; grade_evidence.covered)",
            "ours": round(ours_recall, 4),
            "haystack": round(peer_recall, 4),
            "ours_found": f"{sum(found['ours'])}/{len(found['ours'])}",
            "haystack_found": f"{sum(found['haystack'])}/{len(found['haystack'])}",
            "ratio_ours_over_theirs": round(ours_recall / peer_recall, 3) if peer_recall else None,
            "delta_ci95": paired_ci(found["ours"], found["haystack"]),
            "by_type": {
                t: {k: f"{sum(v)}/{len(v)}" for k, v in d.items()} for t, d in sorted(by_type.items())
            },
            "ours_abstained_on_unanswerable": f"{sum(a.record.get('abstained', False) for a in unanswerable)}/"
            f"{len(unanswerable)} (the peer has no abstention)",
        },
        "evidence_size": {"ours": evidence_size(mine), "haystack": evidence_size(theirs)},
        "latency": latency_block(ms, mine),
        "graded_files": [str(out_dir / "dev-ours.jsonl"), str(out_dir / "dev-haystack.jsonl")],
        "per_question": per_question,
    }
    if cross_encoder_queries > 0:
        result["cross_encoder_time_only"] = time_cross_encoders(
            data_dir,
            chunks,
            [q["question"] for q in questions][:cross_encoder_queries],
            model_dir,
            cache_dir,
            s.lexical_top_n,
            s.evidence_k,
            peer.vectors,
            log,
        )
    return result


def time_cross_encoders(
    data_dir: Path,
    chunks: Sequence[Any],
    questions: Sequence[str],
    model_dir: Path,
    cache_dir: Path,
    top_n: int,
    evidence_k: int,
    vectors: np.ndarray,
    log: Log,
) -> dict[str, Any]:
    """Both sides with the same MiniLM-L6-sized cross-encoder over their fused candidates (time only)."""
    from benchmarks.rerankers import _minilm_cross_encoder

    folder = _minilm_cross_encoder(cache_dir.parent / "minilm-l6-cross-encoder-random-head")
    ours = Ours(data_dir, reranker="cross-encoder", reranker_path=str(folder))
    peer = Peer(
        chunks,
        model_dir=model_dir,
        cache_dir=cache_dir,
        top_n=top_n,
        evidence_k=evidence_k,
        cross_encoder=folder,
        vectors=vectors,
        log=log,
    )
    log(f"cross-encoder timing: {len(questions)} dev questions per side")
    mine, _, ms = side_by_side(ours, peer, questions, peer_threads=[None], log=log)
    return {
        "model": "MiniLM-L6 weights + random 1-logit head (benchmarks.rerankers._minilm_cross_encoder)",
        "ours_reranker": ours.reranker,
        "haystack_ranker": "SentenceTransformersSimilarityRanker",
        **latency_block(ms, mine),
    }


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


def run(
    *,
    work_dir: Path,
    scifact_root: Path | None,
    scifact_limit: int | None = None,
    scifact_docs: int | None = None,
    dev_questions: Path | None = None,
    dev_corpus: Sequence[Path] = DEV_CORPUS,
    grader: Path = GRADER,
    peer_threads: Sequence[int | None] = (None, 1),
    peer_vectors: str = "own",
    cross_encoder_queries: int = 0,
    log: Log = print,
) -> dict[str, Any]:
    import torch

    version = require_haystack()
    started = time.perf_counter()
    result: dict[str, Any] = {
        "date": date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads_default": torch.get_num_threads(),
        },
        "haystack": version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    if scifact_root is not None:
        result["scifact"] = run_scifact(
            scifact_root,
            work_dir,
            limit=scifact_limit,
            docs=scifact_docs,
            peer_threads=peer_threads,
            peer_vectors=peer_vectors,
            log=log,
        )
    if dev_questions is not None:
        result["dev"] = run_dev(
            dev_questions,
            dev_corpus,
            work_dir,
            load_grader(grader),
            peer_threads=peer_threads,
            peer_vectors=peer_vectors,
            cross_encoder_queries=cross_encoder_queries,
            log=log,
        )
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"Haystack {result['haystack']} vs ours, {result['date']}, {result['machine']['cpus']} CPUs, "
        f"load {result['load_average_at_start'][0]} -> {result['load_average_at_end'][0]}"
    ]
    head = f"{'':<34}{'ours':>10}{'haystack':>10}{'ours/theirs':>13}"
    for key, title in (("scifact", "SciFact"), ("dev", "dev questions")):
        r = result.get(key)
        if not r:
            continue
        q, lat = r["quality"], r["latency"]
        n = r["queries"] if key == "scifact" else r["answerable"]
        lines += [
            "",
            f"{title}: {n} {'held-out queries' if key == 'scifact' else 'answerable questions'}, "
            f"{r['chunks']} chunks, our reranker {r['reranker']}",
            head,
        ]
        metric = "nDCG@10" if key == "scifact" else "evidence recall"
        lines.append(
            f"{metric:<34}{q['ours']:>10.4f}{q['haystack']:>10.4f}{q['ratio_ours_over_theirs'] or 0:>13.3f}"
            f"   delta CI95 {q['delta_ci95']}"
        )
        peer = lat["ms"][lat["peer_compared"]]
        for p in ("p50", "p95"):
            lines.append(
                f"{'latency ' + p + ' ms (' + lat['peer_compared'] + ')':<34}{lat['ms']['ours'][p]:>10.1f}"
                f"{peer[p]:>10.1f}{lat['ratio_ours_over_theirs'][p]:>13.3f}"
            )
        te, ter = lat["ours_through_evidence_ms"], lat["ours_through_evidence_ratio"]
        lines.append(
            f"  ours up to its evidence: p50 {te['p50']:.1f} ms ({ter['p50']}), p95 {te['p95']:.1f} ms ({ter['p95']})"
        )
        for label, v in lat["ms"].items():
            if label not in ("ours", lat["peer_compared"]):
                lines.append(f"  also {label}: p50 {v['p50']:.1f} ms, p95 {v['p95']:.1f} ms")
        top = sorted(lat["ours_stages_ms"].items(), key=lambda kv: -kv[1]["p50"])[:5]
        lines.append("  our slowest stages (p50 ms): " + ", ".join(f"{k} {v['p50']:.1f}" for k, v in top))
        for side in ("ours", "haystack"):
            ix = r["indexing"][side]
            reused = f", vectors reused: {ix['vectors_reused']}" if "vectors_reused" in ix else ""
            lines.append(
                f"  indexing {side}: {ix['seconds']:.1f} s, embedded {ix['embedded_this_run']} this run{reused}"
            )
        if key == "dev":
            es = r["evidence_size"]
            lines.append(
                f"  evidence per question: ours {es['ours']['chunks']} chunks / {es['ours']['tokens']} tokens, "
                f"haystack {es['haystack']['chunks']} / {es['haystack']['tokens']}"
            )
            lines.append(
                f"  by type: {q['by_type']}; ours abstained on unanswerable {q['ours_abstained_on_unanswerable']}"
            )
            ce = r.get("cross_encoder_time_only")
            if ce:
                lines.append(
                    f"  same MiniLM-L6 cross-encoder on both (time only, {ce['ms']['ours']['n']} questions): "
                    f"ours p50 {ce['ms']['ours']['p50']:.0f} ms, haystack p50 "
                    f"{ce['ms'][ce['peer_compared']]['p50']:.0f} ms, ratio {ce['ratio_ours_over_theirs']['p50']}"
                )
    lines.append(f"\n{result['seconds']:.0f} s in all")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--work-dir", type=Path, default=WORK_DIR, help="Indexes and embedding caches (scratch)."
    )
    parser.add_argument("--scifact", type=Path, default=SCIFACT, help="BEIR SciFact folder.")
    parser.add_argument("--scifact-limit", type=int, default=None, help="Only the first N held-out queries.")
    parser.add_argument(
        "--scifact-docs",
        type=int,
        default=None,
        help="Index only the queries' relevant documents plus others up to N (not the full corpus).",
    )
    parser.add_argument("--no-scifact", action="store_true")
    parser.add_argument("--dev-questions", type=Path, default=DEV_QUESTIONS)
    parser.add_argument("--dev-corpus", type=Path, nargs="+", default=list(DEV_CORPUS))
    parser.add_argument("--no-dev", action="store_true")
    parser.add_argument(
        "--grader", type=Path, default=GRADER, help="grade_evidence.py (defines evidence recall)."
    )
    parser.add_argument(
        "--cross-encoder-queries",
        type=int,
        default=10,
        help="Dev questions to time with a MiniLM-sized cross-encoder on both sides (0: skip).",
    )
    parser.add_argument(
        "--peer-vectors",
        choices=("own", "ours"),
        default="own",
        help="'own': Haystack embeds the chunks itself (cached in --work-dir); 'ours': it is given the vectors our "
        "ingestion stored for the same texts (same model: they differ by ~1e-7), when embedding twice does not fit.",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "peer.json")
    parser.add_argument("--json", action="store_true", help="Print the JSON instead of the table.")
    args = parser.parse_args(argv)
    require_haystack()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # Haystack 2.x announcing its 3.0 moves
    log: Log = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    result = run(
        work_dir=args.work_dir,
        scifact_root=None if args.no_scifact else args.scifact,
        scifact_limit=args.scifact_limit,
        scifact_docs=args.scifact_docs,
        dev_questions=None if args.no_dev else args.dev_questions,
        dev_corpus=args.dev_corpus,
        grader=args.grader,
        peer_vectors=args.peer_vectors,
        cross_encoder_queries=args.cross_encoder_queries,
        log=log,
    )
    result["command"] = " ".join(["python -m benchmarks.peer", *(argv if argv is not None else sys.argv[1:])])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
    else:
        print(_table(result))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
