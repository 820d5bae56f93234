"""Domain types shared by ingestion, the query path, the trace store and the UI.

Every data type is a frozen dataclass: stages return new values instead of mutating their inputs. ``Completes``
is the one protocol: what a stage needs of an LLM client.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import date
from typing import Any, Literal, Protocol

import numpy as np

PUBLIC_GROUP = "*"  # the access group that means "every signed-in user"
FAR_FUTURE = date(9999, 12, 31)
FAR_PAST = date(1, 1, 1)


@dataclass(frozen=True)
class Principal:
    """Who is asking. Access control is a required argument of every retrieval call."""

    user: str
    groups: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.user or not self.user.strip():
            from rag.errors import AccessError

            raise AccessError("A user name is required to search.", hint="Pass --user NAME.")

    @property
    def readable_groups(self) -> frozenset[str]:
        return self.groups | {PUBLIC_GROUP}


@dataclass(frozen=True)
class DocumentMeta:
    """Per-document metadata, set by a sidecar ``<file>.meta.json`` or a JSONL record's ``metadata``."""

    title: str
    groups: tuple[str, ...] = (PUBLIC_GROUP,)
    effective: date | None = None
    expires: date | None = None
    tags: tuple[str, ...] = ()

    def readable_by(self, principal: Principal) -> bool:
        return bool(set(self.groups) & principal.readable_groups)

    def valid_on(self, day: date) -> bool:
        return (self.effective or FAR_PAST) <= day <= (self.expires or FAR_FUTURE)


@dataclass(frozen=True)
class Chunk:
    """One indexed passage. ``chunk_id`` derives from the document id and the chunk's content. Ingestion sets every
    field; the defaults serve passages built elsewhere (evaluation's, tests'), and the access default is no group."""

    chunk_id: str
    doc_id: str
    text: str
    source: str  # file path (or JSONL path#id) it came from
    title: str
    section: str = ""  # section path, "Travel > Reimbursement > Local travel"
    page: int | None = None  # first page (1-based) for PDFs, None otherwise
    page_end: int | None = None
    ordinal: int = 0  # position within the document, 0-based
    prev_id: str | None = None
    next_id: str | None = None
    groups: tuple[str, ...] = ()  # who may read it; none (the default) is no one
    effective: date | None = None
    expires: date | None = None
    tags: tuple[str, ...] = ()
    doc_version: str = ""  # content hash of the document this chunk came from
    n_tokens: int = 0

    @property
    def meta(self) -> DocumentMeta:
        return DocumentMeta(self.title, self.groups, self.effective, self.expires, self.tags)


def chunk_id_for(doc_id: str, text: str, occurrence: int = 0) -> str:
    """Content-derived id: same document + same text (+ same repeat index) -> same id."""
    digest = hashlib.sha256(f"{doc_id}\x00{occurrence}\x00{text}".encode()).hexdigest()
    return digest[:24]


@dataclass(frozen=True)
class SearchFilter:
    """Everything that restricts what retrieval may see. Built once per request from the principal."""

    principal: Principal
    as_of: date
    tags: frozenset[str] = frozenset()

    def allows(self, chunk: Chunk) -> bool:
        """The Python twin of the store-side filter; used to re-check every chunk added after retrieval."""
        if not chunk.meta.readable_by(self.principal) or not chunk.meta.valid_on(self.as_of):
            return False
        return not self.tags or not chunk.tags or bool(self.tags & set(chunk.tags))


@dataclass(frozen=True)
class Intent:
    """One retrieval intent of a (possibly compound) question."""

    index: int
    text: str


@dataclass(frozen=True)
class Candidate:
    """A retrieved chunk with every score it collected on its way through the query path."""

    chunk: Chunk
    bm25_rank: int | None = None  # 1-based; None when the lexical leg did not return it
    bm25_score: float | None = None
    dense_rank: int | None = None
    dense_score: float | None = None
    fused_score: float = 0.0
    fused_rank: int | None = None
    intents: tuple[int, ...] = ()
    rerank_score: float | None = None
    rerank_rank: int | None = None
    hop: int = 0  # 0 = first retrieval, 1.. = follow-up hops
    added_by: str | None = None  # None = retrieved; else why it was added (bundling, neighbour, hop)

    @property
    def chunk_id(self) -> str:
        return self.chunk.chunk_id

    def with_(self, **changes: object) -> Candidate:
        """A copy with ``changes``. Candidates are copied hundreds of times per question (every rerank, every
        fusion): a field-by-field copy instead of ``dataclasses.replace``, which re-runs ``__init__``."""
        unknown = changes.keys() - _CANDIDATE_FIELDS
        if unknown:
            raise TypeError(f"Candidate has no field(s) {sorted(unknown)}")
        new = object.__new__(Candidate)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_CANDIDATE_FIELDS = frozenset(f.name for f in fields(Candidate))


