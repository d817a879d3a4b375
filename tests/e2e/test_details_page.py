"""A run page tells the truth about the run's details: Debian's chromium (Playwright) over a real ``vigil run``.

One unflagged OTel GenAI run whose chat spans carry their messages (``gen_ai.input.messages`` /
``gen_ai.output.messages``) is sent over OTLP/HTTP to ``vigil run`` with no random review sample
(``VIGIL_SAMPLE_RATE=0``):

* with the details defaults, its run page shows the conversation (details of every run are kept
  by default; the trace id is outside a 10 % sample, so a lower default fails here);
* with ``VIGIL_DETAILS_SAMPLE_RATE=0``, its run page says the details were not kept by the sample
  rate, and gives no content-capture advice: the agent did capture the content.

Screenshots land in ``test-artifacts/``.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.model import TraceBatch
from collector.otlp import encode_batch
from tests.support.spans import agent_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
ADMIN_TOKEN = "e2e-details-page-admin"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PROTO = {"Content-Type": "application/x-protobuf"}
TRACE_ID = "7e1a5c0de5a1e0f4a2b3c4d5e6f70819"
"""The run's trace id: outside the details sample at rate 0.1 (review_queue.details.details_sampled)."""
USER = "What is the weather in Paris and in Rome?"
ANSWER = "Paris 18C, Rome 24C."
"""What the run's chat spans say (tests.support.spans.agent_run with content)."""
BASE_ENV = {"VIGIL_QUIET_PERIOD_S": "0.3", "VIGIL_SAMPLE_RATE": "0", "VIGIL_ADMIN_TOKEN": ADMIN_TOKEN}


@pytest.fixture
def vigil_with(tmp_path: Path) -> Iterator[Any]:
    """Starts ``vigil run`` with :data:`BASE_ENV` plus the given variables; every one stopped at the end."""
    numbers = itertools.count()
    with ExitStack() as stack:

        def start(env: Mapping[str, str]) -> VigilProcess:
            workdir = tmp_path / f"vigil{next(numbers)}"
            workdir.mkdir()
            return stack.enter_context(start_vigil(workdir, {**BASE_ENV, **env}))

        yield start


def _send_run(vigil: VigilProcess) -> None:
    """Send one unflagged run with captured messages and wait until it is stored (unflagged)."""
    spans = tuple(dataclasses.replace(s, trace_id=TRACE_ID) for s in agent_run(content=True))
    response = httpx.post(
        f"{vigil.otlp_endpoint}/v1/traces", content=encode_batch(TraceBatch(TRACE_ID, spans)), headers=PROTO
    )
    assert 200 == response.status_code
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = httpx.get(f"{vigil.api}/api/v1/runs/{TRACE_ID}", headers=ADMIN, timeout=10)
        if found.status_code == 200:
            assert found.json()["flag"] is None  # the page of an unflagged run, not a review item
            return
        time.sleep(0.2)
    raise AssertionError("the run was not stored")


def _open(vigil: VigilProcess, browser: Any) -> Any:
    """A logged-in admin tab on the run's page, once the page says something final about its details
    (the writer works a moment behind the store: "not written yet" is reloaded)."""
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    tab.goto(f"{vigil.api}/login")
    tab.fill("#token", ADMIN_TOKEN)
    with tab.expect_navigation():
        tab.press("#token", "Enter")
    deadline = time.monotonic() + 30
    while True:
        tab.goto(f"{vigil.api}/runs/{TRACE_ID}")
        missing = tab.locator("#details-missing")
        if missing.count() == 0 or missing.get_attribute("data-reason") != "pending" or time.monotonic() > deadline:
            return tab
        tab.wait_for_timeout(300)


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


class TestDetailsPage:
    """What a reviewer sees on an unflagged run's page, by the details settings."""

    def test_defaults_keep_the_conversation(self, vigil_with: Any, browser: Any) -> None:
        """Details defaults: the captured conversation is on the page, no notice about missing details."""
        vigil = vigil_with({})
        _send_run(vigil)
        page = _open(vigil, browser)
        _shot(page, "details-default.png")
        reason = (
            page.get_attribute("#details-missing", "data-reason") if page.locator("#details-missing").count() else None
        )
        assert reason is None, f"the run page says the details are missing: {reason}"
        conversation = page.locator("#conversation")
        assert conversation.is_visible()
        assert USER in conversation.inner_text()
        assert ANSWER in conversation.inner_text()
        assert 0 == page.locator("#no-content").count()

    def test_rate_zero_says_not_kept(self, vigil_with: Any, browser: Any) -> None:
        """VIGIL_DETAILS_SAMPLE_RATE=0: "not kept by the sample rate", the setting named, no content-capture advice."""
        vigil = vigil_with({"VIGIL_DETAILS_SAMPLE_RATE": "0"})
        _send_run(vigil)
        page = _open(vigil, browser)
        _shot(page, "details-not-sampled.png")
        notice = page.locator("#details-missing")
        assert notice.is_visible()
        assert "not_sampled" == notice.get_attribute("data-reason")
        text = notice.inner_text()
        assert "Details not kept by the sample rate." in text
        assert "VIGIL_DETAILS_SAMPLE_RATE=0" in text
        assert 0 == page.locator("#no-content").count()
        assert "content capture" not in page.inner_text("main").lower()
        assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" not in page.content()
        assert 0 == page.locator("#conversation").count()
        assert "outside the details sample rate" in page.inner_text("#spans")
