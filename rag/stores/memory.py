"""In-process stores over a generation's files: BM25 (``rag.stores.bm25``) and the dense matrix, filtered with numpy.

The filter columns (``FilterArrays``) are the numpy twin of ``rag.stores.qdrant.qdrant_filter``: both legs
apply the principal's groups, the validity dates and the tags before ranking, like Qdrant does.

The dense matrix is one ``.npy`` file per generation (``dense.npy``: float32, L2-normalised, row i = chunk i),
memory-mapped by readers: opening it costs nothing, its pages live once in the page cache whichever processes
read it, and an exact cosine top-n is one matrix-vector product.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

from rag.stores import GenerationBuild, Hit, PublishedGeneration
from rag.stores.bm25 import BM25Index
from rag.stores.qdrant import NO_TAGS
from rag.types import FAR_FUTURE, FAR_PAST, Chunk, SearchFilter

_BLAS = ThreadpoolController()
DENSE_FILE = "dense.npy"


def dense_matrix_path(generation_folder: Path) -> Path:
    return Path(generation_folder) / DENSE_FILE


def normalised(vectors: Sequence[np.ndarray] | np.ndarray, dim: int) -> np.ndarray:
    """The rows of ``vectors`` as one float32 matrix, each row L2-normalised (zero rows stay zero)."""
    matrix = (
        np.asarray(vectors, dtype=np.float32).reshape(-1, dim)
        if len(vectors)
        else np.zeros((0, dim), np.float32)
    )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def mapped(path: Path) -> np.ndarray:
    """An ``.npy`` file memory-mapped read-only, as a plain ndarray view (numpy's ``memmap`` subclass adds ~1 us
    to every slice and operation, and the query path makes thousands)."""
    return np.load(path, mmap_mode="r").view(np.ndarray)


def load_dense_matrix(generation_folder: Path) -> np.ndarray | None:
    """The generation's dense matrix, memory-mapped read-only (None for a generation written without one)."""
    path = dense_matrix_path(generation_folder)
    return mapped(path) if path.exists() else None


class FilterArrays:
    """Per-chunk access and validity columns, so the in-process legs filter with numpy like Qdrant does."""

    def __init__(self, chunks: Sequence[Chunk]) -> None:
        self.effective = np.array([(c.effective or FAR_PAST).toordinal() for c in chunks], dtype=np.int64)
        self.expires = np.array([(c.expires or FAR_FUTURE).toordinal() for c in chunks], dtype=np.int64)
        self.groups: dict[str, np.ndarray] = {}
        self.tags: dict[str, np.ndarray] = {}
        n = len(chunks)
        for i, c in enumerate(chunks):
            for g in c.groups:
                self.groups.setdefault(g, np.zeros(n, dtype=bool))[i] = True
            for t in c.tags or (NO_TAGS,):
                self.tags.setdefault(t, np.zeros(n, dtype=bool))[i] = True
        self.n = n

    def mask(self, filt: SearchFilter) -> np.ndarray:
        allowed = np.zeros(self.n, dtype=bool)
        for g in filt.principal.readable_groups:
            if g in self.groups:
                allowed |= self.groups[g]
        day = filt.as_of.toordinal()
        allowed &= (self.effective <= day) & (self.expires >= day)
        if filt.tags:
            tagged = np.zeros(self.n, dtype=bool)
            for t in (*filt.tags, NO_TAGS):
                if t in self.tags:
                    tagged |= self.tags[t]
            allowed &= tagged
        return allowed


class Bm25Lexical:
    """``LexicalIndex``: the generation's BM25 index (rank-bm25's scores), masked by the filter."""

    def __init__(self, bm25: BM25Index, masks: FilterArrays, chunk_ids: Sequence[str]) -> None:
        self.bm25, self.masks, self.chunk_ids = bm25, masks, chunk_ids

    def search(self, tokens: Sequence[str], filt: SearchFilter, n: int) -> list[Hit]:
        if n <= 0:
            return []
        hits = self.bm25.top(tokens, n, mask=self.masks.mask(filt))
        return [(self.chunk_ids[i], score) for i, score in hits]


class MatrixVectors:
    """``VectorStore``: cosine over the generation's L2-normalised dense matrix (row i = chunk i), masked by the
    filter before ranking; ties go to the earlier chunk."""

    def __init__(self, matrix: np.ndarray, masks: FilterArrays, chunk_ids: Sequence[str]) -> None:
        self.matrix, self.masks, self.chunk_ids = matrix, masks, chunk_ids

    def search(self, vector: np.ndarray, filt: SearchFilter, n: int) -> list[Hit]:
        mask = self.masks.mask(filt)
        allowed = int(mask.sum())
        if n <= 0 or not allowed:
            return []
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        q = q / (float(np.linalg.norm(q)) or 1.0)
        with _BLAS.limit(limits=1, user_api="blas"):  # a threaded matvec waits on a busy core: 15 ms, not 0.3
            scores = np.where(mask, self.matrix @ q, -np.inf)
        n = min(n, allowed)
        top = np.argpartition(-scores, n - 1)[:n] if len(scores) > n else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]
        return [(self.chunk_ids[i], float(scores[i])) for i in top]


