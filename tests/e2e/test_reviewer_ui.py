"""The reviewer UI in a real browser: Debian's chromium driven by Playwright (never a downloaded browser).

A uvicorn server on a free port serves the real API + UI over a SQLite store seeded with
flagged runs. Screenshots of the queue and of a run view land in ``test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from review_queue.tables import review_verdicts
from scorers.model import Message, Step, StepKind, ToolCall
from tests.support.ui import Server, T, login, press_and_wait, run, serve

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

XSS_AGENT = '<img src=x onerror="window.__xss=1">'
XSS_OUTPUT = "<script>window.__xss=2</script>Here is your answer"
XSS_TOOL = "<img src=x onerror=alert(1)>"
XSS_MESSAGE = "<script>alert('message')</script>"
XSS_STEP = "<svg onload=alert(1)>"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """The API + UI on a free port over a fresh SQLite store."""
    yield from serve(tmp_path)


class TestKeyboardTriage:
    """A reviewer logs in and triages three items with the keyboard only."""

    def test_three_items_by_keyboard(self, server: Server, browser: Any) -> None:
        """c claims, f/p/1-9/n set the verdict, Enter submits and advances (to the next item, unclaimed: Enter
        claims it); every verdict lands."""
        server.store.write([run(n) for n in (1, 2, 3)])
        token, _ = server.services.tokens.create("alice", "reviewer")
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        dialogs: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        login(page, server, token)
        assert "3" == page.inner_text('#counts b[data-state="pending"]')
        page.keyboard.press("j")
        assert "2" == page.get_attribute("tr.item-row.selected", "data-item")
        page.keyboard.press("k")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "queue.png"), full_page=True)

        press_and_wait(page, "c")
        first = page.url
        assert first.endswith("/items/1")
        assert "search" in page.inner_text("#conversation")
        assert "Timeout: 5 s" in page.inner_text("#conversation")
        assert "Question 1" in page.inner_text("#conversation")
        assert 4 == page.locator("#waterfall .span-row").count()
        assert "0.05" == page.inner_text("#sample-rate")
        page.screenshot(path=str(ARTIFACTS / "run-view.png"), full_page=True)
        page.keyboard.press("f")
        page.keyboard.press("1")
        page.keyboard.press("n")
        page.keyboard.type("called search for a refund question")
        page.keyboard.press("Escape")
        press_and_wait(page, "Enter")
        assert page.url.endswith("/items/2?saved=1")
        assert "Verdict on item 1 saved" in page.inner_text("#saved")  # a confirmation on the next item
        press_and_wait(page, "Enter")  # the next item opens unclaimed, its claim button focused: Enter claims it

        page.keyboard.press("p")
        press_and_wait(page, "Enter")
        assert page.url.endswith("/items/3?saved=2")
        press_and_wait(page, "Enter")

        page.keyboard.press("2")  # a category implies fail
        page.keyboard.press("5")
        press_and_wait(page, "Enter")
        assert "/queue" in page.url
        assert "Nothing left to claim" in page.inner_text("#notice")
        assert [] == dialogs

        with server.store.engine.connect() as conn:
            rows = conn.execute(sa.select(review_verdicts).order_by(review_verdicts.c.item_id)).mappings().all()
        got = [(r["item_id"], r["reviewer"], r["verdict"], list(r["categories"]), r["notes"]) for r in rows]
        assert [
            (1, "alice", "fail", ["wrong_tool"], "called search for a refund question"),
            (2, "alice", "pass", [], ""),
            (3, "alice", "fail", ["wrong_arguments", "loop"], ""),
        ] == got

    def test_enter_without_verdict_does_not_submit(self, server: Server, browser: Any) -> None:
        """Enter before choosing pass or fail keeps the reviewer on the item."""
        server.store.write([run(7)])
        token, _ = server.services.tokens.create("bob", "reviewer")
        page = browser.new_page()
        login(page, server, token)
        press_and_wait(page, "c")
        page.keyboard.press("Enter")
        page.wait_for_timeout(300)
        assert page.url.endswith("/items/1")
        assert "needs-verdict" in (page.get_attribute("#verdict-form", "class") or "")


class TestInertPayloads:
    """Agent output with script and onerror payloads renders as text."""

    def test_run_view_and_queue_are_inert(self, server: Server, browser: Any) -> None:
        """No dialog, no injected flag, no injected element; the payload text is shown escaped."""
        server.store.write(
            [
                run(
                    9,
                    agent=XSS_AGENT,
                    final_output=XSS_OUTPUT,
                    tools=(ToolCall(f"{9:015x}3", "search", "c1", '{"q": "<b>bold</b>"}', XSS_TOOL, None),),
                    messages=(Message("user", XSS_MESSAGE),),
                    steps=(Step(f"{9:015x}1", None, XSS_STEP, StepKind.AGENT, T, T + 10**9),),
                )
            ]
        )
        token, _ = server.services.tokens.create("vera", "viewer")
        page = browser.new_page()
        dialogs: list[str] = []
        console: list[str] = []
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.on("console", lambda m: console.append(m.text))
        login(page, server, token)
        assert XSS_AGENT in page.inner_text("#items")
        page.goto(f"{server.url}/items/1")
        page.wait_for_load_state("load")
        page.wait_for_timeout(500)
        assert [] == dialogs
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert XSS_OUTPUT == page.inner_text("#final-output")
        assert XSS_TOOL in page.inner_text("#conversation")
        assert XSS_MESSAGE in page.inner_text("#conversation")
        assert XSS_AGENT in page.inner_text("#summary")
        assert XSS_STEP in page.inner_text("#waterfall")
        assert 0 == page.locator("img").count()
        assert 0 == page.locator("main script, main svg svg").count()
        sources = page.eval_on_selector_all("script", "els => els.map(e => e.getAttribute('src'))")
        assert ["/static/triage.js"] == sources
        page.screenshot(path=str(ARTIFACTS / "run-view-payloads.png"), full_page=True)
