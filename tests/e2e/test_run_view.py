"""A reviewer judges a run from one page: Debian's chromium (Playwright) over a real ``vigil run``.

Captured instrumentor traces (``tests/fixtures/traces``) are replayed into ``vigil run`` with
``vigil replay``; the run details (spans with attributes and events, the conversation) are written
by its details writer. Checked in the browser: the conversation of four dialects (OTel GenAI,
OpenInference, Traceloop, Vercel AI SDK), a span opened from the tree by keyboard shows its
attributes and exception event, evidence links and deep links land on their span, the runs
explorer's filters return the right runs, "send to review" makes an item, and ``?`` shows the
shortcuts. Screenshots of each page land in ``test-artifacts/``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from collector.model import SpanEvent
from collector.otlp import decode_json
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import build_services
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Evidence, Step, StepKind, ToolCall
from scorers.redact import Redactor
from tests.support.fixtures import served
from tests.support.review_queue import scored_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ADMIN_TOKEN = "e2e-run-view-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
STACKS = ("genai_loop", "langgraph_agent", "traceloop_loop", "vercel_ai")
"""One capture per dialect: OTel GenAI, OpenInference, Traceloop, Vercel AI SDK."""


def _truth(stack: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((FIXTURES / f"{stack}.truth.json").read_text())["runs"]
    return runs


def _trace(stack: str, scenario: str) -> str:
    return str(next(r["trace_id"] for r in _truth(stack) if r["scenario"] == scenario))


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run`` (admin token, no random sample) with the four captures replayed and their details written."""
    env = {
        "VIGIL_QUIET_PERIOD_S": "0.3",
        "VIGIL_SAMPLE_RATE": "0",
        "VIGIL_ADMIN_TOKEN": ADMIN_TOKEN,
        "VIGIL_DETAILS_RETENTION_DAYS": "7",
        "VIGIL_DETAILS_SAMPLE_RATE": "1",  # details of every run, not only flagged ones and a share of the rest
    }
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        files = [str(FIXTURES / f"{stack}.json") for stack in STACKS]
        subprocess.run(
            [sys.executable, "-m", "vigil.cli", "replay", "--endpoint", running.otlp_endpoint,
             "--no-progress", *files],
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        expected = {r["trace_id"] for stack in STACKS for r in _truth(stack)}
        _wait_for(lambda: expected <= _stored(running) and _details(running, expected), 60)
        yield running


def _stored(vigil: VigilProcess) -> set[str]:
    found: set[str] = set()
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        page = httpx.get(f"{vigil.api}/api/v1/runs", params=params, headers=ADMIN, timeout=10).json()
        found |= {r["trace_id"] for r in page["items"]}
        cursor = page.get("next_cursor")
        if not cursor:
            return found


def _details(vigil: VigilProcess, trace_ids: set[str]) -> bool:
    import sqlite3

    with sqlite3.connect(vigil.workdir / "vigil.db") as db:
        kept = {row[0] for row in db.execute("SELECT trace_id FROM run_details")}
    return trace_ids <= kept


def _wait_for(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError("timed out")


@pytest.fixture
def page(vigil: VigilProcess, browser: Any) -> Iterator[Any]:
    """A logged-in admin page (the bootstrap admin token), failing on any dialog."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    dialogs: list[str] = []
    tab.on("dialog", _collect(dialogs))
    tab.goto(f"{vigil.api}/login")
    tab.fill("#token", ADMIN_TOKEN)
    with tab.expect_navigation():
        tab.press("#token", "Enter")
    yield tab
    assert [] == dialogs
    context.close()


def _collect(dialogs: list[str]) -> Any:
    """A dialog handler that records the message and dismisses the dialog."""

    def handle(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    return handle


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


class TestConversation:
    """The conversation sits at the top of the run page, in order, for every dialect."""

    @pytest.mark.parametrize(
        ("stack", "scenario", "user", "answer"),
        [
            ("genai_loop", "gl_normal", "What is the weather in Paris?", "Sunny in Paris."),
            ("langgraph_agent", "lg_normal", "Please help.", "Sunny, 21 C in Paris."),
            ("traceloop_loop", "tl_normal", "What is the weather in Paris?", "Sunny in Paris."),
            ("vercel_ai", "va_normal", "Weather in Paris?", "Sunny, 21 C in Paris."),
        ],
    )
    def test_dialect(  # noqa: PLR0917 - pytest passes the parameters
        self, vigil: VigilProcess, page: Any, stack: str, scenario: str, user: str, answer: str
    ) -> None:
        """The user's input, the requested tool call with its arguments and result, and the answer, in that order."""
        page.goto(f"{vigil.api}/runs/{_trace(stack, scenario)}")
        turns = page.locator("#conversation > li")
        texts = [t.strip() for t in turns.all_inner_texts()]
        kinds = page.eval_on_selector_all("#conversation > li", "els => els.map(e => e.className)")
        user_at = next(i for i, t in enumerate(texts) if user in t and "role-user" in kinds[i])
        tool_at = next(i for i, k in enumerate(kinds) if "turn-tool" in k)
        answer_at = max(i for i, t in enumerate(texts) if answer in t)
        assert user_at < tool_at < answer_at
        assert "get_weather" in texts[tool_at]
        assert "Paris" in texts[tool_at]
        assert 0 == page.locator("#no-content").count()
        # the conversation is what the page opens on; the spans are behind the Trace tab (v)
        assert page.is_visible("#conversation-view")
        assert not page.is_visible("#spans")
        page.keyboard.press("v")
        assert page.is_visible("#spans")
        assert not page.is_visible("#conversation-view")
        _shot(page, f"run-conversation-{stack}.png")


def _exception_span(stack: str, trace_id: str) -> tuple[str, str, str]:
    """(span id, exception type, an attribute key) of the first non-root span of a trace with an exception event."""
    result = decode_json((FIXTURES / f"{stack}.json").read_bytes())
    for batch in result.batches:
        for span in batch.spans:
            if span.trace_id != trace_id or span.parent_span_id is None:
                continue
            for event in span.events:
                if event.name == "exception":
                    key = next(k for k in span.attributes if "tool" in k)
                    return span.span_id, str(event.attributes.get("exception.type")), key
    raise AssertionError("no exception event")


class TestSpanDetails:
    """The span tree is a keyboard-driven tree; the selected span shows everything it carries."""

    def test_keyboard_opens_exception_span(self, vigil: VigilProcess, page: Any) -> None:
        """j moves through the spans; the tool span that raised shows its attributes and its exception event."""
        trace_id = _trace("langgraph_agent", "lg_tool_error")
        span_id, exc_type, key = _exception_span("langgraph_agent", trace_id)
        page.goto(f"{vigil.api}/runs/{trace_id}")
        page.keyboard.press("j")
        for _ in range(60):
            if page.get_attribute(".span-row.selected", "data-span") == span_id:
                break
            page.keyboard.press("j")
        assert span_id == page.get_attribute(".span-row.selected", "data-span")
        assert page.evaluate("document.activeElement.id") == span_id  # focus follows the selection
        detail = page.locator(f"#detail-{span_id}")
        assert detail.is_visible()
        assert 1 == page.locator(".span-detail:not([hidden])").count()
        assert key in detail.locator("table.span-attrs").inner_text()
        assert exc_type in detail.locator(".span-event.exception").inner_text()
        assert "error" in detail.locator("dl.facts").inner_text()
        assert page.url.endswith(f"#{span_id}")  # the selection is a deep link
        page.keyboard.press("k")
        assert span_id != page.get_attribute(".span-row.selected", "data-span")
        page.keyboard.press("j")
        page.keyboard.press("y")  # copy as JSON
        for _ in range(50):  # (wait_for_function evaluates a string: the CSP forbids it)
            if page.get_attribute("body", "data-copied"):
                break
            page.wait_for_timeout(100)
        assert span_id == page.get_attribute("body", "data-copied")
        copied = page.request.get(f"{vigil.api}/runs/{trace_id}/spans/{span_id}.json").json()
        assert span_id == copied["span_id"]
        assert key in copied["attributes"]
        assert "exception" == copied["events"][0]["name"]
        _shot(page, "run-span-details.png")

    def test_mouse_and_deep_link(self, vigil: VigilProcess, page: Any) -> None:
        """A click selects a span; /runs/<trace_id>#<span_id> opens on that span (through the item redirect too)."""
        trace_id = _trace("langgraph_agent", "lg_tool_error")
        span_id, _, _ = _exception_span("langgraph_agent", trace_id)
        page.goto(f"{vigil.api}/runs/{trace_id}#{span_id}")
        page.wait_for_selector(f"#detail-{span_id}:not([hidden])")
        assert span_id == page.get_attribute(".span-row.selected", "data-span")
        first = page.locator(".span-row").first
        first.click()
        assert first.get_attribute("data-span") == page.get_attribute(".span-row.selected", "data-span")


class TestEvidence:
    """Each flag reason's evidence links to the span that decided it."""

    def test_evidence_links_land_on_span(self, vigil: VigilProcess, page: Any) -> None:
        """Clicking the evidence link selects the span named by the stored evidence and shows its details."""
        trace_id = _trace("genai_loop", "gl_max_iterations")
        run = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", headers=ADMIN, timeout=10).json()
        with_span = [e for e in run["evidence"] if e["span_id"]]
        assert with_span, run["evidence"]
        page.goto(f"{vigil.api}/runs/{trace_id}")
        assert "/items/" in page.url  # flagged: the run page is its item page
        link = page.locator(f'a.ev-span[href="#{with_span[0]["span_id"]}"]').first
        link.click()
        assert with_span[0]["span_id"] == page.get_attribute(".span-row.selected", "data-span")
        assert page.locator(f"#detail-{with_span[0]['span_id']}").is_visible()
        assert page.url.endswith("#" + with_span[0]["span_id"])
        page.keyboard.press("e")  # the keyboard walks the evidence spans too
        assert page.get_attribute(".span-row.selected", "data-span") in {e["span_id"] for e in with_span}
        _shot(page, "item-evidence-span.png")
        last = with_span[-1]["span_id"]  # a deep link to a flagged run's span survives the redirect to its item
        page.goto(f"{vigil.api}/runs/{trace_id}#{last}")
        assert "/items/" in page.url
        assert page.url.endswith(f"#{last}")
        assert last == page.get_attribute(".span-row.selected", "data-span")
        assert page.locator(f"#detail-{last}").is_visible()


class TestExplorer:
    """/runs lists every stored run; the filters return exactly the matching runs."""

    def _shown(self, page: Any) -> set[str]:
        return set(page.eval_on_selector_all("tr.run-row", "els => els.map(e => e.getAttribute('data-trace'))"))

    def test_filters(self, vigil: VigilProcess, page: Any) -> None:
        """agent, errored, flagged, text in the final answer, trace prefix: the same runs as the fixtures' truth."""
        truth = [r for stack in STACKS for r in _truth(stack)]
        page.goto(f"{vigil.api}/runs?agent=orders_agent")
        assert {r["trace_id"] for r in truth if r["agent"] == "orders_agent"} == self._shown(page)
        _shot(page, "runs-explorer-agent.png")

        stored = {r["trace_id"]: r for r in _api_runs(vigil)}
        page.goto(f"{vigil.api}/runs?errored=yes")
        assert {t for t, r in stored.items() if r["errored"]} == self._shown(page)
        page.goto(f"{vigil.api}/runs?flagged=no&status=ok")
        assert {t for t, r in stored.items() if not r["flag"] and r["status"] == "ok"} == self._shown(page)

        page.goto(f"{vigil.api}/runs?q=SUNNY")  # text of a final answer, any case
        import sqlite3

        with sqlite3.connect(vigil.workdir / "vigil.db") as db:
            answers = dict(db.execute("SELECT trace_id, final_output FROM run_details"))
        matching = {t for t, text in answers.items() if text and "sunny" in text.lower()}
        assert matching
        assert matching == self._shown(page)

        one = _trace("vercel_ai", "va_normal")
        page.goto(f"{vigil.api}/runs")
        page.keyboard.press("/")
        page.keyboard.type(one[:10])
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert {one} == self._shown(page)
        page.fill("#trace-search", one)
        with page.expect_navigation():
            page.press("#trace-search", "Enter")
        assert page.url.endswith(f"/runs/{one}")  # a full trace id opens the run

    def test_sort_and_pages(self, vigil: VigilProcess, page: Any) -> None:
        """Sorted by duration, five runs a page: the pages together hold every run once, in order."""
        stored = _api_runs(vigil)
        seen: list[str] = []
        page.goto(f"{vigil.api}/runs?sort=duration&order=asc&limit=5")
        while True:
            seen.extend(page.eval_on_selector_all("tr.run-row", "els => els.map(e => e.getAttribute('data-trace'))"))
            if page.locator("#next-page").count() == 0:
                break
            with page.expect_navigation():
                page.keyboard.press("n")
        assert sorted(r["trace_id"] for r in stored) == sorted(seen)
        durations = {r["trace_id"]: r["duration_s"] for r in stored}
        assert [durations[t] for t in seen] == sorted(durations[t] for t in seen)

    def test_send_to_review(self, vigil: VigilProcess, page: Any) -> None:
        """s on a selected unflagged run makes a review item with reason manual."""
        trace_id = _trace("vercel_ai", "va_parallel")
        page.goto(f"{vigil.api}/runs?trace={trace_id[:16]}")
        assert {trace_id} == self._shown(page)
        with page.expect_navigation():
            page.keyboard.press("s")
        assert "/items/" in page.url
        assert "manual" in page.inner_text("#flag")
        run = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", headers=ADMIN, timeout=10).json()
        assert ["manual"] == run["flag"]["reasons"]
        _shot(page, "item-sent-to-review.png")


class TestShortcuts:
    """? lists the shortcuts on every page; Esc closes the list."""

    def test_help(self, vigil: VigilProcess, page: Any) -> None:
        """The list opens and closes from the keyboard."""
        for path in ("/queue", "/runs", "/stats"):
            page.goto(f"{vigil.api}{path}")
            assert not page.locator("#shortcuts").is_visible()
            page.keyboard.press("?")
            assert page.locator("#shortcuts").is_visible()
            if path == "/runs":
                _shot(page, "shortcuts.png")
            page.keyboard.press("Escape")
            assert not page.locator("#shortcuts").is_visible()
        page.keyboard.press("g")
        with page.expect_navigation():
            page.keyboard.press("r")
        assert page.url.endswith("/runs")


def _api_runs(vigil: VigilProcess) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        body = httpx.get(f"{vigil.api}/api/v1/runs", params=params, headers=ADMIN, timeout=10).json()
        found.extend(body["items"])
        cursor = body.get("next_cursor")
        if not cursor:
            return found


# ---- in-process server: a fixed clock (stats buckets) and hostile content (inert views) ----

NOW = datetime(2026, 11, 24, 22, 55, tzinfo=UTC).timestamp()
"""The stats clock: 22:55 UTC. Flags at 22:50 must count under "22" (they used to show under "21")."""
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_IMG = '<img src=x onerror="window.__xss=2">'
XSS_JS = "javascript:window.__xss=3"
T_NS = 1_700_000_000_000_000_000


@dataclass
class Inproc:
    """The API + UI of one store, served by uvicorn on a free port."""

    url: str
    store: SqlStore
    token: str


@pytest.fixture
def inproc(tmp_path: Path) -> Iterator[Inproc]:
    """A store whose writes are stamped by a settable clock, served with the stats clock at 22:55 UTC."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    stamp = {"now": NOW}
    store = SqlStore(url, clock=lambda: stamp["now"])
    store.stamp = stamp  # type: ignore[attr-defined]
    services = build_services(store, admin_token="inproc-admin", clock=lambda: NOW)
    app = create_api_app(store, admin_token="inproc-admin", services=services)
    with served(app) as url:
        yield Inproc(url, store, "inproc-admin")
    store.close()


def _login_inproc(browser: Any, server: Inproc) -> Any:
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    tab.goto(f"{server.url}/login")
    tab.fill("#token", server.token)
    with tab.expect_navigation():
        tab.press("#token", "Enter")
    return tab


def _flag_at(store: SqlStore, n: int, hour: int, minute: int, reason: str = "tool_loop") -> None:
    store.stamp["now"] = datetime(2026, 11, 24, hour, minute, tzinfo=UTC).timestamp()  # type: ignore[attr-defined]
    store.write([scored_run(f"{n:032x}", reasons=[reason], agent="support")])


class TestStatsClock:
    """Hour buckets against a fixed clock, in the browser."""

    def test_current_hour_under_its_label(self, inproc: Inproc, browser: Any) -> None:
        """At 22:55 a flag of 22:50 is under "22" and one of 21:10 under "21"; the charts are drawn."""
        _flag_at(inproc.store, 1, 21, 10)
        _flag_at(inproc.store, 2, 22, 50)
        _flag_at(inproc.store, 3, 22, 5, reason="errored")
        page = _login_inproc(browser, inproc)
        page.goto(f"{inproc.url}/stats")
        labels = page.eval_on_selector_all("#flags thead th", "els => els.map(e => e.textContent)")
        assert ["21", "22", "Total"] == labels[-3:]
        cells = page.eval_on_selector_all('#flags tr[data-reason="tool_loop"] td', "els => els.map(e => e.textContent)")
        assert ["1", "1", "2"] == cells[-3:]
        errored = page.eval_on_selector_all('#flags tr[data-reason="errored"] td', "els => els.map(e => e.textContent)")
        assert ["0", "1", "1"] == errored[-3:]
        assert page.locator("#depth-all polyline").count() >= 1  # queue depth over time, server-rendered SVG
        assert page.locator("#depth-charts figure").count() == 2  # all agents + "support"
        assert page.locator("#rate-charts figure").count() >= 1
        _shot(page, "stats.png")


def _hostile_scored() -> Any:
    hostile_attrs: dict[str, Any] = {
        XSS_SCRIPT: XSS_IMG,
        "url": XSS_JS,
        "gen_ai.input.messages": json.dumps([{"role": "user", "content": f"{XSS_SCRIPT} {XSS_JS}"}]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "content": XSS_IMG}]),
    }
    event = SpanEvent("exception", T_NS, {"exception.type": XSS_IMG, "exception.message": XSS_SCRIPT, XSS_IMG: XSS_JS})
    steps = (
        Step("a" * 16, None, XSS_IMG, StepKind.AGENT, T_NS, T_NS + 10**9, error=True, status_message=XSS_SCRIPT,
             events=(event,), attributes={XSS_IMG: XSS_SCRIPT}),
        Step("b" * 16, "a" * 16, XSS_JS, StepKind.LLM, T_NS + 10**8, T_NS + 5 * 10**8, model=XSS_IMG,
             attributes=hostile_attrs),
        Step("c" * 16, "a" * 16, XSS_SCRIPT, StepKind.TOOL, T_NS + 6 * 10**8, T_NS + 7 * 10**8, error=True,
             attributes={"tool.name": XSS_IMG}),
    )  # fmt: skip
    tools = (ToolCall("c" * 16, XSS_IMG, XSS_JS, json.dumps({"q": XSS_SCRIPT}), XSS_IMG, XSS_SCRIPT),)
    evidence = (Evidence("errored", XSS_IMG, "a" * 16, XSS_SCRIPT, XSS_JS, XSS_IMG),)
    return scored_run(
        "d" * 32, agent=XSS_IMG, service=XSS_SCRIPT, steps=steps, tools=tools, final_output=XSS_SCRIPT + XSS_JS,
        errored=True, error_type=XSS_IMG, span_count=3, start_ns=T_NS, end_ns=T_NS + 10**9, evidence=evidence,
    )  # fmt: skip


class TestInertPayloads:
    """Attacker text in prompts, tool output, attribute keys and values, events and agent names stays text."""

    def test_every_new_view(self, inproc: Inproc, browser: Any) -> None:
        """Run page (conversation, span details), explorer, item page after send to review, stats: no script runs."""
        scored = _hostile_scored()
        inproc.store.write([scored])
        DetailsWriter(inproc.store.write_details, Redactor()).write_now([scored])
        page = _login_inproc(browser, inproc)
        dialogs: list[str] = []
        page.on("dialog", _collect(dialogs))
        views = [
            f"/runs/{'d' * 32}#{'b' * 16}",
            f"/runs?agent={quote(XSS_IMG)}",
            f"/runs?q={quote(XSS_SCRIPT)}",
            "/stats",
        ]
        for path in views:
            page.goto(f"{inproc.url}{path}")
            page.wait_for_load_state("load")
            for index in range(page.locator(".span-row").count()):  # open every span's details
                page.locator(".span-row").nth(index).click()
            page.keyboard.press("a")  # unfold every long text
            _assert_inert(page)
        page.goto(f"{inproc.url}/runs/{'d' * 32}#{'b' * 16}")
        assert XSS_IMG in page.inner_text("#conversation")
        assert XSS_SCRIPT in page.inner_text("#conversation")
        detail = page.locator(f"#detail-{'b' * 16}")
        assert detail.is_visible()
        assert XSS_JS in detail.inner_text()  # the value, as text
        assert XSS_SCRIPT in detail.inner_text()  # an attribute key, as text
        _shot(page, "run-view-payloads-details.png")
        page.keyboard.press("s")  # send to review, then the item page
        page.wait_for_url("**/items/*")
        page.keyboard.press("e")
        _assert_inert(page)
        assert XSS_IMG in page.inner_text("#summary")
        _shot(page, "item-payloads.png")
        page.goto(f"{inproc.url}/runs")
        assert XSS_IMG in page.inner_text("#runs")
        _assert_inert(page)
        _shot(page, "runs-explorer-payloads.png")
        assert [] == dialogs


def _assert_inert(page: Any) -> None:
    page.wait_for_timeout(150)
    assert "undefined" == page.evaluate("typeof window.__xss")
    assert 0 == page.locator("img").count()
    assert 0 == page.locator("main script, main iframe, main object").count()
    hrefs = page.eval_on_selector_all(
        "[href], [src], [action]",
        "els => els.map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action'))",
    )
    assert not [h for h in hrefs if h and h.strip().lower().startswith("javascript:")]
    sources = page.eval_on_selector_all("script", "els => els.map(e => e.getAttribute('src'))")
    assert ["/static/triage.js"] == sources
