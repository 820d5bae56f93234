"""Encoding a trace dict into table rows, and decoding the rows back into the dict.

Which keys go to which columns is derived from the trace schema (rag/traces/schema.py) and the table models
(rag/tracestore/models.py), never restated here. Nothing is lost:

* unknown top-level keys, and known keys whose value does not fit their column or table, go to
  ``answers.extra`` verbatim;
* ``answers.residual`` records what the columns cannot say about the rest: known keys a dict lacked, unknown
  keys inside list items and sub-dicts, and chunk fields that differ from the stored snapshot (a chunk id
  derives from document id + text, so its text never changes, but e.g. ``doc_version`` does when another part
  of the document is edited). It is NULL for a trace of the standard shape.

``trace_id`` (a uuid4 hex) and ``created_at`` (now, UTC) are filled in when the dict lacks them.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, TypeGuard

from pydantic import BaseModel
from sqlalchemy import JSON, Boolean, Column, Float, Integer, String, Table

from rag.traces import schema as ts
from rag.tracestore import models as m
from rag.tracestore.errors import InvalidTrace

Trace = dict[str, Any]
_INT32 = 2**31

# --------------------------------------------------------------------------------------------------------------
# Field maps: dict key -> column, and what the column can hold. The keys come from the trace schema
# (rag/traces/schema.py), the kinds from the columns (rag/tracestore/models.py): neither is restated here.


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
    table = m.table(model)
    out = []
    skipped = set(skip)
    for key in ts.keys(record):
        column = (columns or {}).get(key, key)
        if key in skipped:
            continue
        if column in table.c:
            out.append(_Field(key, column, _kind(table.c[column])))
    return tuple(out)


def fits(kind: Kind, value: Any) -> bool:
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
        elif fits(f.kind, record[f.key]):
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
class EncodedTrace:
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
        if not fits("id", self.trace_id):
            raise InvalidTrace(f"Unusable trace_id {raw_id!r}: expected a string of 1-64 characters.")
        self.answer: dict[str, Any] = {"trace_id": self.trace_id}

    def encode(self) -> EncodedTrace:
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
        return EncodedTrace(
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
            self.children.append((m.table(m.Prompt), [{"trace_id": self.trace_id, **row}]))
        else:
            self._verbatim("prompt")

    def _timings(self) -> None:
        timings = self.trace.get("timings_ms")
        self.answer["total_ms"] = None
        if isinstance(timings, dict) and all(fits("float", v) for v in timings.values()):
            rows = [
                {"trace_id": self.trace_id, "position": i, "stage": stage, "ms": ms}
                for i, (stage, ms) in enumerate(timings.items())
            ]
            self.children.append((m.table(m.Timing), rows))
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
        self.children.append((m.table(model), rows))

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
            if isinstance(members, list) and all(fits("id", c) for c in members):
                member_rows += [
                    {"trace_id": self.trace_id, "bundle_position": i, "position": j, "chunk_id": c}
                    for j, c in enumerate(members)
                ]
            elif "chunk_ids" in bundle:
                self.residual.note(path, extra={"chunk_ids": members})
            else:
                self.residual.note(path, absent=["chunk_ids"])
        self.children += [(m.table(m.TraceBundle), bundle_rows), (m.table(m.BundleMember), member_rows)]

    def _chunk_list(self, key: str, model: type[m.Base], fields: tuple[_Field, ...]) -> None:
        """Evidence or candidates: scores per row, chunk text and metadata in the shared snapshot."""
        items = self.trace.get(key)
        if not _is_record_list(items) or not all(
            item.get("chunk_id") and fits("id", item["chunk_id"]) for item in items
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
                f.column: item.get(f.key) if fits(f.kind, item.get(f.key)) else None for f in CHUNK_FIELDS
            }
            self.snapshots.setdefault(item["chunk_id"], {"chunk_id": item["chunk_id"], **snapshot})
        self.children.append((m.table(model), rows))

    def _answer_documents(self) -> None:
        evidence = self.trace.get("evidence")
        doc_ids = dict.fromkeys(
            item["doc_id"]
            for item in (evidence if _is_record_list(evidence) else [])
            if isinstance(item.get("doc_id"), str) and item["doc_id"] and fits("str", item["doc_id"])
        )
        rows = [{"trace_id": self.trace_id, "doc_id": doc_id} for doc_id in doc_ids]
        self.children.append((m.table(m.AnswerDocument), rows))


def encode_trace(trace: Mapping[str, Any]) -> EncodedTrace:
    """The rows of one trace (a JSON-able dict; raises InvalidTrace otherwise)."""
    return _Encoder(jsonable(trace)).encode()


def decode_trace(answer: Mapping[Any, Any], parts: Mapping[str, list[Mapping[Any, Any]]]) -> Trace:
    """The trace dict from its ``answers`` row and its child rows by list key (``Traces.load`` reads them)."""
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


def jsonable(trace: Mapping[str, Any]) -> Trace:
    """``trace`` after a JSON round trip: what ``get`` gives back. Raises InvalidTrace when it cannot be."""
    if not isinstance(trace, Mapping):
        raise InvalidTrace(f"A trace must be a dict, not {type(trace).__name__}.")
    try:
        return json.loads(json.dumps(trace))
    except (TypeError, ValueError) as exc:
        raise InvalidTrace(f"The trace is not JSON-serialisable: {exc}") from exc
