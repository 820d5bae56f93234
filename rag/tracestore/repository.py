"""The trace store's repository: traces, chat sessions and conversation memory.

``save_trace`` takes the dict the query path produces (the ``rag ask --json`` shape) and stores it normalised,
one transaction per trace; ``get_trace`` gives it back equal to what was written (after a JSON round trip:
tuples come back as lists, ints stored in float columns as floats). Nothing is lost:

* unknown top-level keys, and known keys whose value does not fit their column or table, go to
  ``answers.extra`` verbatim;
* ``answers.residual`` records what the columns cannot say about the rest: known keys a dict lacked, unknown
  keys inside list items and sub-dicts, and chunk fields that differ from the stored snapshot (a chunk id
  derives from document id + text, so its text never changes, but e.g. ``doc_version`` does when another part
  of the document is edited). It is NULL for a trace of the standard shape.

``trace_id`` (a uuid4 hex) and ``created_at`` (now, UTC) are filled in when the dict lacks them, and then
come back too. ``get_trace`` raises :class:`TraceNotFound` for an unknown id rather than returning None.

Which keys go to which columns is derived from the trace schema (rag/trace_schema.py) and the table models
(rag/tracestore/models.py), never restated here. ``read_trace`` is ``get_trace`` checked against that schema:
the typed :class:`rag.trace_schema.Trace`, or :class:`rag.trace_schema.TraceSchemaError`.

Database errors surface as :class:`rag.errors.StorageError` (subclasses below). The store never migrates:
when the tables are missing it raises :class:`DatabaseNotInitialised` ("run `rag db upgrade`").
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeGuard, TypeVar

from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    Boolean,
    Column,
    Connection,
    Engine,
    Float,
    Integer,
    String,
    Table,
    and_,
    delete,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import aliased

from rag import trace_schema as ts
from rag.errors import AccessError, RagError, StorageError
from rag.tracestore import models as m
from rag.tracestore.db import (
    describe_db_error,
    display_url,
    head_revision,
    make_engine,
    resolve_url,
    sqlite_path,
    write_engine,
)

if TYPE_CHECKING:
    from rag.config import Settings

log = logging.getLogger(__name__)

T = TypeVar("T")
Trace = dict[str, Any]
TimeBound = datetime | date | str | None


class GapQuestion(TypedDict):
    """A question the bot abstained on or its asker rated down (``TraceStore.gap_questions``), with who asked,
    as of when and with which tags: what asking it again needs."""

    trace_id: str
    created_at: str | None
    user: str | None
    groups: list[str]
    as_of: str | None
    tags: list[str]
    question: str
    abstained: bool
    feedback: str | None
    feedback_reason: str | None
    feedback_comment: str | None


class CitedDocument(TypedDict):
    """How many answers in a window cite a document (``TraceStore.cited_documents``), with its title and file as
    the cited passages recorded them."""

    title: str | None
    source: str | None
    answers: int


WRITE_ATTEMPTS = 6  # bounded retry on "database is locked" / PostgreSQL deadlock or serialisation failure
ANSWER_PREVIEW_CHARS = 200
_INT32 = 2**31


class TraceNotFound(StorageError):
    """No trace with that id."""


class SessionNotFound(StorageError):
    """No chat session with that id."""


class InvalidTrace(StorageError):
    """The trace dict cannot be stored (not JSON-able, or an unusable ``trace_id``)."""


class DatabaseNotInitialised(StorageError):
    """The trace tables do not exist yet: ``rag db upgrade`` was never run against this database."""


class SchemaOutOfDate(StorageError):
    """The database schema is at a different migration than this code expects."""


class FeedbackNotAllowed(AccessError):
    """Feedback on a trace that is not the caller's own."""


class InvalidFeedback(StorageError):
    """A rating, reason or comment the feedback table cannot take."""


FEEDBACK_COMMENT_CHARS = 2000
FeedbackFilter = Literal["up", "down", "none", "any"]


# --------------------------------------------------------------------------------------------------------------
# Field maps: dict key -> column, and what the column can hold. The keys come from the trace schema
# (rag/trace_schema.py), the kinds from the columns (rag/tracestore/models.py): neither is restated here.


Kind = Literal["str", "id", "int", "float", "bool", "json"]
ID_CHARS = 64  # the width of every id column (String(64)): an id is 1-64 characters


@dataclass(frozen=True)
class _Field:
    key: str
    column: str
    kind: Kind


def _kind(column: Column[Any]) -> Kind:
    """What a column holds, from its SQL type."""
    sql_type = column.type
    if isinstance(sql_type, JSON):
        return "json"
    if isinstance(sql_type, Boolean):
        return "bool"
    if isinstance(sql_type, Integer):
        return "int"
    if isinstance(sql_type, Float):
        return "float"
    if isinstance(sql_type, String):
        return "id" if sql_type.length == ID_CHARS else "str"
    raise TypeError(f"No field kind for column {column} of type {sql_type!r}")


def _table(model: type[m.Base]) -> Table:
    return m.Base.metadata.tables[model.__tablename__]


def _fields(
    record: type[BaseModel],
    model: type[m.Base],
    *,
    columns: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
) -> tuple[_Field, ...]:
    """The keys of the schema ``record`` that ``model``'s table has a column for, in schema order; ``columns``
    renames a key's column, ``skip`` names keys encoded on their own. A key without a column is not a field:
    the encoder keeps it verbatim (a top-level key in ``answers.extra``, a record's key in
    ``answers.residual``), so nothing is lost."""
    table = _table(model)
    out = []
    skipped = set(skip)
    for key in ts.keys(record):
        column = (columns or {}).get(key, key)
        if key in skipped:
            continue
        if column in table.c:
            out.append(_Field(key, column, _kind(table.c[column])))
    return tuple(out)


def _fits(kind: Kind, value: Any) -> bool:
    """Whether ``value`` comes back from a column of this kind equal to itself, on every backend."""
    if value is None or kind == "json":
        return True
    if kind == "str":
        return isinstance(value, str) and "\x00" not in value  # PostgreSQL text cannot hold NUL
    if kind == "id":
        return isinstance(value, str) and 0 < len(value) <= ID_CHARS and "\x00" not in value
    if isinstance(value, bool):
        return kind == "bool"
    if kind == "int":
        return isinstance(value, int) and -_INT32 <= value < _INT32
    if kind == "float":
        if isinstance(value, int):
            return abs(value) <= 2**53
        return isinstance(value, float) and not math.isnan(value)  # SQLite stores NaN as NULL
    return False


