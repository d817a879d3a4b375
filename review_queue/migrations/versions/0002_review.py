"""The reviewer's workbench: leases and assignment on items, verdicts, audit events, feedback, tokens.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the types of this revision: later changes to tables.py must not alter it.
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _item_columns() -> tuple[sa.Column[object], ...]:
    return (
        sa.Column("reviews_required", sa.Integer(), nullable=False, server_default="1"),
        sa.Column("reviews_done", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("assigned_to", sa.String(128), nullable=True),
        sa.Column("claimed_by", sa.String(128), nullable=True),
        sa.Column("claimed_at", sa.Double(), nullable=True),
        sa.Column("lease_expires_at", sa.Double(), nullable=True),
        sa.Column("completed_at", sa.Double(), nullable=True),
    )


def upgrade() -> None:
    """Add the item columns and create ``review_verdicts``, ``review_events``, ``feedback``, ``api_tokens``."""
    with op.batch_alter_table("review_items") as batch:
        for column in _item_columns():
            batch.add_column(column)
    op.create_index("ix_review_items_lease", "review_items", ["state", "lease_expires_at"])
    _create_verdicts()
    _create_events()
    _create_feedback()
    _create_tokens()


def downgrade() -> None:
    """Drop the new tables and columns."""
    for table in ("api_tokens", "feedback", "review_events", "review_verdicts"):
        op.drop_table(table)
    op.drop_index("ix_review_items_lease", "review_items")
    with op.batch_alter_table("review_items") as batch:
        for column in _item_columns():
            batch.drop_column(column.name)


def _item_fk(name: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["item_id"], ["review_items.id"], name=name, ondelete="CASCADE")


def _create_verdicts() -> None:
    op.create_table(
        "review_verdicts",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("item_id", _ID, nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("agent", sa.String(256), nullable=False),
        sa.Column("reviewer", sa.String(128), nullable=False),
        sa.Column("verdict", sa.String(8), nullable=False),
        sa.Column("categories", _JSON, nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("corrected_answer", sa.Text(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_review_verdicts"),
        sa.UniqueConstraint("item_id", "reviewer", name="uq_review_verdicts_item_id"),
        _item_fk("fk_review_verdicts_item_id"),
    )
    op.create_index("ix_review_verdicts_created", "review_verdicts", ["created_at"])


def _create_events() -> None:
    op.create_table(
        "review_events",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("item_id", _ID, nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("detail", _JSON, nullable=False),
        sa.Column("at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_review_events"),
        _item_fk("fk_review_events_item_id"),
    )
    op.create_index("ix_review_events_item", "review_events", ["item_id", "at"])


def _create_feedback() -> None:
    op.create_table(
        "feedback",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("feedback_id", sa.String(128), nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("score", sa.Double(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("joined_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_feedback"),
        sa.UniqueConstraint("feedback_id", name="uq_feedback_feedback_id"),
    )
    op.create_index("ix_feedback_trace", "feedback", ["trace_id"])
    op.create_index("ix_feedback_joined", "feedback", ["joined_at"])


def _create_tokens() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("last_used_at", sa.Double(), nullable=True),
        sa.Column("revoked_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_tokens"),
        sa.UniqueConstraint("token_hash", name="uq_api_tokens_token_hash"),
    )