@dataclass(frozen=True)
class Dropped:
    chunk_id: str
    reason: str  # e.g. "near_duplicate_of:<id>", "over_budget", "below_threshold"
    stage: str


@dataclass(frozen=True)
class Bundle:
    """Passages that travel together; members keep document order."""

    bundle_id: int
    members: tuple[Candidate, ...]
    reason: str  # "single", "rule_exception", "cross_reference", "continuation", "chain", "adjacent", ...
    score: float  # the best member's rerank score: a bundle ranks by its strongest passage

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(m.chunk_id for m in self.members)


@dataclass(frozen=True)
class Evidence:
    """One passage at its final position n (1-based) as the model sees it."""

    n: int
    candidate: Candidate
    bundle_id: int


@dataclass(frozen=True)
class Citation:
    n: int
    chunk_id: str | None  # None when [n] does not exist in the evidence
    valid: bool
    supported: bool
    sentence: str
    support_score: float


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str
    evidence_map: tuple[tuple[int, str], ...]  # (n, chunk_id)
    n_tokens: int


@dataclass(frozen=True)
class Excerpt:
    """One point of an extractive answer: a contiguous run of one passage's sentences (``sentences``, in passage
    order, shown under ``heading``), the ones that carried the choice (``key``: the reader chose them, the others
    are what their meaning depends on), the intents it answers and where it lies in the passage's text (``span``).
    Two runs of one passage a few sentences apart are one excerpt whose ``sentences`` hold an ellipsis between."""

    n: int
    chunk_id: str
    heading: str
    sentences: tuple[str, ...]
    key: tuple[str, ...]
    intents: tuple[int, ...]
    span: tuple[int, int]
    score: float  # the best reader probability (or sentence score) of its key sentences

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


@dataclass(frozen=True)
class Generated:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    excerpts: tuple[Excerpt, ...] = ()  # what an extractive answer shows, point by point


class Completes(Protocol):
    """What a stage needs of an LLM client (``rag.stages.generate.ChatModel`` extends it; ``rag.llm.client.LLMClient`` or a
    test double implements it)."""

    def complete(
        self, prompt: Prompt, *, max_tokens: int | None = None, temperature: float = 0.0
    ) -> Generated: ...


@dataclass
class StageRecord:
    """What the runner recorded for one stage: timing plus a JSON-able summary of its output."""

    name: str
    ms: float
    detail: dict[str, object] = field(default_factory=dict)


# ----------------------------------------------------------------------------- what the stages produce
# A request's State (rag/request.py) holds them between stages; the stages that make them say how.


@dataclass(frozen=True)
class Coverage:
    """How much of the question the passages found can answer.

    ``abstain``: they answer none of it. ``uncovered``: the intents no passage answers (every intent when
    abstaining). ``reason``: why, in words; None when every intent is covered. A partial ``reason`` is kept
    although the answer does not abstain: it becomes the abstention's reason if no evidence is selected.
    """

    abstain: bool
    uncovered: tuple[Intent, ...] = ()
    reason: str | None = None

    def covered(self, intents: Sequence[Intent]) -> list[Intent]:
        """The intents the evidence is selected for (``covered_intents``)."""
        return covered_intents(intents, self.uncovered)


def covered_intents(intents: Sequence[Intent], uncovered: Sequence[Intent]) -> list[Intent]:
    """The intents evidence is selected and quoted for: the covered ones, or all of them when none is."""
    return [i for i in intents if i not in uncovered] or list(intents)


@dataclass(frozen=True)
class Abstention:
    """The answer abstains; ``reason`` is what the user is told why (``abstain_reason`` in ``rag ask --json``)."""

    reason: str


Verdict = Literal["supported", "unsupported", "contradicted", "uncited"]


