"""The reader: which evidence sentence states what each part of the question asks (rag/stages/read.py).
The answer quotes those sentences, a part with none is unanswered, and the "Citations checked" badge needs each
quoted one to clear the support bar."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rag.components.retrieval import Models, QueryVectors
from rag.components.scoring import Scoring
from rag.request import State
from rag.stages.budget import score_of
from rag.stages.extractive import evidence_sentences
from rag.stages.pack import edge_pack, number_evidence
from rag.stages.read import read, reader_coverage, trim_bundles
from rag.types import Evidence, Intent, Reading


class Read:
    """Reads the evidence when there is some and a reader model is loaded. With ``cut`` > 0 bundles whose
    sentences the reader finds nothing in are dropped (at least ``keep`` stay), and the rest packed again."""

    name = "read"

    def __init__(
        self, models: Models, queries: QueryVectors, scoring: Scoring, *, cut: float, keep: int
    ) -> None:
        self.models, self.queries, self.scoring = models, queries, scoring
        self.cut, self.keep = cut, keep

    def run(self, state: State) -> State:
        intents, evidence, coverage = state.intents, state.evidence, state.coverage
        bundles, dropped = state.bundles, state.dropped
        if not evidence or self.models.reader_model is None:
            return state
        with state.recorder.stage(self.name) as d:
            reading = self.read(intents, evidence)
            if not coverage.abstain:
                coverage = reader_coverage(coverage, intents, reading)
            if self.cut and not coverage.abstain:
                trimmed, cut = trim_bundles(bundles, evidence, reading, cut=self.cut, keep=self.keep)
                if cut:  # fewer passages: pack and number them again, and read them in their new places
                    bundles, dropped = trimmed, dropped + cut
                    evidence = number_evidence(edge_pack(bundles, state.plan.packing))
                    reading = self.read(intents, evidence)
                    d.update(cut=[c.chunk_id for c in cut], order=[e.candidate.chunk_id for e in evidence])
            d.update(reading.to_json())
        return replace(
            state, reading=reading, coverage=coverage, bundles=bundles, dropped=dropped, evidence=evidence
        )

    def read(self, intents: Sequence[Intent], evidence: Sequence[Evidence]) -> Reading:
        """The reader's probabilities for every (intent, evidence sentence) pair."""
        assert self.models.reader_model is not None
        texts = [i.text for i in intents]
        return read(
            texts,
            evidence_sentences(evidence),
            model=self.models.reader_model,
            query_vectors=self.scoring.reading.vectors(texts),
            vectors=self.scoring.reading_vector_lookup(evidence),
            passage_scores={e.n: score_of(e.candidate) for e in evidence},
            cross_encoder=self.models.reader_cross_encoder,
        )
