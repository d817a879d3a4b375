"""The session page in a real browser: Debian's chromium driven by Playwright.

:class:`TestCapturedConversation`: a real ``vigil run`` is sent the captured LangGraph
conversations (``tests/fixtures/traces/langgraph_sessions.json``, OTLP/JSON, with the driver's
truth); the session page lists the turns the driver recorded, in order, under the user the
driver set, each with its conversation, the re-ask on the turn the script re-asked in, and the
keyboard walks them.

:class:`TestSessionPage`: a uvicorn server on a free port serves the real API + UI over a SQLite
store holding one flagged conversation of four turns (their run details written by the real details writer). A reviewer
opens the session from the sessions explorer and walks it turn by turn with the keyboard:
``j``/``n`` forward, ``k``/``p`` back; each move focuses the turn, opens it, puts it in view and
in the URL fragment; keys typed in a form field move nothing. An injected ``<script>`` in a
turn's message stays text. The screenshot lands in ``test-artifacts/session.png``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import build_services
from review_queue.session_close import SessionCloser, compile_session_rules
from review_queue.store import SqlStore, upgrade_database
from scorers.redact import Redactor
from tests.support.fixtures import served
from tests.support.sessions import T0, S, chat_turns, put_session
from vigil.process import start_vigil

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ADMIN_TOKEN = "e2e-session-admin"
SESSION = "conv-7f3a/support"
XSS = "<script>window.__xss=1</script>"
EXCHANGES = [
    ("Where is my order 4411?", "Your order 4411 shipped yesterday."),
    ("When will it arrive?", "It should arrive on Thursday."),
    ("It is Friday and still nothing. Where is my order 4411?", "Let me check the carrier again."),
    (f"Can I talk to a human please? {XSS}", "I have asked a colleague to contact you."),
]


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    """The API + UI on a free port over a SQLite store holding the conversation."""
    db = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(db)
    store = SqlStore(db)
    turns = chat_turns(SESSION, EXCHANGES, flagged=(3,), gap_s=40)
    store.write(turns)
    DetailsWriter(store.write_details, Redactor()).write_now(turns)
    ids = [t.run.trace_id for t in turns]
    signals = [
        {"signal": "reask", "trace_id": ids[2], "turn": 3, "span_id": f"{3:015x}2", "span_name": "chat gpt-4o-mini",
         "source": "user message", "value": "Where is my order 4411?"},
        {"signal": "human_request", "trace_id": ids[3], "turn": 4, "span_id": f"{4:015x}2",
         "span_name": "chat gpt-4o-mini", "source": "user message", "value": "talk to a human"},
    ]  # fmt: skip
    queued = chat_turns("conv-q", EXCHANGES, first=11)  # idle since 2023: closed and flagged as a session
    store.write(queued)
    DetailsWriter(store.write_details, Redactor()).write_now(queued)
    closer = SessionCloser(store, compile_session_rules({"long_conversation": {"expr": "turns >= 4"}}))
    assert {SESSION, "conv-q"} == {c.row["session_id"] for c in closer.close_idle()}
    put_session(store, SESSION, user_id="user-1", turns=4, turns_flagged=1, errors=1, first_ns=T0,
                last_ns=T0 + 122 * S, duration_s=122.0, signals=signals, status="closed", closed_at=1.0)  # fmt: skip
    services = build_services(store, admin_token=ADMIN_TOKEN)
    with served(create_api_app(store, admin_token=ADMIN_TOKEN, services=services)) as base:
        yield base
    store.close()


def _state(page: Any) -> dict[str, Any]:
    """Which turn is current, focused, open and in view; the URL fragment."""
    return page.evaluate(
        """() => {
        const current = document.querySelector("details.session-turn.current");
        const focused = document.activeElement && document.activeElement.closest("details.session-turn");
        const box = current ? current.getBoundingClientRect() : null;
        return {
            current: current ? current.id : null,
            focused: focused ? focused.id : null,
            open: current ? current.open : null,
            inView: box ? box.top >= -1 && box.top < window.innerHeight : null,
            hash: window.location.hash,
        };
    }"""
    )


def _at(turn: int) -> dict[str, Any]:
    return {"current": f"turn-{turn}", "focused": f"turn-{turn}", "open": True, "inView": True, "hash": f"#turn-{turn}"}


class TestSessionPage:
    """A reviewer walks a flagged session turn by turn with the keyboard."""

    def test_walk_turns_by_keyboard(self, url: str, browser: Any) -> None:
        """From the explorer to the session; j/n forward, k/p back, clamped at the ends; o closes and
        opens; keys in a form field do nothing; the injected script never runs."""
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{url}/login")
        page.fill("#token", ADMIN_TOKEN)
        with page.expect_navigation():
            page.press("#token", "Enter")
        with page.expect_navigation():
            page.click("#nav-sessions")
        assert 2 == page.locator("tr.session-row").count()
        assert SESSION in page.inner_text("tr.session-row.selected")  # the most recently active first
        with page.expect_navigation():
            page.keyboard.press("Enter")  # the selected (first) row
        assert "/sessions/conv-7f3a%2Fsupport" in page.url
        assert 4 == page.locator("details.session-turn").count()
        assert "j</kbd> / <kbd>n</kbd> next turn" in page.inner_html("#turn-keys")

        page.keyboard.press("j")
        assert _at(1) == _state(page)
        page.keyboard.press("j")
        assert _at(2) == _state(page)
        assert page.is_visible("#turn-2 >> text=It should arrive on Thursday.")
        page.keyboard.press("n")
        assert _at(3) == _state(page)
        assert page.is_visible("#turn-3 .reason >> text=errored")
        assert page.is_visible("#turn-3 .turn-signals >> text=reask")
        page.keyboard.press("n")
        assert _at(4) == _state(page)
        page.keyboard.press("j")  # clamped at the last turn
        assert _at(4) == _state(page)
        assert XSS in page.inner_text("#turn-4")  # shown as text
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "session.png"))
        page.screenshot(path=str(ARTIFACTS / "session-full.png"), full_page=True)
        page.keyboard.press("k")
        assert _at(3) == _state(page)
        page.keyboard.press("p")
        assert _at(2) == _state(page)

        page.keyboard.press("o")
        assert page.evaluate("() => document.getElementById('turn-2').open") is False
        page.keyboard.press("o")
        assert page.evaluate("() => document.getElementById('turn-2').open") is True

        page.evaluate(
            """() => { const box = document.createElement("input"); box.id = "probe";
                       document.querySelector("main").prepend(box); }"""
        )
        page.focus("#probe")
        page.keyboard.type("jjnn")
        assert "jjnn" == page.input_value("#probe")
        assert "#turn-2" == _state(page)["hash"]  # typing moved no turn

        page.goto(f"{url}/sessions/conv-7f3a%2Fsupport#turn-3")  # a link to a turn opens on it
        assert "turn-3" == _state(page)["current"]
        page.keyboard.press("r")  # the turn's run page (flagged: its item page), linking back
        page.wait_for_url("**/items/*")
        assert page.is_visible("#session-nav")
        assert "3" == page.inner_text("#turn-number")
        assert page.evaluate("() => window.__xss") is None
        assert [] == dialogs
        page.screenshot(path=str(ARTIFACTS / "session-turn-item.png"), full_page=True)


def _login(page: Any, base: str, token: str) -> None:
    page.goto(f"{base}/login")
    page.fill("#token", token)
    with page.expect_navigation():
        page.press("#token", "Enter")


class TestCapturedConversation:
    """Captured LangGraph conversations through a real ``vigil run``, read on the session page."""

    def test_session_page_of_a_captured_conversation(self, tmp_path: Path, browser: Any) -> None:
        """The three-turn conversation's page lists the driver's traces in turn order under its user, the
        re-ask on the turn the driver recorded it, and ``j`` walks the turns, each showing its conversation."""
        truth = json.loads((FIXTURES / "langgraph_sessions.truth.json").read_text())
        session = max(truth["sessions"], key=lambda s: len(s["traces"]))
        env = {"VIGIL_QUIET_PERIOD_S": "0.3", "VIGIL_SAMPLE_RATE": "0", "VIGIL_ADMIN_TOKEN": ADMIN_TOKEN}
        with start_vigil(tmp_path, env) as vigil:
            body = (FIXTURES / "langgraph_sessions.json").read_bytes()
            sent = httpx.post(
                f"{vigil.otlp_endpoint}/v1/traces", content=body, headers={"Content-Type": "application/json"}
            )
            assert 200 == sent.status_code
            path = f"/sessions/{quote(session['session_id'], safe='')}"
            auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            deadline = time.monotonic() + 60
            turns: list[str] = []
            while time.monotonic() < deadline:
                found = httpx.get(f"{vigil.api}/api/v1{path}", headers=auth, timeout=10)
                if found.status_code == 200:
                    turns = [t["trace_id"] for t in found.json()["turns"]]
                    if len(turns) >= len(session["traces"]):
                        break
                time.sleep(0.3)
            assert session["traces"] == turns
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            _login(page, vigil.api, ADMIN_TOKEN)
            while True:  # the details writer works a moment behind the store
                page.goto(f"{vigil.api}{path}")
                if page.locator('[data-reason="pending"]').count() == 0 or time.monotonic() > deadline:
                    break
                page.wait_for_timeout(300)
            hrefs = page.eval_on_selector_all("details.session-turn", "els => els.map(e => e.dataset.href)")
            assert [f"/runs/{t}" for t in session["traces"]] == hrefs
            assert session["user_id"] == page.inner_text("#session-summary td >> nth=0")
            assert session["signals"]["reask"], "the fixture's longest conversation re-asks"
            for index in session["signals"]["reask"]:  # the driver's 0-based turn index
                assert "reask" in page.inner_text(f"#turn-{index + 1} summary")
                assert "reask" in page.inner_text(f"#turn-{index + 1} .turn-signals")
            for n in range(1, len(turns) + 1):
                page.keyboard.press("j")
                assert _at(n) == _state(page)
                assert page.locator(f"#turn-{n} .conversation-view").is_visible()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "session-captured.png"), full_page=True)
            page.close()


def _session_item_page(url: str, browser: Any, *, height: int) -> tuple[Any, dict[str, Any]]:
    """A page logged in as admin on the session item of conv-q (its last turn, trace 14), 1280 px wide,
    and that item as the queue API lists it."""
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    items = httpx.get(f"{url}/api/v1/queue", headers=auth, params={"limit": 50}).json()["items"]
    item = next(i for i in items if "long_conversation" in i["reasons"] and i["trace_id"] == f"{14:032x}")
    page = browser.new_page(viewport={"width": 1280, "height": height})
    _login(page, url, ADMIN_TOKEN)
    page.goto(f"{url}/items/{item['id']}")
    return page, item


class TestSessionItemPage:
    """A session flagged into the queue: its item page walks the turns with j/k (p/n stay verdict keys)."""

    def test_walk_turns_on_the_item_page(self, url: str, browser: Any) -> None:
        """The session item of conv-q lists its four turns; j/k move between them like on the session page."""
        page, _ = _session_item_page(url, browser, height=800)
        assert 4 == page.locator("#session-item details.session-turn").count()
        page.keyboard.press("j")
        assert _at(1) == _state(page)
        page.keyboard.press("j")
        assert _at(2) == _state(page)
        page.keyboard.press("k")
        assert _at(1) == _state(page)
        assert page.is_visible("#turn-1 >> text=Where is my order 4411?")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "session-item.png"))
        page.close()

    def test_t_before_any_turn_is_chosen(self, url: str, browser: Any) -> None:
        """``t`` right after claiming (no turn chosen with j/k yet) chooses the first turn and gives it the verdict."""
        page, _ = _session_item_page(url, browser, height=900)
        with page.expect_navigation():
            page.click("#claim-item button")
        assert 0 == page.locator("details.session-turn.current").count()
        page.keyboard.press("t")
        assert f"turn 1 only (run {f'{11:032x}'[:12]})" == page.inner_text("#target-label")
        assert ("turn", f"{11:032x}") == (page.input_value("#target"), page.input_value("#target-trace"))
        assert ["turn-1"] == page.eval_on_selector_all("details.session-turn.current", "els => els.map(e => e.id)")
        assert page.evaluate("document.activeElement.parentElement.id") == "turn-1"
        page.close()

    def test_turn_verdict_by_keyboard(self, url: str, browser: Any) -> None:
        """The verdict form judges the session until ``t`` on a turn gives it to that turn (label and mark say
        which); ``f`` then Enter stores a fail on that turn's trace id; ``t`` twice returns to the session."""
        page, item = _session_item_page(url, browser, height=900)
        page.click("#claim-item button")
        label = page.locator("#target-label")
        assert "the whole session conv-q" == label.inner_text()
        assert ("session", "") == (page.input_value("#target"), page.input_value("#target-trace"))
        page.keyboard.press("j")
        page.keyboard.press("t")
        assert f"turn 1 only (run {f'{11:032x}'[:12]})" == label.inner_text()
        page.keyboard.press("t")  # the same turn again: back to the session
        assert ("the whole session conv-q", "session") == (label.inner_text(), page.input_value("#target"))
        page.keyboard.press("j")
        page.keyboard.press("t")
        assert f"turn 2 only (run {f'{12:032x}'[:12]})" == label.inner_text()
        assert ("turn", f"{12:032x}") == (page.input_value("#target"), page.input_value("#target-trace"))
        assert "Judge the session again" == page.inner_text("#target-toggle-text")
        assert ["turn-2"] == page.eval_on_selector_all("details.session-turn.judged", "els => els.map(e => e.id)")
        page.keyboard.press("f")
        page.locator("#verdict-form").scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "session-turn-verdict.png"))
        assert page.evaluate("() => window.__xss") is None
        with page.expect_navigation():
            page.keyboard.press("Enter")
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        stored = httpx.get(f"{url}/api/v1/items/{item['id']}", headers=auth).json()
        assert [("fail", "turn", f"{12:032x}")] == [
            (v["verdict"], v["target"], v["target_trace_id"]) for v in stored["verdicts"]
        ]
        page.close()
