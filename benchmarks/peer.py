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
trained on the other half; ``evaluation.rerank_train.heldout``); evidence recall on the dev questions, graded with
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

The peer as its users run it (``--mode users [--suites dev gitlab sample] [--split tune|test|all]``): on every
policy suite, Haystack indexes the suite's files itself, the way its own users would: PyPDFToDocument for PDFs,
MarkdownToDocument for Markdown (TextFileToDocument when its optional ``mdit_plain`` is missing), DocumentCleaner(),
DocumentSplitter(split_by="word", split_length=200, split_overlap=20), SentenceTransformersDocumentEmbedder
(the packaged MiniLM folder), InMemoryDocumentStore; per query InMemoryBM25Retriever top 40 +
SentenceTransformersTextEmbedder/InMemoryEmbeddingRetriever top 40, DocumentJoiner(reciprocal_rank_fusion).
Its evidence in three configurations, cut from the same fused list: ``haystack_top6`` (the joiner's top 6, the
peer's default), ``haystack_budget`` (documents in fused order until our settings' ``evidence_token_budget``,
1,800 tokens, would be exceeded) and ``haystack_ours_mean`` (the same cut at ours' mean evidence tokens in this
run). Tokens are counted with ``rag.text.count_tokens`` on both sides. Ours: ``rag.factory.build_pipeline`` over
the project's own ingestion of the same files (``--suite-cache``/<suite> when it holds an index, else
``--work-dir``/ours/<suite>), each question asked as its asker (user, groups, as_of) with
PipelineOptions(use_llm=False). Graded: questions of the split with gold ``evidence`` quotes the asker may read
(the peer has no access control; in ``sample``, questions whose asker may not read the gold have no gold quotes
either). Grading is ../shared/tools/grade_evidence.py's: every gold quote ``covered()`` by the final evidence,
quotes covered, the passage covering the first quote in the first or last bundle (a peer document is its own
bundle). Latency: per query in one loop, who goes first rotating per question; ours = every traced stage except
``generate``, ours_through_evidence = up to ``pack``; the peer = ``Pipeline.run`` with torch's default threads and
with one, compared at its faster setting. The peer's vectors are cached in ``--work-dir``/haystack-cache by model
and split texts. Output (``--out``, default benchmarks/results/peer-users.json; ``--json`` prints it):

    {"mode": "users", "date", "commit", "command", "haystack", "machine", "split", "seconds",
     "load_average_at_start", "load_average_at_end", "settings": {"evidence_k", "evidence_token_budget", ...},
     "peer_pipeline": str,
     "suites": {NAME: {
        "split", "questions_in_split", "graded", "corpus": [paths],
        "excluded": {"no_gold_quotes": [ids], "gold_not_readable_by_asker": [ids]},
        "ours": {"data_dir", "chunks", "reranker", "indexing"},
        "haystack": {"converters": {kind: str}, "files", "indexing": {"documents", "embedded_this_run", ...}},
        "systems": {"ours" | "haystack_top6" | "haystack_budget" | "haystack_ours_mean": {
            "all_gold": {"k", "n", "rate", "wilson95": [low, high]}, "quotes_covered": {"k", "n"},
            "best_gold_at_edge": {"k", "n"}, "evidence_passages_mean", "evidence_words_mean",
            "evidence_tokens_mean",
            # haystack_* only:
            "cut", "budget_tokens", "ratio_all_gold_ours_over_theirs", "only_ours", "only_theirs",
            "mcnemar_exact_p"}},
        "latency_ms": {"ours", "ours_through_evidence", "haystack": {"p50", "p95", "mean", "n"},
            "haystack_setting", "haystack_all_settings", "ratio_ours_over_theirs": {"p50", "p95"},
            "ratio_through_evidence_over_theirs": {"p50", "p95"}, "ours_stages_ms": {STAGE: {"p50", ...}}},
        "per_question": [{"id", "type", SYSTEM: {"all_gold", "quotes", "edge"}}]}}}
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
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from rag.config import library_defaults

