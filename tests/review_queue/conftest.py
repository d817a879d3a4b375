"""Fixtures shared by the review_queue tests: a migrated database (SQLite and PostgreSQL), a
hand-moved clock, and a store on both."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from review_queue.store import SqlStore, upgrade_database
from tests.support.review_queue import Clock, postgres_scratch_url, postgres_unreachable

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database: a SQLite file or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        yield url
        return
    reason = postgres_unreachable(POSTGRES_URL)
    if reason is not None:
        pytest.skip(f"!!! PostgreSQL at {POSTGRES_URL} is unreachable ({reason}); PostgreSQL tests SKIPPED")
    with postgres_scratch_url(POSTGRES_URL) as url:
        upgrade_database(url)
        yield url


@pytest.fixture
def clock() -> Clock:
    """A clock the test moves by hand (starts at ``T0``)."""
    return Clock()


@pytest.fixture
def store(database_url: str, clock: Clock) -> Iterator[SqlStore]:
    """A SqlStore on the migrated database, stamping times from ``clock``."""
    sql_store = SqlStore(database_url, clock=clock)
    yield sql_store
    sql_store.close()
