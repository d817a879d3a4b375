"""Tests of review_queue.api: shapes, validation, bearer auth and probes, on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.store import SqlStore
from scorers.model import Evidence, Priority
from tests.support.review_queue import Clock, assert_unauthorized, scored_run

CLOSED_PORT_URL = "postgresql+psycopg://postgres@127.0.0.1:1/test"
TOKEN = "s3cret-token"


class TickingClock(Clock):
    """A clock that advances one second per reading."""

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture
def clock() -> Clock:
    """The store's clock: one second later at each reading."""
    return TickingClock()


@pytest.fixture
def client(store: SqlStore) -> TestClient:
    """An API client without authentication."""
    return TestClient(create_api_app(store, admin_token=None))


def _tid(n: int) -> str:
    return f"{n:032x}"


class TestRuns:
    """GET /api/v1/runs and /api/v1/runs/{trace_id}."""

    def test_detail_shape(self, store: SqlStore, client: TestClient) -> None:
        """A flagged run has every documented field, its flag and its review item."""
        store.write(
            [
                scored_run(
                    _tid(1),
                    agent="support",
                    scores={"latency": 0.25},
                    reasons=["loop", "random_sample"],
                    priority=Priority.HIGH,
                    llm_calls=3,
                )
            ]
        )
        response = client.get(f"/api/v1/runs/{_tid(1)}")
        body = response.json()
        assert 200 == response.status_code
        assert {
            "trace_id": _tid(1),
            "agent": "support",
            "status": "ok",
            "complete": True,
            "llm_calls": 3,
            "scores": {"latency": 0.25},
            "flag": {"reasons": ["loop", "random_sample"], "priority": "high", "sample_rate": 0.05},
        } == {key: body[key] for key in ("trace_id", "agent", "status", "complete", "llm_calls", "scores", "flag")}
        for key in ("duration_s", "tool_calls", "tool_errors", "input_tokens", "output_tokens"):
            assert key in body
        for key in ("hit_max_iterations", "safety_blocked", "errored"):
            assert body[key] is False
        assert "pending" == body["review_item"]["state"]
        assert _tid(1) == body["review_item"]["snapshot"]["trace_id"]

    def test_unflagged_run(self, store: SqlStore, client: TestClient) -> None:
        """An unflagged run has flag null and review_item null."""
        store.write([scored_run(_tid(2))])
        body = client.get(f"/api/v1/runs/{_tid(2)}").json()
        assert (None, None) == (body["flag"], body["review_item"])

    def test_evidence(self, store: SqlStore, client: TestClient) -> None:
        """The run's signal evidence, then each flag reason's, as stored; a re-score replaces it."""
        cut = Evidence("hit_max_iterations", "limit.cutoff", "a" * 16, "chat", "finish_reason", "tool_calls")
        scored = scored_run(_tid(3), reasons=["hit_max_iterations"], hit_max_iterations=True, evidence=(cut,))
        scored = dataclasses.replace(scored, evidence=(dataclasses.replace(cut, signal="hit_max_iterations"),))
        store.write([scored])
        body = client.get(f"/api/v1/runs/{_tid(3)}").json()
        assert [cut.as_dict(), cut.as_dict()] == body["evidence"]
        assert [cut.as_dict(), cut.as_dict()] == body["review_item"]["snapshot"]["evidence"]
        store.write([dataclasses.replace(scored_run(_tid(3)), evidence=())])
        assert [] == client.get(f"/api/v1/runs/{_tid(3)}").json()["evidence"]

    def test_upper_case_trace_id(self, store: SqlStore, client: TestClient) -> None:
        """An upper-case trace id is lower-cased before the lookup."""
        trace_id = "ABCDEF0123456789ABCDEF0123456789"
        store.write([scored_run(trace_id.lower())])
        assert trace_id.lower() == client.get(f"/api/v1/runs/{trace_id}").json()["trace_id"]

    def test_missing_run_404(self, client: TestClient) -> None:
        """An unknown trace id answers 404 with a JSON detail."""
        response = client.get(f"/api/v1/runs/{_tid(404)}")
        assert 404 == response.status_code
        assert "not found" in response.json()["detail"]

    @pytest.mark.parametrize("bad", ["xyz", "0" * 31, "g" * 32, "0" * 33])
    def test_invalid_trace_id_422(self, client: TestClient, bad: str) -> None:
        """A trace id that is not 32 hex characters answers 422."""
        assert 422 == client.get(f"/api/v1/runs/{bad}").status_code

    def test_list_filters_and_pages(self, store: SqlStore, client: TestClient) -> None:
        """The list pages with next_cursor and honours agent, flagged and reason."""
        for n in range(7):
            store.write([scored_run(_tid(n), agent=f"a{n % 2}", reasons=["slow"] if n < 2 else [])])
        first = client.get("/api/v1/runs", params={"limit": 4}).json()
        second = client.get("/api/v1/runs", params={"limit": 4, "cursor": first["next_cursor"]}).json()
        assert [_tid(n) for n in range(6, -1, -1)] == [i["trace_id"] for i in first["items"] + second["items"]]
        assert second["next_cursor"] is None
        flagged = client.get("/api/v1/runs", params={"flagged": "true", "agent": "a1", "reason": "slow"}).json()
        assert [_tid(1)] == [item["trace_id"] for item in flagged["items"]]

    @pytest.mark.parametrize(
        ("params", "status"), [({"limit": 501}, 422), ({"limit": 0}, 422), ({"cursor": "zz"}, 400)]
    )
    def test_list_bad_query(self, client: TestClient, params: dict[str, str | int], status: int) -> None:
        """limit outside 1..500 answers 422; a malformed cursor answers 400."""
        assert status == client.get("/api/v1/runs", params=params).status_code


