"""The question a request searches and answers: a follow-up's standalone form, and its parts."""

from __future__ import annotations

from dataclasses import replace

from rag.components.retrieval import QueryVectors
from rag.request import State
from rag.stages.intents import split_intents
from rag.stages.standalone import standalone, standalone_with_llm
from rag.types import Intent, Standalone


class StandaloneQuestion:
    """A follow-up is searched and answered as the question it stands for (rag/stages/standalone.py);
    ``enabled=False`` (ablate=followup) keeps the question as asked and says so in the trace."""

    name = "standalone"

    def __init__(self, queries: QueryVectors, *, bar: float, enabled: bool = True) -> None:
        self.queries, self.bar, self.enabled = queries, bar, enabled

    def run(self, state: State) -> State:
        with state.recorder.stage(self.name) as d:
            rewrite = self.rewrite(state)
            d.update(rewrite.to_json())
        question = replace(state.question, text=rewrite.question) if rewrite.rewritten else state.question
        return replace(state, standalone=rewrite, question=question)

    def rewrite(self, state: State) -> Standalone:
        """The standalone question a follow-up stands for; the question itself without a conversation."""
        question = state.question
        if not question.history or not self.enabled:
            reason = "switched off (ablate=followup)" if question.history else "no earlier question"
            return Standalone(question.text, question.text, False, "none", None, reason)
        if state.rewrite_llm is not None:
            return standalone_with_llm(
                question.text, question.history, state.rewrite_llm, self.queries.vectors, bar=self.bar
            )
        return standalone(question.text, question.history, self.queries.vectors, bar=self.bar)


class Intents:
    """The parts of a compound question (``split=False``: the question is one intent; ablate=intents)."""

    name = "intents"

    def __init__(self, *, split: bool = True) -> None:
        self.split = split

    def run(self, state: State) -> State:
        text = state.question.text
        with state.recorder.stage(self.name) as d:
            intents = split_intents(text) if self.split else [Intent(0, text)]
            d["intents"] = [i.text for i in intents]
        return replace(state, intents=intents)
