"""Tests of review_queue.web_sessions and the session parts of the run pages: the sessions explorer,
the session page (turns in order, each with its conversation, signals and evidence; agent text
escaped), a run's link to its session and neighbours, and the runs explorer by session and user."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import ReviewServices, build_services
from review_queue.session_close import SessionCloser, compile_session_rules
from review_queue.session_queries import fresh_entries
from review_queue.store import SqlStore, upgrade_database
from review_queue.views import iso_time
from scorers.model import Step, StepKind
from scorers.redact import Redactor
from tests.support.review_queue import login, scored_run
from tests.support.sessions import T0, S, chat_turns, put_session

ADMIN_TOKEN = "web-sessions-admin"
XSS = "<script>window.__xss=1</script><img src=x onerror=alert(1)>"
EXCHANGES = [
    ("Where is my order 4411?", "It shipped yesterday."),
    ("When will it arrive?", "Thursday."),
    (f"Still nothing. {XSS}", "I am sorry, let me check again."),
]


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[tuple[TestClient, SqlStore, ReviewServices]]:
    """A logged-in admin UI client over a SQLite store."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    store = SqlStore(url)
    services = build_services(store, admin_token=ADMIN_TOKEN)
    client = TestClient(create_api_app(store, admin_token=ADMIN_TOKEN, services=services))
    login(client, services.tokens.create("root", "admin")[0])
    yield client, store, services
    store.close()


def _conversation(store: SqlStore, session_id: str, *, flagged: tuple[int, ...] = (), first: int = 1) -> list[str]:
    turns = chat_turns(session_id, EXCHANGES, flagged=flagged, first=first)
    store.write(turns)
    DetailsWriter(store.write_details, Redactor()).write_now(turns)
    return [t.run.trace_id for t in turns]


def _turn_sections(page: str) -> list[str]:
    return re.findall(r'<details class="session-turn[^"]*" id="(turn-\d+)"', page)


