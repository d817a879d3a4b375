"""Tests of review_queue.api_sessions (and review_queue.session_queries behind it): the sessions
listing, one session with its turns, the runs listing by session and user, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from review_queue import session_queries
from review_queue.api import create_api_app
from review_queue.store import SqlStore
from scorers.model import Evidence
from tests.support.review_queue import assert_unauthorized, scored_run
from tests.support.sessions import S, put_session

TOKEN = "s3cret-token"


def _tid(n: int) -> str:
    return f"{n:032x}"


def write_turns(store: SqlStore, session_id: str, starts: Sequence[int], first: int, **fields: Any) -> list[str]:
    """Write one run per start time (seconds) in ``session_id``; trace ids ``first``, ``first + 1`` …"""
    ids = []
    for n, start in enumerate(starts):
        trace_id = _tid(first + n)
        store.write(
            [scored_run(trace_id, session_id=session_id, start_ns=start * S, end_ns=start * S + S // 2, **fields)]
        )
        ids.append(trace_id)
    return ids


@pytest.fixture
def client(store: SqlStore) -> TestClient:
    """An API client without authentication."""
    return TestClient(create_api_app(store, admin_token=None))


def _ids(page: Mapping[str, Any]) -> list[str]:
    return [s["session_id"] for s in page["items"]]


class TestListSessions:
    """GET /api/v1/sessions."""

    @pytest.fixture
    def three(self, store: SqlStore) -> None:
        """Three sessions: a (open, 3 turns, flagged, re-ask), b (closed, 5 turns), c (closed, 1 turn, user u2)."""
        reask = {"signal": "reask", "trace_id": _tid(2), "turn": 2, "span_id": "ab" * 8, "span_name": "chat",
                 "source": "user message", "value": "where is my order?"}  # fmt: skip
        put_session(store, "a", user_id="u1", last_ns=300 * S, turns=3, duration_s=30.0, turns_flagged=1,
                    signals=[reask])  # fmt: skip
        put_session(store, "b", user_id="u1", last_ns=200 * S, turns=5, duration_s=10.0, status="closed",
                    closed_at=250.0, agent="billing")  # fmt: skip
        put_session(store, "c", user_id="u2", last_ns=100 * S, turns=1, duration_s=50.0, status="closed",
                    closed_at=150.0)  # fmt: skip

    @pytest.mark.usefixtures("three")
    def test_shape_and_default_order(self, client: TestClient) -> None:
        """Most recent activity first; every documented field, the signals with their evidence."""
        response = client.get("/api/v1/sessions")
        assert 200 == response.status_code
        body = response.json()
        assert ["a", "b", "c"] == _ids(body)
        first = body["items"][0]
        assert {"session_id": "a", "agent": "support", "user_id": "u1", "turns": 3, "turns_flagged": 1,
                "status": "open", "closed_at": None} == {k: first[k] for k in (
                    "session_id", "agent", "user_id", "turns", "turns_flagged", "status", "closed_at")}  # fmt: skip
        assert [{"signal": "reask", "trace_id": _tid(2), "turn": 2, "span_id": "ab" * 8, "span_name": "chat",
                 "source": "user message", "value": "where is my order?"}] == first["signals"]  # fmt: skip
        assert body["next_cursor"] is None

    @pytest.mark.usefixtures("three")
    @pytest.mark.parametrize(
        ("params", "expected"),
        [
            ({"agent": "billing"}, ["b"]),
            ({"user": "u1"}, ["a", "b"]),
            ({"status": "closed"}, ["b", "c"]),
            ({"flagged": "true"}, ["a"]),
            ({"flagged": "false"}, ["b", "c"]),
            ({"signal": "reask"}, ["a"]),
            ({"signal": "abandonment"}, []),
            ({"since": 150}, ["a", "b"]),
            ({"until": 250}, ["b", "c"]),
            ({"since": 150, "until": 250}, ["b"]),
            ({"since": "1970-01-01T00:02:30.000Z", "until": "1970-01-01T00:04:10Z"}, ["b"]),  # the API's own format
            ({"since": "1970-01-01T00:02:30"}, ["a", "b"]),  # no zone: UTC
            ({"sort": "turns"}, ["b", "a", "c"]),
            ({"sort": "turns", "order": "asc"}, ["c", "a", "b"]),
            ({"sort": "duration"}, ["c", "a", "b"]),
            ({"sort": "last", "order": "asc"}, ["c", "b", "a"]),
        ],
    )
    def test_filters_and_sorts(self, client: TestClient, params: dict[str, Any], expected: list[str]) -> None:
        """Each filter and sort selects and orders the sessions it names."""
        response = client.get("/api/v1/sessions", params=params)
        assert 200 == response.status_code, response.text
        assert expected == _ids(response.json())

    def test_keyset_paging(self, store: SqlStore, client: TestClient) -> None:
        """Pages of 2 over 5 sessions with equal sort keys: each once, in order, a new session in between
        does not move the pages already read."""
        for n in range(5):
            put_session(store, f"s{n}", last_ns=100 * S, turns=n % 2)
        seen: list[str] = []
        cursor = None
        for page_number in range(3):
            params: dict[str, Any] = {"limit": 2, "sort": "turns"}
            if cursor:
                params["cursor"] = cursor
            body = client.get("/api/v1/sessions", params=params).json()
            seen += _ids(body)
            cursor = body["next_cursor"]
            if page_number == 0:
                put_session(store, "s9", last_ns=100 * S, turns=2)  # sorts before every page: never listed here
        assert ["s3", "s1", "s4", "s2", "s0"] == seen
        assert cursor is None

    @pytest.mark.parametrize(
        ("params", "status", "says"),
        [
            ({"sort": "tokens"}, 422, "sort"),
            ({"order": "up"}, 422, "order"),
            ({"status": "pending"}, 422, "status"),
            ({"limit": 0}, 422, "limit"),
            ({"limit": 501}, 422, "limit"),
            ({"since": "yesterday"}, 422, "since"),
            ({"since": "1969-12-31T23:59:59Z"}, 422, "since"),
            ({"since": -1}, 422, "since"),
            ({"until": 9.3e9}, 422, "until"),
            ({"signal": "re ask; drop"}, 422, "signal"),
            ({"flagged": "maybe"}, 422, "flagged"),
            ({"cursor": "%%%"}, 400, "malformed cursor"),
            ({"agent": "a\x00b"}, 400, "agent contains a NUL character"),
        ],
    )
    def test_bad_query(self, client: TestClient, params: dict[str, Any], status: int, says: str) -> None:
        """A bad parameter answers a 4xx that names it; nothing else happens."""
        response = client.get("/api/v1/sessions", params=params)
        assert status == response.status_code
        assert says in response.text

    def test_cursor_of_another_order_400(self, store: SqlStore, client: TestClient) -> None:
        """A cursor of one sort order is refused by another (it would skip or repeat sessions)."""
        for n in range(3):
            put_session(store, f"s{n}", last_ns=n * S)
        cursor = client.get("/api/v1/sessions", params={"limit": 1}).json()["next_cursor"]
        response = client.get("/api/v1/sessions", params={"limit": 1, "sort": "turns", "cursor": cursor})
        assert (400, {"detail": "the cursor belongs to another listing or order"}) == (
            response.status_code,
            response.json(),
        )


class TestGetSession:
    """GET /api/v1/sessions/{session_id}."""

    def test_turns_in_start_order(self, store: SqlStore, client: TestClient) -> None:
        """The row and every turn in start order, each with its summary, scores, flag, evidence, signals."""
        write_turns(store, "conv-1", [30], 3)
        ev = Evidence("errored", "error.status", "cd" * 8, "tool lookup", "status.message", "timeout")
        store.write(
            [
                scored_run(_tid(1), session_id="conv-1", user_id="u1", start_ns=10 * S, end_ns=11 * S,
                           scores={"latency": 0.5}),
                scored_run(_tid(2), session_id="conv-1", user_id="u1", start_ns=20 * S, end_ns=21 * S,
                           reasons=["errored"], errored=True, evidence=(ev,)),
            ]
        )  # fmt: skip
        write_turns(store, "other", [15], 9)
        thumbs = {"signal": "thumbs_down", "trace_id": _tid(2), "turn": 2, "span_id": None, "span_name": None,
                  "source": "feedback", "value": "0"}  # fmt: skip
        put_session(store, "conv-1", turns=3, turns_flagged=1, errors=1, signals=[thumbs], first_ns=10 * S,
                    last_ns=int(30.5 * S))  # fmt: skip
        response = client.get("/api/v1/sessions/conv-1")
        assert 200 == response.status_code, response.text
        body = response.json()
        assert "conv-1" == body["session"]["session_id"]
        assert 3 == body["session"]["turns"]
        assert [(1, _tid(1)), (2, _tid(2)), (3, _tid(3))] == [(t["turn"], t["trace_id"]) for t in body["turns"]]
        first, second, third = body["turns"]
        assert {"latency": 0.5} == first["scores"]
        assert first["flag"] is None
        assert first["review_item_id"] is None
        assert "u1" == first["user_id"]
        assert ["errored"] == second["flag"]["reasons"]
        assert isinstance(second["review_item_id"], int)
        assert [{"signal": "errored", "rule": "error.status", "span_id": "cd" * 8, "span_name": "tool lookup",
                 "source": "status.message", "value": "timeout"}] == second["evidence"]  # fmt: skip
        assert [thumbs] == second["signals"]
        assert [] == first["signals"] == third["signals"]
        assert body["turns_truncated"] is False

    def test_session_without_row_yet(self, store: SqlStore, client: TestClient) -> None:
        """Turns stored before their session row: the session is summed from them, open, no signals."""
        write_turns(store, "fresh", [5, 7], 1, input_tokens=10, output_tokens=4)
        body = client.get("/api/v1/sessions/fresh").json()
        assert {"session_id": "fresh", "turns": 2, "input_tokens": 20, "output_tokens": 8, "status": "open",
                "signals": [], "first_ns": 5 * S, "last_ns": int(7.5 * S)} == {
                    k: body["session"][k] for k in ("session_id", "turns", "input_tokens", "output_tokens",
                                                    "status", "signals", "first_ns", "last_ns")}  # fmt: skip
        assert 2 == len(body["turns"])

    def test_run_without_session_is_a_session_of_one(self, store: SqlStore, client: TestClient) -> None:
        """A run without a session id answers its trace id as a one-turn session; a turn's trace id does not."""
        store.write([scored_run(_tid(7), start_ns=S, end_ns=2 * S)])
        write_turns(store, "conv", [1], 8)
        body = client.get(f"/api/v1/sessions/{_tid(7)}").json()
        assert (_tid(7), 1, [_tid(7)]) == (
            body["session"]["session_id"],
            body["session"]["turns"],
            [t["trace_id"] for t in body["turns"]],
        )
        assert 404 == client.get(f"/api/v1/sessions/{_tid(8)}").status_code

    @pytest.mark.parametrize("session_id", ["a/b c", "../x", "ü?&#%", "x" * 256])
    def test_any_id_percent_encoded(self, store: SqlStore, client: TestClient, session_id: str) -> None:
        """A session id is any text of up to 256 characters: slashes, spaces, '?', '#', '%' …, percent-encoded."""
        write_turns(store, session_id, [1], 1)
        response = client.get(f"/api/v1/sessions/{quote(session_id, safe='')}")
        assert 200 == response.status_code, response.text
        assert session_id == response.json()["session"]["session_id"]

    @pytest.mark.parametrize(("path", "status"), [("nope", 404), ("a%00b", 404), ("x" * 257, 422)])
    def test_unknown_or_bad_404_422(self, store: SqlStore, client: TestClient, path: str, status: int) -> None:
        """An unknown id is a 404 naming it; an over-long one a 422."""
        write_turns(store, "known", [1], 1)
        response = client.get(f"/api/v1/sessions/{path}")
        assert status == response.status_code
        if status == 404:
            assert "not found" in response.json()["detail"]

    def test_turns_bounded(self, store: SqlStore, client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
        """At most MAX_TURNS turns, the first ones, and ``turns_truncated`` says more exist."""
        monkeypatch.setattr(session_queries, "MAX_TURNS", 2)
        write_turns(store, "long", [1, 2, 3], 1)
        body = client.get("/api/v1/sessions/long").json()
        assert [_tid(1), _tid(2)] == [t["trace_id"] for t in body["turns"]]
        assert body["turns_truncated"] is True


class TestRunsBySessionAndUser:
    """GET /api/v1/runs?session=…&user=…"""

    def test_filters(self, store: SqlStore, client: TestClient) -> None:
        """``session`` lists the session's turns, ``user`` the user's runs, both together their intersection."""
        store.write(
            [
                scored_run(_tid(1), session_id="s1", user_id="u1"),
                scored_run(_tid(2), session_id="s1", user_id="u1"),
                scored_run(_tid(3), session_id="s2", user_id="u1"),
                scored_run(_tid(4), session_id="s2", user_id="u2"),
                scored_run(_tid(5)),
            ]
        )

        def listed(**params: str) -> set[str]:
            response = client.get("/api/v1/runs", params=params)
            assert 200 == response.status_code, response.text
            return {r["trace_id"] for r in response.json()["items"]}

        assert {_tid(1), _tid(2)} == listed(session="s1")
        assert {_tid(1), _tid(2), _tid(3)} == listed(user="u1")
        assert {_tid(3)} == listed(session="s2", user="u1")
        assert set() == listed(session="s3")
        detail = client.get(f"/api/v1/runs/{_tid(4)}").json()
        assert ("s2", "u2") == (detail["session_id"], detail["user_id"])
        assert (None, None) == tuple(client.get(f"/api/v1/runs/{_tid(5)}").json()[k] for k in ("session_id", "user_id"))

    @pytest.mark.parametrize("params", [{"session": ""}, {"user": "x" * 257}, {"session": "a\x00"}])
    def test_bad_params(self, client: TestClient, params: dict[str, str]) -> None:
        """An empty, over-long or NUL-carrying id is a 4xx."""
        assert client.get("/api/v1/runs", params=params).status_code in (400, 422)


class TestAuth:
    """The sessions routes need a reader's token, like the runs routes."""

    @pytest.fixture
    def secured(self, store: SqlStore) -> TestClient:
        """A client of an app that requires TOKEN."""
        return TestClient(create_api_app(store, admin_token=TOKEN))

    @pytest.mark.parametrize("path", ["/api/v1/sessions", "/api/v1/sessions/s1"])
    @pytest.mark.parametrize("header", [None, "Bearer wrong"])
    def test_rejected(self, secured: TestClient, path: str, header: str | None) -> None:
        """No or a wrong token: 401 with WWW-Authenticate: Bearer."""
        assert_unauthorized(secured, path, header)

    def test_accepted_and_documented(self, store: SqlStore, secured: TestClient) -> None:
        """The right token reads both routes; both are in the OpenAPI document with a response schema."""
        write_turns(store, "s1", [1], 1)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        assert 200 == secured.get("/api/v1/sessions", headers=headers).status_code
        assert 200 == secured.get("/api/v1/sessions/s1", headers=headers).status_code
        paths = secured.get("/openapi.json").json()["paths"]
        for path in ("/api/v1/sessions", "/api/v1/sessions/{session_id}"):
            assert "schema" in paths[path]["get"]["responses"]["200"]["content"]["application/json"]
