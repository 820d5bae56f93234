"""The open question/passage data the feature reranker is trained and measured on: SciFact (train qrels) and
NQ-Open, their fixed held-out halves (``heldout``), embeddings cached on disk, and the app's hybrid retrieval
over them (``Retrieval``: BM25 + MiniLM + RRF, top 40). ``evaluation.training.reranker`` trains on the other
halves; ``evaluation.rerankers``, ``evaluation.retrieval``, the peer and the suites' SciFact split measure on these."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.models.embedder import passage_text
from rag.models.reading import identity
from rag.models.sentences import reading_text, sentence_units
from rag.stages.retrieve import rrf_fuse
from rag.stores.bm25 import BM25Index
from rag.text import bm25_tokens
from rag.types import PUBLIC_GROUP, Candidate, Chunk

DEFAULT_DATA_DIR = Path("/work/shared/data")


DEFAULT_CACHE_DIR = Path("/tmp/rag-bench")


@dataclass(frozen=True)
class Passage:
    pid: str
    title: str
    text: str

    @property
    def embed_text(self) -> str:
        return passage_text(self.title, "", self.text)


def encoder_identity(embedder: Any) -> str:
    """``rag.models.reading.identity`` of an embedder: its model name, with the shipped reading encoder's weights
    digest, and int8 marked when it runs int8 (``runtime`` 'onnx-int8'; 'torch (why)' counts as float)."""
    return identity(str(embedder.name), str(getattr(embedder, "runtime", "onnx")).split(" ")[0])


def embed_cached(embedder, texts: Sequence[str], cache_dir: Path, label: str) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Embed ``texts`` once; later calls with the same model and texts load ``<cache_dir>/<label>-<hash>.npy``.

    The model counts by its identity (``encoder_identity``: the shipped reading encoder with its weights' digest,
    so a retrained one never reads an earlier one's vectors; int8 vectors marked)."""
    digest = hashlib.sha256(encoder_identity(embedder).encode())
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\x00")
    path = Path(cache_dir) / f"{label}-{digest.hexdigest()[:16]}.npy"
    if path.exists():
        return np.load(path)
    vectors = embedder.embed_passages(list(texts))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vectors)
    tmp.replace(path)
    return vectors


def embed_cached_parts(  # type: ignore[no-untyped-def]
    embedder,
    texts: Sequence[str],
    cache_dir: Path,
    label: str,
    *,
    part: int = 4096,
    log: Callable[[str], None] | None = None,
) -> np.ndarray:
    """:func:`embed_cached` in parts of ``part`` texts, so a long embedding job resumes where it stopped."""
    pieces = []
    for start in range(0, len(texts), part):
        pieces.append(
            embed_cached(embedder, texts[start : start + part], cache_dir, f"{label}-{start // part}")
        )
        if log is not None:
            log(f"{label}: {min(start + part, len(texts))}/{len(texts)} embedded")
    return np.concatenate(pieces) if pieces else np.zeros((0, embedder.dim), dtype=np.float32)


def sentence_vectors_of(  # type: ignore[no-untyped-def]
    embedder,
    passages: Sequence[Passage],
    cache_dir: Path,
    label: str,
    log: Callable[[str], None] | None = None,
    *,
    reading: bool = False,
) -> dict[str, np.ndarray]:
    """pid -> vectors of ``sentence_units(passage.text)``: what ingestion stores per chunk (cached on disk); with
    ``reading`` each unit read after the passage's title (``reading_text``), as ingestion gives the reading
    encoder a chunk's units after its heading (a SciFact or NQ passage's heading is its title)."""
    units_of = {
        p.pid: [reading_text(p.title, u) for u in sentence_units(p.text)]
        if reading
        else sentence_units(p.text)
        for p in passages
    }
    texts = sorted({u for us in units_of.values() for u in us})
    vectors = np.asarray(embed_cached_parts(embedder, texts, cache_dir, label, log=log), dtype=np.float32)
    row = {t: i for i, t in enumerate(texts)}
    return {pid: vectors[[row[u] for u in us]] for pid, us in units_of.items()}


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    relevant: frozenset[str]  # passage ids judged relevant
    answers: tuple[str, ...] = ()  # NQ answer strings: other passages holding one are not safe negatives