# trace_id (the primary key) and created_at (a timestamp column) are encoded on their own.
ANSWER_FIELDS = _fields(ts.Trace, m.Answer, skip=("trace_id", "created_at"))
TOKEN_FIELDS = _fields(ts.Tokens, m.Answer, columns={k: f"{k}_tokens" for k in ts.keys(ts.Tokens)})
# Stored once per chunk id, in chunk_snapshots; the chunk id itself is a column of each list's rows.
CHUNK_FIELDS = _fields(ts.Passage, m.ChunkSnapshot, skip=("chunk_id",))
_CHUNK_KEYS = frozenset(f.key for f in CHUNK_FIELDS)
EVIDENCE_FIELDS = _fields(ts.Evidence, m.TraceEvidence, skip=_CHUNK_KEYS)
CANDIDATE_FIELDS = _fields(ts.Candidate, m.TraceCandidate, skip=_CHUNK_KEYS)
INTENT_FIELDS = _fields(ts.Intent, m.TraceIntent, columns={"index": "intent_index"})
CITATION_FIELDS = _fields(ts.Citation, m.Citation)
DROPPED_FIELDS = _fields(ts.Dropped, m.TraceDropped)
BUNDLE_FIELDS = _fields(ts.Bundle, m.TraceBundle)  # + chunk_ids, in bundle_members
PROMPT_FIELDS = _fields(ts.Prompt, m.Prompt)
STAGE_FIELDS = _fields(ts.Stage, m.Stage)

# Top-level lists of records stored one row per item: key -> (model, fields)
_RECORD_LISTS: dict[str, tuple[type[m.Base], tuple[_Field, ...]]] = {
    "intents": (m.TraceIntent, INTENT_FIELDS),
    "citations": (m.Citation, CITATION_FIELDS),
    "dropped": (m.TraceDropped, DROPPED_FIELDS),
    "stages": (m.Stage, STAGE_FIELDS),
}
_CHUNK_LISTS: dict[str, tuple[type[m.Base], tuple[_Field, ...]]] = {
    "evidence": (m.TraceEvidence, EVIDENCE_FIELDS),
    "candidates": (m.TraceCandidate, CANDIDATE_FIELDS),
}
# Key order of a trace as the query path writes it; get_trace returns keys in this order, then extras.
TRACE_KEYS = ts.keys(ts.Trace)
# The keys stored in columns and child tables; every other key of a trace (answer_check, claims, verified,
# verification, and keys unknown to the schema) is kept verbatim in answers.extra.
STORED_KEYS = (
    "trace_id",
    "created_at",
    *(f.key for f in ANSWER_FIELDS),
    *_RECORD_LISTS,
    *_CHUNK_LISTS,
    "bundles",
    "prompt",
    "tokens",
    "timings_ms",
)
if unknown := set(STORED_KEYS) - set(TRACE_KEYS):  # a key renamed or removed in the schema: a broken contract
    raise TypeError(f"The trace store stores keys the trace schema lacks: {sorted(unknown)}")
EVIDENCE_ORDER = tuple(
    k for k in ts.keys(ts.Evidence) if k in _CHUNK_KEYS or k in {f.key for f in EVIDENCE_FIELDS}
)
BUNDLE_ORDER = tuple(k for k in ts.keys(ts.Bundle) if k == "chunk_ids" or k in {f.key for f in BUNDLE_FIELDS})
CANDIDATE_ORDER = tuple(
    k for k in ts.keys(ts.Candidate) if k in _CHUNK_KEYS or k in {f.key for f in CANDIDATE_FIELDS}
)


# --------------------------------------------------------------------------------------------------------------
# Encoding a trace dict into rows, and decoding rows into the dict


@dataclass
class _Residual:
    """What the columns cannot say about the written dict, keyed by path ("" = top level, "evidence/3")."""

    absent: dict[str, list[str]] = field(default_factory=dict)
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)

    def note(self, path: str, *, extra: Mapping[str, Any] | None = None, absent: Sequence[str] = ()) -> None:
        if extra:
            self.extra.setdefault(path, {}).update(extra)
        if absent:
            self.absent.setdefault(path, []).extend(absent)

    def apply(self, path: str, record: dict[str, Any]) -> dict[str, Any]:
        record.update(self.extra.get(path, {}))
        for key in self.absent.get(path, ()):
            record.pop(key, None)
        return record

    def to_json(self) -> dict[str, Any] | None:
        out: dict[str, Any] = {}
        if self.absent:
            out["absent"] = self.absent
        if self.extra:
            out["extra"] = self.extra
        return out or None

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> _Residual:
        data = data or {}
        return cls(absent=dict(data.get("absent", {})), extra=dict(data.get("extra", {})))


def _encode_record(
    record: Mapping[str, Any], fields: Iterable[_Field], path: str, residual: _Residual
) -> dict[str, Any]:
    """Column values for ``record``; what does not fit a column goes to ``residual``."""
    row: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    absent: list[str] = []
    known: set[str] = set()
    for f in fields:
        known.add(f.key)
        row[f.column] = None
        if f.key not in record:
            absent.append(f.key)
        elif _fits(f.kind, record[f.key]):
            row[f.column] = record[f.key]
        else:
            extra[f.key] = record[f.key]
    extra.update({k: v for k, v in record.items() if k not in known})
    residual.note(path, extra=extra, absent=absent)
    return row


def _decode_record(row: Mapping[Any, Any], fields: Iterable[_Field]) -> dict[str, Any]:
    return {f.key: row[f.column] for f in fields}


