"""In-process stores over a generation's files: BM25 (``rag.lexical``) and the dense matrix, filtered with numpy.

The filter columns (``FilterArrays``) are the numpy twin of ``rag.stores.qdrant.qdrant_filter``: both legs
apply the principal's groups, the validity dates and the tags before ranking, like Qdrant does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from threadpoolctl import ThreadpoolController

from rag.lexical import BM25Index
from rag.stores import GenerationBuild, Hit, PublishedGeneration
from rag.stores.qdrant import NO_TAGS
from rag.types import FAR_FUTURE, FAR_PAST, Chunk, SearchFilter

_BLAS = ThreadpoolController()


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


class Bm25Writer:
    """``IndexWriter`` for the BM25 files every generation carries (``bm25_*.npz/json``), rebuilt each time."""

    def is_stale(self, published: PublishedGeneration) -> bool:
        return False

    def write(self, build: GenerationBuild) -> None:
        BM25Index.build(build.tokens).save(build.folder)

    def publish(self, generation: str) -> None:
        """The files are inside the generation folder: publishing the folder published them."""

    def close(self) -> None:
        """Nothing is held open."""
