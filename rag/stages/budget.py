"""The evidence budget: at most k passages and a token budget, covering every intent that has evidence."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rag.types import Candidate, Dropped, Intent

STAGE = "budget"


def score_of(cand: Candidate) -> float:
    """The score a candidate ranks by: its rerank score, or its fused score before reranking."""
    return cand.rerank_score if cand.rerank_score is not None else cand.fused_score


def intents_of(cand: Candidate) -> tuple[int, ...]:
    """Intents a candidate was retrieved for; an untagged one counts for intent 0 (the whole question)."""
    return cand.intents or (0,)


def _reserve(
    ranked: Sequence[Candidate],
    intent: int,
    taken: set[int],
    tokens_left: int,
    clears: Callable[[Candidate], bool],
) -> int | None:
    """Index of the best candidate for ``intent`` that fits, preferring one that clears the threshold."""
    fitting = [
        i
        for i, c in enumerate(ranked)
        if i not in taken and intent in intents_of(c) and c.chunk.n_tokens <= tokens_left
    ]
    clearing = [i for i in fitting if clears(ranked[i])]
    best = clearing or fitting
    return best[0] if best else None


def apply_budget(
    ranked: Sequence[Candidate],
    intents: Sequence[Intent],
    *,
    k: int,
    token_budget: int,
    min_score: float | None = None,
) -> tuple[list[Candidate], list[Dropped]]:
    """Choose at most ``k`` passages and ``token_budget`` tokens from ``ranked`` (best first).

    First each intent gets its best candidate (one clearing ``min_score`` when there is one), so eight good
    passages cannot all answer the first half of a compound question; then the rest fill by rank. A
    candidate that does not fit the remaining tokens is skipped, and a smaller one further down may still fit.
    Returns the selection in rank order and a Dropped record for everything else.
    """
    if k < 0 or token_budget < 0:
        raise ValueError(f"k and token_budget must be >= 0, got k={k}, token_budget={token_budget}")

    def clears(c: Candidate) -> bool:
        return min_score is None or score_of(c) >= min_score

    taken: set[int] = set()
    covered: set[int] = set()
    tokens = 0
    for intent in intents:
        if intent.index in covered or len(taken) >= k:
            continue
        pick = _reserve(ranked, intent.index, taken, token_budget - tokens, clears)
        if pick is not None:
            taken.add(pick)
            tokens += ranked[pick].chunk.n_tokens
            covered.update(intents_of(ranked[pick]))

    dropped: list[Dropped] = []
    for i, cand in enumerate(ranked):
        if i in taken:
            continue
        if not clears(cand):
            reason = "below_threshold"
        elif len(taken) >= k:
            reason = "over_budget_k"
        elif tokens + cand.chunk.n_tokens > token_budget:
            reason = "over_budget_tokens"
        else:
            taken.add(i)
            tokens += cand.chunk.n_tokens
            continue
        dropped.append(Dropped(cand.chunk_id, reason, STAGE))
    return [ranked[i] for i in sorted(taken)], dropped