def _is_record_list(value: Any) -> TypeGuard[list[dict[str, Any]]]:
    return isinstance(value, list) and all(isinstance(item, dict) for item in value)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _parse_created_at(value: Any) -> tuple[datetime, bool]:
    """(timestamp in UTC, whether ``value`` is exactly its canonical ISO form)."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return datetime.now(UTC), False
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
        return parsed, parsed.isoformat() == value
    return datetime.now(UTC), False


@dataclass
class _EncodedTrace:
    """A trace as rows, ready to insert; ``residual_against`` completes it once the snapshots are known."""

    trace_id: str
    answer: dict[str, Any]
    children: list[tuple[Table, list[dict[str, Any]]]]
    snapshots: dict[str, dict[str, Any]]  # chunk_id -> snapshot row to insert if absent
    chunk_items: list[tuple[str, dict[str, Any]]]  # (residual path, evidence/candidate item)
    residual: _Residual

    def residual_against(self, stored: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
        """The residual, plus chunk fields of items that differ from the snapshot stored for their id."""
        residual = _Residual(
            absent={k: list(v) for k, v in self.residual.absent.items()},
            extra={k: dict(v) for k, v in self.residual.extra.items()},
        )
        for path, item in self.chunk_items:
            snapshot = stored[item["chunk_id"]]
            differs = {
                f.key: item[f.key]
                for f in CHUNK_FIELDS
                if f.key in item and not _same(item[f.key], snapshot[f.column])
            }
            residual.note(path, extra=differs, absent=[f.key for f in CHUNK_FIELDS if f.key not in item])
        return residual.to_json()


class _Encoder:
    """Turns one trace dict into rows. Each step handles one part of the shape; a part whose value is not
    the expected shape (None, a string where a list was expected, ...) is kept verbatim in ``answers.extra``."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.residual = _Residual()
        self.extra: dict[str, Any] = {}  # -> answers.extra
        self.children: list[tuple[Table, list[dict[str, Any]]]] = []
        self.snapshots: dict[str, dict[str, Any]] = {}
        self.chunk_items: list[tuple[str, dict[str, Any]]] = []
        raw_id = trace.get("trace_id")
        self.trace_id = uuid.uuid4().hex if raw_id is None else raw_id
        if not _fits("id", self.trace_id):
            raise InvalidTrace(f"Unusable trace_id {raw_id!r}: expected a string of 1-64 characters.")
        self.answer: dict[str, Any] = {"trace_id": self.trace_id}

    def encode(self) -> _EncodedTrace:
        self._scalars()
        self._tokens()
        self._prompt()
        self._timings()
        for key, (model, fields) in _RECORD_LISTS.items():
            self._record_list(key, model, fields)
        self._bundles()
        for key, (model, fields) in _CHUNK_LISTS.items():
            self._chunk_list(key, model, fields)
        self._answer_documents()
        citations = self.trace.get("citations")
        self.answer["has_failed_citation"] = _is_record_list(citations) and any(
            c.get("valid") is False or c.get("supported") is False for c in citations
        )
        # trace_id and created_at are filled in when absent, so they are never noted as absent.
        self.residual.note("", absent=[k for k in STORED_KEYS[2:] if k not in self.trace])
        self.extra.update({k: v for k, v in self.trace.items() if k not in STORED_KEYS})
        self.answer["extra"] = self.extra or None
        return _EncodedTrace(
            self.trace_id, self.answer, self.children, self.snapshots, self.chunk_items, self.residual
        )

    def _verbatim(self, key: str) -> None:
        if key in self.trace:
            self.extra[key] = self.trace[key]

    def _scalars(self) -> None:
        created_at, canonical = _parse_created_at(self.trace.get("created_at"))
        self.answer["created_at"] = created_at
        if "created_at" in self.trace and not canonical:
            self.extra["created_at"] = self.trace["created_at"]
        scalars = {f.key: self.trace[f.key] for f in ANSWER_FIELDS if f.key in self.trace}
        self.answer.update(_encode_record(scalars, ANSWER_FIELDS, "", self.residual))
        # A known key whose value did not fit its column is a top-level extra; absences are noted in encode().
        self.extra.update(self.residual.extra.pop("", {}))
        self.residual.absent.pop("", None)

    def _tokens(self) -> None:
        tokens = self.trace.get("tokens")
        if isinstance(tokens, dict):
            self.answer.update(_encode_record(tokens, TOKEN_FIELDS, "tokens", self.residual))
        else:
            self.answer.update({f.column: None for f in TOKEN_FIELDS})
            self._verbatim("tokens")

    def _prompt(self) -> None:
        prompt = self.trace.get("prompt")
        if isinstance(prompt, dict):
            row = _encode_record(prompt, PROMPT_FIELDS, "prompt", self.residual)
            self.children.append((_table(m.Prompt), [{"trace_id": self.trace_id, **row}]))
        else:
            self._verbatim("prompt")

    def _timings(self) -> None:
        timings = self.trace.get("timings_ms")
        self.answer["total_ms"] = None
        if isinstance(timings, dict) and all(_fits("float", v) for v in timings.values()):
            rows = [
                {"trace_id": self.trace_id, "position": i, "stage": stage, "ms": ms}
                for i, (stage, ms) in enumerate(timings.items())
            ]
            self.children.append((_table(m.Timing), rows))
            self.answer["total_ms"] = timings.get("total")
        else:
            self._verbatim("timings_ms")

    def _record_list(self, key: str, model: type[m.Base], fields: tuple[_Field, ...]) -> None:
        items = self.trace.get(key)
        if not _is_record_list(items):
            self._verbatim(key)
            return
        rows = [
            {
                "trace_id": self.trace_id,
                "position": i,
                **_encode_record(item, fields, f"{key}/{i}", self.residual),
            }
            for i, item in enumerate(items)
        ]
        self.children.append((_table(model), rows))

    def _bundles(self) -> None:
        bundles = self.trace.get("bundles")
        if not _is_record_list(bundles):
            self._verbatim("bundles")
            return
        bundle_rows, member_rows = [], []
        for i, bundle in enumerate(bundles):
            path = f"bundles/{i}"
            own = {k: v for k, v in bundle.items() if k != "chunk_ids"}
            bundle_rows.append(
                {
                    "trace_id": self.trace_id,
                    "position": i,
                    **_encode_record(own, BUNDLE_FIELDS, path, self.residual),
                }
            )
            members = bundle.get("chunk_ids")
            if isinstance(members, list) and all(_fits("id", c) for c in members):
                member_rows += [
                    {"trace_id": self.trace_id, "bundle_position": i, "position": j, "chunk_id": c}
                    for j, c in enumerate(members)
                ]
            elif "chunk_ids" in bundle:
                self.residual.note(path, extra={"chunk_ids": members})
            else:
                self.residual.note(path, absent=["chunk_ids"])
        self.children += [(_table(m.TraceBundle), bundle_rows), (_table(m.BundleMember), member_rows)]

    def _chunk_list(self, key: str, model: type[m.Base], fields: tuple[_Field, ...]) -> None:
        """Evidence or candidates: scores per row, chunk text and metadata in the shared snapshot."""
        items = self.trace.get(key)
        if not _is_record_list(items) or not all(
            item.get("chunk_id") and _fits("id", item["chunk_id"]) for item in items
        ):
            self._verbatim(key)
            return
        chunk_keys = {f.key for f in CHUNK_FIELDS}
        rows = []
        for i, item in enumerate(items):
            path = f"{key}/{i}"
            own = {k: v for k, v in item.items() if k not in chunk_keys}
            rows.append(
                {"trace_id": self.trace_id, "position": i, **_encode_record(own, fields, path, self.residual)}
            )
            self.chunk_items.append(
                (path, item)
            )  # residual_against() notes where it differs from the snapshot
            snapshot = {
                f.column: item.get(f.key) if _fits(f.kind, item.get(f.key)) else None for f in CHUNK_FIELDS
            }
            self.snapshots.setdefault(item["chunk_id"], {"chunk_id": item["chunk_id"], **snapshot})
        self.children.append((_table(model), rows))

    def _answer_documents(self) -> None:
        evidence = self.trace.get("evidence")
        doc_ids = dict.fromkeys(
            item["doc_id"]
            for item in (evidence if _is_record_list(evidence) else [])
            if isinstance(item.get("doc_id"), str) and item["doc_id"] and _fits("str", item["doc_id"])
        )
        rows = [{"trace_id": self.trace_id, "doc_id": doc_id} for doc_id in doc_ids]
        self.children.append((_table(m.AnswerDocument), rows))


