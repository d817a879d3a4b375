"""End to end over a real ``vigil run``: stored tokens on OTLP ingest, user feedback before and after
the run is scored, claim and verdict over the API, and the review metrics on the real /metrics."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.spans import capped_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": "Bearer e2e-admin-token"}
PROTO = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run`` with an admin token, authenticated ingest and no random sample."""
    env = {
        "VIGIL_QUIET_PERIOD_S": "0.5",
        "VIGIL_SAMPLE_RATE": "0",
        "VIGIL_ADMIN_TOKEN": "e2e-admin-token",
        "VIGIL_INGEST_AUTH": "true",
    }
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(vigil: VigilProcess) -> dict[str, str]:
    """An ingest and a reviewer token created through the API."""
    made = {}
    for role in ("ingest", "reviewer"):
        response = httpx.post(f"{vigil.api}/api/v1/tokens", json={"name": f"e2e-{role}", "role": role}, headers=ADMIN)
        assert 201 == response.status_code, response.text
        made[role] = response.json()["token"]
    return made


def _wait_flag(vigil: VigilProcess, trace_id: str, reasons: list[str], timeout_s: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        response = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", headers=ADMIN)
        if response.status_code == 200:
            last = response.json()
            if last["flag"] and last["flag"]["reasons"] == reasons:
                return dict(last)
        time.sleep(0.1)
    raise AssertionError(f"run {trace_id} never had reasons {reasons}: {last}\n{vigil.log_tail()}")


def _feedback(vigil: VigilProcess, token: str, trace_id: str, feedback_id: str) -> dict[str, Any]:
    payload = {"feedback_id": feedback_id, "trace_id": trace_id, "score": "down", "comment": "wrong", "source": "web"}
    response = httpx.post(f"{vigil.api}/api/v1/feedback", json=payload, headers={"Authorization": f"Bearer {token}"})
    assert 200 == response.status_code, response.text
    return dict(response.json())


class TestIngestAuth:
    """OTLP ingest accepts stored ingest tokens only."""

    def test_roles_on_otlp(self, vigil: VigilProcess, tokens: dict[str, str]) -> None:
        """No token and a reviewer token are 401; the ingest token is accepted."""
        _, payload = capped_run(100)
        url = f"{vigil.otlp_endpoint}/v1/traces"
        assert 401 == httpx.post(url, content=payload, headers=PROTO).status_code
        reviewer = {**PROTO, "Authorization": f"Bearer {tokens['reviewer']}"}
        assert 401 == httpx.post(url, content=payload, headers=reviewer).status_code
        ingest = {**PROTO, "Authorization": f"Bearer {tokens['ingest']}"}
        assert 200 == httpx.post(url, content=payload, headers=ingest).status_code


class TestFeedback:
    """Feedback before and after scoring ends in one flagged item with both reasons."""

    def test_before_and_after(self, vigil: VigilProcess, tokens: dict[str, str]) -> None:
        """Thumbs-down before the run and after it; both runs carry hit_max_iterations and user_thumbs_down."""
        ingest = {**PROTO, "Authorization": f"Bearer {tokens['ingest']}"}
        url = f"{vigil.otlp_endpoint}/v1/traces"
        before_id, before_body = capped_run(1)
        early = _feedback(vigil, tokens["ingest"], before_id, "fb-before")
        assert (False, False) == (early["duplicate"], early["joined"])
        assert 200 == httpx.post(url, content=before_body, headers=ingest).status_code
        both = ["hit_max_iterations", "user_thumbs_down"]
        run = _wait_flag(vigil, before_id, both)
        assert "high" == run["flag"]["priority"]

        after_id, after_body = capped_run(2)
        assert 200 == httpx.post(url, content=after_body, headers=ingest).status_code
        _wait_flag(vigil, after_id, ["hit_max_iterations"])
        late = _feedback(vigil, tokens["ingest"], after_id, "fb-after")
        assert {"reasons": both, "priority": "high"} == late["flag"]
        item = _wait_flag(vigil, after_id, both)["review_item"]
        assert both == item["reasons"]
        assert _feedback(vigil, tokens["ingest"], after_id, "fb-after")["duplicate"]

        queue = httpx.get(f"{vigil.api}/api/v1/queue", params={"limit": 500}, headers=ADMIN).json()["items"]
        assert 1 == sum(1 for i in queue if i["trace_id"] == before_id)
        assert 1 == sum(1 for i in queue if i["trace_id"] == after_id)
        assert 2.0 == vigil.metric("vigil_feedback_received_total", {"source": "web", "kind": "thumbs"})


class TestReviewOverApi:
    """Claim and verdict over the real API move the review metrics."""

    def test_claim_verdict_metrics(self, vigil: VigilProcess, tokens: dict[str, str]) -> None:
        """A reviewer claims the oldest high item and fails it; counters and gauges follow."""
        trace_id, payload = capped_run(3)
        ingest = {**PROTO, "Authorization": f"Bearer {tokens['ingest']}"}
        assert 200 == httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=payload, headers=ingest).status_code
        _wait_flag(vigil, trace_id, ["hit_max_iterations"])
        reviewer = {"Authorization": f"Bearer {tokens['reviewer']}"}
        claims_before = vigil.metric("vigil_review_claims_total")
        claim = httpx.post(f"{vigil.api}/api/v1/queue/claim", json={}, headers=reviewer)
        assert 200 == claim.status_code, claim.text
        item_id = claim.json()["item_id"]
        verdict = {"verdict": "fail", "categories": ["loop"], "notes": "capped", "corrected_answer": "Stop earlier."}
        response = httpx.post(f"{vigil.api}/api/v1/items/{item_id}/verdict", json=verdict, headers=reviewer)
        assert {"item_id": item_id, "state": "done"} == response.json()
        assert claims_before + 1 == vigil.metric("vigil_review_claims_total")
        agent = httpx.get(f"{vigil.api}/api/v1/runs/{claim.json()['trace_id']}", headers=ADMIN).json()["agent"]
        assert 1.0 <= vigil.metric("vigil_review_verdicts_total", {"agent": agent, "verdict": "fail"})
        assert 0.0 == vigil.metric("vigil_review_pass_rate", {"agent": agent})
        assert vigil.metric("vigil_review_items", {"state": "done", "priority": "high"}) >= 1.0
        assert 'vigil_review_oldest_pending_age_seconds{priority="high"}' in httpx.get(vigil.metrics_url).text

    def test_ui_served_with_csp(self, vigil: VigilProcess) -> None:
        """The login page is served by vigil run with the strict CSP."""
        response = httpx.get(f"{vigil.api}/login")
        assert 200 == response.status_code
        assert "script-src 'self'" in response.headers["content-security-policy"]
