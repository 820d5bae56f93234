"""Sentence vectors for every indexed chunk, computed once at ingestion.

Three query-time jobs need sentence-level similarity: the extractive generator (which sentence answers?), the
reranker (a chunk whose single clause answers the question scores by that clause, not by its diluted average)
and the citation check (does the cited passage hold a sentence like the claim?). Embedding sentences at query
time costs seconds on 2 cores; looking up vectors embedded at ingestion costs microseconds.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.text import split_sentences

MIN_WORDS = 3
MAX_UNITS = 48
FILE = "sentences.npz"
VECTORS_FILE = "sentence_vectors.npy"  # the vectors beside FILE, memory-mapped by readers


def sentence_units(text: str) -> list[str]:
    """The sentences of a chunk that can carry an answer (headings and fragments under 3 words dropped)."""
    return list(_units(text))


@functools.lru_cache(
    maxsize=50_000
)  # the query path asks for the same chunks' units several times per answer
def _units(text: str) -> tuple[str, ...]:
    units = [
        s for s in split_sentences(text) if sum(any(ch.isalpha() for ch in w) for w in s.split()) >= MIN_WORDS
    ]
    return tuple(units[:MAX_UNITS] or ([text.strip()] if text.strip() else []))


@dataclass
class SentenceStore:
    """Row ``starts[i] .. starts[i] + counts[i]`` of ``vectors`` are the units of chunk ``chunk_ids[i]``."""

    chunk_ids: list[str]
    starts: np.ndarray
    counts: np.ndarray
    vectors: np.ndarray  # float32, L2-normalised

    def __post_init__(self) -> None:
        self._row = {cid: i for i, cid in enumerate(self.chunk_ids)}

    def __contains__(self, chunk_id: str) -> bool:
        return chunk_id in self._row

    def vectors_of(self, chunk_id: str) -> np.ndarray | None:
        i = self._row.get(chunk_id)
        if i is None:
            return None
        start = int(self.starts[i])
        return self.vectors[start : start + int(self.counts[i])]

    def save(self, folder: Path) -> None:
        np.savez(
            folder / FILE,
            chunk_ids=np.array(self.chunk_ids, dtype=object),
            starts=self.starts,
            counts=self.counts,
        )
        np.save(folder / VECTORS_FILE, np.asarray(self.vectors, dtype=np.float32))

    @classmethod
    def load(cls, folder: Path) -> SentenceStore | None:
        """The stored vectors, memory-mapped: a query reads only its candidates' rows, and every process that
        reads the generation shares one copy in the page cache. (Generations written before the vectors had
        their own file keep them inside ``FILE``, loaded whole.)"""
        path = folder / FILE
        if not path.exists():
            return None
        data = np.load(path, allow_pickle=True)
        separate = folder / VECTORS_FILE
        # a plain ndarray view of the map: numpy's memmap subclass adds ~1 us to every slice and operation
        vectors = np.load(separate, mmap_mode="r").view(np.ndarray) if separate.exists() else data["vectors"]
        return cls(list(data["chunk_ids"]), data["starts"], data["counts"], vectors)

    @classmethod
    def empty(cls, dim: int) -> SentenceStore:
        return cls(
            [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros((0, dim), np.float32)
        )


def build_sentence_store(
    chunks: Sequence[tuple[str, str]],
    *,
    previous: SentenceStore | None,
    embed: Callable[[list[str]], Mapping[str, np.ndarray]],
    dim: int,
) -> SentenceStore:
    """Vectors for the units of every (chunk_id, text); rows of unchanged chunks are copied from ``previous``.

    ``embed`` maps unit texts to vectors (the ingestion side caches them by text).
    """
    needed: list[str] = []
    for chunk_id, text in chunks:
        if previous is None or chunk_id not in previous:
            needed.extend(sentence_units(text))
    fresh = embed(sorted(set(needed))) if needed else {}
    parts: list[np.ndarray] = []
    starts, counts = np.zeros(len(chunks), dtype=np.int64), np.zeros(len(chunks), dtype=np.int64)
    offset = 0
    for i, (chunk_id, text) in enumerate(chunks):
        old = previous.vectors_of(chunk_id) if previous is not None else None
        block = (
            old if old is not None else np.stack([fresh[u] for u in sentence_units(text)]).astype(np.float32)
        )
        parts.append(block)
        starts[i], counts[i] = offset, len(block)
        offset += len(block)
    vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
    return SentenceStore([cid for cid, _ in chunks], starts, counts, vectors)
