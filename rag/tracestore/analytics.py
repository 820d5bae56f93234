"""Analytics over a window of stored answers: answers per day and per channel (the chat page, ``rag ask``, the
API), down-vote reasons, the questions the bot did not answer well, which documents answers cite, and who has
asked (the admin pages read these)."""

from __future__ import annotations

from typing import Any, TypedDict

from sqlalchemy import func, or_, select

from rag.tracestore import models as m
from rag.tracestore.db import Database, as_datetime, iso
from rag.tracestore.filters import TimeBound, TraceFilter


class GapQuestion(TypedDict):
    """A question the bot abstained on or its asker rated down (``Analytics.gap_questions``), with who asked,
    as of when and with which tags: what asking it again needs."""

    trace_id: str
    created_at: str | None
    user: str | None
    groups: list[str]
    as_of: str | None
    tags: list[str]
    question: str
    abstained: bool
    channel: str  # ui, cli, api, or "unrecorded" (stored before channels were)
    feedback: str | None
    feedback_reason: str | None
    feedback_comment: str | None


UNRECORDED = "unrecorded"  # the channel of an answer stored before channels were recorded


class ChannelStats(TypedDict):
    """Answers in a window asked through one channel (``Analytics.channel_stats``)."""

    channel: str
    questions: int
    abstained: int
    thumbs_up: int
    thumbs_down: int


class CitedDocument(TypedDict):
    """How many answers in a window cite a document (``Analytics.cited_documents``), with its title and file as
    the cited passages recorded them."""

    title: str | None
    source: str | None
    answers: int


class Analytics:
    """Aggregates over the answers in one database. ``since`` is inclusive; ``until`` is exclusive, or
    includes the whole day for a date (as in :class:`TraceFilter`)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def users(self) -> list[str]:
        """Every user who has a stored answer, sorted (the trace explorer's user filter for admins)."""
        a = m.Answer
        stmt = select(a.user).where(a.user.is_not(None)).distinct().order_by(a.user)
        return [r.user for r in self.db.read("list users", lambda conn: list(conn.execute(stmt)))]

    def daily_stats(self, since: TimeBound = None, until: TimeBound = None) -> list[dict[str, Any]]:
        """Per UTC day with answers, oldest first: day (ISO date), questions, abstained, failed_citations,
        errors, thumbs_up, thumbs_down (feedback on that day's answers)."""
        a, fb = m.Answer, m.Feedback
        stmt = (
            select(a.created_at, a.abstained, a.has_failed_citation, a.error, fb.rating)
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(*TraceFilter(since=since, until=until).where())
        )
        # The day is cut in Python: the columns hold UTC on both backends, but SQL date functions differ.
        days: dict[str, dict[str, Any]] = {}
        for row in self.db.read("count answers per day", lambda conn: list(conn.execute(stmt))):
            day = as_datetime(row.created_at).date().isoformat()  # type: ignore[union-attr]
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

    def channel_stats(self, since: TimeBound = None, until: TimeBound = None) -> list[ChannelStats]:
        """Per channel (ui, cli, api; ``unrecorded`` for answers stored before channels were), most questions
        first: questions, abstained, thumbs_up, thumbs_down."""
        a, fb = m.Answer, m.Feedback
        stmt = (
            select(
                a.channel,
                func.count().label("questions"),
                func.count().filter(a.abstained.is_(True)).label("abstained"),
                func.count(fb.trace_id).filter(fb.rating == "up").label("up"),
                func.count(fb.trace_id).filter(fb.rating == "down").label("down"),
            )
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(*TraceFilter(since=since, until=until).where())
            .group_by(a.channel)
        )
        rows = self.db.read("count answers per channel", lambda conn: list(conn.execute(stmt)))
        out = [
            ChannelStats(
                channel=r.channel or UNRECORDED,
                questions=int(r.questions),
                abstained=int(r.abstained),
                thumbs_up=int(r.up),
                thumbs_down=int(r.down),
            )
            for r in rows
        ]
        return sorted(out, key=lambda c: (-c["questions"], c["channel"]))

    def feedback_reasons(self, since: TimeBound = None, until: TimeBound = None) -> dict[str, int]:
        """Down-votes per reason (``"none"`` for a down-vote without one) on answers in the window."""
        a, fb = m.Answer, m.Feedback
        stmt = (
            select(fb.reason, func.count().label("n"))
            .join(a, a.trace_id == fb.trace_id)
            .where(fb.rating == "down", *TraceFilter(since=since, until=until).where())
            .group_by(fb.reason)
        )
        rows = self.db.read("count feedback reasons", lambda conn: list(conn.execute(stmt)))
        return {str(r.reason or "none"): int(r.n) for r in rows}

    def gap_questions(
        self, since: TimeBound = None, until: TimeBound = None, limit: int = 2000
    ) -> list[GapQuestion]:
        """Questions the bot did not answer well, newest first: abstained, or rated down by their user."""
        a, fb = m.Answer, m.Feedback
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
                a.channel,
                fb.rating.label("feedback"),
                fb.reason.label("feedback_reason"),
                fb.comment.label("feedback_comment"),
            )
            .outerjoin(fb, fb.trace_id == a.trace_id)
            .where(
                or_(a.abstained.is_(True), fb.rating == "down"),
                a.question.is_not(None),
                *TraceFilter(since=since, until=until).where(),
            )
            .order_by(a.created_at.desc(), a.trace_id.desc())
            .limit(limit)
        )
        rows = self.db.read("list unanswered questions", lambda conn: list(conn.execute(stmt).mappings()))
        return [
            GapQuestion(
                trace_id=r["trace_id"],
                created_at=iso(r["created_at"]),
                user=r["user"],
                groups=[str(g) for g in r["groups"] or []],
                as_of=r["as_of"],
                tags=[str(t) for t in r["tags"] or []],
                question=r["question"],
                abstained=bool(r["abstained"]),
                channel=r["channel"] or UNRECORDED,
                feedback=r["feedback"],
                feedback_reason=r["feedback_reason"],
                feedback_comment=r["feedback_comment"],
            )
            for r in rows
        ]

    def cited_documents(self, since: TimeBound = None, until: TimeBound = None) -> dict[str, CitedDocument]:
        """doc_id -> how many answers in the window cite a passage of the document, with its title and file."""
        a, ev, snap = m.Answer, m.TraceEvidence, m.ChunkSnapshot
        stmt = (
            select(
                snap.doc_id,
                func.max(snap.title).label("title"),
                func.max(snap.source).label("source"),
                func.count(func.distinct(ev.trace_id)).label("answers"),
            )
            .join(ev, ev.chunk_id == snap.chunk_id)
            .join(a, a.trace_id == ev.trace_id)
            .where(
                ev.cited.is_(True), snap.doc_id.is_not(None), *TraceFilter(since=since, until=until).where()
            )
            .group_by(snap.doc_id)
        )
        rows = self.db.read("count cited documents", lambda conn: list(conn.execute(stmt)))
        return {
            str(r.doc_id): CitedDocument(title=r.title, source=r.source, answers=int(r.answers)) for r in rows
        }
