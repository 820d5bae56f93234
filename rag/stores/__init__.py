"""The store interfaces the index reader composes and ingestion writes through.

A published generation is served by a lexical index and a vector store, both filtered inside the store (the
filter is a required argument: there is no unfiltered search). Some backends also run both legs and their RRF
fusion in one round trip (``HybridSearch``, Qdrant's Query API); the reader asks the stores for the legs and
never which backend holds them. Implementations:

- ``rag.stores.memory``: in-process BM25 (``rag.stores.bm25``) and the dense matrix of an embedded generation,
  filtered with numpy masks; ``Bm25Writer`` writes the BM25 files of every generation.
- ``rag.stores.qdrant``: the Qdrant point layout (dense vector, sparse BM25 vector, payload) and its searches,
  the same calls against embedded Qdrant or a server; ``EmbeddedQdrantWriter`` writes an embedded generation.
- ``rag.stores.qdrant_server``: ``ServerIndexWriter`` (blue/green collections) and the server's store backend.

``tests/stores/`` holds the contract suite every implementation passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from rag.types import Chunk, SearchFilter

Hit = tuple[str, float]  # (chunk_id, score), best first


# ----------------------------------------------------------------------------- chunk (de)serialisation
_CHUNK_FIELDS = tuple(Chunk.__dataclass_fields__)


def chunk_to_dict(chunk: Chunk) -> dict[str, Any]:
    """A chunk as JSON-ready data: the generation files, the chunk archive and Qdrant payloads store this.
    (Field by field: ``dataclasses.asdict`` deep-copies every value, 70 us a chunk, 7 s at 100k chunks.)"""
    data = {name: getattr(chunk, name) for name in _CHUNK_FIELDS}
    for key in ("effective", "expires"):
        data[key] = data[key].isoformat() if data[key] else None
    data["groups"] = list(chunk.groups)
    data["tags"] = list(chunk.tags)
    return data


def chunk_from_dict(data: dict[str, Any]) -> Chunk:
    fields = {k: data[k] for k in Chunk.__dataclass_fields__ if k in data}
    for key in ("effective", "expires"):
        fields[key] = date.fromisoformat(fields[key]) if fields.get(key) else None
    fields["groups"] = tuple(fields.get("groups") or ())
    fields["tags"] = tuple(fields.get("tags") or ())
    return Chunk(**fields)


class Legs(NamedTuple):
    """One query's retrieval legs: each filtered, best first; ``fused`` is the store's own RRF fusion of the two
    (``1 / (rrf_k + rank)``), or None when the caller fuses them."""

    lexical: list[Hit]
    dense: list[Hit]
    fused: list[Hit] | None


# ----------------------------------------------------------------------------- reading
class LexicalIndex(Protocol):
    def search(self, tokens: Sequence[str], filt: SearchFilter, n: int) -> list[Hit]:
        """The best ``n`` chunks ``filt`` allows that share a term with ``tokens`` (``rag.text.bm25_tokens``)."""
        ...


class VectorStore(Protocol):
    def search(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
        """Cosine top ``n`` among the chunks ``filt`` allows (the filter applies before ranking)."""
        ...


@dataclass(frozen=True)
class LegsQuery:
    """One query of both legs: its BM25 tokens and vector, the asker's filter (required: there is no unfiltered
    search), how many hits each leg returns, and RRF's k for a store that fuses them itself."""

    tokens: Sequence[str]
    vector: np.ndarray
    filt: SearchFilter
    n_lexical: int
    n_dense: int
    rrf_k: int


class HybridSearch(Protocol):
    def search(self, query: LegsQuery) -> Legs:
        """Both legs and their fusion in one call (``fused`` is None only when a leg is asked for no hits)."""
        ...


@dataclass(frozen=True)
class Stores:
    """One generation's stores, as a backend opened them. ``hybrid`` is set when the backend fuses the legs
    itself; ``close`` releases what the backend opened for this generation alone."""

    lexical: LexicalIndex
    dense: VectorStore
    hybrid: HybridSearch | None = None
    close: Callable[[], None] = lambda: None

    def search(self, query: LegsQuery) -> Legs:
        if self.hybrid is not None:
            return self.hybrid.search(query)
        return separate_legs(self.lexical, self.dense, query)


def separate_legs(lexical: LexicalIndex, dense: VectorStore, query: LegsQuery) -> Legs:
    """Each leg from its own store, unfused (the caller fuses)."""
    q = query
    return Legs(
        lexical.search(q.tokens, q.filt, q.n_lexical), dense.search(q.vector, q.filt, q.n_dense), None
    )


# ----------------------------------------------------------------------------- writing
class PublishedGeneration(Protocol):
    """What a writer needs to know about the published generation (``rag.stores.index.Manifest`` is one)."""

    @property
    def generation(self) -> str: ...

    @property
    def bm25_avgdl(self) -> float | None: ...


@dataclass(frozen=True)
class GenerationBuild:
    """Everything a writer needs to write its part of the next generation, built beside the published one."""

    name: str  # the new generation ("gen-000007")
    folder: Path  # its staging folder: published by renaming it, so a writer may write files beneath it
    chunks: Sequence[Chunk]  # every chunk of the new generation, in order
    tokens: Sequence[Sequence[str]]  # each chunk's BM25 tokens, aligned with ``chunks``
    dim: int  # embedding dimension
    fresh: Sequence[tuple[Chunk, np.ndarray]]  # the chunks this run embedded, with their vectors
    dropped: Sequence[str]  # chunk ids of the previous generation's changed or removed documents
    all_vectors: Callable[
        [], np.ndarray
    ]  # every chunk's vector as the rows of one matrix, aligned (a full rebuild)
    previous: Path | None = None  # the published generation's folder (None: the first generation)
    previous_avgdl: float | None = None  # the avgdl the published generation's sparse weights used


class IndexWriter(Protocol):
    """Writes one store's part of a generation. Ingestion writes every part into the staging folder, publishes
    the folder (``rag.stores.index.publish``), then publishes each part; readers follow ``CURRENT``."""

    def is_stale(self, published: PublishedGeneration) -> bool:
        """True when this part of the published generation must be rebuilt even though no document changed."""
        ...

    def write(self, build: GenerationBuild) -> None:
        """Write this part of ``build``; nothing reads it until it is published."""
        ...

    def publish(self, generation: str) -> None:
        """Make ``generation`` the one this store serves, if it is not already (after ``CURRENT`` names it)."""
        ...

    def close(self) -> None: ...


__all__ = [
    "GenerationBuild",
    "Hit",
    "HybridSearch",
    "IndexWriter",
    "Legs",
    "LexicalIndex",
    "PublishedGeneration",
    "Stores",
    "VectorStore",
    "chunk_from_dict",
    "chunk_to_dict",
]
