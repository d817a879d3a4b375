"""Tests of review_queue.api_review over the real app on SQLite and PostgreSQL: status codes and shapes."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.maintenance import Maintenance
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore
from scorers.model import Priority
from tests.support.review_queue import Clock, scored_run
from tests.support.sessions import flagged_session

ADMIN = {"Authorization": "Bearer api-admin"}


@pytest.fixture
def services(store: SqlStore, clock: Clock) -> ReviewServices:
    """Services with a 60 s lease."""
    return build_services(store, admin_token="api-admin", lease_s=60, clock=clock)


@pytest.fixture
def client(store: SqlStore, services: ReviewServices) -> TestClient:
    """The app."""
    return TestClient(create_api_app(store, admin_token="api-admin", services=services))


def _who(services: ReviewServices, name: str, role: str = "reviewer") -> dict[str, str]:
    return {"Authorization": f"Bearer {services.tokens.create(name, role)[0]}"}


class TestWorkbenchApi:
    """Claim, verdict, blind review, errors."""

    def test_claim_empty_204(self, client: TestClient) -> None:
        """Nothing to claim → 204."""
        assert 204 == client.post("/api/v1/queue/claim", headers=ADMIN).status_code

    def test_claim_verdict_flow(self, store: SqlStore, services: ReviewServices, client: TestClient) -> None:
        """Claim next by priority, submit, 409 on a second verdict, 422 on a bad category."""
        store.write([scored_run("1" * 32, reasons=["a"]), scored_run("2" * 32, reasons=["b"], priority=Priority.HIGH)])
        alice = _who(services, "alice")
        claim = client.post("/api/v1/queue/claim", json={"priority": "normal"}, headers=alice).json()
        assert "1" * 32 == claim["trace_id"]
        bad = client.post(f"/api/v1/items/{claim['item_id']}/verdict", json={"verdict": "fail", "categories": ["x"]},
                          headers=alice)  # fmt: skip
        assert 422 == bad.status_code
        assert "unknown categories" in bad.json()["detail"][0]["msg"]
        ok = client.post(f"/api/v1/items/{claim['item_id']}/verdict", json={"verdict": "pass"}, headers=alice)
        assert {"item_id": claim["item_id"], "state": "done"} == ok.json()
        again = client.post(f"/api/v1/items/{claim['item_id']}/verdict", json={"verdict": "pass"}, headers=alice)
        assert 409 == again.status_code
        assert 404 == client.post("/api/v1/items/999/claim", headers=alice).status_code
        assert 422 == client.post("/api/v1/items/1/verdict", json={"verdict": "maybe"}, headers=alice).status_code

    def test_blind_review_over_api(self, store: SqlStore, services: ReviewServices, client: TestClient) -> None:
        """With two reviews required bob sees no verdict until his own lands; then both."""
        store.write([scored_run("3" * 32, reasons=["a"])])
        alice, bob = _who(services, "alice"), _who(services, "bob")
        assert (
            200
            == client.post("/api/v1/items/1/reviews-required", json={"reviews_required": 2}, headers=ADMIN).status_code
        )
        client.post("/api/v1/items/1/claim", headers=alice)
        client.post("/api/v1/items/1/verdict", json={"verdict": "fail", "categories": ["loop"]}, headers=alice)
        assert [] == client.get("/api/v1/items/1", headers=bob).json()["verdicts"]
        assert 1 == len(client.get("/api/v1/items/1", headers=ADMIN).json()["verdicts"])
        client.post("/api/v1/items/1/claim", headers=bob)
        client.post("/api/v1/items/1/verdict", json={"verdict": "pass"}, headers=bob)
        item = client.get("/api/v1/items/1", headers=bob).json()
        assert ("done", ["alice", "bob"]) == (item["state"], [v["reviewer"] for v in item["verdicts"]])
        assert ["set_reviews_required", "claim", "verdict", "claim", "verdict"] == [e["action"] for e in item["events"]]

    def test_release_skip_assign_requeue(self, store: SqlStore, services: ReviewServices, client: TestClient) -> None:
        """Release and skip need the lease; assign and requeue are recorded."""
        store.write([scored_run("4" * 32, reasons=["a"])])
        alice = _who(services, "alice")
        assert 409 == client.post("/api/v1/items/1/release", headers=alice).status_code
        client.post("/api/v1/items/1/claim", headers=alice)
        assert 200 == client.post("/api/v1/items/1/skip", headers=alice).status_code
        assert 204 == client.post("/api/v1/queue/claim", headers=alice).status_code
        client.post("/api/v1/items/1/assign", json={"assignee": "bob"}, headers=ADMIN)
        assert "bob" == client.get("/api/v1/items/1", headers=ADMIN).json()["assigned_to"]
        client.post("/api/v1/items/1/requeue", json={"reviews_required": 3}, headers=ADMIN)
        assert 3 == client.get("/api/v1/items/1", headers=ADMIN).json()["reviews_required"]

    def test_feedback_validation(self, client: TestClient) -> None:
        """A bad score or trace id is 422; a number is accepted."""
        headers = ADMIN
        bad_score = client.post("/api/v1/feedback", json={"trace_id": "5" * 32, "score": "meh"}, headers=headers)
        bad_trace = client.post("/api/v1/feedback", json={"trace_id": "xyz", "score": 1}, headers=headers)
        ok = client.post(
            "/api/v1/feedback", json={"trace_id": "5" * 32, "score": 4.5, "source": "csat"}, headers=headers
        )
        assert (422, 422, 200) == (bad_score.status_code, bad_trace.status_code, ok.status_code)

    def test_taxonomy(self, client: TestClient) -> None:
        """The default taxonomy is served."""
        assert "wrong_tool" in client.get("/api/v1/taxonomy", headers=ADMIN).json()


ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
"""The one time format of the API: ISO 8601 UTC with milliseconds."""


class TestTimeFormat:
    """Every time field of the API is ISO 8601 UTC with milliseconds, list and item routes alike."""

    def test_item_routes_write_iso_times(self, store: SqlStore, services: ReviewServices, client: TestClient,
                                         clock: Clock) -> None:  # fmt: skip
        """Claim, item (verdicts, events and the claim event's lease), tokens, queue, run and quality: ISO."""
        store.write([scored_run("5" * 32, reasons=["a"])])
        alice = _who(services, "alice")
        claim = client.post("/api/v1/queue/claim", headers=alice).json()
        lease = datetime.fromtimestamp(clock.now + 60, tz=UTC)
        assert lease.isoformat(timespec="milliseconds").replace("+00:00", "Z") == claim["lease_expires_at"]
        held = client.get(f"/api/v1/items/{claim['item_id']}", headers=ADMIN).json()
        assert claim["lease_expires_at"] == held["lease_expires_at"]
        assert claim["lease_expires_at"] == held["events"][-1]["detail"]["lease_expires_at"]
        client.post(f"/api/v1/items/{claim['item_id']}/verdict", json={"verdict": "pass"}, headers=alice)
        item = client.get(f"/api/v1/items/{claim['item_id']}", headers=ADMIN).json()
        times = [item["verdicts"][0]["created_at"], *(e["at"] for e in item["events"])]
        token = client.get("/api/v1/tokens", headers=ADMIN).json()[0]
        times.append(token["created_at"])
        run = client.get(f"/api/v1/runs/{'5' * 32}", headers=ADMIN).json()
        times += [run["created_at"], run["updated_at"], run["review_item"]["created_at"]]
        listed = client.get("/api/v1/runs", headers=ADMIN).json()["items"][0]
        times += [listed["created_at"]]
        quality = client.get("/api/v1/quality", headers=ADMIN).json()
        times += [quality["since"], quality["until"]]
        assert all(isinstance(t, str) and ISO_UTC.fullmatch(t) for t in times), times
        assert run["created_at"] == listed["created_at"]
        assert None is item["lease_expires_at"]

    def test_openapi_says_date_time(self, client: TestClient) -> None:
        """The OpenAPI document gives each time field as a date-time string, no number."""
        schemas = client.get("/openapi.json").json()["components"]["schemas"]
        fields = (("ClaimOut", "lease_expires_at"), ("EventOut", "at"), ("VerdictOut", "created_at"),
                  ("TokenOut", "created_at"), ("QualityOut", "since"), ("RunOut", "created_at"))  # fmt: skip
        for shape, field in fields:
            assert {"type": "string", "format": "date-time"}.items() <= schemas[shape]["properties"][field].items()


class TestVerdictTargetsApi:
    """Verdicts on a session item: the session by default, or one turn named by its trace id."""

    EXCHANGES = (("Where is order 7?", "It shipped."), ("When?", "Thursday."), ("Thanks", "Bye."))

    def test_session_and_turn_verdicts(self, store: SqlStore, services: ReviewServices, client: TestClient) -> None:
        """Session by default; a turn of the session; another session's turn → 422, one line; run items as before."""
        item = flagged_session(store, "conv-api", self.EXCHANGES, first=1)
        flagged_session(store, "conv-other", self.EXCHANGES, first=11)
        store.write([scored_run("a" * 32, reasons=["r"])])
        alice, bob = _who(services, "alice"), _who(services, "bob")
        client.post(f"/api/v1/items/{item}/reviews-required", json={"reviews_required": 2}, headers=ADMIN)
        assert 200 == client.post(f"/api/v1/items/{item}/claim", headers=alice).status_code
        url = f"/api/v1/items/{item}/verdict"
        foreign = client.post(url, json={"verdict": "fail", "target": "turn", "target_trace_id": f"{12:032x}"},
                              headers=alice)  # fmt: skip
        assert 422 == foreign.status_code
        (error,) = foreign.json()["detail"]
        assert f"trace '{12:032x}' is not a turn of session 'conv-api'" == error["msg"]
        assert 200 == client.post(url, json={"verdict": "fail", "categories": ["gave_up"]}, headers=alice).status_code
        client.post(f"/api/v1/items/{item}/claim", headers=bob)
        turn = {"verdict": "fail", "target": "turn", "target_trace_id": f"{2:032x}", "corrected_answer": "Friday."}
        assert {"item_id": item, "state": "done"} == client.post(url, json=turn, headers=bob).json()
        verdicts = client.get(f"/api/v1/items/{item}", headers=ADMIN).json()["verdicts"]
        assert [("alice", "session", None), ("bob", "turn", f"{2:032x}")] == [
            (v["reviewer"], v["target"], v["target_trace_id"]) for v in verdicts
        ]
        run_item = int(store.get_run("a" * 32)["review_item"]["id"])  # type: ignore[index]
        client.post(f"/api/v1/items/{run_item}/claim", headers=alice)
        wrong = client.post(f"/api/v1/items/{run_item}/verdict", json={"verdict": "pass", "target": "session"},
                            headers=alice)  # fmt: skip
        assert 422 == wrong.status_code
        assert (
            200 == client.post(f"/api/v1/items/{run_item}/verdict", json={"verdict": "pass"}, headers=alice).status_code
        )
        (plain,) = client.get(f"/api/v1/items/{run_item}", headers=ADMIN).json()["verdicts"]
        assert ("run", "a" * 32) == (plain["target"], plain["target_trace_id"])


class TestMaintenance:
    """The upkeep loop's single pass."""

    def test_tick_expires_and_joins(self, store: SqlStore, services: ReviewServices, clock: Clock) -> None:
        """A lapsed lease returns to pending and feedback whose run appeared later is joined."""
        store.write([scored_run("6" * 32, reasons=["a"])])
        services.workbench.claim_next("alice")
        from review_queue.model import FeedbackIn

        services.feedback.record(FeedbackIn("7" * 32, "thumbs", 0.0, "", "web", "late-run"))
        store.write([scored_run("7" * 32)])  # written by "another process" after the feedback
        clock.now += 61
        assert (1, 1) == Maintenance(services.workbench, services.feedback).tick()
        run = store.get_run("7" * 32)
        assert run is not None
        assert ["user_thumbs_down"] == run["flag"]["reasons"]
        assert "pending" == services.workbench.item(1)["state"]


class TestQueueView:
    """Filters and counts of the queue page."""

    def test_filters(self, store: SqlStore, services: ReviewServices, client: TestClient) -> None:
        """Priority, reason, agent, state and 'assigned to me' narrow the list; counts follow the other filters."""
        store.write(
            [
                scored_run("a" * 32, reasons=["loop"], priority=Priority.HIGH, agent="support"),
                scored_run("b" * 32, reasons=["errored"], priority=Priority.NORMAL, agent="billing"),
                scored_run("c" * 32, reasons=["loop", "errored"], priority=Priority.NORMAL, agent="support"),
            ]
        )
        alice = _who(services, "alice")
        services.workbench.assign(3, "admin", "alice")

        def rows(**params: str) -> list[str]:
            html = client.get("/queue", params=params, headers=alice).text
            return [part.split('"')[0] for part in html.split('data-item="')[1:]]

        assert ["1", "2", "3"] == rows()
        assert ["1"] == rows(priority="high")
        assert ["1", "3"] == rows(reason="loop")
        assert ["2"] == rows(agent="billing")
        assert ["3"] == rows(mine="1")
        assert [] == rows(state="done")
        page = client.get("/queue", params={"reason": "errored"}, headers=alice).text
        assert 'data-state="pending">2<' in page

    def test_pages_past_the_first_hundred_items(
        self, store: SqlStore, services: ReviewServices, client: TestClient
    ) -> None:
        """250 pending items: three pages of at most QUEUE_PAGE, each saying which of how many, the
        filters kept in the links; every item on exactly one page (the random-sample items at the end
        of the order are reachable)."""
        from review_queue.web import QUEUE_PAGE

        store.write([scored_run(f"{i:032x}", reasons=["random_sample"], agent="support") for i in range(250)])
        alice = _who(services, "alice")
        seen: list[str] = []
        url: str | None = "/queue?agent=support"
        pages = 0
        while url is not None:
            html = client.get(url, headers=alice).text
            rows = [part.split('"')[0] for part in html.split('data-item="')[1:]]
            assert len(rows) <= QUEUE_PAGE
            first = len(seen) + 1
            assert f"Items {first}–{len(seen) + len(rows)} of 250" in html
            seen += rows
            pages += 1
            found = html.split('rel="next"')[0].rsplit('href="', 1)[-1].split('"')[0] if 'rel="next"' in html else None
            url = found.replace("&amp;", "&") if found else None
            assert url is None or "agent=support" in url
        assert (3, 250, 250) == (pages, len(seen), len(set(seen)))
