"""Fixtures of the e2e tests: a real tansu broker and PostgreSQL schemas (scale-out), a headless
chromium (the UI tests)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.review_queue import postgres_scratch_url, postgres_unreachable
from vigil.bench.broker import TansuBroker, start_tansu, tansu_missing

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium under Playwright, one per test module."""
    if shutil.which("chromium") is None and not Path(CHROMIUM).exists():
        pytest.skip("!!! /usr/bin/chromium is missing (apt-get install chromium); browser tests SKIPPED")
    sync_api = pytest.importorskip("playwright.sync_api", reason="!!! playwright missing; browser tests SKIPPED")
    with sync_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield chromium
        chromium.close()
