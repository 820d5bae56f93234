"""Feedback: a user's thumbs up or down (with an optional reason and comment) on one of their own answers.

The check that the answer is the caller's own is here, not only in the UI: :class:`FeedbackNotAllowed`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, insert, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from rag.tracestore import models as m
from rag.tracestore.db import Database, iso
from rag.tracestore.errors import FeedbackNotAllowed, InvalidFeedback, TraceNotFound

FEEDBACK_COMMENT_CHARS = 2000


class Feedback:
    """The feedback on the answers in one database: at most one rating per trace, by the user who asked."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def set(
        self,
        trace_id: str,
        user: str,
        rating: str,
        reason: str | None = None,
        comment: str | None = None,
    ) -> dict[str, Any]:
        """Rate one of ``user``'s own answers (``"up"`` or ``"down"``, with an optional reason and comment);
        a second call changes the rating. Raises FeedbackNotAllowed when the trace is another user's and
        TraceNotFound for an unknown id."""
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
            _require_own_trace(conn, trace_id, user)
            now = datetime.now(UTC)
            values = {"rating": rating, "reason": reason, "comment": comment, "updated_at": now}
            row = {"trace_id": trace_id, "user": user, "created_at": now, **values}
            dialect = conn.dialect.name
            if dialect in ("postgresql", "sqlite"):
                stmt = (pg_insert if dialect == "postgresql" else sqlite_insert)(m.table(fb)).values(**row)
                conn.execute(stmt.on_conflict_do_update(index_elements=["trace_id"], set_=values))
            elif conn.execute(select(fb.trace_id).where(fb.trace_id == trace_id)).first() is None:
                conn.execute(insert(fb).values(**row))
            else:
                conn.execute(update(fb).where(fb.trace_id == trace_id).values(**values))
            return feedback_rows(conn, [trace_id])[trace_id]

        return self.db.write("save the feedback", write, retry_on=(IntegrityError,))

    def clear(self, trace_id: str, user: str) -> bool:
        """Withdraw ``user``'s feedback on their own answer; False when there was none."""
        fb = m.Feedback

        def write(conn: Connection) -> bool:
            _require_own_trace(conn, trace_id, user)
            return bool(conn.execute(delete(fb).where(fb.trace_id == trace_id)).rowcount)

        return self.db.write("withdraw the feedback", write)

    def get(self, trace_id: str) -> dict[str, Any] | None:
        """The feedback on a trace (trace_id, user, rating, reason, comment, created_at, updated_at), or None."""
        rows = self.db.read("read the feedback", lambda conn: feedback_rows(conn, [trace_id]))
        return rows.get(trace_id)


def feedback_rows(conn: Connection, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """trace_id -> its feedback row, for the rated ones among ``trace_ids`` (an export reads them too)."""
    fb = m.table(m.Feedback)
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(trace_ids), 500):
        batch = list(trace_ids[start : start + 500])
        for row in conn.execute(select(fb).where(fb.c.trace_id.in_(batch))).mappings():
            out[row["trace_id"]] = {
                **row,
                "created_at": iso(row["created_at"]),
                "updated_at": iso(row["updated_at"]),
            }
    return out


def _require_own_trace(conn: Connection, trace_id: str, user: str) -> None:
    owner = conn.execute(select(m.Answer.user).where(m.Answer.trace_id == trace_id)).first()
    if owner is None:
        raise TraceNotFound(f"No trace with id {trace_id!r}.")
    if owner.user != user:
        raise FeedbackNotAllowed(
            "Feedback can only be given on your own answers.",
            hint="Open the answer as the user who asked it.",
        )
