"""From the ranking to the numbered evidence: whether the passages can answer, near-duplicates out, the budget
filled, dependent passages bundled, bundles packed, and whether the evidence states what each part asks.

Evidence is selected and shown even when the answer abstains: the trace (and the user) can see what was found
and why it was not enough."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rag.components.retrieval import Models
from rag.components.scoring import Scoring
from rag.embedder import passage_text
from rag.request import State
from rag.stages.abstention import Coverage, check_answer_types, decide_abstention, vouched_evidence
from rag.stages.budget import apply_budget, score_of
from rag.stages.bundling import bundle_dependencies, single_bundles
from rag.stages.context import rank_by_section_context
from rag.stages.dedup import remove_near_duplicates
from rag.stages.followup import unmentioned
from rag.stages.hops import bundle_chains, chain_links
from rag.stages.packing import edge_pack, number_evidence
from rag.types import Candidate


class Abstention:
    """Whether any passage's score reaches the threshold, for each part of the question."""

    name = "abstention"

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            coverage = decide_abstention(state.ranked, state.intents, threshold=state.threshold)
            d.update(
                abstain=coverage.abstain,
                uncovered=[i.text for i in coverage.uncovered],
                threshold=state.threshold,
                best_score=max((score_of(c) for c in state.ranked), default=None),
            )
        return replace(state, coverage=coverage)


class Dedup:
    name = "dedup"

    def __init__(self, *, threshold: float) -> None:
        self.threshold = threshold

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            kept, drops = remove_near_duplicates(state.ranked, threshold=self.threshold)
            d["dropped"] = len(drops)
        return replace(state, kept=kept, fill_order=kept, dropped=[*state.dropped, *drops])


class SectionContext:
    """The budget's fill order only, raised by the passages' section neighbours: the ranking (candidates,
    SciFact's nDCG) stays the reranker's. Runs when the weight is set and the scores read as probabilities
    (every reranker but "none", whose scores are RRF scores)."""

    name = "context"

    def __init__(self, models: Models, *, weight: float, window: int | None) -> None:
        self.models, self.weight, self.window = models, weight, window

    def run(self, state: State) -> State:
        from rag.rerank import NoReranker

        kept = state.kept
        if not (self.weight and kept and not isinstance(self.models.reranker, NoReranker)):
            return state
        with state.recorder.stage(self.name) as d:
            fill_order = rank_by_section_context(kept, weight=self.weight, window=self.window)
            before = {c.chunk_id: rank for rank, c in enumerate(kept, start=1)}
            d.update(
                weight=self.weight,
                window=self.window,
                raised=[
                    {"chunk_id": c.chunk_id, "from": before[c.chunk_id], "to": rank}
                    for rank, c in enumerate(fill_order, start=1)
                    if before[c.chunk_id] > rank
                ],
            )
        return replace(state, fill_order=fill_order)


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


class Bundle:
    """Passages that depend on each other travel together (``bundling=False``: each passage alone, ablate=bundling;
    ``join_adjacent=False``: neighbours are not joined, ablate=adjacent)."""

    name = "bundle"

    def __init__(self, models: Models, *, bundling: bool = True, join_adjacent: bool = True) -> None:
        self.models, self.bundling, self.join_adjacent = models, bundling, join_adjacent

    def run(self, state: State) -> State:
        dropped = state.dropped
        with state.recorder.stage(self.name) as d:
            added: list[Candidate] = []
            if not self.bundling:
                bundles = single_bundles(state.selected)
            else:
                chains = bundle_chains(state.question.text, state.selected, state.chains)
                d["chains"] = [list(c) for c in chains]
                bundles, added, drops = bundle_dependencies(
                    state.selected,
                    self.models.reader,
                    state.search_filter,
                    pool=state.kept,
                    token_budget=state.plan.token_budget,
                    chains=chains,
                    join_adjacent=self.join_adjacent,
                )
                dropped = [*dropped, *drops]
            d.update(bundles=len(bundles), added=[c.chunk_id for c in added])
        return replace(state, bundles=bundles, dropped=dropped)


class Pack:
    """The bundles in prompt order, numbered [1], [2], ..."""

    name = "pack"

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            evidence = number_evidence(edge_pack(state.bundles, state.plan.packing))
            d.update(strategy=state.plan.packing, order=[e.candidate.chunk_id for e in evidence])
        return replace(state, evidence=evidence)


class AnswerTypes:
    """Does the evidence state the kind of answer each part asks for (a number, a place, one of the choices)?
    A part it does not is uncovered."""

    name = "answer_type"

    def __init__(self, scoring: Scoring, *, check_k: int | None, followup_topic: bool = True) -> None:
        self.scoring, self.check_k, self.followup_topic = scoring, check_k, followup_topic

    def _mentioned(self, state: State) -> Callable[[str], bool] | None:
        """Whether a passage the asker may read holds a word (one BM25 search under the request's filter)."""
        filt = state.filter
        if filt is None:
            return None
        lexical = self.scoring.models.reader.lexical
        return lambda stem: bool(lexical.search([stem], filt, 1))

    def run(self, state: State) -> State:
        evidence, coverage = state.evidence, state.coverage
        if not evidence or coverage.abstain:
            return state
        with state.recorder.stage(self.name) as d:
            vouched = vouched_evidence(evidence, threshold=state.threshold, k=self.check_k)
            types = check_answer_types(
                state.question.text,
                state.intents,
                coverage,
                [e.candidate.chunk.text for e in vouched],
                pool=[c.chunk.text for c in state.ranked],
                score=self.scoring.sentence_scorer(vouched),
                labelled=[
                    passage_text(e.candidate.chunk.title, e.candidate.chunk.section, e.candidate.chunk.text)
                    for e in vouched
                ],
            )
            d.update({f"intent_{intent.index}": why for intent, why in types.missing})
            coverage = types.coverage
            if self.followup_topic and state.standalone is not None and not coverage.abstain:
                # a follow-up about something no passage mentions is not answered by the previous topic's passages
                pool = [passage_text(c.chunk.title, c.chunk.section, c.chunk.text) for c in state.ranked]
                why = unmentioned(state.standalone, pool, self._mentioned(state))
                if why:
                    coverage = Coverage(True, tuple(state.intents), why)
                    d["followup"] = why
        return replace(state, coverage=coverage)
