"""Session judge verdicts: ``session_judge_results``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

One row per closed session and session judge (:mod:`scorers.judge.session`): the columns of
``judge_results`` (migration ``0003``) keyed by ``session_id`` instead of a trace id. Not rows of
``judge_results``: those are keyed by and cascade with a run, pair with human verdicts on that run
(agreement gauges) and revoke its task completion, none of which holds for a whole conversation,
whose last turn changes when it reopens. Deleted with the session.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    """Create ``session_judge_results`` and its judge index."""
    op.create_table(
        "session_judge_results",
        sa.Column("session_id", sa.String(256), nullable=False),
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
        sa.PrimaryKeyConstraint("session_id", "judge", name="pk_session_judge_results"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.session_id"],
            name="fk_session_judge_results_session_id",
            ondelete="CASCADE",
        ),
    )
    op.create_index("ix_session_judge_results_judge", "session_judge_results", ["judge", "rubric_version"])


def downgrade() -> None:
    """Drop ``session_judge_results``."""
    op.drop_index("ix_session_judge_results_judge", table_name="session_judge_results")
    op.drop_table("session_judge_results")