class MatrixWriter:
    """``IndexWriter`` for the generation's dense matrix (``dense.npy``), written whole each generation: kept
    chunks' rows come from the published matrix, new ones from the run (``GenerationBuild.all_vectors``)."""

    def is_stale(self, published: PublishedGeneration) -> bool:
        return False

    def write(self, build: GenerationBuild) -> None:
        np.save(dense_matrix_path(build.folder), normalised(build.all_vectors(), build.dim))

    def publish(self, generation: str) -> None:
        """The file is inside the generation folder: publishing the folder published it."""

    def close(self) -> None:
        """Nothing is held open."""


class Bm25Writer:
    """``IndexWriter`` for the BM25 files every generation carries (``bm25_*.npz/json``), rebuilt each time, and
    each chunk's tokens as ids into the BM25 vocabulary (``tokens.npy``, ``token_offsets.npy``)."""

    def is_stale(self, published: PublishedGeneration) -> bool:
        return False

    def write(self, build: GenerationBuild) -> None:
        index = BM25Index.build(build.tokens)
        index.save(build.folder)
        save_token_ids(build.folder, build.tokens, index.vocab)

    def publish(self, generation: str) -> None:
        """The files are inside the generation folder: publishing the folder published them."""

    def close(self) -> None:
        """Nothing is held open."""


# ----------------------------------------------------------------------------- stored tokens
TOKENS_FILE = "tokens.npy"
TOKEN_OFFSETS_FILE = "token_offsets.npy"


def save_token_ids(folder: Path, tokens: Sequence[Sequence[str]], vocab: dict[str, int]) -> None:
    """Every chunk's tokens as one flat int32 array of ids into ``vocab`` (the BM25 vocabulary) and the offset
    of each chunk's first token (``len(tokens) + 1`` of them)."""
    lengths = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=len(tokens))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    ids = np.fromiter((vocab[t] for doc in tokens for t in doc), dtype=np.int32, count=int(offsets[-1]))
    np.save(Path(folder) / TOKENS_FILE, ids)
    np.save(Path(folder) / TOKEN_OFFSETS_FILE, offsets)


def load_token_ids(folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, offsets) as ``save_token_ids`` wrote them, memory-mapped; None for a generation without them."""
    ids, offsets = Path(folder) / TOKENS_FILE, Path(folder) / TOKEN_OFFSETS_FILE
    if not (ids.exists() and offsets.exists()):
        return None
    return mapped(ids), mapped(offsets)


class TokenStore:
    """Each chunk's lexical tokens as ingestion stored them (``bm25_tokens(passage_text(...))``, the tokens its
    BM25 row counts), as vocabulary ids in one flat array: ~4 bytes a token instead of a str object each.

    The feature reranker reads them instead of tokenising and stemming every new candidate again (Snowball in
    pure Python: ~0.2 ms a word the stem cache has not seen, most of a cold rerank's time at 10k chunks).
    A generation that stores them (``save_token_ids``) is memory-mapped; an older one's token lists are
    converted once when it opens. Tokens that do not match the chunks or the vocabulary are not served (None):
    the reranker then tokenises as before.
    """

    def __init__(
        self, row_of: dict[str, int], ids: np.ndarray | None, offsets: np.ndarray, terms: list[str]
    ) -> None:
        self._row, self._ids, self._offsets, self._terms = row_of, ids, offsets, terms
        if ids is not None and (len(offsets) != len(row_of) + 1 or int(offsets[-1]) != len(ids)):
            self._ids = None

    @classmethod
    def open(
        cls,
        folder: Path,
        row_of: dict[str, int],
        vocab: dict[str, int],
        lists: Sequence[Sequence[str]] | None = None,
    ) -> TokenStore:
        """The generation's stored ids, or ``lists`` (an older generation's token lists) converted."""
        terms = [""] * len(vocab)
        for term, i in vocab.items():
            terms[i] = term
        stored = load_token_ids(folder)
        if stored is not None:
            return cls(row_of, stored[0], stored[1], terms)
        lists = lists or []
        lengths = np.fromiter((len(t) for t in lists), dtype=np.int64, count=len(lists))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        try:
            ids: np.ndarray | None = np.fromiter(
                (vocab[t] for doc in lists for t in doc), dtype=np.int32, count=int(offsets[-1])
            )
        except KeyError:
            ids = None
        return cls(row_of, ids, offsets, terms)

    def tokens(self, chunk_id: str) -> list[str] | None:
        row = self._row.get(chunk_id)
        if row is None or self._ids is None:
            return None
        terms = self._terms
        return [terms[i] for i in self._ids[self._offsets[row] : self._offsets[row + 1]].tolist()]

    def all_tokens(self) -> list[list[str]] | None:
        """Every chunk's tokens, in row order (ingestion keeps the unchanged chunks' tokens)."""
        if self._ids is None:
            return None
        terms, ids, offsets = self._terms, np.asarray(self._ids).tolist(), np.asarray(self._offsets).tolist()
        return [[terms[i] for i in ids[offsets[r] : offsets[r + 1]]] for r in range(len(offsets) - 1)]
