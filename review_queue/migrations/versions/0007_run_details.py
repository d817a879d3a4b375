"""``run_details``: the per-run details document (spans with attributes and events, the conversation).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25

One row per run, written off the scoring path by :class:`review_queue.details.DetailsWriter`:
``body`` is compact JSON (``codec`` says how it is encoded), kept ``VIGIL_DETAILS_RETENTION_DAYS``
for unflagged runs and as long as the run for flagged ones. ``final_output``: the run's final
answer (redacted, first 2,048 characters) for the runs explorer's text search. On PostgreSQL the column's storage
compressed with lz4 (as review snapshots, migration 0004): the database compresses, not Vigil's
process (zlib there cost ~100 µs a run). A server without lz4 keeps pglz.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


_LZ4 = """
DO $$
BEGIN
    EXECUTE 'ALTER TABLE run_details ALTER COLUMN body SET COMPRESSION lz4';
EXCEPTION WHEN others THEN
    RAISE NOTICE 'run_details.body keeps its compression: %', SQLERRM;
END
$$
"""


def upgrade() -> None:
    """Create ``run_details``."""
    op.create_table(
        "run_details",
        sa.Column("trace_id", sa.String(32), nullable=False),
        sa.Column("span_count", sa.Integer(), nullable=False),
        sa.Column("codec", sa.String(16), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("final_output", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("trace_id", name="pk_run_details"),
    )
    op.create_index("ix_run_details_created", "run_details", ["created_at"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_LZ4)


def downgrade() -> None:
    """Drop ``run_details``."""
    op.drop_index("ix_run_details_created", table_name="run_details")
    op.drop_table("run_details")
