"""The ``rerank`` stage: the reranker (``rag.models.rerankers``, chosen by ``RAG_RERANKER``) orders the
retrieved candidates against the whole question."""

from __future__ import annotations

from dataclasses import replace

from rag.request import State
from rag.stages.shared import Models


class Rerank:
    name = "rerank"

    def __init__(self, models: Models) -> None:
        self.models = models

    def run(self, state: State) -> State:
        reranker = self.models.reranker
        with state.recorder.stage(self.name) as d:
            ranked = reranker.rerank(state.question.text, state.candidates) if state.candidates else []
            d["reranker"] = reranker.name
        return replace(state, ranked=ranked)
