"""Every page of the reviewer UI in a real browser (Debian chromium under Playwright) at 1280 and 1920 px:
nothing wider than the window, lists that page instead of hiding rows, the verdict within reach, a
"final answer" only where there is one, and HTML error pages for HTML routes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scorers.model import Message, ToolCall
from tests.support.ui import Server, login, run, serve

pytestmark = pytest.mark.integration

WIDTHS = (1280, 1920)
LONG = "word " * 400 + "a" * 300  # a long unbroken token too: a page must wrap or scroll it in its own box


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    yield from serve(tmp_path)


def _seed(server: Server, n: int = 3) -> None:
    runs = [
        run(i, final_output=LONG, messages=(Message("user", LONG), Message("assistant", LONG))) for i in range(1, n)
    ]
    capped = run(
        n,
        hit_max_iterations=True,
        errored=True,
        final_output='lookup_order({"order_id": "A-1"})',
        tools=(ToolCall(f"{n:015x}3", "lookup_order", "call_9", '{"order_id": "A-1"}', None, None),),
    )
    server.store.write([*runs, capped])


def _overflow(page: Any) -> int:
    """How many pixels the page is wider than its window (0: nothing sticks out)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


@pytest.mark.parametrize("width", WIDTHS)
def test_no_page_is_wider_than_the_window(server: Server, browser: Any, width: int) -> None:
    _seed(server)
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": width, "height": 900})
    login(page, server, token)
    trace = f"{1:032x}"
    item = page.get_attribute("tr.item-row", "data-item")
    for path in ("/queue", "/queue?state=done", f"/items/{item}", "/runs", f"/runs/{trace}", "/sessions", "/stats"):
        page.goto(server.url + path)
        assert _overflow(page) == 0, f"{path} at {width} px is {_overflow(page)} px wider than the window"
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_verdict_is_in_reach_without_scrolling(server: Server, browser: Any, width: int) -> None:
    """On a run with a long conversation, the claim button and then the verdict form sit in the first
    screen, beside the conversation (not below it)."""
    _seed(server)
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": width, "height": 900})
    login(page, server, token)
    page.goto(f"{server.url}/items/1")
    claim = page.locator("#claim-item").bounding_box()
    assert claim is not None
    assert claim["y"] + claim["height"] <= 900
    with page.expect_navigation():
        page.click("#claim-item button")
    form = page.locator("#verdict-pass").bounding_box()
    conversation = page.locator("#item-main").bounding_box()
    assert form is not None
    assert conversation is not None
    assert form["y"] + form["height"] <= 900, "the verdict form is below the first screen"
    assert form["x"] >= conversation["x"] + conversation["width"], "the verdict form is not beside the conversation"
    page.close()


def test_a_tool_call_is_never_labelled_the_final_answer(server: Server, browser: Any) -> None:
    _seed(server)
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, server, token)
    page.goto(f"{server.url}/items/3")
    headings = page.locator("#item-main h2").all_inner_texts()
    assert "Last output" in headings
    assert "Final answer" not in headings
    page.close()


def test_the_queue_pages_instead_of_hiding_rows(server: Server, browser: Any) -> None:
    from review_queue.web import QUEUE_PAGE

    server.store.write([run(i) for i in range(1, QUEUE_PAGE + 21)])
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, server, token)
    seen = page.locator("tr.item-row").count()
    assert f"Items 1–{QUEUE_PAGE} of {QUEUE_PAGE + 20}" in page.inner_text("#pages")
    with page.expect_navigation():
        page.click("#pages a[rel=next]")
    assert seen + page.locator("tr.item-row").count() == QUEUE_PAGE + 20
    page.close()


def test_filters_are_chosen_from_known_values(server: Server, browser: Any) -> None:
    server.store.write([run(1, agent="billing"), run(2, agent="support")])
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, server, token)
    agents = page.locator("select[name=agent] option").all_inner_texts()
    assert ["any", "billing", "support"] == agents
    assert "low_step_efficiency" in page.locator("select[name=reason] option").all_inner_texts()
    page.select_option("select[name=agent]", "billing")
    with page.expect_navigation():
        page.click("#filters button[type=submit]")
    assert ["billing"] == page.locator("tr.item-row td:nth-child(3)").all_inner_texts()
    page.close()


def test_html_routes_answer_errors_with_html(server: Server, browser: Any) -> None:
    token, _ = server.services.tokens.create("alice", "reviewer")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    login(page, server, token)
    for path, status in (("/items/999999", 404), ("/no-such-page", 404), ("/queue?page=x", 422)):
        response = page.goto(server.url + path)
        assert response is not None
        assert response.status == status, path
        assert "text/html" in (response.headers.get("content-type") or ""), path
        assert page.locator("h1").inner_text() == "Sorry", path
    page.close()
