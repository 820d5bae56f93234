"""The trace: one typed schema for what ``rag ask --json`` prints, the trace store keeps, ``rag traces show
--json`` prints back and the UI's trace explorer reads.

``Result.to_json()`` (rag/pipeline.py) builds a :class:`Trace` and dumps it; the trace store derives which keys
it stores in which columns from these models (rag/tracestore/codec.py); readers of stored traces
(``TraceStore.traces.read``: ``rag traces show``, the UI's trace explorer) go through :func:`parse_trace`, so a
trace that does not match is a :class:`TraceSchemaError` naming where, not a KeyError three calls later.
``docs/schema/trace.schema.json`` is generated from :class:`Trace`:

    python -m rag.traces.schema --write   # regenerate it after changing a model
    python -m rag.traces.schema --check   # exit 1 when the committed file is stale (scripts/lint.sh runs it)

Models are strict (JSON types only: an int is not a string, a list is not a tuple) and forbid unknown keys.
The shape is a contract: extend it, never rename or remove a key. A key added later gets a default, so traces
stored before it still load; :meth:`Trace.to_json` leaves out keys a trace did not carry (``exclude_unset``),
so an old trace prints back as it was stored (``defaults=True`` fills them in).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag.cli_support import write_or_check
from rag.errors import StorageError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "schema" / "trace.schema.json"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


class TraceSchemaError(StorageError):
    """A trace (stored, imported or read from a file) that does not match :class:`Trace`."""


class _Record(BaseModel):
    # ser_json_inf_nan: a NaN score dumps as NaN, as json.dumps always wrote it, not as null.
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        validate_by_name=True,
        validate_by_alias=True,
        ser_json_inf_nan="constants",
    )


class Intent(_Record):
    """One retrieval intent of a (possibly compound) question."""

    index: int
    text: str


class Citation(_Record):
    """A ``[n]`` marker in the answer and its verdicts."""

    n: int
    chunk_id: str | None = Field(description="None when [n] does not exist in the evidence")
    valid: bool = Field(description="[n] points at shown evidence")
    supported: bool = Field(description="the cited passage supports the sentence")
    sentence: str
    support_score: float


class Passage(_Record):
    """A chunk's text and metadata with every score it collected on its way through the query path."""

    chunk_id: str
    doc_id: str
    source: str
    title: str
    page: int | None = Field(description="first page (1-based) for PDFs")
    page_end: int | None
    section: str
    text: str
    doc_version: str = Field(description="content hash of the document the chunk came from")
    rerank_rank: int | None
    rerank_score: float | None
    bm25_rank: int | None
    bm25_score: float | None
    dense_rank: int | None
    dense_score: float | None
    fused_score: float
    fused_rank: int | None
    hop: int = Field(description="0 = first retrieval, 1.. = follow-up hops")
    added_by: str | None = Field(description="None = retrieved; else why it was added")


class _Position(_Record):
    n: int = Field(description="the passage's number in the prompt, as the answer cites it (1-based)")


class Evidence(Passage, _Position):  # _Position second: its n comes first, as rag ask --json writes it
    """A passage at its final position ``n``, as the model saw it."""

    bundle: int = Field(description="bundle_id of the bundle it travels in")
    cited: bool = Field(description="a valid citation points at it")


class Candidate(Passage):
    """A retrieved passage (after rerank and hops), whether or not it reached the evidence."""

    intents: list[int] = Field(description="the intents it ranks among the best for")


class Dropped(_Record):
    chunk_id: str
    reason: str = Field(description='e.g. "near_duplicate_of:<id>", "over_budget", "below_threshold"')
    stage: str


class Bundle(_Record):
    """Passages that travel together, in document order."""

    bundle_id: int
    chunk_ids: list[str]
    reason: str
    score: float = Field(description="the best member's rerank score")


class HopQuery(_Record):
    term: str
    query: str
    from_: str = Field(alias="from", description="the chunk id whose bridge term it follows")
    found: list[str]
    best_score: float | None


class HopLink(_Record):
    chunk_id: str
    from_: str = Field(alias="from")
    term: str
    score: float | None
    moved: bool