@dataclass
class Dataset:
    """A passage pool and its queries (the retrieval task the reranker learns and is measured on)."""

    name: str
    passages: list[Passage]
    queries: list[Query]


def load_scifact(data_dir: Path = DEFAULT_DATA_DIR) -> Dataset:
    """SciFact: the full 5,183-abstract corpus and the queries that have train qrels."""
    root = Path(data_dir) / "scifact"
    passages = []
    with open(root / "corpus.jsonl") as f:
        for line in f:
            d = json.loads(line)
            passages.append(Passage(str(d["_id"]), d.get("title", ""), d.get("text", "")))
    texts = {}
    with open(root / "queries.jsonl") as f:
        for line in f:
            d = json.loads(line)
            texts[str(d["_id"])] = d["text"]
    rel: dict[str, set[str]] = {}
    with open(root / "qrels" / "train.tsv") as f:
        next(f)
        for line in f:
            qid, pid, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                rel.setdefault(qid, set()).add(pid)
    queries = [Query(q, texts[q], frozenset(p)) for q, p in sorted(rel.items(), key=lambda kv: int(kv[0]))]
    return Dataset("scifact", passages, queries)


def load_nq(data_dir: Path = DEFAULT_DATA_DIR) -> Dataset:
    """NQ-Open with its gold passages; the pool is the set of distinct gold passages of all questions."""
    path = Path(data_dir) / "lost-in-the-middle" / "nq-open-oracle.jsonl.gz"
    pool: dict[tuple[str, str], str] = {}
    queries = []
    with gzip.open(path, "rt") as f:
        for i, line in enumerate(f):
            d = json.loads(line)
            gold = [c for c in d["ctxs"] if c.get("isgold", True)] or d["ctxs"][:1]
            pids = set()
            for c in gold:
                key = (c["title"], c["text"])
                pids.add(pool.setdefault(key, f"nq{len(pool)}"))
            queries.append(Query(f"nq{i}", d["question"], frozenset(pids), tuple(d.get("answers", ()))))
    passages = [Passage(pid, title, text) for (title, text), pid in pool.items()]
    return Dataset("nq", passages, queries)


def heldout(qid: str) -> bool:
    """The fixed 50/50 split by query id: True = held out (dev), never trained on."""
    return hashlib.sha256(f"rerank-split:{qid}".encode()).digest()[0] % 2 == 1


def _chunk(p: Passage) -> Chunk:
    return Chunk(
        chunk_id=p.pid,
        doc_id=p.pid,
        text=p.text,
        source=p.pid,
        title=p.title,
        groups=(PUBLIC_GROUP,),
    )


def rrf_candidates(
    lexical: Sequence[tuple[int, float]],
    dense: Sequence[tuple[int, float]],
    chunks: Sequence[Chunk],
    *,
    k: int = 60,
    top: int = 40,
) -> list[Candidate]:
    """RRF of two ranked legs of (passage index, score), best ``top`` first, each with both legs' ranks:
    the query path's own fusion stage, so training sees exactly the candidates the pipeline reranks."""
    by_id = {chunks[i].chunk_id: chunks[i] for i, _ in [*lexical, *dense]}
    fused = rrf_fuse(
        [(chunks[i].chunk_id, s) for i, s in lexical], [(chunks[i].chunk_id, s) for i, s in dense], by_id, k=k
    )
    return fused[:top]


