"""Scratch PostgreSQL schemas for benches and tests: an isolated schema per run, dropped after.

:func:`postgres_scratch_url` yields a URL confined to a fresh schema; :func:`postgres_unreachable`
says in one line why a URL cannot be used (for skip messages and bench errors).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["postgres_scratch_url", "postgres_unreachable"]


@contextmanager
def postgres_scratch_url(base_url: str) -> Iterator[str]:
    """Create a fresh schema in a PostgreSQL database and yield a URL that uses only it.

    The schema is dropped (with everything in it) on exit. Needs ``psycopg``.

    Args:
        base_url: a SQLAlchemy PostgreSQL URL, e.g. ``postgresql+psycopg://postgres@127.0.0.1/test``.

    Yields:
        ``base_url`` with ``options=-csearch_path=<schema>``.

    Raises:
        sqlalchemy.exc.OperationalError: the database cannot be reached.
    """
    import sqlalchemy as sa

    schema = f"vigil_test_{secrets.token_hex(6)}"
    admin = sa.create_engine(base_url, poolclass=sa.pool.NullPool)
    with admin.begin() as conn:
        conn.exec_driver_sql(f'CREATE SCHEMA "{schema}"')
    url = sa.make_url(base_url).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as conn:
            conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        admin.dispose()


def postgres_unreachable(url: str, timeout_s: float = 3.0) -> str | None:
    """Return ``None`` when the database at ``url`` answers, else a one-line reason (for ``pytest.skip``)."""
    import sqlalchemy as sa

    from review_queue.store import create_store_engine

    try:
        engine = create_store_engine(url, connect_timeout_s=timeout_s)
        with engine.connect():
            pass
        engine.dispose()
    except sa.exc.SQLAlchemyError as exc:
        return str(exc).splitlines()[0]
    return None
