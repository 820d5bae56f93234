"""BM25 over a sparse term matrix: the same scores as rank-bm25's ``BM25Okapi``, without its per-document loop.

rank-bm25 scores a query by looping over every document in Python (27 ms at 10k documents, 336 ms at 100k).
Here each document's term weight ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` is computed once at
index time into a CSC matrix, so a query touches only the columns of its own terms. IDF, including rank-bm25's
epsilon floor for negative IDF, is computed from the same statistics, so scores match to float precision
(tests compare against rank-bm25 itself).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

K1 = 1.5
B = 0.75
EPSILON = 0.25


def average_length(corpus: Sequence[Sequence[str]]) -> float:
    """rank-bm25's avgdl: mean token count over every chunk of the generation."""
    return float(sum(len(t) for t in corpus) / len(corpus)) if corpus else 0.0


@dataclass
class BM25Index:
    vocab: dict[str, int]
    idf: np.ndarray  # per vocabulary term
    weights: sparse.csc_matrix  # documents x terms, BM25 term weights (without idf)
    doc_len: np.ndarray

    @property
    def n_docs(self) -> int:
        return int(self.weights.shape[0])

    @classmethod
    def build(
        cls, corpus: Sequence[Sequence[str]], *, k1: float = K1, b: float = B, epsilon: float = EPSILON
    ) -> BM25Index:
        vocab: dict[str, int] = {}
        rows: list[int] = []
        cols: list[int] = []
        tfs: list[int] = []
        doc_len = np.zeros(len(corpus), dtype=np.float64)
        for d, tokens in enumerate(corpus):
            doc_len[d] = len(tokens)
            for term, tf in Counter(tokens).items():
                col = vocab.setdefault(term, len(vocab))
                rows.append(d)
                cols.append(col)
                tfs.append(tf)
        n = len(corpus)
        tf_arr = np.asarray(tfs, dtype=np.float64)
        row_arr = np.asarray(rows, dtype=np.int64)
        col_arr = np.asarray(cols, dtype=np.int64)
        avgdl = float(doc_len.sum() / n) if n else 0.0
        if n and avgdl > 0:
            norm = k1 * (1 - b + b * doc_len[row_arr] / avgdl)
            data = tf_arr * (k1 + 1) / (tf_arr + norm)
        else:
            data = np.zeros_like(tf_arr)
        weights = sparse.csc_matrix((data, (row_arr, col_arr)), shape=(n, len(vocab)), dtype=np.float64)
        # rank-bm25: idf = log(N - df + 0.5) - log(df + 0.5); negative values floored at epsilon * mean idf
        df = np.bincount(col_arr, minlength=len(vocab)).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            idf = np.log(n - df + 0.5) - np.log(df + 0.5)
        if len(idf):
            average = float(idf.sum() / len(idf))
            idf = np.where(idf < 0, epsilon * average, idf)
        return cls(vocab=vocab, idf=idf, weights=weights, doc_len=doc_len)

    def scores(self, query: Sequence[str]) -> np.ndarray:
        """BM25 score of every document (rank-bm25 ``get_scores``: repeated query terms count repeatedly)."""
        counts = Counter(t for t in query if t in self.vocab)
        if not counts or self.n_docs == 0:
            return np.zeros(self.n_docs, dtype=np.float64)
        cols = np.fromiter((self.vocab[t] for t in counts), dtype=np.int64)
        coef = self.idf[cols] * np.fromiter(counts.values(), dtype=np.float64)
        return np.asarray(self.weights[:, cols] @ coef).ravel()

    def top(self, query: Sequence[str], n: int, mask: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Best ``n`` documents with a positive score among those the mask allows (the mask is the filter)."""
        scores = self.scores(query)
        if mask is not None:
            scores = np.where(mask, scores, -math.inf)
        eligible = np.flatnonzero(scores > 0)
        if eligible.size == 0:
            return []
        part = eligible[np.argpartition(-scores[eligible], n - 1)[:n]] if eligible.size > n else eligible
        order = sorted(part.tolist(), key=lambda i: (-scores[i], i))
        return [(i, float(scores[i])) for i in order]

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        sparse.save_npz(folder / "bm25_weights.npz", self.weights, compressed=False)
        np.savez(folder / "bm25_stats.npz", idf=self.idf, doc_len=self.doc_len)
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        (folder / "bm25_vocab.json").write_text(json.dumps(terms))

    @classmethod
    def load(cls, folder: Path) -> BM25Index:
        terms = json.loads((folder / "bm25_vocab.json").read_text())
        stats = np.load(folder / "bm25_stats.npz")
        weights = sparse.load_npz(folder / "bm25_weights.npz").tocsc()
        return cls(
            vocab={t: i for i, t in enumerate(terms)},
            idf=stats["idf"],
            weights=weights,
            doc_len=stats["doc_len"],
        )
