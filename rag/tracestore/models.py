"""The trace store's tables, as SQLAlchemy 2.x declarative models.

A trace (the dict ``rag ask --json`` prints) is stored normalised: one ``answers`` row plus ordered child rows
(stages, candidates, evidence, ...). Chunk text and metadata live once per chunk id in ``chunk_snapshots``, so a
trace stays readable after its documents are re-ingested or deleted. ``migrations/versions`` must create exactly
this metadata: ``alembic check`` (run by the tests) fails on any drift.

Child tables carry a ``position`` column: lists come back in the order they were written.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    DateTime,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Stable constraint names, so batch migrations on SQLite can find and alter them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite has no timezone type: values are stored as naive UTC (which sorts correctly as text) and come back
    with ``tzinfo=UTC``. Naive datetimes passed in are taken to be UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Python None is SQL NULL, not the JSON literal 'null'.
Json = JSON(none_as_null=True)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: Json, list[Any]: Json, float: Double()}


def table(model: type[Base]) -> Table:
    """The Core table of a model (the query builders and the trace codec work on tables)."""
    return Base.metadata.tables[model.__tablename__]


def _trace_fk() -> Any:
    return ForeignKey("answers.trace_id", ondelete="CASCADE")


class Answer(Base):
    """One answered (or abstained, or failed) question: the root of a trace."""

    __tablename__ = "answers"

    trace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime]
    user: Mapped[str | None] = mapped_column(String)
    groups: Mapped[list[Any] | None]
    as_of: Mapped[str | None] = mapped_column(String(32))
    tags: Mapped[list[Any] | None]
    session_id: Mapped[str | None] = mapped_column(String(64))  # soft reference to chat_sessions.id
    question: Mapped[str | None] = mapped_column(Text)
    answer: Mapped[str | None] = mapped_column(Text)
    abstained: Mapped[bool | None]
    abstain_reason: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(String)
    reranker: Mapped[str | None] = mapped_column(String)
    packing: Mapped[str | None] = mapped_column(String)
    generation_mode: Mapped[str | None] = mapped_column(String)
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    evidence_tokens: Mapped[int | None]
    history_tokens: Mapped[int | None]
    total_ms: Mapped[float | None]
    error: Mapped[str | None] = mapped_column(Text)
    channel: Mapped[str | None] = mapped_column(String(16))  # ui, cli, api (analytics count by it)
    has_failed_citation: Mapped[bool]
    hops: Mapped[list[Any] | None]
    budgets: Mapped[dict[str, Any] | None]
    # Top-level keys this schema has no column for (and known keys whose value did not fit their column).
    extra: Mapped[dict[str, Any] | None]
    # What the columns cannot say about the written dict: keys it lacked, per-item extras, chunk fields that
    # differ from the snapshot. NULL for a trace of the standard shape. See repository._Residual.
    residual: Mapped[dict[str, Any] | None]

    __table_args__ = (
        Index("ix_answers_created_at", "created_at"),
        Index("ix_answers_user_created_at", "user", "created_at"),
        Index("ix_answers_abstained_created_at", "abstained", "created_at"),
        Index("ix_answers_has_failed_citation_created_at", "has_failed_citation", "created_at"),
        Index("ix_answers_session_id", "session_id"),
    )


class ChunkSnapshot(Base):
    """A chunk as it was when first cited. Chunk ids derive from content, so rows are insert-if-absent."""

    __tablename__ = "chunk_snapshots"

    chunk_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    doc_id: Mapped[str | None] = mapped_column(String, index=True)
    source: Mapped[str | None] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    section: Mapped[str | None] = mapped_column(Text)
    page: Mapped[int | None]
    page_end: Mapped[int | None]
    text: Mapped[str | None] = mapped_column(Text)
    doc_version: Mapped[str | None] = mapped_column(String)
    first_seen_at: Mapped[datetime]


class AnswerDocument(Base):
    """Which documents an answer's evidence came from: the UI's "answers citing this policy" query."""

    __tablename__ = "answer_documents"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    doc_id: Mapped[str] = mapped_column(String, primary_key=True, index=True)


class Stage(Base):
    __tablename__ = "stages"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str | None] = mapped_column(String)
    ms: Mapped[float | None]
    detail: Mapped[dict[str, Any] | None]


class Timing(Base):
    """``timings_ms``: one row per stage, ``total`` included."""

    __tablename__ = "timings"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    stage: Mapped[str] = mapped_column(String)
    ms: Mapped[float | None]


class TraceIntent(Base):
    __tablename__ = "intents"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    intent_index: Mapped[int | None]
    text: Mapped[str | None] = mapped_column(Text)


class _Scores:
    """Scores a chunk collected on its way through the query path (shared by candidates and evidence)."""

    bm25_rank: Mapped[int | None]
    bm25_score: Mapped[float | None]
    dense_rank: Mapped[int | None]
    dense_score: Mapped[float | None]
    fused_score: Mapped[float | None]
    fused_rank: Mapped[int | None]
    rerank_score: Mapped[float | None]
    rerank_rank: Mapped[int | None]
    hop: Mapped[int | None]
    added_by: Mapped[str | None] = mapped_column(String)


class TraceCandidate(_Scores, Base):
    __tablename__ = "candidates"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    chunk_id: Mapped[str] = mapped_column(ForeignKey("chunk_snapshots.chunk_id"), index=True)
    intents: Mapped[list[Any] | None]


class TraceEvidence(_Scores, Base):
    """The final order: the passages the prompt showed, numbered as the answer cites them."""

    __tablename__ = "evidence"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int | None]
    chunk_id: Mapped[str] = mapped_column(ForeignKey("chunk_snapshots.chunk_id"), index=True)
    bundle: Mapped[int | None]
    cited: Mapped[bool | None]


class TraceDropped(Base):
    __tablename__ = "dropped"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    chunk_id: Mapped[str | None] = mapped_column(String(64))
    reason: Mapped[str | None] = mapped_column(Text)
    stage: Mapped[str | None] = mapped_column(String)


class TraceBundle(Base):
    __tablename__ = "bundles"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    bundle_id: Mapped[int | None]
    reason: Mapped[str | None] = mapped_column(String)
    score: Mapped[float | None]


class BundleMember(Base):
    __tablename__ = "bundle_members"

    trace_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    bundle_position: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    chunk_id: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        ForeignKeyConstraint(
            ["trace_id", "bundle_position"],
            ["bundles.trace_id", "bundles.position"],
            ondelete="CASCADE",
            name="fk_bundle_members_bundles",
        ),
    )


class Prompt(Base):
    __tablename__ = "prompts"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    system: Mapped[str | None] = mapped_column(Text)
    user: Mapped[str | None] = mapped_column(Text)
    tokens: Mapped[int | None]


class Citation(Base):
    """A numbered citation in the answer and its verdicts: ``valid`` (points at shown evidence) and
    ``supported`` (the cited passage supports the sentence)."""

    __tablename__ = "citations"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    n: Mapped[int | None]
    chunk_id: Mapped[str | None] = mapped_column(String(64))
    valid: Mapped[bool | None]
    supported: Mapped[bool | None]
    sentence: Mapped[str | None] = mapped_column(Text)
    support_score: Mapped[float | None]


class ChatSession(Base):
    __tablename__ = "chat_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    user: Mapped[str] = mapped_column(String)
    title: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]

    __table_args__ = (Index("ix_chat_sessions_user_created_at", "user", "created_at"),)


class ChatTurn(Base):
    __tablename__ = "chat_turns"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("chat_sessions.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[str] = mapped_column(Text)
    trace_id: Mapped[str | None] = mapped_column(String(64), index=True)  # soft reference to answers
    created_at: Mapped[datetime]

    __table_args__ = (
        CheckConstraint("role IN ('user', 'assistant')", name="role"),
        Index("ix_chat_turns_session_id_id", "session_id", "id"),
    )


class MemoryFact(Base):
    """Conversation memory. A correction deactivates the old fact and points it at its replacement."""

    __tablename__ = "memory_facts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String)
    key: Mapped[str] = mapped_column(String)
    value: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    active: Mapped[bool]
    superseded_by: Mapped[int | None] = mapped_column(ForeignKey("memory_facts.id", ondelete="SET NULL"))

    __table_args__ = (
        Index("ix_memory_facts_user_key", "user", "key"),
        # At most one active fact per (user, key), even with two writers at once.
        Index(
            "uq_memory_facts_active_user_key",
            "user",
            "key",
            unique=True,
            sqlite_where=text("active"),
            postgresql_where=text("active"),
        ),
    )


FEEDBACK_RATINGS = ("up", "down")
FEEDBACK_REASONS = ("wrong", "incomplete", "outdated", "did_not_answer", "other")


class Feedback(Base):
    """A user's thumbs up or down on one of their own answers, with an optional reason. One per trace: the
    trace's user may change it (``updated_at``) or withdraw it (the row is deleted)."""

    __tablename__ = "feedback"

    trace_id: Mapped[str] = mapped_column(_trace_fk(), primary_key=True)
    user: Mapped[str] = mapped_column(String)
    rating: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str | None] = mapped_column(String(32))
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    __table_args__ = (
        CheckConstraint("rating IN ('up', 'down')", name="rating"),
        CheckConstraint(
            "reason IS NULL OR reason IN ('wrong', 'incomplete', 'outdated', 'did_not_answer', 'other')",
            name="reason",
        ),
        Index("ix_feedback_rating_updated_at", "rating", "updated_at"),
    )


class ApiKey(Base):
    """An API key (docs/api.md): bound to a user and their groups, with an expiry. Only a hash of the secret is
    kept; a key is never deleted (traces name it), only expired or revoked. A ``service`` key is trusted to ask
    on behalf of a named user, with groups among its own."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    user: Mapped[str] = mapped_column(String)
    groups: Mapped[list[Any]]
    service: Mapped[bool]
    secret_hash: Mapped[str] = mapped_column(String(64))  # sha256 hex of the key's secret
    rate_limit: Mapped[int | None]  # requests per minute; NULL: RAG_API_RATE_LIMIT
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_api_keys_user", "user"),)
