"""Sessions: ``session_id``/``user_id`` on runs and the ``sessions`` aggregate table.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28

``runs.cost_usd``: the run's estimated LLM cost (price table), summed into the session's ``cost_usd``.
``runs.session_turn``: the features of a turn the session signals are computed from (no text).

A session (a conversation) is the runs sharing a ``session_id`` read from the trace; each run is
one turn. ``sessions`` holds one row per session id, recomputed from its runs in the transaction
that writes them (:mod:`review_queue.sessions`), so it is exact under replays and re-scores.
Runs without a session id are sessions of one and have no row here. The reviewer login sessions
are another table (``ui_sessions``, migration ``0009``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    """Add the id columns and their indexes to ``runs``; create ``sessions``."""
    op.add_column("runs", sa.Column("session_id", sa.String(256), nullable=True))
    op.add_column("runs", sa.Column("user_id", sa.String(256), nullable=True))
    op.add_column("runs", sa.Column("cost_usd", sa.Double(), nullable=True))
    op.add_column("runs", sa.Column("session_turn", _JSON, nullable=True))
    op.create_index("ix_runs_session", "runs", ["session_id", "start_ns"])
    op.create_index("ix_runs_user", "runs", ["user_id"])
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(256), nullable=False),
        sa.Column("agent", sa.String(256), nullable=False),
        sa.Column("user_id", sa.String(256), nullable=True),
        sa.Column("first_ns", sa.BigInteger(), nullable=False),
        sa.Column("last_ns", sa.BigInteger(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("duration_s", sa.Double(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("turns_flagged", sa.Integer(), nullable=False),
        sa.Column("limit_hits", sa.Integer(), nullable=False),
        sa.Column("blocks", sa.Integer(), nullable=False),
        sa.Column("errors", sa.Integer(), nullable=False),
        sa.Column("thumbs_down", sa.Integer(), nullable=False),
        sa.Column("signals", _JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("closed_at", sa.Double(), nullable=True),
        sa.Column("updated_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_last", "sessions", ["last_ns"])
    op.create_index("ix_sessions_agent", "sessions", ["agent"])
    op.create_index("ix_sessions_user", "sessions", ["user_id"])
    op.create_index("ix_sessions_status", "sessions", ["status"])


def downgrade() -> None:
    """Drop ``sessions`` and the run columns."""
    op.drop_table("sessions")
    op.drop_index("ix_runs_user", table_name="runs")
    op.drop_index("ix_runs_session", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("user_id")
        batch.drop_column("session_id")
        batch.drop_column("cost_usd")
        batch.drop_column("session_turn")
