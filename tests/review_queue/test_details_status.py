"""Tests of review_queue.details_status (why a run has no details) and of the run and item pages that say it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from review_queue.api import create_api_app
from review_queue.details import DetailsWriter, details_sampled
from review_queue.details_status import (
    DAY_S,
    WRITE_GRACE_S,
    DetailsPolicy,
    DetailsStatus,
    details_status,
    flagged_when_stored,
)
from review_queue.services import build_services
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Message, Step, StepKind
from scorers.redact import Redactor
from tests.support.fixtures import Clock
from tests.support.review_queue import scored_run

NOW = 1_800_000_000.0
IDS = [f"{n:032x}" for n in range(1, 200)]
IN_HALF = next(t for t in IDS if details_sampled(t, 0.5))
"""A trace id in the details sample at rate 0.5."""
OUT_HALF = next(t for t in IDS if not details_sampled(t, 0.5))
"""A trace id outside the details sample at rate 0.5."""


def _status(**facts: Any) -> DetailsStatus:
    """details_status of an unflagged, sampled run without a document stored an hour ago, with ``facts`` changed."""
    given: dict[str, Any] = {
        "present": False,
        "content_captured": False,
        "flagged": False,
        "trace_id": IN_HALF,
        "created_at": NOW - 3600,
        "now": NOW,
        "sample_rate": 0.5,
        "retention_days": 7.0,
    }
    given.update(facts)
    return details_status(**given)


class TestDetailsStatus:
    """The decision: kept, not captured, not sampled, flagged only, expired, not written yet, dropped."""

    def test_present_document(self) -> None:
        """With a document only content capture matters: flag, sample, age and settings do not."""
        for facts in ({}, {"flagged": True}, {"trace_id": OUT_HALF}, {"created_at": NOW - 30 * DAY_S},
                      {"retention_days": 0.0}, {"sample_rate": 0.0}):  # fmt: skip
            assert DetailsStatus.KEPT == _status(present=True, content_captured=True, **facts)
            assert DetailsStatus.NOT_CAPTURED == _status(present=True, content_captured=False, **facts)

    def test_not_sampled(self) -> None:
        """Unflagged and outside the sample at the configured rate: never kept (rate 0: no unflagged run)."""
        assert DetailsStatus.NOT_SAMPLED == _status(trace_id=OUT_HALF)
        assert DetailsStatus.NOT_SAMPLED == _status(sample_rate=0.0)
        assert DetailsStatus.NOT_SAMPLED == _status(trace_id=OUT_HALF, created_at=NOW - 30 * DAY_S)  # never kept
        assert DetailsStatus.DROPPED == _status(trace_id=OUT_HALF, sample_rate=1.0)  # rate 1: every run is kept

    def test_flagged_only(self) -> None:
        """Details retention 0 keeps flagged runs only, whatever the rate."""
        assert DetailsStatus.FLAGGED_ONLY == _status(retention_days=0.0)
        assert DetailsStatus.FLAGGED_ONLY == _status(retention_days=0.0, sample_rate=1.0)

    def test_expired(self) -> None:
        """A sampled unflagged run stored longer ago than the retention: deleted by it."""
        assert DetailsStatus.EXPIRED == _status(created_at=NOW - 7 * DAY_S - 1)
        assert DetailsStatus.DROPPED == _status(created_at=NOW - 7 * DAY_S + 1)
        assert DetailsStatus.EXPIRED == _status(created_at=NOW - 2 * DAY_S, retention_days=1.5)

    def test_dropped_or_not_written_yet(self) -> None:
        """A run that should have a document: not written yet within the grace, dropped after it."""
        assert DetailsStatus.PENDING == _status(created_at=NOW - 1)
        assert DetailsStatus.PENDING == _status(created_at=NOW - WRITE_GRACE_S + 1)
        assert DetailsStatus.DROPPED == _status(created_at=NOW - WRITE_GRACE_S - 1)

    def test_flagged_runs_are_always_kept(self) -> None:
        """A flagged run's details are kept with the run: missing means dropped, at any rate, retention or age."""
        for facts in ({}, {"trace_id": OUT_HALF}, {"sample_rate": 0.0}, {"retention_days": 0.0},
                      {"created_at": NOW - 30 * DAY_S}):  # fmt: skip
            assert DetailsStatus.DROPPED == _status(flagged=True, **facts)
        assert DetailsStatus.PENDING == _status(flagged=True, sample_rate=0.0, created_at=NOW - 5)

    def test_flagged_when_stored(self) -> None:
        """Sent to review by hand (only reason manual): unflagged when stored; any rule's reason: flagged."""
        assert [False, False, False, True, True] == [
            flagged_when_stored(None),
            flagged_when_stored({"reasons": []}),
            flagged_when_stored({"reasons": ["manual"]}),
            flagged_when_stored({"reasons": ["tool_loop"]}),
            flagged_when_stored({"reasons": ["tool_loop", "manual"]}),
        ]

    def test_policy_defaults_are_the_writers(self) -> None:
        """The page's defaults are the settings' defaults (defined once, in review_queue.details)."""
        from vigil.settings import Settings

        settings = Settings()
        assert DetailsPolicy(settings.details_sample_rate, settings.details_retention_days) == DetailsPolicy()


