"""Feedback: a thumbs up or down on an answer, with an optional reason, one per trace.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types as of this revision (migrations must not import the live models).
TIMESTAMP = sa.DateTime(timezone=True)
TRACE_ID = sa.String(length=64)


def upgrade() -> None:
    op.create_table(
        "feedback",
        sa.Column("trace_id", TRACE_ID, nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("rating", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.String(length=32), nullable=True),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("rating IN ('up', 'down')", name="ck_feedback_rating"),
        sa.CheckConstraint(
            "reason IS NULL OR reason IN ('wrong', 'incomplete', 'outdated', 'did_not_answer', 'other')",
            name="ck_feedback_reason",
        ),
        sa.ForeignKeyConstraint(
            ["trace_id"], ["answers.trace_id"], name="fk_feedback_trace_id_answers", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("trace_id", name="pk_feedback"),
    )
    op.create_index("ix_feedback_rating_updated_at", "feedback", ["rating", "updated_at"])


def downgrade() -> None:
    op.drop_table("feedback")  # drops its index on both backends