class TestSessionPage:
    """/sessions/{id}: every turn in order, its conversation without the repeated history."""

    def test_turns_signals_evidence(self, ui: Any) -> None:
        """Three turns in order, each a <details> with its run link; the flagged turn's flag and evidence,
        the session signal on its turn; each turn shows only what it added to the conversation."""
        client, store, _ = ui
        ids = _conversation(store, "conv-1", flagged=(3,))
        reask = {"signal": "reask", "trace_id": ids[2], "turn": 3, "span_id": f"{3:015x}2", "span_name": "chat",
                 "source": "user message", "value": "Still nothing."}  # fmt: skip
        put_session(store, "conv-1", turns=3, turns_flagged=1, signals=[reask], status="closed")
        page = client.get("/sessions/conv-1")
        assert 200 == page.status_code
        html = page.text
        assert ["turn-1", "turn-2", "turn-3"] == _turn_sections(html)
        for trace_id in ids:
            assert f'href="/runs/{trace_id}"' in html
        turns = html.split('<details class="session-turn')[1:]
        assert "Where is my order 4411?" in turns[0]
        assert "When will it arrive?" in turns[1]
        assert "Where is my order 4411?" not in turns[1]  # the history the turn repeats is not shown again
        assert "2 messages of the earlier turns not repeated" in turns[1]
        assert "Thursday." in turns[1]
        assert '<span class="signal">reask</span>' in turns[2]
        assert '<span class="reason">errored</span>' in turns[2]
        assert "reask" not in turns[0] + turns[1]
        assert 'href="#turn-3"' in html  # the signal list links to its turn
        assert "j</kbd> / <kbd>n</kbd> next turn" in html  # the keys are documented on the page

    def test_agent_text_escaped(self, ui: Any) -> None:
        """An injected <script> in a turn's message, the session id and a signal value are shown escaped."""
        client, store, _ = ui
        session_id = f"s{XSS}"
        ids = _conversation(store, session_id)
        put_session(store, session_id, user_id=XSS, signals=[{"signal": "reask", "trace_id": ids[2], "turn": 3,
                                                              "source": XSS, "value": XSS}])  # fmt: skip
        for path in (f"/sessions/{quote(session_id, safe='')}", "/sessions", f"/runs/{ids[1]}"):
            page = client.get(path)
            assert 200 == page.status_code, path
            assert "<script>window.__xss" not in page.text, path
            assert "<img src=x" not in page.text, path
            assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in page.text, path
        session_page = client.get(f"/sessions/{quote(session_id, safe='')}").text
        assert "Still nothing. &lt;script&gt;" in session_page  # the turn's message, escaped

    def test_unknown_404(self, ui: Any) -> None:
        """An unknown session answers the error page with 404."""
        client, _, _ = ui
        page = client.get("/sessions/nope")
        assert 404 == page.status_code
        assert "session nope not found" in page.text

    def test_long_session_shows_first_turns(self, ui: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        """Past PAGE_TURNS the page shows the first turns and links to the runs explorer for the rest."""
        from review_queue import web_sessions

        client, store, _ = ui
        monkeypatch.setattr(web_sessions, "PAGE_TURNS", 2)
        _conversation(store, "long")
        html = client.get("/sessions/long").text
        assert ["turn-1", "turn-2"] == _turn_sections(html)
        assert 'href="/runs?session=long"' in html


class TestSessionItemPage:
    """A session flagged into the queue (its last turn's item) shows the whole session on the item page."""

    def test_item_page_shows_every_turn(self, ui: Any) -> None:
        """The closer flags the idle three-turn session by a session rule; its item page lists the three
        turns in order, each with its conversation, the injected script escaped; j/k are documented."""
        client, store, _ = ui
        ids = _conversation(store, "conv-q")
        closer = SessionCloser(store, compile_session_rules({"long_conversation": {"expr": "turns >= 3"}}))
        assert ["conv-q"] == [c.row["session_id"] for c in closer.close_idle()]
        (item,) = client.get("/api/v1/queue").json()["items"]
        assert ids[2] == item["trace_id"]
        assert "long_conversation" in item["reasons"]
        page = client.get(f"/items/{item['id']}")
        assert 200 == page.status_code
        html = page.text
        assert 'id="session-item"' in html
        assert ["turn-1", "turn-2", "turn-3"] == _turn_sections(html)
        turns = html.split('<details class="session-turn')[1:]
        assert "Where is my order 4411?" in turns[0]
        assert "Still nothing. &lt;script&gt;window.__xss=1&lt;/script&gt;" in turns[2]
        assert "<script>window.__xss" not in html
        assert "<kbd>j</kbd> next turn · <kbd>k</kbd> previous turn" in html
        assert 'id="conversation-view"' not in html  # the last turn is among the turns, not shown twice

    def test_plain_item_page_unchanged(self, ui: Any) -> None:
        """A run's own item (not a session's) keeps its single conversation."""
        client, store, _ = ui
        _conversation(store, "conv-r", flagged=(2,))
        (item,) = client.get("/api/v1/queue").json()["items"]
        html = client.get(f"/items/{item['id']}").text
        assert 'id="session-item"' not in html
        assert 'id="conversation-view"' in html
        assert 'id="session-nav"' in html


class TestRunPageNeighbours:
    """A run's page (and a flagged run's item page) link to its session and its neighbour turns."""

    def test_middle_first_last(self, ui: Any) -> None:
        """Turn 2 links to turns 1 and 3; turn 1 has no previous, turn 3 no next; all link to the session."""
        client, store, _ = ui
        ids = _conversation(store, "conv/2 ?", flagged=(3,))
        middle = client.get(f"/runs/{ids[1]}").text
        assert 'id="turn-number">2</b> of 3' in middle
        assert f'href="/runs/{ids[0]}" id="previous-turn"' in middle
        assert f'href="/runs/{ids[2]}" id="next-turn"' in middle
        assert 'href="/sessions/conv%2F2%20%3F#turn-2" id="session-link"' in middle
        first = client.get(f"/runs/{ids[0]}").text
        assert 'id="previous-turn"' not in first
        assert "first turn" in first
        item = client.get(f"/runs/{ids[2]}")  # flagged: the item page
        assert "/items/" in str(item.url)
        assert 'id="next-turn"' not in item.text
        assert f'href="/runs/{ids[1]}" id="previous-turn"' in item.text
        assert 200 == client.get("/sessions/conv%2F2%20%3F").status_code

    def test_run_without_session(self, ui: Any) -> None:
        """A run without a session id is a session of one: no session navigation."""
        client, store, _ = ui
        store.write([scored_run("ab" * 16)])
        assert 'id="session-nav"' not in client.get(f"/runs/{'ab' * 16}").text


class TestSessionsExplorer:
    """/sessions lists, filters and sorts sessions; /runs filters by session and user."""

    def test_list_filter_sort(self, ui: Any) -> None:
        """Rows link to their session pages; the user, status and signal filters and the turns sort apply."""
        client, store, _ = ui
        put_session(store, "a", user_id="u1", turns=3, last_ns=T0 + 3 * S, signals=[{"signal": "reask"}])
        put_session(store, "b", user_id="u2", turns=5, last_ns=T0 + 2 * S, status="closed")
        put_session(store, "c", user_id="u1", turns=1, last_ns=T0 + S, status="closed")

        def listed(query: str = "") -> list[str]:
            page = client.get("/sessions" + query)
            assert 200 == page.status_code
            return re.findall(r'<tr class="run-row session-row" data-href="/sessions/([^"]+)"', page.text)

        assert ["a", "b", "c"] == listed()
        assert ["a", "c"] == listed("?user=u1")
        assert ["b", "c"] == listed("?status=closed")
        assert ["a"] == listed("?signal=reask")
        assert ["b", "a", "c"] == listed("?sort=turns")
        assert ["c", "a", "b"] == listed("?sort=turns&order=asc")
        assert ["a", "b", "c"] == listed("?since_h=1e300")  # far beyond any time: clamped, everything
        assert [] == listed("?since_h=-1e300")
        assert 'id="nav-sessions"' in client.get("/sessions").text

    def test_bad_cursor_says_so(self, ui: Any) -> None:
        """A malformed cursor shows a one-line error on the page, not a 500."""
        client, _, _ = ui
        page = client.get("/sessions?cursor=%%%")
        assert 200 == page.status_code
        assert 'id="sessions-error">malformed cursor' in page.text

    def test_runs_by_session_and_user(self, ui: Any) -> None:
        """The runs explorer's session and user filters list exactly those runs, with a link to the session."""
        client, store, _ = ui
        _conversation(store, "s1", first=1)
        store.write([scored_run(f"{9:032x}", session_id="s2", user_id="other")])

        def listed(query: str) -> set[str]:
            page = client.get("/runs" + query)
            assert 200 == page.status_code
            return set(re.findall(r'data-trace="([0-9a-f]{32})"', page.text))

        assert {f"{n:032x}" for n in (1, 2, 3)} == listed("?session=s1")
        assert {f"{9:032x}"} == listed("?user=other")
        assert set() == listed("?session=s1&user=other")
        assert 'href="/sessions/s1"' in client.get("/runs?session=s1").text

    def test_runs_list_their_start_time_and_cost(self, tmp_path: Path) -> None:
        """Each row of the runs explorer says when its run started (UTC) and what it cost where priced."""
        from scorers.pricing import PriceTable

        url = f"sqlite:///{tmp_path / 'priced.db'}"
        upgrade_database(url)
        store = SqlStore(url, prices=PriceTable())
        services = build_services(store, admin_token=ADMIN_TOKEN)
        client = TestClient(create_api_app(store, admin_token=ADMIN_TOKEN, services=services))
        login(client, services.tokens.create("root", "admin")[0])
        start = T0
        root = Step("1" * 16, None, "invoke_agent support", StepKind.AGENT, start, start + 2 * S)
        llm = Step(
            "2" * 16, root.span_id, "chat gpt-4o-mini", StepKind.LLM, start, start + S,
            model="gpt-4o-mini", input_tokens=1000, output_tokens=100,
        )  # fmt: skip
        turns = [
            scored_run(
                f"{1:032x}", agent="support", session_id="s1", start_ns=start, end_ns=start + 2 * S,
                input_tokens=1000, output_tokens=100, llm_calls=1, steps=(root, llm),
            )
        ]  # fmt: skip
        store.write(turns)
        page = client.get("/runs").text
        started = re.findall(r'<time datetime="([^"]+)" title="run started', page)
        assert [iso_time(turns[0].run.start_ns / 1e9)] == started
        assert started[0].startswith("2023-11-14T")  # T0 is 1,700,000,000 s
        assert re.search(r'<span class="cost"[^>]*>\$\d+\.\d{4}</span>', page)
        sessions_page = client.get("/sessions").text
        assert re.search(r'<span class="cost"[^>]*>\$\d+\.\d{4}</span>', sessions_page)
        assert [iso_time(turns[-1].run.end_ns / 1e9)] == re.findall(
            r'<time datetime="([^"]+)" title="last turn ended', sessions_page
        )
        store.close()


class TestFreshEntries:
    """review_queue.session_queries.fresh_entries: what a turn adds to the previous turn's conversation."""

    @staticmethod
    def _m(role: str, text: str) -> dict[str, Any]:
        return {"kind": "message", "role": role, "content": text}

    def test_history_dropped_reask_kept(self) -> None:
        """The repeated history is dropped in order; the same question asked again later is kept."""
        m = self._m
        previous = [m("user", "q1"), m("assistant", "a1")]
        current = [m("user", "q1"), m("assistant", "a1"), m("user", "q1"), {"kind": "tool", "name": "t"}]
        assert ([m("user", "q1"), {"kind": "tool", "name": "t"}], 2) == fresh_entries(previous, current)

    def test_final_answer_shown_apart(self) -> None:
        """A previous final answer (kind ``final``) matches the assistant message the history repeats."""
        m = self._m
        previous = [m("user", "q1"), {"kind": "final", "content": "a1"}]
        assert ([m("user", "q2")], 2) == fresh_entries(
            previous, [m("user", "q1"), m("assistant", "a1"), m("user", "q2")]
        )

    def test_first_turn_and_rewritten_history(self) -> None:
        """Nothing before: everything is new; a history that differs from the start is kept whole."""
        m = self._m
        assert ([m("user", "q")], 0) == fresh_entries([], [m("user", "q")])
        assert ([m("system", "summary"), m("user", "q2")], 0) == fresh_entries(
            [m("user", "q1")], [m("system", "summary"), m("user", "q2")]
        )