@dataclass
class Retrieval:
    """BM25 + dense (MiniLM) + RRF over one dataset's pool, with embeddings cached on disk.

    ``sentence_vectors`` (pid -> vectors of the passage's ``sentence_units``) is what ingestion stores per
    chunk; None when built with ``sentences=False``. ``reading_vectors`` and ``reading_query_vectors`` are the
    reading encoder's (the units read after the passage's title; the queries), when built with one.
    """

    dataset: Dataset
    bm25: BM25Index
    passage_vectors: np.ndarray
    query_vectors: dict[str, np.ndarray]
    chunks: list[Chunk]
    sentence_vectors: dict[str, np.ndarray] | None = None
    reading_vectors: dict[str, np.ndarray] | None = None
    reading_query_vectors: dict[str, np.ndarray] | None = None

    @classmethod
    def build(
        cls,
        dataset: Dataset,
        embedder: Any,
        cache_dir: Path = DEFAULT_CACHE_DIR,
        *,
        sentences: bool = True,
        reading_encoder: Any | None = None,
        log: Callable[[str], None] | None = None,
    ) -> Retrieval:
        bm25 = BM25Index.build([bm25_tokens(p.embed_text) for p in dataset.passages])
        pv = embed_cached(
            embedder, [p.embed_text for p in dataset.passages], cache_dir, f"{dataset.name}-passages"
        )
        qv = embed_cached(embedder, [q.text for q in dataset.queries], cache_dir, f"{dataset.name}-queries")
        sv = (
            sentence_vectors_of(embedder, dataset.passages, cache_dir, f"{dataset.name}-sentences", log=log)
            if sentences
            else None
        )
        rv = rqv = None
        if reading_encoder is not None:
            rv = sentence_vectors_of(
                reading_encoder, dataset.passages, cache_dir, f"{dataset.name}-reading", log=log, reading=True
            )
            vectors = embed_cached(
                reading_encoder,
                [q.text for q in dataset.queries],
                cache_dir,
                f"{dataset.name}-reading-queries",
            )
            rqv = {q.qid: np.asarray(vectors[i], dtype=np.float32) for i, q in enumerate(dataset.queries)}
        return cls(
            dataset,
            bm25,
            np.asarray(pv, dtype=np.float32),
            {q.qid: np.asarray(qv[i], dtype=np.float32) for i, q in enumerate(dataset.queries)},
            [_chunk(p) for p in dataset.passages],
            sv,
            rv,
            rqv,
        )

    def query_vector_of(self, text: str) -> np.ndarray:
        """The cached vector of a query by its text (what ``Pipeline.query_vector`` is in the app)."""
        if not hasattr(self, "_by_text"):
            self._by_text = {q.text: self.query_vectors[q.qid] for q in self.dataset.queries}
        return self._by_text[text]

    def sentence_vectors_of(self, chunk_id: str) -> np.ndarray | None:
        """chunk_id -> sentence vectors (what ``IndexReader.sentence_vectors`` is in the app)."""
        return None if self.sentence_vectors is None else self.sentence_vectors.get(chunk_id)

    def reading_query_vector_of(self, text: str) -> np.ndarray:
        """The reading encoder's cached vector of a query by its text (``Pipeline.reading_query_vector``)."""
        if not hasattr(self, "_reading_by_text"):
            vectors = self.reading_query_vectors or {}
            self._reading_by_text = {q.text: vectors[q.qid] for q in self.dataset.queries if q.qid in vectors}
        return self._reading_by_text[text]

    def reading_vectors_of(self, chunk_id: str) -> np.ndarray | None:
        """chunk_id -> reading vectors (what ``IndexReader.reading_vectors`` is in the app)."""
        return None if self.reading_vectors is None else self.reading_vectors.get(chunk_id)

    def candidates(self, query: Query, *, top_n: int = 40, k: int = 60) -> list[Candidate]:
        lexical = self.bm25.top(bm25_tokens(query.text), top_n)
        sims = self.passage_vectors @ self.query_vectors[query.qid]
        idx = np.argpartition(-sims, top_n - 1)[:top_n]
        dense = sorted(((int(i), float(sims[i])) for i in idx), key=lambda t: (-t[1], t[0]))
        return rrf_candidates(lexical, dense, self.chunks, k=k, top=top_n)


def app_reading_encoder() -> Any:
    """The reading encoder as the app runs it (``RAG_READING_MODEL``, ``RAG_READING_RUNTIME``): training reads the
    vectors the query path will read."""
    from rag.config import load_settings
    from rag.models.embedder import reading_encoder_for

    return reading_encoder_for(load_settings())
