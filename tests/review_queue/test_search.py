"""The runs search (review_queue.search) over what the user asked and the final answer, on SQLite and
PostgreSQL: the explorer, ``GET /api/v1/runs``, the stored user message and the queue's column."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from review_queue import explorer, listing, search
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import build_services
from review_queue.store import SqlStore
from scorers.model import Message, Priority, ScoredRun, Step, StepKind
from scorers.redact import Redactor
from tests.support.review_queue import T0, Clock, scored_run

T = 1_700_000_000_000_000_000


def _run(trace: int, reasons: tuple[str, ...] = (), **fields: Any) -> ScoredRun:
    root = Step(f"{0:016x}", None, "invoke_agent a", StepKind.AGENT, T, T + 10**9)
    return scored_run(f"{trace:032x}", reasons=list(reasons), priority=Priority.NORMAL, agent="support",
                      steps=(root,), span_count=1, start_ns=T, end_ns=T + 10**9, **fields)  # fmt: skip


class TestSearch:
    """Text search and the user message column."""

    def _ids(self, store: SqlStore, q: explorer.RunQuery) -> list[str]:
        with store.engine.connect() as conn:
            rows, _ = explorer.explore(conn, q)
        return [r["trace_id"][-2:] for r in rows]

    def test_user_message_and_answer(self, store: SqlStore, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
        """The text search matches what the user asked as well as the final answer, case-insensitively, its
        wildcards literal, in the explorer and ``GET /api/v1/runs`` alike; the user message is stored redacted,
        listed with the run, and the search looks at the newest ``SEARCH_WINDOW`` runs only."""
        runs = [
            _run(1, messages=(Message("user", "Where is my PARCEL? 50% late, mail bob@example.com"),),
                 final_output="It ships Monday"),
            _run(2, messages=(Message("user", "I want my money back"),), final_output="Refund issued"),
            _run(3, messages=(Message("system", "be kind"), Message("user", "hello there")), final_output=None),
            _run(4),  # no content captured
        ]  # fmt: skip
        for n, run in enumerate(runs):
            clock.now = T0 + n  # index times 1 < 2 < 3 < 4
            store.write([run])
        DetailsWriter(store.write_details, Redactor()).write_now(runs)
        q = explorer.RunQuery
        assert ["01"] == self._ids(store, q(text="parcel"))  # the user message
        assert ["02"] == self._ids(store, q(text="REFUND"))  # the final answer
        assert ["02", "01"] == self._ids(store, q(text="m"))  # either
        assert ["01"] == self._ids(store, q(text="50%"))
        assert [] == self._ids(store, q(text="50_"))
        assert [] == self._ids(store, q(text="be kind"))  # the system prompt is not what the user asked
        assert [] == self._ids(store, q(text="bob@example.com"))  # stored redacted
        with store.engine.connect() as conn:
            rows, _ = explorer.explore(conn, q())
        asked = {r["trace_id"][-2:]: r["user_message"] for r in rows}
        assert asked["01"].startswith("Where is my PARCEL? 50% late, mail [REDACTED")
        assert ("hello there", None) == (asked["03"], asked["04"])
        client = TestClient(create_api_app(store, admin_token=None, services=build_services(store, admin_token=None)))
        found = client.get("/api/v1/runs", params={"q": "parcel"}).json()["items"]
        assert [f"{1:032x}"] == [r["trace_id"] for r in found]
        assert asked["01"] == found[0]["user_message"]
        assert ["02", "01"] == [
            r["trace_id"][-2:] for r in client.get("/api/v1/runs", params={"q": "M"}).json()["items"]
        ]
        assert 422 == client.get("/api/v1/runs", params={"q": "x" * 257}).status_code
        monkeypatch.setattr(search, "SEARCH_WINDOW", 3)  # runs 2, 3, 4
        assert [] == self._ids(store, q(text="parcel"))
        assert ["02"] == self._ids(store, q(text="m"))
        assert [] == client.get("/api/v1/runs", params={"q": "parcel"}).json()["items"]

    def test_turn_message_not_history(self, store: SqlStore) -> None:
        """A later turn's user message is its own question, not the first one its chat call repeats."""
        history = (
            '[{"role": "user", "content": "first question"}, {"role": "assistant", "content": "an answer"},'
            ' {"role": "user", "content": "and the follow-up?"}]'
        )
        first = Step("1" * 16, "0" * 16, "chat", StepKind.LLM, T, T + 10, attributes={"gen_ai.input.messages": history})
        last = Step("2" * 16, "0" * 16, "chat", StepKind.LLM, T + 20, T + 30)  # after a tool call
        root = Step("0" * 16, None, "invoke_agent a", StepKind.AGENT, T, T + 10**9)
        later = scored_run(
            f"{5:032x}", agent="support", steps=(root, first, last), span_count=3, session_id="s1",
            messages=(Message("user", "first question"), Message("user", "tool output")),
        )  # fmt: skip
        store.write([later])
        DetailsWriter(store.write_details, Redactor()).write_now([later])
        assert ["05"] == self._ids(store, explorer.RunQuery(text="follow-up"))
        assert [] == self._ids(store, explorer.RunQuery(text="first question"))

    def test_queue_lists_user_message(self, store: SqlStore) -> None:
        """The queue's items (page and ``GET /api/v1/queue``) carry their run's user message; None without details."""
        asked = _run(6, ("loop",), messages=(Message("user", "cancel my order"),))
        store.write([asked, _run(7, ("loop",))])
        DetailsWriter(store.write_details, Redactor()).write_now([asked])
        with store.engine.connect() as conn:
            items = listing.list_items(conn, listing.ItemFilter())
        expected = {f"{6:032x}": "cancel my order", f"{7:032x}": None}
        assert expected == {i["trace_id"]: i["user_message"] for i in items}
        client = TestClient(create_api_app(store, admin_token=None, services=build_services(store, admin_token=None)))
        listed = client.get("/api/v1/queue").json()["items"]
        assert expected == {i["trace_id"]: i["user_message"] for i in listed}
