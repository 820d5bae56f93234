"""Which traces a listing, a count, an export or an analytics window covers: one :class:`TraceFilter`.

store.traces.list(TraceFilter(user="alice", since="2025-03-01", abstained=True), limit=20)
store.traces.count(TraceFilter(doc_id="travel-policy"))
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal, get_args

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import aliased

from rag.tracestore import models as m

TimeBound = datetime | date | str | None
FeedbackFilter = Literal["up", "down", "none", "any"]


@dataclass(frozen=True)
class TraceFilter:
    """Conditions on stored answers; None (the default) leaves a condition out, so ``TraceFilter()`` is all.

    ``since`` is inclusive; ``until`` is exclusive, or includes the whole day for a date. Either may be an ISO
    string. ``failed_citations=True``: answers with a citation that is invalid or unsupported. ``doc_id``:
    answers whose evidence came (partly) from that document. ``feedback``: ``"up"`` / ``"down"`` (rated so),
    ``"any"`` (rated), ``"none"`` (not rated).
    """

    user: str | None = None
    since: TimeBound = None
    until: TimeBound = None
    abstained: bool | None = None
    failed_citations: bool | None = None
    doc_id: str | None = None
    feedback: FeedbackFilter | None = None

    def __post_init__(self) -> None:
        # Fail when the filter is made, not when the query runs.
        utc(self.since)
        utc(self.until, end=True)
        if self.feedback is not None and self.feedback not in get_args(FeedbackFilter):
            raise ValueError(f"feedback must be 'up', 'down', 'any' or 'none', not {self.feedback!r}")

    def where(self) -> list[ColumnElement[bool]]:
        """WHERE clauses over ``answers`` (the feedback condition is a subquery, so a query may join it)."""
        a = m.Answer
        where: list[ColumnElement[bool]] = []
        if self.user is not None:
            where.append(a.user == self.user)
        if (start := utc(self.since)) is not None:
            where.append(a.created_at >= start)
        if (end := utc(self.until, end=True)) is not None:
            where.append(a.created_at < end)
        if self.abstained is not None:
            where.append(a.abstained.is_(self.abstained))
        if self.failed_citations is not None:
            where.append(a.has_failed_citation.is_(self.failed_citations))
        if self.doc_id is not None:
            docs = m.AnswerDocument
            where.append(
                select(docs.trace_id).where(docs.trace_id == a.trace_id, docs.doc_id == self.doc_id).exists()
            )
        if self.feedback is not None:
            fb = aliased(m.Feedback)  # the listing also joins Feedback: the subquery must not correlate to it
            given = select(fb.trace_id).where(fb.trace_id == a.trace_id).correlate(a)
            if self.feedback in ("up", "down"):
                where.append(given.where(fb.rating == self.feedback).exists())
            elif self.feedback == "any":
                where.append(given.exists())
            else:
                where.append(~given.exists())
        return where


def utc(value: TimeBound, *, end: bool = False) -> datetime | None:
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


__all__ = ["FeedbackFilter", "TimeBound", "TraceFilter", "utc"]