# ---- the pages ----

T = 1_700_000_000_000_000_000
ADMIN = {"Authorization": "Bearer adm"}
SAID = "What is the weather in Paris?"


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """A migrated SQLite store whose writes are stamped by a settable clock (``store.clock``)."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    clock = Clock(NOW)
    s = SqlStore(url, clock=clock)
    s.clock = clock  # type: ignore[attr-defined]
    yield s
    s.close()


def _client(store: SqlStore, policy: DetailsPolicy, now: float = NOW + 3600) -> TestClient:
    services = build_services(store, admin_token="adm", clock=lambda: now, details=policy)
    return TestClient(create_api_app(store, admin_token="adm", services=services))


def _run(trace_id: str, *, content: bool = True, reasons: tuple[str, ...] = ()) -> Any:
    attrs = {"gen_ai.input.messages": f'[{{"role": "user", "content": "{SAID}"}}]'} if content else {}
    steps = (
        Step("a" * 16, None, "invoke_agent", StepKind.AGENT, T, T + 10**9),
        Step("b" * 16, "a" * 16, "chat", StepKind.LLM, T + 10**8, T + 5 * 10**8, attributes=attrs),
    )
    messages = (Message("user", SAID),) if content else ()
    return scored_run(trace_id, reasons=list(reasons), steps=steps, messages=messages, span_count=2, start_ns=T,
                      end_ns=T + 10**9)  # fmt: skip


def _reason(page: str) -> str | None:
    import re

    found = re.search(r'id="details-missing" data-reason="([a-z_]+)"', page)
    return None if found is None else found.group(1)


class TestRunPage:
    """The run page (and a flagged run's item page) says why details are missing; only a kept document
    without content gets the content-capture advice."""

    def test_kept_with_content(self, store: SqlStore) -> None:
        """Details kept: the conversation, no notice."""
        scored = _run(IN_HALF)
        store.write([scored])
        DetailsWriter(store.write_details, Redactor()).write_now([scored])
        page = _client(store, DetailsPolicy(0.5, 7.0)).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert SAID in page
        assert (None, False) == (_reason(page), 'id="no-content"' in page)

    def test_kept_without_content(self, store: SqlStore) -> None:
        """Details kept, no content on the spans: the content-capture advice."""
        scored = _run(IN_HALF, content=False)
        store.write([scored])
        DetailsWriter(store.write_details, Redactor()).write_now([scored])
        page = _client(store, DetailsPolicy(0.5, 7.0)).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert (None, True) == (_reason(page), 'id="no-content"' in page)
        assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in page

    def test_not_sampled(self, store: SqlStore) -> None:
        """Rate 0, unflagged: not kept by the sample rate, the rate named, no content-capture advice."""
        store.write([_run(IN_HALF)])
        page = _client(store, DetailsPolicy(0.0, 7.0)).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert "not_sampled" == _reason(page)
        assert "Details not kept by the sample rate." in page
        assert "VIGIL_DETAILS_SAMPLE_RATE=0" in page
        assert 'id="no-content"' not in page
        assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" not in page
        assert "not kept (outside the details sample rate)" in page  # the span view's header

    def test_half_rate_names_the_share(self, store: SqlStore) -> None:
        """At 0.5 the notice says 50 %."""
        store.write([_run(OUT_HALF)])
        page = _client(store, DetailsPolicy(0.5, 7.0)).get(f"/runs/{OUT_HALF}", headers=ADMIN).text
        assert "not_sampled" == _reason(page)
        assert "50 % of the other runs" in page

    def test_flagged_only(self, store: SqlStore) -> None:
        """Details retention 0, unflagged."""
        store.write([_run(IN_HALF)])
        page = _client(store, DetailsPolicy(1.0, 0.0)).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert "flagged_only" == _reason(page)
        assert "VIGIL_DETAILS_RETENTION_DAYS=0" in page

    def test_expired(self, store: SqlStore) -> None:
        """Stored eight days ago with a seven-day details retention."""
        store.write([_run(IN_HALF)])
        page = _client(store, DetailsPolicy(1.0, 7.0), now=NOW + 8 * DAY_S).get(f"/runs/{IN_HALF}", headers=ADMIN)
        assert "expired" == _reason(page.text)
        assert "VIGIL_DETAILS_RETENTION_DAYS=7" in page.text

    def test_dropped_and_pending(self, store: SqlStore) -> None:
        """Should be kept, none written: not written yet a moment after, dropped (metric named) later."""
        store.write([_run(IN_HALF)])
        soon = _client(store, DetailsPolicy(1.0, 7.0), now=NOW + 2).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert "pending" == _reason(soon)
        page = _client(store, DetailsPolicy(1.0, 7.0)).get(f"/runs/{IN_HALF}", headers=ADMIN).text
        assert "dropped" == _reason(page)
        assert "vigil_run_details_dropped_total" in page
        assert 'id="no-content"' not in page

    def test_item_page(self, store: SqlStore) -> None:
        """A flagged run without details: its item page (the conversation from the review snapshot) says
        dropped in the span view; one sent to review by hand is judged as the unflagged run it was."""
        flagged, manual = IN_HALF, OUT_HALF
        store.write([_run(flagged, reasons=("tool_loop",)), _run(manual)])
        client = _client(store, DetailsPolicy(0.5, 7.0))
        page = client.get(f"/runs/{flagged}", headers=ADMIN, follow_redirects=True).text
        assert SAID in page  # from the snapshot
        assert 'data-reason="dropped"' in page
        assert 'id="no-content"' not in page
        store.send_to_review(manual, "alice")
        page = client.get(f"/runs/{manual}", headers=ADMIN, follow_redirects=True).text
        assert 'data-reason="not_sampled"' in page

    def test_settings_reach_the_pages(self, tmp_path: Path, store: SqlStore) -> None:
        """VIGIL_DETAILS_SAMPLE_RATE and VIGIL_DETAILS_RETENTION_DAYS reach the review services."""
        from vigil.scoring import review_services
        from vigil.settings import Settings

        (tmp_path / "vigil.yaml").write_text("{}\n")
        env = {"VIGIL_DETAILS_SAMPLE_RATE": "0.25", "VIGIL_DETAILS_RETENTION_DAYS": "3"}
        settings = Settings.load(env, config_file=tmp_path / "vigil.yaml")
        services = review_services(settings, store, CollectorRegistry(), ())
        assert DetailsPolicy(0.25, 3.0) == services.details