def _decode_trace(answer: Mapping[Any, Any], parts: Mapping[str, list[Mapping[Any, Any]]]) -> Trace:
    residual = _Residual.from_json(answer["residual"])

    def records(key: str, fields: Iterable[_Field]) -> list[dict[str, Any]]:
        return [residual.apply(f"{key}/{r['position']}", _decode_record(r, fields)) for r in parts[key]]

    values: dict[str, Any] = _decode_record(answer, ANSWER_FIELDS)
    values["trace_id"] = answer["trace_id"]
    values["created_at"] = answer["created_at"].isoformat()
    for key, (_, fields) in _RECORD_LISTS.items():
        values[key] = records(key, fields)
    for key, order in (("evidence", EVIDENCE_ORDER), ("candidates", CANDIDATE_ORDER)):
        fields = _CHUNK_LISTS[key][1] + CHUNK_FIELDS
        values[key] = [
            residual.apply(f"{key}/{r['position']}", {k: item[k] for k in order})
            for r in parts[key]
            for item in [_decode_record(r, fields)]
        ]
    members: dict[int, list[str]] = {}
    for r in parts["bundle_members"]:
        members.setdefault(r["bundle_position"], []).append(r["chunk_id"])
    values["bundles"] = []
    for r in parts["bundles"]:
        bundle = {**_decode_record(r, BUNDLE_FIELDS), "chunk_ids": members.get(r["position"], [])}
        ordered = {key: bundle[key] for key in BUNDLE_ORDER}
        values["bundles"].append(residual.apply(f"bundles/{r['position']}", ordered))
    prompt = parts["prompts"]
    values["prompt"] = residual.apply("prompt", _decode_record(prompt[0], PROMPT_FIELDS)) if prompt else None
    values["tokens"] = residual.apply("tokens", _decode_record(answer, TOKEN_FIELDS))
    values["timings_ms"] = {r["stage"]: r["ms"] for r in parts["timings"]}

    # Extras are keys without a column, unknown keys, and known ones stored verbatim (their value did not fit).
    merged = {**values, **(answer["extra"] or {})}
    trace = {key: merged.pop(key) for key in TRACE_KEYS if key in merged}
    trace.update(merged)
    return residual.apply("", trace)


def _jsonable(trace: Mapping[str, Any]) -> Trace:
    if not isinstance(trace, Mapping):
        raise InvalidTrace(f"A trace must be a dict, not {type(trace).__name__}.")
    try:
        return json.loads(json.dumps(trace))
    except (TypeError, ValueError) as exc:
        raise InvalidTrace(f"The trace is not JSON-serialisable: {exc}") from exc


def _utc(value: TimeBound, *, end: bool = False) -> datetime | None:
    """A filter bound as an aware UTC datetime. A date means the whole day: ``until`` a date includes it."""
    if value is None:
        return None
    if isinstance(value, str):
        text_value = value.strip()
        try:
            value = (
                date.fromisoformat(text_value)
                if len(text_value) == 10
                else datetime.fromisoformat(text_value)
            )
        except ValueError as exc:
            raise ValueError(f"Not an ISO date or datetime: {text_value!r}") from exc
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    start = datetime(value.year, value.month, value.day, tzinfo=UTC)
    return start + timedelta(days=1) if end else start


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _preview(text_value: str | None, limit: int = ANSWER_PREVIEW_CHARS) -> str | None:
    if text_value is None or len(text_value) <= limit:
        return text_value
    return text_value[: limit - 1].rstrip() + "…"


def _sqlstate(exc: BaseException) -> str | None:
    return getattr(getattr(exc, "orig", None), "sqlstate", None)


def _is_missing_table(exc: BaseException) -> bool:
    return _sqlstate(exc) == "42P01" or "no such table" in str(getattr(exc, "orig", exc)).lower()


def _is_retryable(exc: BaseException) -> bool:
    """SQLite lock timeouts and PostgreSQL deadlocks / serialisation failures: the transaction can rerun."""
    if _sqlstate(exc) in ("40001", "40P01"):
        return True
    message = str(getattr(exc, "orig", exc)).lower()
    return (
        "database is locked" in message
        or "database is busy" in message
        or "database table is locked" in message
    )


# --------------------------------------------------------------------------------------------------------------