@dataclass(frozen=True)
class Claim:
    """One checkable statement of an answer."""

    index: int
    sentence: str  # as the model wrote it, markers included
    text: str  # without markers, list bullets or an 'Answer:' prefix
    cited: tuple[int, ...]


@dataclass(frozen=True)
class ClaimCheck:
    """The verdict on one claim and what it rests on."""

    claim: Claim
    verdict: Verdict
    n: int | None  # the passage the verdict rests on (the supporting or contradicting one)
    chunk_id: str | None
    evidence_sentence: str | None  # the passage sentence the claim was compared with
    score: float  # support score of passage n
    reason: str
    conflicts: tuple[str, ...] = ()
    attributed: bool = False  # an uncited claim given the passage that supports it

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.claim.index,
            "text": self.claim.text,
            "sentence": self.claim.sentence,
            "cited": list(self.claim.cited),
            "verdict": self.verdict,
            "n": self.n,
            "chunk_id": self.chunk_id,
            "evidence_sentence": self.evidence_sentence,
            "score": round(float(self.score), 4),
            "reason": self.reason,
            "conflicts": list(self.conflicts),
            "attributed": self.attributed,
        }


Chain = tuple[str, str, str]  # (child chunk id, parent chunk id, reason): two passages that belong together


@dataclass(frozen=True)
class Standalone:
    """What a question was searched and answered as. ``question`` equals ``asked`` when nothing was rewritten."""

    asked: str
    question: str
    rewritten: bool
    # "none" (no conversation), "self-contained", "repeat", "substitution", "substitution+addition",
    # "addition", "reference", "condition", "llm", or "llm-rejected:<the offline method used instead>"
    method: str
    previous: str | None = None  # the standalone form of the user's previous turn it builds on
    reason: str = ""
    replaced: tuple[tuple[str, str, float], ...] = ()  # (previous span, new span, cosine) substitutions

    def to_json(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "question": self.question,
            "rewritten": self.rewritten,
            "method": self.method,
            "previous": self.previous,
            "reason": self.reason,
            "replaced": [{"old": o, "new": n, "similarity": round(s, 4)} for o, n, s in self.replaced],
        }


@dataclass(frozen=True)
class EvidenceSentence:
    """A sentence of the final evidence that an answer may quote, with what the reader reads it in."""

    text: str
    n: int  # the passage it came from
    tokens: frozenset[str]
    table: int | None = None  # rows of one table share a number: one row answers, the others are near-copies
    row: str = ""  # a table row's own text (``text`` is the row read with the table's first line)
    asks: bool = False  # a question ("Does the budget roll over?"): an FAQ's answer is the sentence after it
    position: int = 0  # its place among its passage's quotable sentences (0: the first)
    before: str = ""  # the passage's sentence before it, heading or not ("" for the first): its context
    heading: str = ""  # its passage's title and section path
    after_heading: bool = False  # ``before`` is a heading: the first sentence under it
    section: str = ""  # the nearest heading above it in its passage ("" when the passage opens without one)
    span: tuple[int, int] = (0, 0)  # where it lies in its passage's text (a table row: the whole table)


@dataclass(frozen=True)
class Reading:
    """The reader's probabilities, one row per intent (in intent order), one column per evidence sentence."""

    probabilities: np.ndarray
    sentences: tuple[EvidenceSentence, ...]
    answer_bar: float
    support_bar: float
    keep_ratio: float

    def best(self, row: int) -> float:
        return float(self.probabilities[row].max()) if self.probabilities.shape[1] else 0.0

    def answered(self, row: int) -> bool:
        return self.best(row) >= self.answer_bar

    def to_json(self, top: int = 3) -> dict[str, Any]:
        """What the trace keeps: each intent's best probability and its top sentences."""
        sentences = self.sentences
        out = []
        for row in range(self.probabilities.shape[0]):
            p = self.probabilities[row]
            order = np.argsort(-p, kind="stable")[:top]
            out.append(
                {
                    "best": round(self.best(row), 4),
                    "answered": self.answered(row),
                    "top": [
                        {"n": sentences[i].n, "p": round(float(p[i]), 4), "sentence": sentences[i].text}
                        for i in order
                    ],
                }
            )
        return {"answer_bar": self.answer_bar, "support_bar": self.support_bar, "intents": out}
