"""The two systems: ours (``rag.pipeline.Pipeline`` over our ingestion) and the peer (Haystack over our chunks)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.peer.common import EXCLUDED, Log

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


def docs_in_order(doc_ids: Sequence[str]) -> list[str]:
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
    from rag.models.embedder import load_embedder

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
    from rag.models.embedder import passage_text

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
            ranked_docs=docs_in_order([c.chunk.doc_id for c in result.candidates]),
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

        from rag.models.embedder import passage_text

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
        return Answer(docs_in_order([d.meta["doc_id"] for d in ranked]), evidence, ms, record)
