"""Fixtures of the scale-out e2e tests: a real tansu broker and PostgreSQL schemas."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from review_queue.app.bench.broker import TansuBroker, start_tansu, tansu_missing
from tests.support.review_queue import postgres_scratch_url, postgres_unreachable

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """One memory-only tansu broker for the session (each test uses its own topic and group)."""
    reason = tansu_missing()
    if reason is not None:
        pytest.skip(f"!!! no Kafka broker: {reason}; Kafka tests SKIPPED")
    with start_tansu(tmp_path_factory.mktemp("tansu")) as broker:
        yield broker


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema for one test."""
    reason = postgres_unreachable(POSTGRES_URL)
    if reason is not None:
        pytest.skip(f"!!! PostgreSQL at {POSTGRES_URL} is unreachable ({reason}); PostgreSQL tests SKIPPED")
    with postgres_scratch_url(POSTGRES_URL) as url:
        yield url


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The working directory of the role processes (their logs)."""
    return tmp_path
