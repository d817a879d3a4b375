"""Text search over runs: what the user asked and the final answer, bounded in cost.

Both texts are kept in the clear beside the run's compressed details (``run_details.user_message`` and
``final_output``, redacted and cut at 2,048 characters by :func:`review_queue.details.details_row`), so a
search reads two short columns per run and never decompresses a document. It looks at the newest
:data:`SEARCH_WINDOW` runs only (by index time, a range of ``ix_runs_created``): on a store of millions of
runs a rare word costs at most that many rows, whichever plan the database picks. Case-insensitive
(``ILIKE`` on PostgreSQL, ``LIKE`` on SQLite, ASCII letters), the text a bound parameter, ``%``/``_``
matched literally. The runs explorer (:mod:`review_queue.explorer`, the UI) and ``GET /api/v1/runs``
(:mod:`review_queue.queries`) share it.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from review_queue.tables import run_details, runs

__all__ = ["MAX_QUERY_CHARS", "SEARCH_WINDOW", "like_pattern", "text_match"]

SEARCH_WINDOW: Final = 200_000
"""Newest runs a text search looks at."""

MAX_QUERY_CHARS: Final = 256
"""Longest text searched for (longer is cut)."""


def like_pattern(text: str) -> str:
    """A ``LIKE`` pattern (escape ``\\``) matching ``text`` anywhere, its wildcards literal."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def text_match(dialect: str, text: str) -> sa.ColumnElement[bool]:
    """Runs among the newest :data:`SEARCH_WINDOW` whose user message or final answer contains ``text``.

    A clause over ``runs`` joined (outer or inner) with ``run_details`` on the trace id.
    """
    pattern = like_pattern(text[:MAX_QUERY_CHARS])

    def contains(column: sa.ColumnElement[str | None]) -> sa.ColumnElement[bool]:
        if dialect == "postgresql":
            return column.ilike(pattern, escape="\\")
        return column.like(pattern, escape="\\")

    oldest = (
        sa.select(runs.c.created_at)
        .order_by(runs.c.created_at.desc())
        .offset(SEARCH_WINDOW - 1)
        .limit(1)
        .scalar_subquery()
    )
    return sa.and_(
        runs.c.created_at >= sa.func.coalesce(oldest, -1.0),
        sa.or_(contains(run_details.c.user_message), contains(run_details.c.final_output)),
    )
