"""Alembic environment of the review-queue schema.

Run programmatically by :func:`review_queue.store.upgrade_database` (which passes an open
connection in ``config.attributes["connection"]``), or by the ``alembic`` CLI with
``sqlalchemy.url`` set (or ``-x url=…``). Offline mode renders the SQL without a database.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlalchemy.pool import NullPool

from review_queue.tables import metadata


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def _url() -> str | None:
    """The database URL: ``-x url=…`` on the command line wins over ``sqlalchemy.url``."""
    override = context.get_x_argument(as_dictionary=True).get("url")
    return override or context.config.get_main_option("sqlalchemy.url")


def _run_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _configure_and_run(connection)
        return
    url = _url()
    if not url:
        raise RuntimeError("set sqlalchemy.url or pass a connection in config.attributes")
    engine = create_engine(url, poolclass=NullPool)
    with engine.connect() as conn:
        _configure_and_run(conn)
    engine.dispose()


if context.is_offline_mode():
    _run_offline()
else:
    _run_online()
