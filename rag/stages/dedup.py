"""Drop passages that repeat a better passage (overlapping chunks of one page, copies across documents)."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from rag.text import normalize
from rag.types import Candidate, Dropped

_WORD = re.compile(r"[0-9a-z]+")
Shingles = frozenset[tuple[str, ...]]


@functools.lru_cache(maxsize=50_000)  # a passage comes back query after query: its shingles are computed once
def shingles(text: str, size: int = 3) -> Shingles:
    """Word n-grams of the normalised, lowercased text; a text shorter than ``size`` is one shingle."""
    words = _WORD.findall(normalize(text).lower())
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
    kept: list[tuple[Candidate, Shingles]] = []
    dropped: list[Dropped] = []
    for cand in cands:
        grams = shingles(cand.chunk.text)
        best_id, best = "", 0.0
        for other, other_grams in kept:
            score = 1.0 if other.chunk_id == cand.chunk_id else overlap(grams, other_grams)
            if score > best:
                best_id, best = other.chunk_id, score
        if best >= threshold and best > 0.0:
            dropped.append(Dropped(cand.chunk_id, f"near_duplicate_of:{best_id} overlap={best:.2f}", "dedup"))
        else:
            kept.append((cand, grams))
    return [c for c, _ in kept], dropped
