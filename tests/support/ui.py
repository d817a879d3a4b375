"""The reviewer UI served for browser tests: a uvicorn server over a fresh SQLite store, seeded runs, login.

Shared by ``tests/e2e/test_reviewer_ui.py`` and ``tests/e2e/test_layout.py`` (the ``ui_server``
fixture is in ``tests/e2e/conftest.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from review_queue.api import create_api_app
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Message, Priority, Step, StepKind, ToolCall
from tests.support.fixtures import served
from tests.support.review_queue import scored_run

T = 1_700_000_000_000_000_000


@dataclass
class Server:
    """A running UI server."""

    url: str
    store: SqlStore
    services: ReviewServices


def run(n: int, agent: str = "support", **fields: Any) -> Any:
    steps = (
        Step(f"{n:015x}1", None, f"invoke_agent {agent}", StepKind.AGENT, T, T + 3 * 10**9),
        Step(f"{n:015x}2", f"{n:015x}1", "chat gpt-4o-mini", StepKind.LLM, T + 10**8, T + 9 * 10**8),
        Step(f"{n:015x}3", f"{n:015x}1", "execute_tool search", StepKind.TOOL, T + 10**9, T + 2 * 10**9, error=True),
        Step(f"{n:015x}4", f"{n:015x}1", "chat gpt-4o-mini", StepKind.LLM, T + 2 * 10**9, T + 29 * 10**8),
    )
    defaults: dict[str, Any] = {
        "agent": agent,
        "start_ns": T,
        "end_ns": T + 3 * 10**9,
        "llm_calls": 2,
        "tool_calls": 1,
        "tool_errors": 1,
        "steps": steps,
        "tools": (ToolCall(f"{n:015x}3", "search", "call_1", '{"q": "refund policy"}', None, "Timeout: 5 s"),),
        "messages": (Message("user", f"Question {n}: where is my refund?"), Message("assistant", "Checking.")),
        "final_output": f"Answer {n}",
    }
    defaults.update(fields)
    return scored_run(f"{n:032x}", reasons=["low_step_efficiency"], priority=Priority.NORMAL, **defaults)


def login(page: Any, server: Server, token: str) -> None:
    page.goto(f"{server.url}/login")
    # the token field has autofocus; typing before the browser has applied it would lose keys
    page.wait_for_function("document.activeElement !== null && document.activeElement.id === 'token'")
    page.keyboard.type(token)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.endswith("/queue")


def press_and_wait(page: Any, key: str) -> None:
    with page.expect_navigation():
        page.keyboard.press(key)


def serve(tmp_path: Path) -> Iterator[Server]:
    """The API + UI on a free port over a fresh SQLite store."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    store = SqlStore(url)
    services = build_services(store, admin_token="bootstrap-admin-token")
    app = create_api_app(store, admin_token="bootstrap-admin-token", services=services)
    with served(app) as url:
        yield Server(url, store, services)
    store.close()
