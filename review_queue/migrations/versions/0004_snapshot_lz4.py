"""PostgreSQL: compress review snapshots with lz4 instead of pglz.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

A flagged run's snapshot (~8 KB of JSONB) is compressed by TOAST; with the default pglz
that was about a quarter of PostgreSQL's CPU per stored run in ``vigil bench --kafka``
(145 → 112 µs of server CPU per run with lz4, 6,000 runs, 30 % flagged; BENCHMARKS.md).
Only values written afterwards use lz4; existing ones stay readable. A server without
lz4 support (built without it, or older than PostgreSQL 14) keeps pglz: the statement is
run dynamically and its failure ignored. SQLite: nothing to do.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_SET = """
DO $$
BEGIN
    EXECUTE 'ALTER TABLE review_items ALTER COLUMN snapshot SET COMPRESSION {method}';
EXCEPTION WHEN others THEN
    RAISE NOTICE 'review_items.snapshot keeps its compression: %', SQLERRM;
END
$$
"""


def upgrade() -> None:
    """Use lz4 for new snapshots on PostgreSQL."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_SET.format(method="lz4"))


def downgrade() -> None:
    """Back to the server default (pglz) for new snapshots."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_SET.format(method="default"))