class TestQueue:
    """GET /api/v1/queue."""

    def test_order_and_shape(self, store: SqlStore, client: TestClient) -> None:
        """Pending items come highest priority first, then oldest, with the documented fields."""
        for n, priority in [(1, Priority.LOW), (2, Priority.HIGH), (3, Priority.NORMAL), (4, Priority.HIGH)]:
            store.write([scored_run(_tid(n), agent="bot", reasons=["r"], priority=priority, sample_rate=0.05)])
        body = client.get("/api/v1/queue").json()
        assert [_tid(2), _tid(4), _tid(3), _tid(1)] == [item["trace_id"] for item in body["items"]]
        first = body["items"][0]
        assert ("bot", "high", ["r"], 0.05) == (
            first["agent"],
            first["priority"],
            first["reasons"],
            first["sample_rate"],
        )
        assert first["created_at"].startswith("2023-11-14T")
        assert body["next_cursor"] is None


class TestAuth:
    """Bearer-token protection of /api/v1 when admin_token is set."""

    @pytest.fixture
    def secured(self, store: SqlStore) -> TestClient:
        """A client of an app that requires TOKEN."""
        return TestClient(create_api_app(store, admin_token=TOKEN))

    @pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer "])
    def test_rejected(self, secured: TestClient, header: str | None) -> None:
        """A missing or wrong token answers 401 with WWW-Authenticate: Bearer."""
        assert_unauthorized(secured, "/api/v1/queue", header)

    def test_accepted(self, secured: TestClient) -> None:
        """The right token answers 200 on every API route."""
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert 200 == secured.get("/api/v1/queue", headers=headers).status_code
        assert 200 == secured.get("/api/v1/runs", headers=headers).status_code
        assert 404 == secured.get(f"/api/v1/runs/{_tid(1)}", headers=headers).status_code

    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
    def test_open_paths(self, secured: TestClient, path: str) -> None:
        """Probes and the OpenAPI document need no token."""
        assert 200 == secured.get(path).status_code


class TestProbesAndSchema:
    """healthz, readyz, 503 mapping and the OpenAPI document."""

    def test_ready(self, client: TestClient) -> None:
        """readyz answers 200 when the database answers."""
        response = client.get("/readyz")
        assert (200, "ready") == (response.status_code, response.json()["status"])

    def test_not_ready_callback(self, store: SqlStore) -> None:
        """readyz answers 503 when the ready callback is false."""
        client = TestClient(create_api_app(store, admin_token=None, ready=lambda: False))
        assert 503 == client.get("/readyz").status_code

    def test_openapi_documents_every_endpoint(self, client: TestClient) -> None:
        """/openapi.json lists every route with a response schema."""
        paths = client.get("/openapi.json").json()["paths"]
        expected = {"/api/v1/runs", "/api/v1/runs/{trace_id}", "/api/v1/queue", "/healthz", "/readyz"}
        assert expected <= set(paths)
        for path in expected:
            assert "schema" in paths[path]["get"]["responses"]["200"]["content"]["application/json"]


class TestDatabaseDown:
    """An unreachable database gives 503, never 500."""

    @pytest.fixture
    def down(self) -> Iterator[TestClient]:
        """A client of an app whose store points at a closed port."""
        store = SqlStore(CLOSED_PORT_URL, retry_after_s=2.5)
        yield TestClient(create_api_app(store, admin_token=None))
        store.close()

    def test_readyz_503(self, down: TestClient) -> None:
        """readyz answers 503 when ping fails, healthz still 200."""
        assert 503 == down.get("/readyz").status_code
        assert 200 == down.get("/healthz").status_code

    def test_api_503_with_retry_after(self, down: TestClient) -> None:
        """A store read that cannot reach the database answers 503 with Retry-After."""
        response = down.get("/api/v1/runs")
        assert (503, "3") == (response.status_code, response.headers["Retry-After"])


class TestQueueFilters:
    """``GET /api/v1/queue`` takes the queue page's filters (it ignored them)."""

    def test_filters(self, store: SqlStore, client: TestClient) -> None:
        store.write(
            [
                scored_run(_tid(1), agent="billing", reasons=["errored"], priority=Priority.NORMAL),
                scored_run(_tid(2), agent="support", reasons=["safety_blocked"], priority=Priority.HIGH),
                scored_run(_tid(3), agent="support", reasons=["errored", "tool_loop"], priority=Priority.NORMAL),
            ]
        )

        def traces(**params: str) -> list[str]:
            response = client.get("/api/v1/queue", params=params)
            assert 200 == response.status_code, response.text
            return [item["trace_id"] for item in response.json()["items"]]

        assert [_tid(2), _tid(1), _tid(3)] == traces()
        assert [_tid(2), _tid(3)] == traces(agent="support")
        assert [_tid(1), _tid(3)] == traces(reason="errored")
        assert [_tid(2)] == traces(priority="high")
        assert [_tid(3)] == traces(agent="support", reason="tool_loop")
        assert [] == traces(state="done")
        assert 422 == client.get("/api/v1/queue", params={"state": "nonsense"}).status_code
        assert 400 == client.get("/api/v1/queue", params={"agent": "a\x00b"}).status_code

    def test_a_cursor_pages_through_a_filter(self, store: SqlStore, client: TestClient) -> None:
        store.write([scored_run(_tid(n), agent="a" if n % 2 else "b", reasons=["errored"]) for n in range(1, 8)])
        seen, cursor = [], None
        while True:
            params = {"agent": "a", "limit": "2", **({"cursor": cursor} if cursor else {})}
            page = client.get("/api/v1/queue", params=params).json()
            seen += [item["trace_id"] for item in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert [_tid(n) for n in (1, 3, 5, 7)] == seen
