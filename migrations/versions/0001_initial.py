"""Initial trace store: answers and their normalised parts, chunk snapshots, chat sessions, memory facts.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types as of this revision (migrations must not import the live models).
TIMESTAMP = sa.DateTime(timezone=True)
TRACE_ID = sa.String(length=64)
CHUNK_ID = sa.String(length=64)


def _trace_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["trace_id"], ["answers.trace_id"], name=f"fk_{table}_trace_id_answers", ondelete="CASCADE"
    )


def _score_columns() -> list[sa.Column]:
    return [
        sa.Column("bm25_rank", sa.Integer(), nullable=True),
        sa.Column("bm25_score", sa.Double(), nullable=True),
        sa.Column("dense_rank", sa.Integer(), nullable=True),
        sa.Column("dense_score", sa.Double(), nullable=True),
        sa.Column("fused_score", sa.Double(), nullable=True),
        sa.Column("fused_rank", sa.Integer(), nullable=True),
        sa.Column("rerank_score", sa.Double(), nullable=True),
        sa.Column("rerank_rank", sa.Integer(), nullable=True),
        sa.Column("hop", sa.Integer(), nullable=True),
        sa.Column("added_by", sa.String(), nullable=True),
    ]


def upgrade() -> None:
    op.create_table(
        "answers",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("user", sa.String(), nullable=True),
        sa.Column("groups", sa.JSON(), nullable=True),
        sa.Column("as_of", sa.String(length=32), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=True),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("question", sa.Text(), nullable=True),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("abstained", sa.Boolean(), nullable=True),
        sa.Column("abstain_reason", sa.Text(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("reranker", sa.String(), nullable=True),
        sa.Column("packing", sa.String(), nullable=True),
        sa.Column("generation_mode", sa.String(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("evidence_tokens", sa.Integer(), nullable=True),
        sa.Column("history_tokens", sa.Integer(), nullable=True),
        sa.Column("total_ms", sa.Double(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("has_failed_citation", sa.Boolean(), nullable=False),
        sa.Column("hops", sa.JSON(), nullable=True),
        sa.Column("budgets", sa.JSON(), nullable=True),
        sa.Column("extra", sa.JSON(), nullable=True),
        sa.Column("residual", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("trace_id", name="pk_answers"),
    )
    op.create_index("ix_answers_created_at", "answers", ["created_at"])
    op.create_index("ix_answers_user_created_at", "answers", ["user", "created_at"])
    op.create_index("ix_answers_abstained_created_at", "answers", ["abstained", "created_at"])
    op.create_index(
        "ix_answers_has_failed_citation_created_at", "answers", ["has_failed_citation", "created_at"]
    )
    op.create_index("ix_answers_session_id", "answers", ["session_id"])

    op.create_table(
        "chunk_snapshots",
        sa.Column("chunk_id", CHUNK_ID, nullable=False),
        sa.Column("doc_id", sa.String(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("section", sa.Text(), nullable=True),
        sa.Column("page", sa.Integer(), nullable=True),
        sa.Column("page_end", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("doc_version", sa.String(), nullable=True),
        sa.Column("first_seen_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("chunk_id", name="pk_chunk_snapshots"),
    )
    op.create_index("ix_chunk_snapshots_doc_id", "chunk_snapshots", ["doc_id"])

    op.create_table(
        "answer_documents",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("doc_id", sa.String(), nullable=False),
        _trace_fk("answer_documents"),
        sa.PrimaryKeyConstraint("trace_id", "doc_id", name="pk_answer_documents"),
    )
    op.create_index("ix_answer_documents_doc_id", "answer_documents", ["doc_id"])

    op.create_table(
        "stages",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=True),
        sa.Column("ms", sa.Double(), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=True),
        _trace_fk("stages"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_stages"),
    )
    op.create_table(
        "timings",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("stage", sa.String(), nullable=False),
        sa.Column("ms", sa.Double(), nullable=True),
        _trace_fk("timings"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_timings"),
    )
    op.create_table(
        "intents",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("intent_index", sa.Integer(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        _trace_fk("intents"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_intents"),
    )
    op.create_table(
        "candidates",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("chunk_id", CHUNK_ID, nullable=False),
        sa.Column("intents", sa.JSON(), nullable=True),
        *_score_columns(),
        sa.ForeignKeyConstraint(
            ["chunk_id"], ["chunk_snapshots.chunk_id"], name="fk_candidates_chunk_id_chunk_snapshots"
        ),
        _trace_fk("candidates"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_candidates"),
    )
    op.create_index("ix_candidates_chunk_id", "candidates", ["chunk_id"])
    op.create_table(
        "evidence",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=True),
        sa.Column("chunk_id", CHUNK_ID, nullable=False),
        sa.Column("bundle", sa.Integer(), nullable=True),
        sa.Column("cited", sa.Boolean(), nullable=True),
        *_score_columns(),
        sa.ForeignKeyConstraint(
            ["chunk_id"], ["chunk_snapshots.chunk_id"], name="fk_evidence_chunk_id_chunk_snapshots"
        ),
        _trace_fk("evidence"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_evidence"),
    )
    op.create_index("ix_evidence_chunk_id", "evidence", ["chunk_id"])
    op.create_table(
        "dropped",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("chunk_id", CHUNK_ID, nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("stage", sa.String(), nullable=True),
        _trace_fk("dropped"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_dropped"),
    )
    op.create_table(
        "bundles",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("bundle_id", sa.Integer(), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        _trace_fk("bundles"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_bundles"),
    )
    op.create_table(
        "bundle_members",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("bundle_position", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("chunk_id", CHUNK_ID, nullable=True),
        sa.ForeignKeyConstraint(
            ["trace_id", "bundle_position"],
            ["bundles.trace_id", "bundles.position"],
            name="fk_bundle_members_bundles",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("trace_id", "bundle_position", "position", name="pk_bundle_members"),
    )
    op.create_table(
        "prompts",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("system", sa.Text(), nullable=True),
        sa.Column("user", sa.Text(), nullable=True),
        sa.Column("tokens", sa.Integer(), nullable=True),
        _trace_fk("prompts"),
        sa.PrimaryKeyConstraint("trace_id", name="pk_prompts"),
    )
    op.create_table(
        "citations",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=True),
        sa.Column("chunk_id", CHUNK_ID, nullable=True),
        sa.Column("valid", sa.Boolean(), nullable=True),
        sa.Column("supported", sa.Boolean(), nullable=True),
        sa.Column("sentence", sa.Text(), nullable=True),
        sa.Column("support_score", sa.Double(), nullable=True),
        _trace_fk("citations"),
        sa.PrimaryKeyConstraint("trace_id", "position", name="pk_citations"),
    )

    op.create_table(
        "chat_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_chat_sessions"),
    )
    op.create_index("ix_chat_sessions_user_created_at", "chat_sessions", ["user", "created_at"])
    op.create_table(
        "chat_turns",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("trace_id", TRACE_ID, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("role IN ('user', 'assistant')", name="ck_chat_turns_role"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["chat_sessions.id"],
            name="fk_chat_turns_session_id_chat_sessions",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_chat_turns"),
    )
    op.create_index("ix_chat_turns_session_id_id", "chat_turns", ["session_id", "id"])
    op.create_index("ix_chat_turns_trace_id", "chat_turns", ["trace_id"])

    op.create_table(
        "memory_facts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("superseded_by", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["superseded_by"],
            ["memory_facts.id"],
            name="fk_memory_facts_superseded_by_memory_facts",
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_memory_facts"),
    )
    op.create_index("ix_memory_facts_user_key", "memory_facts", ["user", "key"])
    op.create_index(
        "uq_memory_facts_active_user_key",
        "memory_facts",
        ["user", "key"],
        unique=True,
        sqlite_where=sa.text("active"),
        postgresql_where=sa.text("active"),
    )


def downgrade() -> None:
    # Children first; dropping a table drops its indexes on both backends.
    for table in (
        "memory_facts",
        "chat_turns",
        "chat_sessions",
        "citations",
        "prompts",
        "bundle_members",
        "bundles",
        "dropped",
        "evidence",
        "candidates",
        "intents",
        "timings",
        "stages",
        "answer_documents",
        "chunk_snapshots",
        "answers",
    ):
        op.drop_table(table)
