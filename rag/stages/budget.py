"""The evidence budget: at most k passages and a token budget, covering every intent that has evidence."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from rag.request import State
from rag.types import Candidate, Chain, Dropped, Intent

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
    links: Mapping[str, str] | None = None,
) -> tuple[list[Candidate], list[Dropped]]:
    """Choose at most ``k`` passages and ``token_budget`` tokens from ``ranked`` (best first).

    First each intent gets its best candidate (one clearing ``min_score`` when there is one), so eight good
    passages cannot all answer the first half of a compound question; then the rest fill by rank. A
    candidate that does not fit the remaining tokens is skipped, and a smaller one further down may still fit.
    ``links`` maps a multi-hop passage to the passage that led to it: when the leading passage is selected and
    its link is not, the link takes the place of the weakest selected passage outside any chain (a chain's
    two links beat two near-copies of the first).
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
    if links:
        taken, dropped = _keep_chains(ranked, taken, dropped, links, token_budget)
    return [ranked[i] for i in sorted(taken)], dropped


def _keep_chains(
    ranked: Sequence[Candidate],
    taken: set[int],
    dropped: list[Dropped],
    links: Mapping[str, str],
    token_budget: int,
) -> tuple[set[int], list[Dropped]]:
    index = {c.chunk_id: i for i, c in enumerate(ranked)}
    taken = set(taken)
    in_chain = set(links) | set(links.values())
    for child, parent in links.items():
        ci, pi = index.get(child), index.get(parent)
        if ci is None or pi is None or pi not in taken or ci in taken:
            continue
        tokens = sum(ranked[i].chunk.n_tokens for i in taken)
        victims = sorted((i for i in taken if ranked[i].chunk_id not in in_chain), reverse=True)
        for victim in victims:
            if tokens - ranked[victim].chunk.n_tokens + ranked[ci].chunk.n_tokens <= token_budget:
                taken.discard(victim)
                taken.add(ci)
                dropped = [d for d in dropped if d.chunk_id != child]
                dropped.append(Dropped(ranked[victim].chunk_id, f"replaced_by_chain_link:{child}", STAGE))
                break
    return taken, dropped


# ----------------------------------------------------------------------------- the stage


class Budget:
    """At most k passages and the token budget, for the parts of the question the passages cover."""

    name = "budget"

    def __init__(self, *, score_floor: bool) -> None:
        self.score_floor = score_floor

    def run(self, state: State) -> State:
        k, token_budget = state.plan.evidence_k, state.plan.token_budget
        with state.recorder.stage(self.name) as d:
            selected, drops = apply_budget(
                state.fill_order,
                state.coverage.covered(state.intents),
                k=k,
                token_budget=token_budget,
                links=chain_links(state.chains),
                min_score=state.threshold if self.score_floor else None,
            )
            d.update(selected=len(selected), k=k, token_budget=token_budget)
        return replace(state, selected=selected, dropped=[*state.dropped, *drops])


def chain_links(chains: Iterable[Chain]) -> dict[str, str]:
    """Child chunk id -> parent chunk id: the budget keeps both ends of a link."""
    return {child: parent for child, parent, _ in chains}