class TraceStore:
    """Traces, chat sessions and conversation memory in one SQL database (SQLite or PostgreSQL).

    Thread-safe: every call checks a connection out of the engine's pool for one transaction. Create one per
    process and share it; ``close()`` releases the pool.
    """

    def __init__(self, url: str, *, engine: Engine | None = None) -> None:
        self.url = resolve_url(url)
        self._engine = engine or make_engine(self.url)
        self._writer = write_engine(self._engine)
        self._schema_checked = False
        self._schema_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> TraceStore:
        if settings is None:
            from rag.config import default_settings

            settings = default_settings()
        return cls(settings.sqlalchemy_url)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> TraceStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceStore({display_url(self.url)!r})"

    # -- plumbing ----------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Translate SQLAlchemy errors into StorageErrors a user can act on."""
        try:
            yield
        except RagError:
            raise
        except SQLAlchemyError as exc:
            if _is_missing_table(exc):
                raise self._not_initialised() from exc
            raise StorageError(
                f"Could not {action} in {display_url(self.url)}: {describe_db_error(exc)}",
                hint="Check RAG_DATABASE_URL, that the database server is running, and `rag db current`.",
            ) from exc

    def _not_initialised(self) -> DatabaseNotInitialised:
        return DatabaseNotInitialised(
            f"Database not initialised: run `rag db upgrade` ({display_url(self.url)})."
        )

    def check_ready(self) -> None:
        """Raise a StorageError a user can act on unless the database exists at the expected revision."""
        with self._errors("open the trace database"):
            self._check_schema()

    def _check_schema(self) -> None:
        """Once per store: the tables exist and are at the revision this code was written for."""
        if self._schema_checked:
            return
        with self._schema_lock:
            if self._schema_checked:
                return
            path = sqlite_path(self.url)
            if path is not None and not path.exists():  # do not create an empty file as a side effect
                raise self._not_initialised()
            with self._engine.connect() as conn:
                version = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            expected = head_revision()
            if version is None:
                raise self._not_initialised()
            if expected is not None and version != expected:
                raise SchemaOutOfDate(
                    f"The trace database is at schema revision {version}, this version of rag needs {expected}.",
                    hint="Run `rag db upgrade` (or upgrade rag, if the database is newer).",
                )
            self._schema_checked = True

    def _read(self, action: str, fn: Callable[[Connection], T]) -> T:
        with self._errors(action):
            self._check_schema()
            with self._engine.connect() as conn:
                return fn(conn)

    def _write(
        self, action: str, fn: Callable[[Connection], T], *, retry_on: tuple[type[Exception], ...] = ()
    ) -> T:
        """Run ``fn`` in one write transaction, rerunning it when the database says it may."""
        with self._errors(action):
            self._check_schema()
            for attempt in range(1, WRITE_ATTEMPTS + 1):
                try:
                    with self._writer.begin() as conn:
                        return fn(conn)
                except DBAPIError as exc:
                    if attempt == WRITE_ATTEMPTS or not (_is_retryable(exc) or isinstance(exc, retry_on)):
                        raise
                    delay = min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.0)
                    log.warning("%s: %s; retrying in %.2fs", action, describe_db_error(exc), delay)
                    time.sleep(delay)
            raise AssertionError("unreachable")

    # -- traces ------------------------------------------------------------------------------------------------

    def save_trace(self, trace: Mapping[str, Any]) -> str:
        """Store one trace (one transaction) and return its id. Raises StorageError if it already exists."""
        encoded = _Encoder(_jsonable(trace)).encode()

        def write(conn: Connection) -> str:
            stored = self._ensure_snapshots(conn, encoded.snapshots)
            answer = {**encoded.answer, "residual": encoded.residual_against(stored)}
            try:
                conn.execute(insert(m.Answer), [answer])
            except IntegrityError as exc:
                raise StorageError(f"A trace with id {encoded.trace_id} is already stored.") from exc
            for table, rows in encoded.children:
                if rows:
                    conn.execute(insert(table), rows)
            return encoded.trace_id

        return self._write("save the trace", write)

    def _ensure_snapshots(
        self, conn: Connection, rows: Mapping[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        """Insert-if-absent each chunk snapshot; return the stored snapshot of every id."""
        if not rows:
            return {}
        now = datetime.now(UTC)
        # Sorted, so two PostgreSQL writers sharing chunks take the row locks in the same order (no deadlock).
        values = [{**rows[k], "first_seen_at": now} for k in sorted(rows)]
        table = _table(m.ChunkSnapshot)
        dialect = conn.dialect.name
        if dialect in ("postgresql", "sqlite"):
            stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(table)
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["chunk_id"]), values)
            stored = self._snapshots(conn, list(rows))
        else:
            stored = self._snapshots(conn, list(rows))
            missing = [v for v in values if v["chunk_id"] not in stored]
            if missing:
                conn.execute(insert(table), missing)
                stored.update({v["chunk_id"]: v for v in missing})
        return stored

    @staticmethod
    def _snapshots(conn: Connection, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        table = _table(m.ChunkSnapshot)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(chunk_ids), 500):
            batch = chunk_ids[start : start + 500]
            for row in conn.execute(select(table).where(table.c.chunk_id.in_(batch))).mappings():
                out[row["chunk_id"]] = dict(row)
        return out

    def get_trace(self, trace_id: str) -> Trace:
        """The trace as written, whatever its shape (export, import and copies use it; readers that show a
        trace use :meth:`read_trace`). Raises TraceNotFound for an unknown id."""
        traces = self._read("read the trace", lambda conn: self._load(conn, [trace_id]))
        if trace_id not in traces:
            raise TraceNotFound(
                f"No trace with id {trace_id!r}.", hint="`rag traces list` shows the stored ones."
            )
        return traces[trace_id]

    def read_trace(self, trace_id: str) -> ts.Trace:
        """The trace checked against the trace schema (rag/trace_schema.py): what `rag traces show` and the
        UI's trace explorer read. Keys added to the schema after the trace was stored get their defaults; a
        trace that does not match (an unknown key, a value of the wrong type) raises
        :class:`rag.trace_schema.TraceSchemaError` saying where. Raises TraceNotFound for an unknown id."""
        return ts.parse_trace(self.get_trace(trace_id))

    def _load(self, conn: Connection, trace_ids: Sequence[str]) -> dict[str, Trace]:
        """Full traces for ``trace_ids``: one query per table, not one per trace."""
        ids = list(trace_ids)
        answers = {
            r["trace_id"]: r
            for r in conn.execute(select(_table(m.Answer)).where(m.Answer.trace_id.in_(ids))).mappings()
        }
        if not answers:
            return {}
        ids = list(answers)
        parts: dict[str, dict[str, list[Mapping[Any, Any]]]] = {
            tid: {
                k: []
                for k in (
                    "intents",
                    "citations",
                    "evidence",
                    "candidates",
                    "dropped",
                    "bundles",
                    "bundle_members",
                    "prompts",
                    "timings",
                    "stages",
                )
            }
            for tid in ids
        }
        snapshot = _table(m.ChunkSnapshot)
        simple: list[tuple[str, Table]] = [
            ("intents", _table(m.TraceIntent)),
            ("citations", _table(m.Citation)),
            ("dropped", _table(m.TraceDropped)),
            ("bundles", _table(m.TraceBundle)),
            ("prompts", _table(m.Prompt)),
            ("timings", _table(m.Timing)),
            ("stages", _table(m.Stage)),
        ]
        for key, table in simple:
            order = [table.c.trace_id] + ([table.c.position] if "position" in table.c else [])
            for row in conn.execute(
                select(table).where(table.c.trace_id.in_(ids)).order_by(*order)
            ).mappings():
                parts[row["trace_id"]][key].append(row)
        members = _table(m.BundleMember)
        stmt = (
            select(members)
            .where(members.c.trace_id.in_(ids))
            .order_by(members.c.trace_id, members.c.bundle_position, members.c.position)
        )
        for row in conn.execute(stmt).mappings():
            parts[row["trace_id"]]["bundle_members"].append(row)
        for key, model in (("evidence", m.TraceEvidence), ("candidates", m.TraceCandidate)):
            table = _table(model)
            chunk_cols = [snapshot.c[f.column] for f in CHUNK_FIELDS]
            stmt = (
                select(table, *chunk_cols)
                .join(snapshot, snapshot.c.chunk_id == table.c.chunk_id)
                .where(table.c.trace_id.in_(ids))
                .order_by(table.c.trace_id, table.c.position)
            )
            for row in conn.execute(stmt).mappings():
                parts[row["trace_id"]][key].append(row)
        return {tid: _decode_trace(answers[tid], parts[tid]) for tid in trace_ids if tid in answers}

    def _filters(
        self,
        *,
        user: str | None,
        since: TimeBound,
        until: TimeBound,
        abstained: bool | None,
        failed_citations: bool | None,
        doc_id: str | None,
        feedback: FeedbackFilter | None = None,
    ) -> list[Any]:
        a = m.Answer
        where: list[Any] = []
        if user is not None:
            where.append(a.user == user)
        if (start := _utc(since)) is not None:
            where.append(a.created_at >= start)
        if (end := _utc(until, end=True)) is not None:
            where.append(a.created_at < end)
        if abstained is not None:
            where.append(a.abstained.is_(abstained))
        if failed_citations is not None:
            where.append(a.has_failed_citation.is_(failed_citations))
        if doc_id is not None:
            docs = m.AnswerDocument
            where.append(
                select(docs.trace_id).where(docs.trace_id == a.trace_id, docs.doc_id == doc_id).exists()
            )
        if feedback is not None:
            fb = aliased(m.Feedback)  # the listing also joins Feedback: the subquery must not correlate to it
            given = select(fb.trace_id).where(fb.trace_id == a.trace_id).correlate(a)
            if feedback in ("up", "down"):
                where.append(given.where(fb.rating == feedback).exists())
            elif feedback == "any":
                where.append(given.exists())
            elif feedback == "none":
                where.append(~given.exists())
            else:
                raise ValueError(f"feedback must be 'up', 'down', 'any' or 'none', not {feedback!r}")
        return where

    def list_traces(
        self,
        user: str | None = None,
        since: TimeBound = None,
        until: TimeBound = None,
        abstained: bool | None = None,
        failed_citations: bool | None = None,
        doc_id: str | None = None,
        limit: int = 50,
        offset: int = 0,
        feedback: FeedbackFilter | None = None,
    ) -> list[dict[str, Any]]:
        """Summary rows, newest first. ``since`` is inclusive; ``until`` is exclusive, or a whole day for a date.

        ``failed_citations=True``: answers with a citation that is invalid or unsupported. ``doc_id``: answers
        whose evidence came (partly) from that document. Each row: trace_id, created_at (ISO), user, question,
        answer (first 200 characters), abstained, abstain_reason, has_failed_citation, error, model, total_ms,
        session_id, feedback (``"up"``, ``"down"`` or None) and feedback_reason. ``feedback``: ``"up"`` /
        ``"down"`` (rated so), ``"any"`` (rated), ``"none"`` (not rated).
        """
        where = self._filters(
            user=user,
            since=since,
            until=until,
            abstained=abstained,
            failed_citations=failed_citations,
            doc_id=doc_id,
            feedback=feedback,
        )
        a, fb = m.Answer, m.Feedback
        stmt = (
            select(
                a.trace_id,
                a.created_at,
                a.user,
                a.question,
                a.answer,
                a.abstained,
                a.abstain_reason,
                a.has_failed_citation,
                a.error,
                a.model,
                a.total_ms,
                a.session_id,
                fb.rating.label("feedback"),
                fb.reason.label("feedback_reason"),
            )
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(*where)
            .order_by(a.created_at.desc(), a.trace_id.desc())
            .limit(limit)
            .offset(offset)
        )
        rows = self._read("list traces", lambda conn: list(conn.execute(stmt).mappings()))
        return [
            {**row, "created_at": _iso(row["created_at"]), "answer": _preview(row["answer"])} for row in rows
        ]

    def count_traces(
        self,
        user: str | None = None,
        since: TimeBound = None,
        until: TimeBound = None,
        abstained: bool | None = None,
        failed_citations: bool | None = None,
        doc_id: str | None = None,
        feedback: FeedbackFilter | None = None,
    ) -> int:
        """How many traces ``list_traces`` would page through with these filters."""
        where = self._filters(
            user=user,
            since=since,
            until=until,
            abstained=abstained,
            failed_citations=failed_citations,
            doc_id=doc_id,
            feedback=feedback,
        )
        stmt = select(func.count()).select_from(m.Answer).where(*where)
        return int(self._read("count traces", lambda conn: conn.execute(stmt).scalar_one()))

    def export_traces(
        self,
        user: str | None = None,
        since: TimeBound = None,
        until: TimeBound = None,
        abstained: bool | None = None,
        failed_citations: bool | None = None,
        doc_id: str | None = None,
        batch_size: int = 100,
        feedback: FeedbackFilter | None = None,
        with_feedback: bool = False,
    ) -> Iterator[Trace]:
        """Full traces, oldest first, read in batches (short transactions, so writers are not held up).

        ``with_feedback``: a rated trace carries its feedback under the key ``"feedback"`` (what
        ``rag traces export`` writes and ``rag traces import`` restores); without it, traces are as written.
        """
        where = self._filters(
            user=user,
            since=since,
            until=until,
            abstained=abstained,
            failed_citations=failed_citations,
            doc_id=doc_id,
            feedback=feedback,
        )
        a = m.Answer
        last: tuple[datetime, str] | None = None
        while True:
            page = select(a.trace_id, a.created_at).where(*where)
            if last is not None:
                page = page.where(
                    or_(a.created_at > last[0], and_(a.created_at == last[0], a.trace_id > last[1]))
                )
            page = page.order_by(a.created_at, a.trace_id).limit(batch_size)

            def fetch(
                conn: Connection, page: Any = page
            ) -> tuple[list[Any], dict[str, Trace], dict[str, dict[str, Any]]]:
                keys = list(conn.execute(page))
                ids = [k.trace_id for k in keys]
                rated = self._feedback_rows(conn, ids) if with_feedback else {}
                return keys, self._load(conn, ids), rated

            keys, traces, rated = self._read("export traces", fetch)
            for key in keys:
                if key.trace_id in traces:
                    trace = traces[key.trace_id]
                    if key.trace_id in rated:
                        trace = {**trace, "feedback": rated[key.trace_id]}
                    yield trace
            if len(keys) < batch_size:
                return
            last = (keys[-1].created_at, keys[-1].trace_id)

    # -- feedback ----------------------------------------------------------------------------------------------

    def set_feedback(
        self,
        trace_id: str,
        user: str,
        rating: str,
        reason: str | None = None,
        comment: str | None = None,
    ) -> dict[str, Any]:
        """Rate one of ``user``'s own answers (``"up"`` or ``"down"``, with an optional reason and comment);
        a second call changes the rating. Raises FeedbackNotAllowed when the trace is another user's and
        TraceNotFound for an unknown id: the check is here, not only in the UI."""
        if rating not in m.FEEDBACK_RATINGS:
            raise InvalidFeedback(f"A rating is 'up' or 'down', not {rating!r}.")
        if reason is not None and reason not in m.FEEDBACK_REASONS:
            raise InvalidFeedback(
                f"Unknown feedback reason {reason!r}.", hint="One of: " + ", ".join(m.FEEDBACK_REASONS) + "."
            )
        comment = (comment or "").strip() or None
        if comment is not None and (len(comment) > FEEDBACK_COMMENT_CHARS or "\x00" in comment):
            raise InvalidFeedback(
                f"A feedback comment holds at most {FEEDBACK_COMMENT_CHARS} characters (and no NUL)."
            )
        fb = m.Feedback

        def write(conn: Connection) -> dict[str, Any]:
            self._require_own_trace(conn, trace_id, user)
            now = datetime.now(UTC)
            values = {"rating": rating, "reason": reason, "comment": comment, "updated_at": now}
            row = {"trace_id": trace_id, "user": user, "created_at": now, **values}
            dialect = conn.dialect.name
            if dialect in ("postgresql", "sqlite"):
                stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(_table(fb)).values(**row)
                conn.execute(stmt.on_conflict_do_update(index_elements=["trace_id"], set_=values))
            elif conn.execute(select(fb.trace_id).where(fb.trace_id == trace_id)).first() is None:
                conn.execute(insert(fb).values(**row))
            else:
                conn.execute(update(fb).where(fb.trace_id == trace_id).values(**values))
            return self._feedback_rows(conn, [trace_id])[trace_id]

        return self._write("save the feedback", write, retry_on=(IntegrityError,))

    def clear_feedback(self, trace_id: str, user: str) -> bool:
        """Withdraw ``user``'s feedback on their own answer; False when there was none."""
        fb = m.Feedback

        def write(conn: Connection) -> bool:
            self._require_own_trace(conn, trace_id, user)
            return bool(conn.execute(delete(fb).where(fb.trace_id == trace_id)).rowcount)

        return self._write("withdraw the feedback", write)

    def get_feedback(self, trace_id: str) -> dict[str, Any] | None:
        """The feedback on a trace (trace_id, user, rating, reason, comment, created_at, updated_at), or None."""
        rows = self._read("read the feedback", lambda conn: self._feedback_rows(conn, [trace_id]))
        return rows.get(trace_id)

    @staticmethod
    def _require_own_trace(conn: Connection, trace_id: str, user: str) -> None:
        owner = conn.execute(select(m.Answer.user).where(m.Answer.trace_id == trace_id)).first()
        if owner is None:
            raise TraceNotFound(f"No trace with id {trace_id!r}.")
        if owner.user != user:
            raise FeedbackNotAllowed(
                "Feedback can only be given on your own answers.",
                hint="Open the answer as the user who asked it.",
            )

    @staticmethod
    def _feedback_rows(conn: Connection, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        fb = _table(m.Feedback)
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(trace_ids), 500):
            batch = list(trace_ids[start : start + 500])
            for row in conn.execute(select(fb).where(fb.c.trace_id.in_(batch))).mappings():
                out[row["trace_id"]] = {
                    **row,
                    "created_at": _iso(row["created_at"]),
                    "updated_at": _iso(row["updated_at"]),
                }
        return out

    # -- analytics ---------------------------------------------------------------------------------------------

    def list_users(self) -> list[str]:
        """Every user who has a stored answer, sorted (the trace explorer's user filter for admins)."""
        a = m.Answer
        stmt = select(a.user).where(a.user.is_not(None)).distinct().order_by(a.user)
        return [r.user for r in self._read("list users", lambda conn: list(conn.execute(stmt)))]

    def daily_stats(self, since: TimeBound = None, until: TimeBound = None) -> list[dict[str, Any]]:
        """Per UTC day with answers, oldest first: day (ISO date), questions, abstained, failed_citations,
        errors, thumbs_up, thumbs_down (feedback on that day's answers)."""
        a, fb = m.Answer, m.Feedback
        where = self._filters(
            user=None, since=since, until=until, abstained=None, failed_citations=None, doc_id=None
        )
        stmt = (
            select(a.created_at, a.abstained, a.has_failed_citation, a.error, fb.rating)
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(*where)
        )
        # The day is cut in Python: the columns hold UTC on both backends, but SQL date functions differ.
        days: dict[str, dict[str, Any]] = {}
        for row in self._read("count answers per day", lambda conn: list(conn.execute(stmt))):
            day = _as_datetime(row.created_at).date().isoformat()  # type: ignore[union-attr]
            d = days.setdefault(
                day,
                {
                    "day": day,
                    "questions": 0,
                    "abstained": 0,
                    "failed_citations": 0,
                    "errors": 0,
                    "thumbs_up": 0,
                    "thumbs_down": 0,
                },
            )
            d["questions"] += 1
            d["abstained"] += bool(row.abstained)
            d["failed_citations"] += bool(row.has_failed_citation)
            d["errors"] += bool(row.error)
            d["thumbs_up"] += row.rating == "up"
            d["thumbs_down"] += row.rating == "down"
        return [days[k] for k in sorted(days)]

    def feedback_reasons(self, since: TimeBound = None, until: TimeBound = None) -> dict[str, int]:
        """Down-votes per reason (``"none"`` for a down-vote without one) on answers in the window."""
        a, fb = m.Answer, m.Feedback
        where = self._filters(
            user=None, since=since, until=until, abstained=None, failed_citations=None, doc_id=None
        )
        stmt = (
            select(fb.reason, func.count().label("n"))
            .join(a, a.trace_id == fb.trace_id)
            .where(fb.rating == "down", *where)
            .group_by(fb.reason)
        )
        rows = self._read("count feedback reasons", lambda conn: list(conn.execute(stmt)))
        return {str(r.reason or "none"): int(r.n) for r in rows}

    def gap_questions(
        self, since: TimeBound = None, until: TimeBound = None, limit: int = 2000
    ) -> list[GapQuestion]:
        """Questions the bot did not answer well, newest first: abstained, or rated down by their user."""
        a, fb = m.Answer, m.Feedback
        where = self._filters(
            user=None, since=since, until=until, abstained=None, failed_citations=None, doc_id=None
        )
        stmt = (
            select(
                a.trace_id,
                a.created_at,
                a.user,
                a.groups,
                a.as_of,
                a.tags,
                a.question,
                a.abstained,
                fb.rating.label("feedback"),
                fb.reason.label("feedback_reason"),
                fb.comment.label("feedback_comment"),
            )
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(or_(a.abstained.is_(True), fb.rating == "down"), a.question.is_not(None), *where)
            .order_by(a.created_at.desc(), a.trace_id.desc())
            .limit(limit)
        )
        rows = self._read("list unanswered questions", lambda conn: list(conn.execute(stmt).mappings()))
        return [
            GapQuestion(
                trace_id=r["trace_id"],
                created_at=_iso(r["created_at"]),
                user=r["user"],
                groups=[str(g) for g in r["groups"] or []],
                as_of=r["as_of"],
                tags=[str(t) for t in r["tags"] or []],
                question=r["question"],
                abstained=bool(r["abstained"]),
                feedback=r["feedback"],
                feedback_reason=r["feedback_reason"],
                feedback_comment=r["feedback_comment"],
            )
            for r in rows
        ]

    def cited_documents(self, since: TimeBound = None, until: TimeBound = None) -> dict[str, CitedDocument]:
        """doc_id -> how many answers in the window cite a passage of the document, with its title and file."""
        a, ev, snap = m.Answer, m.TraceEvidence, m.ChunkSnapshot
        where = self._filters(
            user=None, since=since, until=until, abstained=None, failed_citations=None, doc_id=None
        )
        stmt = (
            select(
                snap.doc_id,
                func.max(snap.title).label("title"),
                func.max(snap.source).label("source"),
                func.count(func.distinct(ev.trace_id)).label("answers"),
            )
            .join(ev, ev.chunk_id == snap.chunk_id)
            .join(a, a.trace_id == ev.trace_id)
            .where(ev.cited.is_(True), snap.doc_id.is_not(None), *where)
            .group_by(snap.doc_id)
        )
        rows = self._read("count cited documents", lambda conn: list(conn.execute(stmt)))
        return {
            str(r.doc_id): CitedDocument(title=r.title, source=r.source, answers=int(r.answers)) for r in rows
        }

    # -- chat --------------------------------------------------------------------------------------------------

    def create_session(self, user: str, title: str | None = None) -> str:
        session_id = uuid.uuid4().hex
        row = {"id": session_id, "user": user, "title": title, "created_at": datetime.now(UTC)}
        self._write("create the chat session", lambda conn: conn.execute(insert(m.ChatSession), [row]))
        return session_id

    def add_turn(
        self, session_id: str, role: Literal["user", "assistant"], content: str, trace_id: str | None = None
    ) -> int:
        """Append a turn; returns its id. ``trace_id`` links an assistant turn to the answer's trace."""
        if role not in ("user", "assistant"):
            raise ValueError(f"role must be 'user' or 'assistant', not {role!r}")

        def write(conn: Connection) -> int:
            self._require_session(conn, session_id)
            row = {
                "session_id": session_id,
                "role": role,
                "content": content,
                "trace_id": trace_id,
                "created_at": datetime.now(UTC),
            }
            return int(conn.execute(insert(m.ChatTurn).values(**row).returning(m.ChatTurn.id)).scalar_one())

        return self._write("add the chat turn", write)

    @staticmethod
    def _require_session(conn: Connection, session_id: str) -> None:
        if conn.execute(select(m.ChatSession.id).where(m.ChatSession.id == session_id)).first() is None:
            raise SessionNotFound(f"No chat session with id {session_id!r}.")

    def list_sessions(self, user: str, limit: int = 100) -> list[dict[str, Any]]:
        """The user's sessions, newest first: id, user, title, created_at, turns, last_turn_at."""
        s, t = m.ChatSession, m.ChatTurn
        stmt = (
            select(
                s.id,
                s.user,
                s.title,
                s.created_at,
                func.count(t.id).label("turns"),
                func.max(t.created_at).label("last_turn_at"),
            )
            .outerjoin(t, t.session_id == s.id)
            .where(s.user == user)
            .group_by(s.id, s.user, s.title, s.created_at)
            .order_by(s.created_at.desc(), s.id.desc())
            .limit(limit)
        )
        rows = self._read("list chat sessions", lambda conn: list(conn.execute(stmt).mappings()))
        # max() over a TypeDecorator column comes back as the raw backend value on SQLite: normalise it.
        return [
            {**r, "created_at": _iso(r["created_at"]), "last_turn_at": _iso(_as_datetime(r["last_turn_at"]))}
            for r in rows
        ]

    def get_turns(self, session_id: str) -> list[dict[str, Any]]:
        """A session's turns in order: id, session_id, role, content, trace_id, created_at."""
        t = m.ChatTurn

        def read(conn: Connection) -> list[Any]:
            self._require_session(conn, session_id)
            stmt = (
                select(t.id, t.session_id, t.role, t.content, t.trace_id, t.created_at)
                .where(t.session_id == session_id)
                .order_by(t.id)
            )
            return list(conn.execute(stmt).mappings())

        return [{**r, "created_at": _iso(r["created_at"])} for r in self._read("read the chat session", read)]

    # -- conversation memory -----------------------------------------------------------------------------------

    def remember_fact(self, user: str, key: str, value: str) -> dict[str, Any]:
        """Make ``value`` the user's fact for ``key``. A different active value is superseded, kept as history."""
        f = m.MemoryFact

        def write(conn: Connection) -> dict[str, Any]:
            now = datetime.now(UTC)
            current = conn.execute(
                select(f.id, f.value)
                .where(f.user == user, f.key == key, f.active.is_(True))
                .with_for_update()
            ).first()
            if current is not None and current.value == value:
                return self._fact(conn, current.id)
            if current is not None:
                conn.execute(update(f).where(f.id == current.id).values(active=False, updated_at=now))
            row = {
                "user": user,
                "key": key,
                "value": value,
                "created_at": now,
                "updated_at": now,
                "active": True,
            }
            new_id = conn.execute(insert(f).values(**row).returning(f.id)).scalar_one()
            if current is not None:
                conn.execute(update(f).where(f.id == current.id).values(superseded_by=new_id))
            return self._fact(conn, new_id)

        # Two writers correcting the same fact at once: the loser hits the one-active-fact index and reruns.
        return self._write("remember the fact", write, retry_on=(IntegrityError,))

    @staticmethod
    def _fact(conn: Connection, fact_id: int) -> dict[str, Any]:
        f = m.MemoryFact
        row = conn.execute(select(_table(f)).where(f.id == fact_id)).mappings().one()
        return _fact_dict(row)

    def facts(self, user: str) -> list[dict[str, Any]]:
        """The user's active facts, oldest first: id, key, value, created_at, updated_at."""
        f = m.MemoryFact
        stmt = select(_table(f)).where(f.user == user, f.active.is_(True)).order_by(f.created_at, f.id)
        return [
            _fact_dict(r, history=False)
            for r in self._read("read memory facts", lambda conn: list(conn.execute(stmt).mappings()))
        ]

    def fact_history(self, user: str, key: str) -> list[dict[str, Any]]:
        """Every value the fact has had, oldest first, with ``active`` and ``superseded_by``."""
        f = m.MemoryFact
        stmt = select(_table(f)).where(f.user == user, f.key == key).order_by(f.id)
        return [
            _fact_dict(r)
            for r in self._read("read memory facts", lambda conn: list(conn.execute(stmt).mappings()))
        ]

    def forget_fact(self, user: str, key: str) -> bool:
        """Deactivate the user's fact for ``key`` (kept as history). False when there was none."""
        f = m.MemoryFact
        stmt = (
            update(f)
            .where(f.user == user, f.key == key, f.active.is_(True))
            .values(active=False, updated_at=datetime.now(UTC))
        )
        return bool(self._write("forget the fact", lambda conn: conn.execute(stmt).rowcount))


def _as_datetime(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def _fact_dict(row: Mapping[Any, Any], *, history: bool = True) -> dict[str, Any]:
    out = {
        "id": row["id"],
        "key": row["key"],
        "value": row["value"],
        "created_at": _iso(row["created_at"]),
        "updated_at": _iso(row["updated_at"]),
    }
    if history:
        out.update(active=row["active"], superseded_by=row["superseded_by"])
    return out