class Hop(_Record):
    """One round of follow-up retrieval. ``skipped``, ``linked`` and ``stopped`` are present when they apply (in
    this order, as the query path writes them)."""

    hop: int
    from_: list[str] = Field(alias="from", description="the passages whose bridge terms were followed")
    queries: list[HopQuery]
    skipped: list[str] = Field(default=[], description="bridge terms no readable passage is about")
    linked: list[HopLink] = Field(default=[])
    stopped: str = Field(default="", description="why following stopped after this hop")


class IntentCheck(_Record):
    index: int
    text: str
    addressed: bool
    coverage: float = Field(description="share of the intent's words in its best answer sentence")
    sentence: str
    support: float | None = Field(
        default=None,
        description="the reader's probability that the best evidence sentence the answer uses states what this "
        "intent asks (None: the reader did not run)",
    )
    supported: bool | None = Field(
        default=None,
        description="support reaches the reader's support bar, or the configured LLM confirmed the quote and "
        "support reaches the confirmation bar",
    )
    quote: str | None = Field(
        default=None, description="the evidence sentence the support rests on (None: the reader did not run)"
    )
    confirmed: bool | None = Field(
        default=None,
        description="the configured LLM's word on whether the quote answers this intent (None: not asked)",
    )


class AnswerCheck(_Record):
    """Does the answer address every part of the question?"""

    complete: bool = False
    intents: list[IntentCheck] = []


Verdict = Literal["supported", "unsupported", "contradicted", "uncited"]


class Claim(_Record):
    """The verdict on one claim of the answer and what it rests on (rag/stages/claims.py)."""

    index: int
    text: str
    sentence: str
    cited: list[int]
    verdict: Verdict
    n: int | None
    chunk_id: str | None
    evidence_sentence: str | None
    score: float
    reason: str
    conflicts: list[str]
    attributed: bool


class Budgets(_Record):
    evidence_k: int
    evidence_token_budget: int
    evidence_tokens: int
    history_token_budget: int
    history_tokens: int
    facts: int


class Prompt(_Record):
    system: str
    user: str
    tokens: int


class Tokens(_Record):
    prompt: int
    completion: int
    evidence: int
    history: int


class Replacement(_Record):
    """One span of the previous question a follow-up's words took the place of."""

    old: str
    new: str
    similarity: float


class StandaloneQuestion(_Record):
    """What a follow-up was searched and answered as (rag/stages/standalone.py)."""

    asked: str = Field(description="what the user typed")
    question: str = Field(description="the standalone question searched and answered")
    rewritten: bool
    method: str = Field(
        description="none, self-contained, repeat, substitution, reference, condition, addition, "
        "substitution+addition, llm, or llm-rejected:<offline method>"
    )
    previous: str | None = Field(description="the standalone form of the user's previous question")
    reason: str = ""
    replaced: list[Replacement] = []


class ApiKeyUse(_Record):
    """The API key a question came with (docs/api.md): never the secret. The asker is the trace's user and
    groups; with ``on_behalf`` a trusted service key (bound to ``user`` here) named them."""

    id: str = Field(description="the key's id, as `rag keys list` shows it")
    name: str
    user: str = Field(description="the user the key is bound to (a service key: the service's name)")
    on_behalf: bool = Field(description="a trusted service key asked for the trace's user and groups")


class Excerpt(_Record):
    """One point of an extractive answer (rag/stages/extractive.py): a contiguous run of one passage's sentences,
    shown under ``heading``; ``key`` are the sentences the reader chose, the others what their meaning depends on."""

    n: int = Field(description="the passage's number in the prompt, as the point cites it")
    chunk_id: str
    heading: str = Field(description="the heading the excerpt is shown under")
    start: int = Field(description="where the excerpt starts in the passage's text (character offset)")
    end: int = Field(description="where it ends (exclusive)")
    sentences: list[str] = Field(
        description="its sentences as shown, in passage order; an ellipsis between two runs of the passage"
    )
    key: list[str] = Field(
        description="the sentences that carried the choice (the reader's), shown highlighted"
    )
    intents: list[int] = Field(description="the intents (by index) it answers")
    score: float = Field(description="the reader's best probability among its key sentences")


class Stage(_Record):
    """What the runner recorded for one stage. ``detail`` belongs to the stage: free-form JSON."""

    name: str
    ms: float
    detail: dict[str, Any]


