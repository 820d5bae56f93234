"""Sentence vectors for every indexed chunk, computed once at ingestion.

Three query-time jobs need sentence-level similarity: the extractive generator (which sentence answers?), the
reranker (a chunk whose single clause answers the question scores by that clause, not by its diluted average)
and the citation check (does the cited passage hold a sentence like the claim?). Embedding sentences at query
time costs seconds on 2 cores; looking up vectors embedded at ingestion costs microseconds.

Two stores, one row per sentence unit of every chunk in both: the sentence vectors (the retrieval embedder, the
unit's own text) and the reading vectors (the reading encoder, ``rag.models.reading``, the unit read after its
passage's heading: ``reading_text``), which the reader and the reranker score sentences by.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.text import collapse_ws, split_sentences

MIN_WORDS = 3
MAX_UNITS = 48
FILE = "sentences.npz"
VECTORS_FILE = "sentence_vectors.npy"  # the vectors beside FILE, memory-mapped by readers
READING_FILE = "reading.npz"
READING_VECTORS_FILE = "reading_vectors.npy"


def chunk_heading(title: str, section: str) -> str:
    """A passage's heading as the reader reads it: its title and section path."""
    return " > ".join(h.strip() for h in (title, section) if h.strip())


HEADING_WORDS = 10  # of the title and of the nearest section, each, in a reading text


@functools.lru_cache(maxsize=100_000)  # the query path reads the same evidence sentences' texts several times
def reading_text(heading: str, sentence: str) -> str:
    """A sentence as the reading encoder (and the reader's cross-encoder) reads it: after the first and the last
    part of its heading (``chunk_heading``: the title and the nearest section, repeats dropped), each cut to
    ``HEADING_WORDS`` words. Measured with all-mpnet-base-v2 on the tune splits' evidence (leave one corpus out,
    docs/reader.md): the whole section path read worse than these two parts and cost 2.6x the tokens (EPA's
    paths repeat long directive titles)."""
    parts = heading_parts(heading)
    kept = parts[:1] + parts[-1:] if len(parts) > 1 else parts
    head = " > ".join(_first_words(p, HEADING_WORDS) for p in kept)
    return f"{head}: {collapse_ws(sentence)}" if head else collapse_ws(sentence)


def heading_parts(heading: str) -> list[str]:
    """The parts of a ``chunk_heading`` (title, then the section path), a part repeated next to itself said once
    (a title that is also the first section)."""
    parts: list[str] = []
    for part in heading.split(" > "):
        part = collapse_ws(part)
        if part and (not parts or part != parts[-1]):
            parts.append(part)
    return parts


def _first_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n]) + (" ..." if len(words) > n else "")


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
    model: str = ""  # what embedded them (recorded for the reading vectors: another encoder's are not read)

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

    def save(self, folder: Path, *, reading: bool = False) -> None:
        """Into ``folder``: the sentence vectors' files, or with ``reading`` the reading vectors'."""
        index, vectors = (READING_FILE, READING_VECTORS_FILE) if reading else (FILE, VECTORS_FILE)
        np.savez(
            folder / index,
            chunk_ids=np.array(self.chunk_ids, dtype=object),
            starts=self.starts,
            counts=self.counts,
            model=np.array(self.model),
        )
        np.save(folder / vectors, np.asarray(self.vectors, dtype=np.float32))

    @classmethod
    def load(cls, folder: Path, *, reading: bool = False) -> SentenceStore | None:
        """The stored vectors, memory-mapped: a query reads only its candidates' rows, and every process that
        reads the generation shares one copy in the page cache. (Generations written before the vectors had
        their own file keep them inside ``FILE``, loaded whole; generations written before reading vectors
        have none: None.)"""
        index, vectors_file = (READING_FILE, READING_VECTORS_FILE) if reading else (FILE, VECTORS_FILE)
        path = folder / index
        if not path.exists():
            return None
        data = np.load(path, allow_pickle=True)
        separate = folder / vectors_file
        # a plain ndarray view of the map: numpy's memmap subclass adds ~1 us to every slice and operation
        vectors = np.load(separate, mmap_mode="r").view(np.ndarray) if separate.exists() else data["vectors"]
        model = str(data["model"]) if "model" in data.files else ""
        return cls(list(data["chunk_ids"]), data["starts"], data["counts"], vectors, model)

    @classmethod
    def empty(cls, dim: int) -> SentenceStore:
        return cls(
            [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros((0, dim), np.float32)
        )


def reading_model_of(folder: Path) -> str | None:
    """Which model embedded a generation's reading vectors (None: it has none)."""
    path = folder / READING_FILE
    if not path.exists():
        return None
    with np.load(path, allow_pickle=True) as data:
        return str(data["model"]) if "model" in data.files else ""


def build_sentence_store(
    chunks: Sequence[tuple[str, str]],
    *,
    previous: SentenceStore | None,
    embed: Callable[[list[str]], Mapping[str, np.ndarray]],
    dim: int,
    headings: Mapping[str, str] | None = None,
    model: str = "",
) -> SentenceStore:
    """Vectors for the units of every (chunk_id, text); rows of unchanged chunks are copied from ``previous``
    (when ``model`` made it).

    ``embed`` maps texts to vectors (the ingestion side caches them by text): each unit's own text, or with
    ``headings`` (chunk_id -> ``chunk_heading``) the unit read after its heading (``reading_text``).
    """
    if previous is not None and previous.model != model:
        previous = None

    def texts(chunk_id: str, text: str) -> list[str]:
        units = sentence_units(text)
        if headings is None:
            return units
        return [reading_text(headings.get(chunk_id, ""), u) for u in units]

    needed: list[str] = []
    for chunk_id, text in chunks:
        if previous is None or chunk_id not in previous:
            needed.extend(texts(chunk_id, text))
    fresh = embed(sorted(set(needed))) if needed else {}
    parts: list[np.ndarray] = []
    starts, counts = np.zeros(len(chunks), dtype=np.int64), np.zeros(len(chunks), dtype=np.int64)
    offset = 0
    for i, (chunk_id, text) in enumerate(chunks):
        old = previous.vectors_of(chunk_id) if previous is not None else None
        block = (
            old if old is not None else np.stack([fresh[u] for u in texts(chunk_id, text)]).astype(np.float32)
        )
        parts.append(block)
        starts[i], counts[i] = offset, len(block)
        offset += len(block)
    vectors = np.concatenate(parts) if parts else np.zeros((0, dim), dtype=np.float32)
    return SentenceStore([cid for cid, _ in chunks], starts, counts, vectors, model)
