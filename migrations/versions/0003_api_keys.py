"""API keys and answer channels: the ``api_keys`` table (``rag keys``, docs/api.md) and ``answers.channel``
(where a question was asked: ui, cli or api), which analytics count by.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types as of this revision (migrations must not import the live models).
TIMESTAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(), nullable=False),
        sa.Column("groups", sa.JSON(), nullable=False),
        sa.Column("service", sa.Boolean(), nullable=False),
        sa.Column("secret_hash", sa.String(length=64), nullable=False),
        sa.Column("rate_limit", sa.Integer(), nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("expires_at", TIMESTAMP, nullable=False),
        sa.Column("revoked_at", TIMESTAMP, nullable=True),
        sa.Column("last_used_at", TIMESTAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_user", "api_keys", ["user"])
    # Existing answers keep NULL: they were asked in the UI or with `rag ask`, which did not record which.
    op.add_column("answers", sa.Column("channel", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("answers") as batch:
        batch.drop_column("channel")
    op.drop_table("api_keys")  # drops its index on both backends
