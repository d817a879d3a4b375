"""Initial schema: the run index (``runs``) and the review queue (``review_items``).

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

# Frozen copies of the types of this revision: later changes to tables.py must not alter it.
_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    """Create ``runs`` and ``review_items`` with their indexes."""
    _create_runs()
    _create_review_items()


def downgrade() -> None:
    """Drop both tables."""
    op.drop_table("review_items")
    op.drop_table("runs")


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("agent", sa.String(256), nullable=False),
        sa.Column("service", sa.String(256), nullable=False),
        sa.Column("dialect", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("end_ns", sa.BigInteger(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("tool_errors", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("hit_max_iterations", sa.Boolean(), nullable=False),
        sa.Column("safety_blocked", sa.Boolean(), nullable=False),
        sa.Column("errored", sa.Boolean(), nullable=False),
        sa.Column("error_type", sa.String(256), nullable=True),
        sa.Column("scores", _JSON, nullable=False),
        sa.Column("scorer_errors", _JSON, nullable=False),
        sa.Column("flagged", sa.Boolean(), nullable=False),
        sa.Column("flag_priority", sa.String(16), nullable=True),
        sa.Column("flag_reasons", _JSON, nullable=True),
        sa.Column("sample_rate", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", name="pk_runs"),
    )
    op.create_index("ix_runs_created", "runs", ["created_at", "trace_id"])
    op.create_index("ix_runs_agent_flagged", "runs", ["agent", "flagged", "created_at"])
    op.create_index("ix_runs_flagged_created", "runs", ["flagged", "created_at"])
    if op.get_context().dialect.name == "postgresql":
        # Serves the reason filter (flag_reasons @> '["rule"]'); PostgreSQL only, not in tables.py.
        op.create_index("ix_runs_flag_reasons", "runs", ["flag_reasons"], postgresql_using="gin")


def _create_review_items() -> None:
    op.create_table(
        "review_items",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("priority_rank", sa.Integer(), nullable=False),
        sa.Column("reasons", _JSON, nullable=False),
        sa.Column("sample_rate", sa.Double(), nullable=False),
        sa.Column("snapshot", _JSON, nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_review_items"),
        sa.UniqueConstraint("trace_id", name="uq_review_items_trace_id"),
        sa.ForeignKeyConstraint(["trace_id"], ["runs.trace_id"], name="fk_review_items_trace_id", ondelete="CASCADE"),
    )
    op.create_index(
        "ix_review_items_queue",
        "review_items",
        ["state", sa.text("priority_rank DESC"), "created_at", "id"],
    )
