"""Per-intent reranking of a compound question's candidates.

A passage found by both halves of a compound question usually answers one of them: each candidate is tagged
with the intents it ranks among the best for (reranked against that intent), so the budget reserves a real
answer to every part (rag/stages/budget.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rag.types import Candidate, Intent

INTENT_TOP = 3  # a candidate counts for an intent when it ranks among that intent's best three

Rerank = Callable[[str, Sequence[Candidate]], list[Candidate]]  # a reranker's ``rerank(query, candidates)``


def is_compound(intents: Sequence[Intent]) -> bool:
    """A question of several intents: its candidates are reranked per intent."""
    return len(intents) > 1


def rerank_per_intent(
    intents: Sequence[Intent],
    ranked: Sequence[Candidate],
    rerank: Rerank,
    *,
    top: int = INTENT_TOP,
) -> tuple[list[Candidate], dict[int, list[str]]]:
    """``ranked`` in the same order, each candidate's ``intents`` replaced by those it is among the ``top``
    for, when the candidates retrieved for an intent are reranked against the intent's text (a candidate
    among no intent's best gets none); and, per intent index, the chunk ids of its best, best first."""
    strong: dict[str, list[int]] = {}
    best_of: dict[int, list[str]] = {}
    for intent in intents:
        pool = [c for c in ranked if intent.index in c.intents]
        best = [c.chunk_id for c in rerank(intent.text, pool)[:top]] if pool else []
        for chunk_id in best:
            strong.setdefault(chunk_id, []).append(intent.index)
        best_of[intent.index] = best
    return [c.with_(intents=tuple(strong.get(c.chunk_id, ()))) for c in ranked], best_of
