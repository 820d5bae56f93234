"""The collaborators of the query path, as narrow as ``Pipeline`` uses them.

``Pipeline`` depends on these shapes, never on a concrete class: the feature, cross-encoder and LLM-judge
rerankers (``rag.models.rerankers``), ``rag.llm.client.LLMClient`` or the UI's streaming wrapper, the SQL trace store
(``rag.tracestore``), and the test doubles that stand in for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from rag.types import Candidate, Completes


class Reranker(Protocol):
    """Orders candidates for a query text. (``rag.models.rerankers.Reranker`` adds the sentence ``support`` the
    evaluation uses; the query path needs only this.) A reranker may also carry a calibrated
    ``abstain_threshold``; ``Pipeline.abstain_threshold`` reads it when the settings name none."""

    @property
    def name(self) -> str:
        """What the trace and the evaluation reports call this reranker."""
        ...

    def rerank(self, question: str, candidates: Sequence[Candidate]) -> list[Candidate]:
        """All candidates, best first, with ``rerank_score`` and ``rerank_rank`` (1-based) set."""
        ...


class ChatModel(Completes, Protocol):
    """What the generation modes need from an LLM client (``rag.llm.client.LLMClient`` or a test double): its
    ``complete`` (``rag.types.Completes``), its model id and its longest answer."""

    model: str
    max_tokens: int


# The LLM client: what the generation modes and the claim repair call (``complete`` with the model's name and
# token limit). One definition, so the two can never drift apart.
LLM = ChatModel


class TraceSink(Protocol):
    """Where ``Pipeline.ask`` saves each answer's trace (``rag.tracestore.TraceStore``)."""

    def save_trace(self, trace: Mapping[str, Any]) -> object:
        """Store one ``Result.to_json()`` record; what it returns (the trace id) the pipeline does not use."""
        ...


__all__ = ["LLM", "ChatModel", "Reranker", "TraceSink"]
