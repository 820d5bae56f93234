"""Drop passages that repeat a better passage (overlapping chunks of one page, copies across documents)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from scipy import sparse

from rag.request import State
from rag.text import normalize
from rag.types import Candidate, Dropped

_WORD = re.compile(r"[0-9a-z]+")
Shingles = frozenset[tuple[str, ...]]


def _words(text: str) -> list[str]:
    """The words shingles are made of: the normalised, lowercased text's runs of letters and digits."""
    return _WORD.findall(normalize(text).lower())


@functools.lru_cache(maxsize=50_000)  # a passage comes back query after query: its shingles are computed once
def shingles(text: str, size: int = 3) -> Shingles:
    """Word n-grams of the normalised, lowercased text; a text shorter than ``size`` is one shingle."""
    words = _words(text)
    if len(words) < size:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(tuple(words[i : i + size]) for i in range(len(words) - size + 1))


def overlap(a: Shingles, b: Shingles) -> float:
    """max(containment of a in b, containment of b in a); 0.0 when either text is empty."""
    if not a or not b:
        return 0.0
    shared = len(a & b)
    return max(shared / len(a), shared / len(b))


def remove_near_duplicates(
    cands: Sequence[Candidate], *, threshold: float = 0.8
) -> tuple[list[Candidate], list[Dropped]]:
    """Keep each passage unless it overlaps a better kept one by ``threshold`` or more.

    ``cands`` must be ranked best first; the kept list keeps that order. Measuring containment both ways
    catches a short chunk swallowed by a longer one, while two documents sharing only a boilerplate
    paragraph stay apart: their overlap is the boilerplate's share of each chunk, below the threshold.
    """
    kept: list[int] = []  # positions in ``cands``
    dropped: list[Dropped] = []
    keys = [_shingle_keys(c.chunk.text) for c in cands]
    shared = _shared_counts(keys)
    sizes = np.fromiter((len(k) for k in keys), dtype=np.float64, count=len(keys))
    first_of: dict[str, int] = {}
    for i, cand in enumerate(cands):
        best_j, best = -1, 0.0
        if kept and sizes[i] > 0:
            ks = np.asarray(kept)
            counts = shared[i, ks]
            with np.errstate(divide="ignore", invalid="ignore"):
                scores = np.where(counts > 0, np.maximum(counts / sizes[i], counts / sizes[ks]), 0.0)
            j = int(np.argmax(scores))  # the first best kept passage
            best_j, best = int(ks[j]), float(scores[j])
        same = first_of.get(cand.chunk_id)
        if same is not None and (best < 1.0 or kept.index(same) < kept.index(best_j)):
            best_j, best = same, 1.0  # the same chunk twice
        if best >= threshold and best > 0.0:
            best_id = cands[best_j].chunk_id
            dropped.append(Dropped(cand.chunk_id, f"near_duplicate_of:{best_id} overlap={best:.2f}", "dedup"))
        else:
            first_of.setdefault(cand.chunk_id, i)
            kept.append(i)
    return [cands[i] for i in kept], dropped


# odd 64-bit multipliers: a shingle's key mixes its words' hashes by position, so "a b c" and "c b a" differ
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))


@functools.lru_cache(maxsize=50_000)
def _shingle_keys(text: str, size: int = 3) -> np.ndarray:
    """The passage's shingles (those of ``shingles``) as 64-bit keys, one per distinct shingle, computed once
    per text with array arithmetic over the words' hashes instead of building a tuple per shingle."""
    words = _words(text)
    if not words:
        return np.zeros(0, dtype=np.uint64)
    h = np.fromiter(map(hash, words), dtype=np.int64, count=len(words)).view(np.uint64)
    if len(words) < size:  # a text shorter than ``size`` is one shingle
        return np.array(
            [np.bitwise_xor.reduce(h[: len(words)] * np.array(_MIX[: len(words)]))], dtype=np.uint64
        )
    n = len(words) - size + 1
    keys = h[:n] * _MIX[0]
    for i in range(1, size):
        keys = keys ^ (h[i : i + n] * _MIX[i % len(_MIX)])
    return np.unique(keys)


def _shared_counts(keys: Sequence[np.ndarray]) -> np.ndarray:
    """(n x n) shingles shared by each pair of passages, from one sparse product instead of n^2 set
    intersections (a 64-bit hash collision between two different shingles is the only way to differ)."""
    n = len(keys)
    flat = np.concatenate(keys) if n else np.zeros(0, dtype=np.int64)
    if not len(flat):
        return np.zeros((n, n))
    rows = np.repeat(np.arange(n), [len(k) for k in keys])
    _, cols = np.unique(flat, return_inverse=True)
    m = sparse.csr_matrix((np.ones(len(flat)), (rows, cols.ravel())), shape=(n, int(cols.max()) + 1))
    return np.asarray((m @ m.T).todense())


# ----------------------------------------------------------------------------- the stage


class Dedup:
    name = "dedup"

    def __init__(self, *, threshold: float) -> None:
        self.threshold = threshold

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            kept, drops = remove_near_duplicates(state.ranked, threshold=self.threshold)
            d["dropped"] = len(drops)
        return replace(state, kept=kept, fill_order=kept, dropped=[*state.dropped, *drops])
