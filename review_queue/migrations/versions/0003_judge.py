"""LLM judge verdicts stored with the run: ``judge_results``.

Revision ID: 0003
Revises: 0001
Create Date: 2026-11-22

Self-contained: creates and drops only its own table. (On main it is chained after the
review workbench's revision; only ``down_revision`` changes.)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create ``judge_results`` (one row per run and judge) and its agreement index."""
    op.create_table(
        "judge_results",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("judge", sa.String(64), nullable=False),
        sa.Column("rubric_version", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "judge", name="pk_judge_results"),
        sa.ForeignKeyConstraint(["trace_id"], ["runs.trace_id"], name="fk_judge_results_trace_id", ondelete="CASCADE"),
    )
    op.create_index("ix_judge_results_judge", "judge_results", ["judge", "rubric_version"])


def downgrade() -> None:
    """Drop ``judge_results``."""
    op.drop_index("ix_judge_results_judge", table_name="judge_results")
    op.drop_table("judge_results")
