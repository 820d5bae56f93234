"""Traces: every answer's trace, saved in one transaction and read back equal to what was written.

``save`` takes the dict the query path produces (the ``rag ask --json`` shape) and stores it normalised
(rag/tracestore/codec.py says how); ``get`` gives it back equal to what was written (after a JSON round trip:
tuples come back as lists, ints stored in float columns as floats) and raises :class:`TraceNotFound` for an
unknown id. ``read`` is ``get`` checked against the trace schema: the typed :class:`rag.traces.schema.Trace`, or
:class:`rag.traces.schema.TraceSchemaError`. ``list``, ``count`` and ``export`` take one :class:`TraceFilter`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, and_, func, insert, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from rag.errors import StorageError
from rag.traces import schema as ts
from rag.tracestore import models as m
from rag.tracestore.codec import CHUNK_FIELDS, Trace, decode_trace, encode_trace
from rag.tracestore.db import Database, iso
from rag.tracestore.errors import TraceNotFound
from rag.tracestore.feedback import feedback_rows
from rag.tracestore.filters import TraceFilter

ANSWER_PREVIEW_CHARS = 200
_BATCH = 500  # ids per IN (...) list

# Child tables read per trace, by the key decode_trace expects; evidence and candidates join the snapshots.
_CHILDREN: tuple[tuple[str, type[m.Base]], ...] = (
    ("intents", m.TraceIntent),
    ("citations", m.Citation),
    ("dropped", m.TraceDropped),
    ("bundles", m.TraceBundle),
    ("prompts", m.Prompt),
    ("timings", m.Timing),
    ("stages", m.Stage),
)
_CHUNK_CHILDREN: tuple[tuple[str, type[m.Base]], ...] = (
    ("evidence", m.TraceEvidence),
    ("candidates", m.TraceCandidate),
)


class Traces:
    """The traces in one database."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def save(self, trace: Mapping[str, Any]) -> str:
        """Store one trace (one transaction) and return its id. Raises StorageError if it already exists."""
        encoded = encode_trace(trace)

        def write(conn: Connection) -> str:
            stored = _ensure_snapshots(conn, encoded.snapshots)
            answer = {**encoded.answer, "residual": encoded.residual_against(stored)}
            try:
                conn.execute(insert(m.Answer), [answer])
            except IntegrityError as exc:
                raise StorageError(f"A trace with id {encoded.trace_id} is already stored.") from exc
            for table, rows in encoded.children:
                if rows:
                    conn.execute(insert(table), rows)
            return encoded.trace_id

        return self.db.write("save the trace", write)

    def get(self, trace_id: str) -> Trace:
        """The trace as written, whatever its shape (export, import and copies use it; readers that show a
        trace use :meth:`read`). Raises TraceNotFound for an unknown id."""
        traces = self.db.read("read the trace", lambda conn: load(conn, [trace_id]))
        if trace_id not in traces:
            raise TraceNotFound(
                f"No trace with id {trace_id!r}.", hint="`rag traces list` shows the stored ones."
            )
        return traces[trace_id]

    def read(self, trace_id: str) -> ts.Trace:
        """The trace checked against the trace schema (rag/traces/schema.py): what `rag traces show` and the
        UI's trace explorer read. Keys added to the schema after the trace was stored get their defaults; a
        trace that does not match (an unknown key, a value of the wrong type) raises
        :class:`rag.traces.schema.TraceSchemaError` saying where. Raises TraceNotFound for an unknown id."""
        return ts.parse_trace(self.get(trace_id))

    def list(
        self, where: TraceFilter | None = None, *, limit: int = 50, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Summary rows, newest first: trace_id, created_at (ISO), user, question, answer (first 200
        characters), abstained, abstain_reason, has_failed_citation, error, model, total_ms, session_id,
        feedback (``"up"``, ``"down"`` or None) and feedback_reason."""
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
            .where(*(where or TraceFilter()).where())
            .order_by(a.created_at.desc(), a.trace_id.desc())
            .limit(limit)
            .offset(offset)
        )
        rows = self.db.read("list traces", lambda conn: list(conn.execute(stmt).mappings()))
        return [
            {**row, "created_at": iso(row["created_at"]), "answer": _preview(row["answer"])} for row in rows
        ]

    def count(self, where: TraceFilter | None = None) -> int:
        """How many traces ``list`` would page through with this filter."""
        stmt = select(func.count()).select_from(m.Answer).where(*(where or TraceFilter()).where())
        return int(self.db.read("count traces", lambda conn: conn.execute(stmt).scalar_one()))

    def export(
        self, where: TraceFilter | None = None, *, batch_size: int = 100, with_feedback: bool = False
    ) -> Iterator[Trace]:
        """Full traces, oldest first, read in batches (short transactions, so writers are not held up).

        ``with_feedback``: a rated trace carries its feedback under the key ``"feedback"`` (what
        ``rag traces export`` writes and ``rag traces import`` restores); without it, traces are as written.
        """
        clauses = (where or TraceFilter()).where()
        a = m.Answer
        last: tuple[datetime, str] | None = None
        while True:
            page = select(a.trace_id, a.created_at).where(*clauses)
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
                rated = feedback_rows(conn, ids) if with_feedback else {}
                return keys, load(conn, ids), rated

            keys, traces, rated = self.db.read("export traces", fetch)
            for key in keys:
                if key.trace_id in traces:
                    trace = traces[key.trace_id]
                    if key.trace_id in rated:
                        trace = {**trace, "feedback": rated[key.trace_id]}
                    yield trace
            if len(keys) < batch_size:
                return
            last = (keys[-1].created_at, keys[-1].trace_id)


def load(conn: Connection, trace_ids: Sequence[str]) -> dict[str, Trace]:
    """Full traces for ``trace_ids``: one query per table, not one per trace."""
    answers = {
        r["trace_id"]: r
        for r in conn.execute(
            select(m.table(m.Answer)).where(m.Answer.trace_id.in_(list(trace_ids)))
        ).mappings()
    }
    if not answers:
        return {}
    ids = list(answers)
    keys = [key for key, _ in _CHILDREN + _CHUNK_CHILDREN] + ["bundle_members"]
    parts: dict[str, dict[str, list[Mapping[Any, Any]]]] = {tid: {k: [] for k in keys} for tid in ids}
    for key, model in _CHILDREN:
        table = m.table(model)
        order = [table.c.trace_id] + ([table.c.position] if "position" in table.c else [])
        for row in conn.execute(select(table).where(table.c.trace_id.in_(ids)).order_by(*order)).mappings():
            parts[row["trace_id"]][key].append(row)
    members = m.table(m.BundleMember)
    stmt = (
        select(members)
        .where(members.c.trace_id.in_(ids))
        .order_by(members.c.trace_id, members.c.bundle_position, members.c.position)
    )
    for row in conn.execute(stmt).mappings():
        parts[row["trace_id"]]["bundle_members"].append(row)
    snapshot = m.table(m.ChunkSnapshot)
    chunk_cols = [snapshot.c[f.column] for f in CHUNK_FIELDS]
    for key, model in _CHUNK_CHILDREN:
        table = m.table(model)
        stmt = (
            select(table, *chunk_cols)
            .join(snapshot, snapshot.c.chunk_id == table.c.chunk_id)
            .where(table.c.trace_id.in_(ids))
            .order_by(table.c.trace_id, table.c.position)
        )
        for row in conn.execute(stmt).mappings():
            parts[row["trace_id"]][key].append(row)
    return {tid: decode_trace(answers[tid], parts[tid]) for tid in trace_ids if tid in answers}


def _ensure_snapshots(conn: Connection, rows: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Insert-if-absent each chunk snapshot; return the stored snapshot of every id."""
    if not rows:
        return {}
    now = datetime.now(UTC)
    # Sorted, so two PostgreSQL writers sharing chunks take the row locks in the same order (no deadlock).
    values = [{**rows[k], "first_seen_at": now} for k in sorted(rows)]
    table = m.table(m.ChunkSnapshot)
    dialect = conn.dialect.name
    if dialect in ("postgresql", "sqlite"):
        stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(table)
        conn.execute(stmt.on_conflict_do_nothing(index_elements=["chunk_id"]), values)
        return _snapshots(conn, table, list(rows))
    stored = _snapshots(conn, table, list(rows))
    missing = [v for v in values if v["chunk_id"] not in stored]
    if missing:
        conn.execute(insert(table), missing)
        stored.update({v["chunk_id"]: v for v in missing})
    return stored


def _snapshots(conn: Connection, table: Table, chunk_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(chunk_ids), _BATCH):
        batch = chunk_ids[start : start + _BATCH]
        for row in conn.execute(select(table).where(table.c.chunk_id.in_(batch))).mappings():
            out[row["chunk_id"]] = dict(row)
    return out


def _preview(text_value: str | None, limit: int = ANSWER_PREVIEW_CHARS) -> str | None:
    if text_value is None or len(text_value) <= limit:
        return text_value
    return text_value[: limit - 1].rstrip() + "…"