class Trace(_Record):
    """Everything one question produced: the ``rag ask --json`` contract."""

    model_config = ConfigDict(title="Trace")

    trace_id: str
    created_at: str = Field(description="ISO 8601 timestamp, UTC")
    question: str
    user: str
    groups: list[str]
    as_of: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="ISO date the policies were read as of")
    tags: list[str]
    session_id: str | None
    answer: str
    abstained: bool
    abstain_reason: str | None
    intents: list[Intent]
    citations: list[Citation]
    evidence: list[Evidence] = Field(description="the final order, as the prompt showed it")
    candidates: list[Candidate]
    dropped: list[Dropped]
    bundles: list[Bundle]
    hops: list[Hop]
    # Added after the first stored traces: defaults, so older traces load (and say "not checked").
    answer_check: AnswerCheck = AnswerCheck()
    claims: list[Claim] = []
    verified: bool = Field(
        default=False, description="every claim supported: the only state shown as checked"
    )
    verification: dict[str, Any] = Field(
        default={}, description="the claim check, its repair and any fallback: free-form JSON"
    )
    budgets: Budgets
    prompt: Prompt
    model: str
    reranker: str
    packing: str
    generation_mode: str
    tokens: Tokens
    timings_ms: dict[str, float] = Field(description="per stage, and total")
    stages: list[Stage]
    error: str | None = Field(description="the language model's failure, when the answer fell back")
    standalone: StandaloneQuestion | None = Field(
        default=None, description="a follow-up's standalone form; absent before conversations were rewritten"
    )
    channel: str | None = Field(
        default=None,
        description="where it was asked: 'ui' (the chat page), 'cli' (rag ask) or 'api' (docs/api.md); None: "
        "not recorded (evaluation runs, traces stored before channels were)",
    )
    api_key: ApiKeyUse | None = Field(default=None, description="the API key an 'api' question came with")
    excerpts: list[Excerpt] = Field(
        default=[],
        description="the points of an extractive answer, in answer order: each passage excerpt, its boundaries and "
        "the sentences that carried the choice (none for a model's answer, and before excerpts were traced)",
    )

    def to_json(self, *, defaults: bool = False) -> dict[str, Any]:
        """The trace as JSON-able dicts, keys in schema order. Keys the trace did not carry (an older trace)
        stay out, so it prints back as it was stored; ``defaults=True`` fills them in with their defaults (a
        reader that wants every key, such as the UI)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=not defaults)


def keys(record: type[BaseModel]) -> tuple[str, ...]:
    """A record's keys as a trace writes them (aliases, such as a hop's ``from``), in schema order."""
    return tuple(f.alias or name for name, f in record.model_fields.items())


def parse_trace(data: Mapping[str, Any]) -> Trace:
    """``data`` as a :class:`Trace`; :class:`TraceSchemaError` saying what does not match otherwise."""
    try:
        return Trace.model_validate(data)
    except ValidationError as exc:
        trace_id = data.get("trace_id") if isinstance(data, Mapping) else None
        raise TraceSchemaError(
            f"Trace {trace_id!r} does not match the trace schema: {describe(exc)}",
            hint="It was written by another version of rag or edited by hand; `rag traces export` still "
            "reads it as stored. The schema: docs/schema/trace.schema.json.",
        ) from None


def describe(exc: ValidationError, limit: int = 5) -> str:
    """The first ``limit`` problems, one phrase each: 'evidence.0.n: Input should be a valid integer'."""
    problems = []
    for err in exc.errors(include_url=False)[:limit]:
        where = ".".join(str(part) for part in err["loc"]) or "(top level)"
        what = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(f"{where}: {what}")
    more = exc.error_count() - len(problems)
    return "; ".join(problems) + (f" (and {more} more)" if more > 0 else "")


def json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Trace` (draft 2020-12), as committed in docs/schema/trace.schema.json."""
    return {"$schema": JSON_SCHEMA_DIALECT, **Trace.model_json_schema(by_alias=True)}


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write or check docs/schema/trace.schema.json."""
    stale = "is stale (the models in rag/traces/schema.py changed)"
    return write_or_check(argv, "rag.traces.schema", SCHEMA_PATH, schema_text, stale)


if __name__ == "__main__":
    raise SystemExit(main())
