"""One request as it passes through the query path: what was asked, what it runs with, and what each stage has
produced so far.

A stage (``Stage``) takes the request's ``State`` and returns it with its own output added; what it did goes into
the state's ``Recorder`` under the stage's name, which becomes that stage's record in the trace
(rag/traces/schema.py). ``Pipeline.ask`` (rag/pipeline.py) runs the stages ``rag.pipeline.build_stages`` lists.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Protocol, overload

from rag.config import Settings
from rag.protocols import LLM
from rag.types import (
    Abstention,
    Bundle,
    Candidate,
    Chain,
    Citation,
    ClaimCheck,
    Coverage,
    Dropped,
    Evidence,
    Excerpt,
    Generated,
    Intent,
    Principal,
    Prompt,
    Reading,
    SearchFilter,
    StageRecord,
    Standalone,
)


@dataclass(frozen=True)
class KeyUse:
    """The API key a question came with (``rag keys``): its id and name, the user it is bound to, and whether it
    asked on someone else's behalf (a trusted service key naming the asker). Never the secret."""

    id: str
    name: str
    user: str
    on_behalf: bool = False


@dataclass(frozen=True)
class Question:
    """One request: the question and who asks it. The principal is required; there is no anonymous search."""

    text: str
    principal: Principal
    as_of: date | None = None
    tags: frozenset[str] = frozenset()
    session_id: str | None = None
    history: tuple[tuple[str, str], ...] = ()  # (role, content) turns already trimmed to the history budget
    facts: tuple[str, ...] = ()  # confirmed facts about the user, retrieved for this question
    channel: str | None = None  # where it was asked: "ui", "cli", "api" (None: not recorded, e.g. evaluation)
    api_key: KeyUse | None = None  # the API key it came with (channel "api")


@dataclass(frozen=True)
class PipelineOptions:
    """Per-request overrides (evaluation and trace replay use them); None means the settings value."""

    packing: str | None = None
    evidence_k: int | None = None
    token_budget: int | None = None
    use_llm: bool | None = None
    max_hops: int | None = None


@dataclass(frozen=True)
class Plan:
    """What one request runs with: its options, else the settings."""

    packing: str
    evidence_k: int
    token_budget: int
    use_llm: bool  # an LLM client is at hand and the options do not turn it off
    max_hops: int
    generation_mode: str  # the settings' mode with an LLM, else "extractive"


def plan_request(settings: Settings, options: PipelineOptions, *, llm_available: bool) -> Plan:
    """Resolve a request's options against the settings; ``llm_available``: the request has an LLM client."""
    use_llm = llm_available if options.use_llm is None else (options.use_llm and llm_available)
    return Plan(
        packing=options.packing or settings.packing,
        evidence_k=options.evidence_k or settings.evidence_k,
        token_budget=options.token_budget or settings.evidence_token_budget,
        use_llm=use_llm,
        max_hops=settings.max_hops if options.max_hops is None else options.max_hops,
        generation_mode=settings.generation_mode if use_llm else "extractive",
    )


class Recorder:
    """Times stages and keeps a short, JSON-able summary of what each produced (the trace's stage records)."""

    def __init__(self) -> None:
        self.stages: list[StageRecord] = []

    @contextmanager
    def stage(self, name: str) -> Iterator[dict[str, object]]:
        detail: dict[str, object] = {}
        start = time.perf_counter()
        try:
            yield detail
        finally:
            self.stages.append(StageRecord(name, (time.perf_counter() - start) * 1000, detail))


@dataclass(frozen=True)
class State:
    """A request between stages. Each stage returns a copy (``dataclasses.replace``) with its output set; a
    field is empty until the stage that produces it has run.

    ``asked`` is the question as the user put it, ``question`` the one searched and answered (a follow-up's
    standalone form); ``llm`` is the client this request may generate with (None: extractive).
    """

    asked: Question
    question: Question
    plan: Plan
    threshold: float  # the score a passage needs to answer (the settings' override, else the reranker's)
    recorder: Recorder
    llm: LLM | None = None
    # the client a follow-up is rewritten with: the pipeline's own, since a request's client may stream into the
    # page and the rewrite is not part of the answer the user reads
    rewrite_llm: LLM | None = None
    filter: SearchFilter | None = None
    standalone: Standalone | None = None
    intents: list[Intent] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)  # retrieved, in fused order
    ranked: list[Candidate] = field(default_factory=list)  # reranked, then with the hops' links in place
    chains: list[Chain] = field(default_factory=list)
    hops: list[dict[str, Any]] = field(default_factory=list)  # one trace record per hop
    coverage: Coverage = Coverage(abstain=False)
    dropped: list[Dropped] = field(default_factory=list)
    kept: list[Candidate] = field(default_factory=list)  # after near-duplicates are removed
    fill_order: list[Candidate] = field(default_factory=list)  # the order the budget fills in
    selected: list[Candidate] = field(default_factory=list)
    bundles: list[Bundle] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reading: Reading | None = None
    prompt: Prompt | None = None
    abstention: Abstention | None = None
    generated: Generated = Generated(text="", model="none")
    answer: str = ""
    excerpts: tuple[Excerpt, ...] = ()  # an extractive answer's points (none for a model's answer)
    notice: str = ""  # what follows the generated text in the answer: the parts it leaves unanswered
    model_answer: bool = False  # the answer is a model's text (citation repair and claim repair apply)
    support: Callable[[str, str], float] | None = None  # how well a passage supports a claim
    citations: list[Citation] = field(default_factory=list)
    claims: list[ClaimCheck] = field(default_factory=list)
    verification: dict[str, Any] = field(default_factory=dict)
    answer_check: dict[str, Any] = field(default_factory=dict)

    @property
    def abstained(self) -> bool:
        return self.abstention is not None

    @property
    def search_filter(self) -> SearchFilter:
        """The request's filter; the ``filters`` stage sets it before anything is searched."""
        if self.filter is None:
            raise RuntimeError("no search filter: the filters stage runs before any search")
        return self.filter


class Stage(Protocol):
    """One step of the query path: ``run`` returns the state with its output set, and writes what it did into
    ``state.recorder`` under ``name`` (a stage with nothing to do records nothing)."""

    name: str

    def run(self, state: State) -> State: ...


@overload
def rounded(value: float) -> float: ...
@overload
def rounded(value: float | None) -> float | None: ...
def rounded(value: float | None) -> float | None:
    """A score as the trace keeps it (six decimals)."""
    return None if value is None else round(float(value), 6)