library_defaults(  # read by Haystack and the Hugging Face libraries at import; Haystack would otherwise phone home
    {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HAYSTACK_TELEMETRY_ENABLED": "False",
        "TQDM_DISABLE": "1",
    }
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
DEFAULT_OUT = REPO / "benchmarks" / "results" / "peer.json"
HAYSTACK_PIN = "haystack-ai==2.31.0"  # keep in step with scripts/peer_venv.sh

HAYSTACK_MISSING = (
    "benchmarks.peer needs Haystack 2.x, which is not installed in this environment (on purpose: it is never a "
    "dependency of the app).\n  Run `bash scripts/peer_venv.sh` once, then "
    "`.venv-peer/bin/python -m benchmarks.peer` (or `.venv-peer/bin/rag bench peer`)."
)

Log = Callable[[str], None]
Q = TypeVar("Q")  # a question as a run takes it (text, or a suite question with its asker)
EXCLUDED = ("generate",)  # as benchmarks/query.py: what an LLM would replace
# our stages past the peer's last one (its pipeline ends at its documents; ours at the packed evidence)
AFTER_EVIDENCE = ("answer_type", "prompt", "generate", "citations", "claims", "answer_check")


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

    def __init__(self, data_dir: Path, *, use_llm: bool | None = None, **settings: Any) -> None:
        """``use_llm``: PipelineOptions.use_llm for every question (None: the settings decide)."""
        from rag.config import load_settings
        from rag.factory import build_pipeline
        from rag.pipeline import PipelineOptions

        self.pipeline = build_pipeline(load_settings(data_dir=data_dir, **settings))
        self.reranker = self.pipeline.reranker.name
        self.options = PipelineOptions(use_llm=use_llm)

    def chunks(self) -> list[Any]:
        return list(self.pipeline.reader.generation.chunks)

    def ask(
        self,
        question: str,
        *,
        user: str = "peer-bench",
        groups: frozenset[str] = frozenset(),
        as_of: date | None = None,
    ) -> Answer:
        from rag.pipeline import Question
        from rag.types import Principal

        result = self.pipeline.ask(Question(question, Principal(user, groups), as_of=as_of), self.options)
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
    from evaluation.rerank_train import heldout

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
    from rag.metrics import ndcg_at

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
    # first-call costs (graphs, caches) are not per-query latency
    return rotate(runs, questions, "What is this about?", peer_label(peer_threads[0]), log=log, every=50)


def rotate(
    runs: Sequence[tuple[str, Callable[[Q], Answer]]],
    questions: Sequence[Q],
    warm: Q,
    peer: str,
    *,
    log: Log,
    every: int,
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Every question through every run (label, ask), who goes first rotating per question, after one warm-up
    call each; returns ours' answers, the ``peer`` run's answers and each run's milliseconds."""
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
        theirs.append(got[peer])
        if (i + 1) % every == 0:
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
    to_evidence = through_evidence(mine)
    return {
        "ms": table,
        "peer_compared": best,
        "ratio_ours_over_theirs": {p: round(ours[p] / theirs[p], 3) for p in ("p50", "p95")},
        "speedup_p50": round(theirs["p50"] / ours["p50"], 2),
        "ours_through_evidence_ms": to_evidence,
        "ours_through_evidence_ratio": {p: round(to_evidence[p] / theirs[p], 3) for p in ("p50", "p95")},
        "ours_stages_ms": stage_latencies(mine),
    }


def through_evidence(mine: Sequence[Answer]) -> dict[str, float]:
    """Latency of our stages up to the packed evidence (the peer's last step)."""
    return latency([sum(v for k, v in a.stages_ms.items() if k not in AFTER_EVIDENCE) for a in mine])


def stage_latencies(mine: Sequence[Answer]) -> dict[str, dict[str, float]]:
    """Latency of each of our traced stages, in the order they run."""
    names = dict.fromkeys(k for a in mine for k in a.stages_ms)
    return {k: latency([a.stages_ms[k] for a in mine if k in a.stages_ms]) for k in names}


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
    from evaluation.rerankers import _minilm_cross_encoder

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
        "model": "MiniLM-L6 weights + random 1-logit head (evaluation.rerankers._minilm_cross_encoder)",
        "ours_reranker": ours.reranker,
        "haystack_ranker": "SentenceTransformersSimilarityRanker",
        **latency_block(ms, mine),
    }


# ---------------------------------------------------------------------------------------------------------
# The peer as its users run it (--mode users): Haystack's own converters, cleaner and splitter, per policy suite
# ---------------------------------------------------------------------------------------------------------

SUITE_CACHE = Path(
    "/work/cache/suite"
)  # where `rag eval suite` keeps each suite's index (reused when present)
SPLIT_WORDS, SPLIT_OVERLAP = (
    200,
    20,
)  # DocumentSplitter(split_by="word", ...), as the issue and Haystack's docs
PEER_TOP_K = 6  # the peer's default evidence: the joiner's top 6


@dataclass(frozen=True)
class PolicySuite:
    """A policy QA suite: its questions (with ``evidence`` quotes) and the corpus they are asked over."""

    name: str
    questions: Path
    corpus: tuple[Path, ...]


def policy_suites(shared: Path = SHARED, repo: Path = REPO) -> dict[str, PolicySuite]:
    policies = shared / "data" / "policies"
    return {
        "dev": PolicySuite(
            "dev",
            shared / "data" / "questions" / "dev.jsonl",
            (policies / "epa-infosec", policies / "civicactions-handbook" / "markdown" / "docs"),
        ),
        "gitlab": PolicySuite(
            "gitlab", shared / "data" / "questions" / "gitlab-dev.jsonl", (policies / "gitlab-people",)
        ),
        "moj": PolicySuite(
            "moj", shared / "data" / "questions" / "moj-dev.jsonl", (policies / "moj-handbook" / "pdf",)
        ),
        "hypha": PolicySuite(
            "hypha", shared / "data" / "questions" / "hypha-dev.jsonl", (policies / "hypha-handbook" / "pdf",)
        ),
        "sample": PolicySuite(
            "sample", repo / "ingest" / "sample" / "questions.jsonl", (repo / "ingest" / "sample" / "pdfs",)
        ),
    }


@dataclass(frozen=True)
class SuiteQuestion:
    """One question of a policy suite, as its file gives it (the asker defaults to a user with no groups)."""

    qid: str
    type: str
    text: str
    quotes: tuple[str, ...]
    gold_files: tuple[str, ...]
    user: str = "peer-bench"
    groups: frozenset[str] = frozenset()
    as_of: date | None = None


def suite_question(d: dict[str, Any]) -> SuiteQuestion:
    evidence = d.get("evidence") or []
    return SuiteQuestion(
        qid=str(d["id"]),
        type=str(d.get("type", "single")),
        text=str(d["question"]),
        quotes=tuple(str(e["quote"]) for e in evidence if e.get("quote")),
        gold_files=tuple(str(e["file"]) for e in evidence if e.get("file")),
        user=str(d.get("user") or "peer-bench"),
        groups=frozenset(d.get("groups") or ()),
        as_of=date.fromisoformat(d["as_of"]) if d.get("as_of") else None,
    )


def select_split(
    questions: Sequence[SuiteQuestion],
    suite: str,
    split: str,
    ids: Callable[[str, str], frozenset[str]] | None = None,
) -> list[SuiteQuestion]:
    """The questions of ``suite`` in ``split`` (tune, test or all), by the fixed split on disk
    (``evaluation.splits.split_ids``), in file order. A question the split does not know is an error: the
    split file is stale."""
    from evaluation.splits import split_ids

    lookup = ids or split_ids
    known = lookup(suite, "all")
    unknown = [q.qid for q in questions if q.qid not in known]
    if unknown:
        raise SystemExit(
            f"{suite}: questions {', '.join(unknown[:5])} have no tune/test split; rebuild the splits with "
            "`python -m evaluation.splits --write` (and commit them)."
        )
    chosen = lookup(suite, split)
    return [q for q in questions if q.qid in chosen]


def sidecar_groups(corpus: Sequence[Path]) -> dict[str, tuple[str, ...]]:
    """File name -> the access groups its ``<file>.meta.json`` sidecar gives (no sidecar or no groups: public)."""
    from rag.types import PUBLIC_GROUP

    groups: dict[str, tuple[str, ...]] = {}
    for root in corpus:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if f.name.endswith(".meta.json") or not f.is_file():
                continue
            meta = f.with_name(f.name + ".meta.json")
            found = json.loads(meta.read_text()).get("groups") if meta.is_file() else None
            groups[f.name] = tuple(found) if found else (PUBLIC_GROUP,)
    return groups


def gold_readable(q: SuiteQuestion, groups: dict[str, tuple[str, ...]]) -> bool:
    """Whether the asker may read every gold file (a file the corpus does not know counts as public)."""
    from rag.types import PUBLIC_GROUP, Principal

    readable = Principal(q.user, q.groups).readable_groups
    return all(set(groups.get(Path(f).name, (PUBLIC_GROUP,))) & readable for f in q.gold_files)


def graded_questions(
    questions: Sequence[SuiteQuestion], groups: dict[str, tuple[str, ...]]
) -> tuple[list[SuiteQuestion], dict[str, list[str]]]:
    """The questions both sides are graded on: those with gold quotes the asker may read (the peer has no access
    control, so a question whose gold the asker may not read has no peer answer to grade); and the rest by why."""
    kept: list[SuiteQuestion] = []
    left: dict[str, list[str]] = {"no_gold_quotes": [], "gold_not_readable_by_asker": []}
    for q in questions:
        if not q.quotes:
            left["no_gold_quotes"].append(q.qid)
        elif not gold_readable(q, groups):
            left["gold_not_readable_by_asker"].append(q.qid)
        else:
            kept.append(q)
    return kept, left


def budget_cut(token_counts: Sequence[int], budget: int) -> int:
    """How many leading documents (in fused order) fit in ``budget`` tokens: take them in order and stop at the
    first that would exceed it (never over the budget; a first document larger than it leaves none)."""
    total = 0
    for i, n in enumerate(token_counts):
        if total + n > budget:
            return i
        total += n
    return len(token_counts)


def grade_evidence(
    quotes: Sequence[str],
    texts: Sequence[str],
    bundles: Sequence[str | None] | None,
    covered: Callable[[str, list[str]], bool],
) -> dict[str, Any]:
    """One answer graded as ../shared/tools/grade_evidence.py grades it: every gold quote covered by the final
    evidence texts, how many quotes are, and whether the passage covering the first quote is in the first or
    last bundle (a passage without a bundle is its own)."""
    texts = list(texts)
    each = [bool(covered(q, texts)) for q in quotes]
    labels = [b if b is not None else f"#{i}" for i, b in enumerate(bundles or [None] * len(texts))]
    pos = [i for i, t in enumerate(texts) if quotes and covered(quotes[0], [t])]
    edge = bool(pos) and labels[pos[0]] in (labels[0], labels[-1])
    return {"all_gold": bool(quotes) and all(each), "quotes": sum(each), "of": len(quotes), "edge": edge}


def side_metrics(rows: Sequence[dict[str, Any]], sizes: Sequence[tuple[int, int, int]]) -> dict[str, Any]:
    """A system's figures over graded answers: ``rows`` from grade_evidence, ``sizes`` (passages, words, tokens)."""
    from evaluation.stats import wilson_interval

    k, n = sum(r["all_gold"] for r in rows), len(rows)
    low, high = wilson_interval(k, n)
    arr = np.asarray(sizes, dtype=float).reshape(-1, 3)
    mean = arr.mean(axis=0) if len(arr) else np.zeros(3)
    return {
        "all_gold": {
            "k": k,
            "n": n,
            "rate": round(k / n, 4) if n else None,
            "wilson95": [round(low, 4), round(high, 4)],
        },
        "quotes_covered": {"k": sum(r["quotes"] for r in rows), "n": sum(r["of"] for r in rows)},
        "best_gold_at_edge": {"k": sum(bool(r["edge"]) for r in rows), "n": n},
        "evidence_passages_mean": round(float(mean[0]), 2),
        "evidence_words_mean": round(float(mean[1]), 1),
        "evidence_tokens_mean": round(float(mean[2]), 1),
    }


def paired_all_gold(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Ours vs one peer configuration on the same questions: the all-gold ratio and the exact McNemar test."""
    from evaluation.stats import discordant_counts, mcnemar_exact

    a, b = [r["all_gold"] for r in ours], [r["all_gold"] for r in theirs]
    only_ours, only_theirs = discordant_counts(a, b)
    return {
        "ratio_all_gold_ours_over_theirs": round(sum(a) / sum(b), 3) if sum(b) else None,
        "only_ours": only_ours,
        "only_theirs": only_theirs,
        "mcnemar_exact_p": round(mcnemar_exact(only_ours, only_theirs), 4),
    }


def ratio(ours: float, theirs: float) -> float | None:
    return round(ours / theirs, 3) if theirs else None


class UsersPeer:
    """Haystack 2.x as its users build it: its converters, DocumentCleaner, DocumentSplitter (200 words, 20
    overlap), SentenceTransformersDocumentEmbedder, InMemoryDocumentStore; per query BM25 top 40 + MiniLM top 40,
    DocumentJoiner(reciprocal_rank_fusion). ``ask`` returns the whole fused list in the joiner's order (its
    ``top_k=6`` is its first six), so the top-6 and token-budget configurations come from one run."""

    name = "haystack"

    def __init__(
        self, files: Sequence[Path], *, model_dir: Path, cache_dir: Path, top_n: int, log: Log = print
    ) -> None:
        from haystack import Pipeline
        from haystack.components.converters import PyPDFToDocument, TextFileToDocument
        from haystack.components.embedders import (
            SentenceTransformersDocumentEmbedder,
            SentenceTransformersTextEmbedder,
        )
        from haystack.components.joiners import DocumentJoiner
        from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever, InMemoryEmbeddingRetriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore
        from haystack.utils import ComponentDevice

        cpu = ComponentDevice.from_str("cpu")
        timings: dict[str, float] = {}
        started = time.perf_counter()
        pdfs = [f for f in files if f.suffix.lower() == ".pdf"]
        texts = [f for f in files if f.suffix.lower() in (".md", ".markdown", ".txt")]
        md = [f for f in texts if f.suffix.lower() != ".txt"]
        plain = [f for f in texts if f.suffix.lower() == ".txt"]
        converters: dict[str, str] = {}
        docs: list[Any] = []
        if pdfs:
            docs += PyPDFToDocument().run(sources=pdfs)["documents"]
            converters["pdf"] = f"PyPDFToDocument ({len(pdfs)} files)"
        if md:
            try:
                from haystack.components.converters import MarkdownToDocument

                docs += MarkdownToDocument(progress_bar=False).run(sources=md)["documents"]
                converters["markdown"] = f"MarkdownToDocument ({len(md)} files)"
            except ImportError:  # its optional mdit_plain is missing: what a user would fall back to
                docs += TextFileToDocument().run(sources=md)["documents"]
                converters["markdown"] = f"TextFileToDocument ({len(md)} files; mdit_plain not installed)"
        if plain:
            docs += TextFileToDocument().run(sources=plain)["documents"]
            converters["text"] = f"TextFileToDocument ({len(plain)} files)"
        timings["convert"] = time.perf_counter() - started
        t = time.perf_counter()
        docs = DocumentCleaner().run(documents=docs)["documents"]
        timings["clean"] = time.perf_counter() - t
        t = time.perf_counter()
        splitter = DocumentSplitter(split_by="word", split_length=SPLIT_WORDS, split_overlap=SPLIT_OVERLAP)
        if hasattr(splitter, "warm_up"):
            splitter.warm_up()
        docs = splitter.run(documents=docs)["documents"]
        timings["split"] = time.perf_counter() - t
        self.converters = converters
        self.files = len(files)

        # Embedding is the slow step: cached on disk by model and the split texts, so a re-run is cheap.
        t = time.perf_counter()
        digest = hashlib.sha256(f"users:{model_dir}".encode())
        for d in docs:
            digest.update((d.content or "").encode() + b"\x00")
        cached = cache_dir / f"haystack-users-{digest.hexdigest()[:16]}.npy"
        embedded = 0
        if cached.exists():
            vectors = np.load(cached)
            docs = [replace(d, embedding=v.tolist()) for d, v in zip(docs, vectors, strict=True)]
        else:
            log(f"haystack: embedding {len(docs)} split documents (SentenceTransformersDocumentEmbedder)")
            embedder = SentenceTransformersDocumentEmbedder(
                model=str(model_dir), device=cpu, progress_bar=False
            )
            embedder.warm_up()
            docs = embedder.run(documents=docs)["documents"]
            embedded = len(docs)
            cache_dir.mkdir(parents=True, exist_ok=True)
            np.save(cached, np.asarray([d.embedding for d in docs], dtype=np.float32))
        timings["embed"] = time.perf_counter() - t
        t = time.perf_counter()
        self.store = InMemoryDocumentStore()
        self.store.write_documents(docs)
        timings["write"] = time.perf_counter() - t
        self.indexing = {
            "seconds": round(time.perf_counter() - started, 2),
            "timings_s": {k: round(v, 2) for k, v in timings.items()},
            "embedded_this_run": embedded,
            "vectors_cache": str(cached),
            "documents": self.store.count_documents(),
        }

        pipe = Pipeline()
        pipe.add_component(
            "text_embedder",
            SentenceTransformersTextEmbedder(model=str(model_dir), device=cpu, progress_bar=False),
        )
        pipe.add_component("bm25", InMemoryBM25Retriever(self.store, top_k=top_n))
        pipe.add_component("dense", InMemoryEmbeddingRetriever(self.store, top_k=top_n))
        pipe.add_component("joiner", DocumentJoiner(join_mode="reciprocal_rank_fusion"))
        pipe.connect("text_embedder.embedding", "dense.query_embedding")
        pipe.connect("bm25", "joiner")
        pipe.connect("dense", "joiner")
        pipe.warm_up()
        self.pipeline = pipe

    def ask(self, question: str) -> Answer:
        started = time.perf_counter()
        out = self.pipeline.run({"text_embedder": {"text": question}, "bm25": {"query": question}})
        ms = (time.perf_counter() - started) * 1000
        fused = out["joiner"]["documents"]
        evidence = [(d.id, d.content or "") for d in fused]
        return Answer(_docs_in_order([str(d.meta.get("file_path", "")) for d in fused]), evidence, ms, {})


def ours_data_dir(suite: str, work_dir: Path, cache_root: Path = SUITE_CACHE) -> Path:
    """``cache_root/<suite>`` when it already holds an index (the suite runner's), else ``work_dir/ours/<suite>``."""
    from rag.index import current_generation

    shared_dir = cache_root / suite
    return shared_dir if current_generation(shared_dir) else work_dir / "ours" / suite


def users_side_by_side(
    ours: Ours,
    peer: UsersPeer,
    questions: Sequence[SuiteQuestion],
    *,
    peer_threads: Sequence[int | None],
    log: Log,
) -> tuple[list[Answer], list[Answer], dict[str, list[float]]]:
    """Each question through ours (as its asker, on its date) and the peer (once per thread setting), who goes
    first rotating per question; the peer's answers are the same whatever its threads (the first setting's kept)."""

    def peer_with(n: int | None) -> Callable[[SuiteQuestion], Answer]:
        def ask(q: SuiteQuestion) -> Answer:
            with torch_threads(n):
                return peer.ask(q.text)

        return ask

    def ours_ask(q: SuiteQuestion) -> Answer:
        return ours.ask(q.text, user=q.user, groups=q.groups, as_of=q.as_of)

    runs: list[tuple[str, Callable[[SuiteQuestion], Answer]]] = [("ours", ours_ask)]
    runs += [(peer_label(n), peer_with(n)) for n in peer_threads]
    warm = SuiteQuestion("warm-up", "single", "What is this about?", (), ())
    return rotate(runs, questions, warm, peer_label(peer_threads[0]), log=log, every=10)


def _sizes(texts: Sequence[str]) -> tuple[int, int, int]:
    from rag.text import count_tokens

    return len(texts), sum(len(t.split()) for t in texts), sum(count_tokens(t) for t in texts)


def run_users_suite(
    suite: PolicySuite,
    split: str,
    work_dir: Path,
    grader: ModuleType,
    *,
    peer_threads: Sequence[int | None] = (None, 1),
    cache_root: Path = SUITE_CACHE,
    log: Log = print,
) -> dict[str, Any]:
    """One policy suite, ours and the peer side by side: quality at top 6, at our settings' evidence token budget
    and at ours' mean evidence tokens in this run; latency per query from the same loop."""
    from ingest.sources import discover
    from rag.config import default_settings
    from rag.embedder import resolve_model_dir

    s = default_settings()
    rows = [json.loads(line) for line in suite.questions.read_text().splitlines() if line.strip()]
    in_split = select_split([suite_question(r) for r in rows], suite.name, split)
    questions, excluded = graded_questions(in_split, sidecar_groups(suite.corpus))
    data_dir = ours_data_dir(suite.name, work_dir, cache_root)
    ours_indexing = ingest_ours([str(p) for p in suite.corpus], data_dir, log)
    ours = Ours(data_dir, use_llm=False)
    files = discover([str(p) for p in suite.corpus])
    peer = UsersPeer(
        files,
        model_dir=resolve_model_dir(s.embedding_model),
        cache_dir=work_dir / "haystack-cache",
        top_n=s.lexical_top_n,
        log=log,
    )
    log(
        f"{suite.name} ({split}): {len(questions)} graded of {len(in_split)} questions; ours "
        f"{len(ours.chunks())} chunks, haystack {peer.indexing['documents']} documents"
    )
    mine, theirs, ms = users_side_by_side(ours, peer, questions, peer_threads=peer_threads, log=log)

    ours_rows, ours_sizes = [], []
    for q, a in zip(questions, mine, strict=True):
        ev = sorted(a.record.get("evidence", []), key=lambda e: e.get("n", 0))
        texts = [e.get("text", "") for e in ev]
        ours_rows.append(grade_evidence(q.quotes, texts, [e.get("bundle") for e in ev], grader.covered))
        ours_sizes.append(_sizes(texts))
    ours_tokens = float(np.mean([t for _, _, t in ours_sizes])) if ours_sizes else 0.0
    configs: dict[str, dict[str, Any]] = {
        "haystack_top6": {"cut": f"the joiner's top {PEER_TOP_K}", "budget_tokens": None},
        "haystack_budget": {
            "cut": "fused order until our settings' evidence_token_budget",
            "budget_tokens": s.evidence_token_budget,
        },
        "haystack_ours_mean": {
            "cut": "fused order until ours' mean evidence tokens in this run",
            "budget_tokens": int(round(ours_tokens)),
        },
    }
    systems: dict[str, Any] = {"ours": side_metrics(ours_rows, ours_sizes)}
    per_question = [
        {"id": q.qid, "type": q.type, "ours": {k: r[k] for k in ("all_gold", "quotes", "edge")}}
        for q, r in zip(questions, ours_rows, strict=True)
    ]
    from rag.text import count_tokens

    for name, cfg in configs.items():
        cfg_rows, cfg_sizes = [], []
        for q, a, pq in zip(questions, theirs, per_question, strict=True):
            texts = [t for _, t in a.evidence]
            budget = cfg["budget_tokens"]
            keep = PEER_TOP_K if budget is None else budget_cut([count_tokens(t) for t in texts], budget)
            texts = texts[:keep]
            row = grade_evidence(q.quotes, texts, None, grader.covered)
            cfg_rows.append(row)
            cfg_sizes.append(_sizes(texts))
            pq[name] = {k: row[k] for k in ("all_gold", "quotes", "edge")}
        systems[name] = {**cfg, **side_metrics(cfg_rows, cfg_sizes), **paired_all_gold(ours_rows, cfg_rows)}

    table = {label: latency(v) for label, v in ms.items()}
    peers = [label for label in table if label != "ours"]
    best = min(peers, key=lambda label: table[label]["p50"])
    through = through_evidence(mine)
    return {
        "split": split,
        "questions_in_split": len(in_split),
        "graded": len(questions),
        "excluded": excluded,
        "corpus": [str(p) for p in suite.corpus],
        "ours": {
            "data_dir": str(data_dir),
            "chunks": len(ours.chunks()),
            "reranker": ours.reranker,
            "indexing": ours_indexing,
        },
        "haystack": {"converters": peer.converters, "files": peer.files, "indexing": peer.indexing},
        "systems": systems,
        "latency_ms": {
            "ours": table["ours"],
            "ours_through_evidence": through,
            "haystack": table[best],
            "haystack_setting": best,
            "haystack_all_settings": {label: table[label] for label in peers},
            "ratio_ours_over_theirs": {p: ratio(table["ours"][p], table[best][p]) for p in ("p50", "p95")},
            "ratio_through_evidence_over_theirs": {
                p: ratio(through[p], table[best][p]) for p in ("p50", "p95")
            },
            "ours_stages_ms": stage_latencies(mine),
        },
        "per_question": per_question,
    }


def git_commit(repo: Path = REPO) -> str | None:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def run_users(
    *,
    work_dir: Path,
    suites: Sequence[str],
    split: str = "test",
    grader: Path = GRADER,
    shared: Path = SHARED,
    cache_root: Path = SUITE_CACHE,
    peer_threads: Sequence[int | None] = (None, 1),
    known: dict[str, PolicySuite] | None = None,
    log: Log = print,
) -> dict[str, Any]:
    """Every chosen policy suite, ours and the peer as its users run it (the JSON shape: module docstring)."""
    import torch

    from rag.config import default_settings

    version = require_haystack()
    known = known if known is not None else policy_suites(shared)
    missing = [n for n in suites if n not in known]
    if missing:
        raise SystemExit(f"Unknown suite {', '.join(missing)}; known: {', '.join(known)}.")
    absent = [str(p) for n in suites for p in (known[n].questions, *known[n].corpus) if not p.exists()]
    if absent:
        raise SystemExit(f"Suite files are missing: {', '.join(absent)} (is ../shared present?).")
    started = time.perf_counter()
    s = default_settings()
    result: dict[str, Any] = {
        "mode": "users",
        "date": date.today().isoformat(),
        "commit": git_commit(),
        "haystack": version,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads_default": torch.get_num_threads(),
        },
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "split": split,
        "settings": {
            "evidence_k": s.evidence_k,
            "evidence_token_budget": s.evidence_token_budget,
            "lexical_top_n": s.lexical_top_n,
            "dense_top_n": s.dense_top_n,
            "tokens_counted_with": "rag.text.count_tokens (the embedding model's word pieces), both sides",
        },
        "peer_pipeline": (
            f"converters -> DocumentCleaner() -> DocumentSplitter(split_by='word', split_length={SPLIT_WORDS}, "
            f"split_overlap={SPLIT_OVERLAP}) -> SentenceTransformersDocumentEmbedder -> InMemoryDocumentStore; "
            f"query: InMemoryBM25Retriever(top_k={s.lexical_top_n}) + SentenceTransformersTextEmbedder -> "
            f"InMemoryEmbeddingRetriever(top_k={s.dense_top_n}) -> DocumentJoiner(join_mode='reciprocal_rank_fusion')"
        ),
        "suites": {},
    }
    work_dir.mkdir(parents=True, exist_ok=True)
    covered = load_grader(grader)
    for name in suites:
        result["suites"][name] = run_users_suite(
            known[name], split, work_dir, covered, peer_threads=peer_threads, cache_root=cache_root, log=log
        )
    result["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _rate(m: dict[str, Any]) -> str:
    a = m["all_gold"]
    lo, hi = a["wilson95"]
    return f"{a['k']}/{a['n']} = {a['rate'] or 0:.2f} [{lo:.2f}, {hi:.2f}]"


def users_table(result: dict[str, Any]) -> str:
    lines = [
        f"Ours vs Haystack {result['haystack']} as its users run it, {result['date']}, commit {result['commit']}, "
        f"split {result['split']}, {result['machine']['cpus']} CPUs, load {result['load_average_at_start'][0]} -> "
        f"{result['load_average_at_end'][0]}"
    ]
    cols = [
        ("ours", "ours"),
        ("haystack_top6", "hs top 6"),
        ("haystack_budget", "hs @budget"),
        ("haystack_ours_mean", "hs @ours' mean"),
    ]
    for name, r in result["suites"].items():
        sy, lat = r["systems"], r["latency_ms"]
        ex = ", ".join(f"{k} {len(v)}" for k, v in r["excluded"].items() if v) or "none"
        lines += [
            "",
            f"{name} ({r['split']}): {r['graded']} graded of {r['questions_in_split']} (not graded: {ex}); "
            f"ours {r['ours']['chunks']} chunks ({r['ours']['reranker']}), haystack "
            f"{r['haystack']['indexing']['documents']} documents ({'; '.join(r['haystack']['converters'].values())})",
            f"  budgets: @budget = {sy['haystack_budget']['budget_tokens']} tokens (our settings), "
            f"@ours' mean = {sy['haystack_ours_mean']['budget_tokens']} tokens (measured in this run)",
            f"{'':<26}" + "".join(f"{label:>28}" for _, label in cols),
        ]
        lines.append(f"{'all gold [Wilson 95%]':<26}" + "".join(f"{_rate(sy[k]):>28}" for k, _ in cols))
        lines.append(
            f"{'  ratio ours/theirs (p)':<26}{'':>28}"
            + "".join(
                f"{str(sy[k]['ratio_all_gold_ours_over_theirs']) + ' (p=' + str(sy[k]['mcnemar_exact_p']) + ')':>28}"
                for k, _ in cols[1:]
            )
        )
        for key, title in (("quotes_covered", "quotes covered"), ("best_gold_at_edge", "best gold at edge")):
            lines.append(
                f"{title:<26}"
                + "".join(f"{str(sy[k][key]['k']) + '/' + str(sy[k][key]['n']):>28}" for k, _ in cols)
            )
        lines.append(
            f"{'evidence words / tokens':<26}"
            + "".join(
                f"{sy[k]['evidence_words_mean']:>18.0f} / {sy[k]['evidence_tokens_mean']:>5.0f}"
                for k, _ in cols
            )
        )
        lines.append(
            f"{'passages per answer':<26}"
            + "".join(f"{sy[k]['evidence_passages_mean']:>24.1f}" for k, _ in cols)
        )
        o, h, rt = lat["ours"], lat["haystack"], lat["ratio_ours_over_theirs"]
        te, rte = lat["ours_through_evidence"], lat["ratio_through_evidence_over_theirs"]
        lines.append(
            f"latency ms p50 / p95: ours {o['p50']:.1f} / {o['p95']:.1f}, haystack ({lat['haystack_setting']}) "
            f"{h['p50']:.1f} / {h['p95']:.1f}; ours/theirs {rt['p50']} / {rt['p95']}"
        )
        lines.append(
            f"  ours up to its evidence {te['p50']:.1f} / {te['p95']:.1f} ms ({rte['p50']} / {rte['p95']}); "
            + ", ".join(
                f"{k} {v['p50']:.1f} / {v['p95']:.1f}" for k, v in lat["haystack_all_settings"].items()
            )
        )
        top = sorted(lat["ours_stages_ms"].items(), key=lambda kv: -kv[1]["p50"])[:6]
        lines.append("  our slowest stages (p50 ms): " + ", ".join(f"{k} {v['p50']:.1f}" for k, v in top))
    lines.append(f"\n{result['seconds']:.0f} s in all")
    return "\n".join(lines)


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
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--json", action="store_true", help="Print the JSON instead of the table.")
    parser.add_argument(
        "--mode",
        choices=("chunks", "users"),
        default="chunks",
        help="'chunks': the peer is fed our chunks (SciFact + dev); 'users': the peer as its users run it, on "
        "every policy suite (its converters, cleaner, 200-word splitter).",
    )
    parser.add_argument(
        "--suites", nargs="+", default=["dev", "gitlab", "sample"], help="--mode users: suites."
    )
    parser.add_argument(
        "--split", choices=("tune", "test", "all"), default="test", help="--mode users: split."
    )
    parser.add_argument(
        "--suite-cache",
        type=Path,
        default=SUITE_CACHE,
        help="--mode users: ours reuses <this>/<suite> as its data dir when it holds an index.",
    )
    args = parser.parse_args(argv)
    require_haystack()
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # Haystack 2.x announcing its 3.0 moves
    log: Log = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    command = " ".join(["python -m benchmarks.peer", *(argv if argv is not None else sys.argv[1:])])
    if args.mode == "users":
        users = run_users(
            work_dir=args.work_dir,
            suites=args.suites,
            split=args.split,
            grader=args.grader,
            cache_root=args.suite_cache,
            log=log,
        )
        users["command"] = command
        out = args.out if args.out != DEFAULT_OUT else DEFAULT_OUT.with_name("peer-users.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(users, indent=1) + "\n")
        print(json.dumps(users) if args.json else users_table(users) + f"\nwrote {out}")
        return 0
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
