"""Tests of review_queue.session_judges on SQLite and PostgreSQL: a multi-turn session closed by the idle
closer is judged by the three session judges over real HTTP (the scripted OpenAI-compatible server),
the verdicts land in ``session_judge_results``, a failing one flags the session's review item, budget,
sample and cache apply, and the API and the session page show the verdicts (escaped)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from collector.demo.fakeopenai import FakeOpenAI, TextTurn, Usage
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.retention import purge_traces
from review_queue.services import build_services
from review_queue.session_close import SAMPLE_SESSION_VARIABLES, SessionCloser, compile_session_rules
from review_queue.session_judges import ConversationLoader, SqlSessionJudgeSink, transcript
from review_queue.store import SqlStore
from review_queue.tables import session_judge_results
from scorers.judge.config import parse_session_judges
from scorers.judge.metrics import JudgeMetrics
from scorers.judge.model import TranscriptTurn
from scorers.judge.rubrics import SESSION_RUBRICS
from scorers.judge.session import SessionJudgeService
from scorers.redact import Redactor
from scorers.rules import sample_point
from tests.support.review_queue import login
from tests.support.sessions import T0, S, chat_turns

XSS = "<script>window.__xss=1</script>"
LOW = TextTurn(json.dumps({"reasoning": f"Turn 3 contradicts turn 1. {XSS}", "score": 0.1}), Usage(400, 30))
HIGH = TextTurn(json.dumps({"reasoning": "Consistent, complete, remembered.", "score": 0.9}), Usage(400, 30))
EMAIL = "ana.silva@example.com"
JUDGES = {
    "contradiction": "contradiction",
    "completeness": "conversation_completeness",
    "retention": "knowledge_retention",
}
IDLE_S = 60.0
ADMIN_TOKEN = "session-judges-admin"


def exchanges(scenario: str) -> list[tuple[str, str]]:
    """Three turns; the first names the scripted verdict, the second carries an e-mail address (redacted)."""
    return [
        (f"[[scenario:{scenario}]] How much is the Pro plan?", "The Pro plan is 20 euros a month."),
        (f"I am Ana, write to {EMAIL}. Is there a yearly price?", "Yes, 200 euros a year."),
        ("So how much per month?", "The Pro plan is 30 euros a month."),
    ]


class RecordingFake(FakeOpenAI):
    """The scripted server, keeping every request body (what the judge was sent)."""

    def __init__(self, scripts: Mapping[str, Sequence[Any]]) -> None:
        super().__init__(scripts)
        self.bodies: list[Mapping[str, Any]] = []
        self._bodies_lock = threading.Lock()

    def answer(self, path: str, body: Mapping[str, Any], scenario_header: str | None = None) -> tuple[int, Any]:
        with self._bodies_lock:
            self.bodies.append(body)
        return super().answer(path, body, scenario_header)


@pytest.fixture
def fake() -> Iterator[RecordingFake]:
    """A started scripted server with a failing (``low``) and a passing (``high``) verdict."""
    with RecordingFake({"low": [LOW], "high": [HIGH]}) as server:
        yield server


class Judged:
    """A store, the idle closer with the session judges wired as ``vigil run`` / ``vigil review`` do, and metrics."""

    def __init__(self, store: SqlStore, fake: FakeOpenAI, judges: Mapping[str, Mapping[str, Any]]) -> None:
        entries = {
            name: {"model": "judge-model", "base_url": fake.base_url, "max_retries": 0, **entry}
            for name, entry in judges.items()
        }
        specs = parse_session_judges(entries, {}, sample=SAMPLE_SESSION_VARIABLES)
        self.store = store
        self.registry = CollectorRegistry()
        self.now = T0 / S
        self.service = SessionJudgeService(
            specs,
            SqlSessionJudgeSink(store.engine, sample_rate=0.05),
            ConversationLoader(store.engine),
            metrics=JudgeMetrics(self.registry),
        )
        self.closer = SessionCloser(store, (), idle_s=IDLE_S, clock=lambda: self.now, judges=self.service)
        self.service.start()

    def converse(self, session_id: str, turns: list[tuple[str, str]], first: int) -> list[str]:
        """Write the turns and their details (redacted, as the scoring roles do)."""
        runs = chat_turns(session_id, turns, first=first)
        self.store.write(runs)
        DetailsWriter(self.store.write_details, Redactor()).write_now(runs)
        return [r.run.trace_id for r in runs]

    def close_all(self) -> set[str]:
        """Move past the idle time, close, and wait for the judges."""
        self.now += 3600 * 24 * 365 * 10
        closed = {str(c.row["session_id"]) for c in self.closer.close_idle()}
        assert self.service.flush(30)
        return closed

    def verdicts(self) -> dict[tuple[str, str], dict[str, Any]]:
        with self.store.engine.connect() as conn:
            rows = conn.execute(sa.select(session_judge_results)).mappings().all()
        return {(r["session_id"], r["judge"]): dict(r) for r in rows}

    def metric(self, name: str, judge: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"judge": judge, **labels})
        return 0.0 if value is None else value


@pytest.fixture
def judged(store: SqlStore, fake: RecordingFake) -> Iterator[Judged]:
    """The three session judges, defaults otherwise."""
    j = Judged(store, fake, {name: {"rubric": rubric} for name, rubric in JUDGES.items()})
    yield j
    j.service.shutdown(5)


def test_closed_session_gets_three_verdicts_and_a_flagged_item(judged: Judged, fake: RecordingFake) -> None:
    """Three failing verdicts on the closed session, the three reasons on its last turn's item, in the API."""
    ids = judged.converse("conv-1", exchanges("low"), first=1)
    assert {"conv-1"} == judged.close_all()
    verdicts = judged.verdicts()
    assert set(JUDGES) == {judge for _, judge in verdicts}
    for name, rubric in JUDGES.items():
        row = verdicts[("conv-1", name)]
        assert (0.1, False, f"{rubric}@1", ids[-1], 400, 30) == (
            row["score"],
            row["passed"],
            row["rubric_version"],
            row["trace_id"],
            row["input_tokens"],
            row["output_tokens"],
        )
        assert 1 == judged.metric("vigil_judge_requests_total", name, outcome="ok")
    run = judged.store.get_run(ids[-1])
    assert run is not None
    item = run["review_item"]
    assert item is not None
    assert {"judge_contradiction", "judge_completeness", "judge_retention"} == set(item["reasons"])
    assert ("session", "conv-1") == (item["snapshot"]["subject"], item["snapshot"]["session_id"])
    assert run["flag"] is not None
    # what the judges were sent: their rubric, the conversation turn by turn, redacted
    assert {SESSION_RUBRICS[r].instructions for r in JUDGES.values()} == {
        b["messages"][0]["content"] for b in fake.bodies
    }
    document = fake.bodies[0]["messages"][1]["content"]
    doc = json.loads(document.removeprefix("<session>\n").removesuffix("\n</session>"))
    assert [1, 2, 3] == [t["turn"] for t in doc["turns"]]
    assert [a for _, a in exchanges("low")] == [t["assistant"] for t in doc["turns"]]
    assert doc["turns"][2]["user"] == "So how much per month?"  # the turn's own message, not the history
    assert EMAIL not in document
    assert "I am Ana, write to" in doc["turns"][1]["user"]
    # the API
    client = TestClient(create_api_app(judged.store, admin_token=None))
    body = client.get("/api/v1/sessions/conv-1").json()
    assert ["completeness", "contradiction", "retention"] == [j["judge"] for j in body["judges"]]
    assert {(0.1, False, ids[-1])} == {(j["score"], j["passed"], j["trace_id"]) for j in body["judges"]}


def test_budget_sample_and_cache(store: SqlStore, fake: RecordingFake) -> None:
    """A spent budget skips and counts, a sample rate of 0 judges nothing, the same conversation is cached,
    and a one-turn session is not selected."""
    j = Judged(
        store,
        fake,
        {
            "contradiction": {"rubric": "contradiction", "concurrency": 1},  # one at a time: the second sees the first
            "completeness": {"rubric": "conversation_completeness", "sample_rate": 0.0},
            "retention": {"rubric": "knowledge_retention", "budget": {"tokens_per_hour": 500}},
        },
    )
    try:
        j.converse("conv-a", exchanges("high"), first=1)
        j.converse("conv-b", exchanges("high"), first=11)
        j.converse("conv-c", exchanges("high")[:1], first=21)
        assert {"conv-a", "conv-b", "conv-c"} == j.close_all()
    finally:
        j.service.shutdown(5)
    verdicts = j.verdicts()
    assert {("conv-a", "contradiction"), ("conv-b", "contradiction")} == set(verdicts)
    assert 1 == len(fake.bodies)  # the second identical conversation came from the cache
    assert [False, True] == sorted(bool(verdicts[(s, "contradiction")]["cached"]) for s in ("conv-a", "conv-b"))
    assert 1 == j.metric("vigil_judge_requests_total", "contradiction", outcome="cached")
    assert 2 == j.metric("vigil_judge_budget_exhausted_total", "retention")
    assert 0 == j.metric("vigil_judge_requests_total", "completeness", outcome="ok")
    assert store.get_run(f"{3:032x}")["review_item"] is None  # type: ignore[index]  # passing: no item


def test_sample_rate_picks_sessions_deterministically(store: SqlStore, fake: RecordingFake) -> None:
    """At sample_rate 0.5 the judged sessions are exactly those whose sample point is below it."""
    j = Judged(store, fake, {"contradiction": {"rubric": "contradiction", "sample_rate": 0.5}})
    names = [f"conv-{i}" for i in range(8)]
    expected = {s for s in names if sample_point(f"contradiction:{s}") < 0.5}
    assert 0 < len(expected) < len(names)
    try:
        for i, name in enumerate(names):
            j.converse(name, exchanges("high"), first=10 * i + 1)
        j.close_all()
    finally:
        j.service.shutdown(5)
    assert expected == {s for s, _ in j.verdicts()}


def test_page_shows_verdicts_escaped_and_retention_deletes_them(store: SqlStore, fake: RecordingFake) -> None:
    """The session page and the session's item page show the judges' reasoning escaped; purging the
    session's turns deletes the session and its verdicts."""
    j = Judged(store, fake, {"contradiction": {"rubric": "contradiction"}})
    try:
        ids = j.converse("conv-x", exchanges("low"), first=1)
        j.close_all()
    finally:
        j.service.shutdown(5)
    services = build_services(store, admin_token=ADMIN_TOKEN)
    client = TestClient(create_api_app(store, admin_token=ADMIN_TOKEN, services=services))
    login(client, services.tokens.create("root", "admin")[0])
    item_id = store.get_run(ids[-1])["review_item"]["id"]  # type: ignore[index]
    for path in (f"/sessions/{quote('conv-x', safe='')}", f"/items/{item_id}"):
        page = client.get(path)
        assert 200 == page.status_code, path
        assert 'id="session-judges"' in page.text, path
        assert "Turn 3 contradicts turn 1. &lt;script&gt;window.__xss=1&lt;/script&gt;" in page.text, path
        assert XSS not in page.text, path
    deleted = purge_traces(store.engine, ids)
    assert (1, 1) == (deleted["session_judge_results"], deleted["sessions"])
    assert {} == j.verdicts()


def test_rules_and_judges_share_the_session_item(store: SqlStore, fake: RecordingFake) -> None:
    """A session flagged by a session rule keeps its item; a failing judge adds its reason to it."""
    j = Judged(store, fake, {"retention": {"rubric": "knowledge_retention"}})
    j.closer = SessionCloser(
        store, compile_session_rules({"every": {"expr": "turns >= 1"}}), idle_s=IDLE_S, clock=lambda: j.now,
        judges=j.service,
    )  # fmt: skip
    try:
        ids = j.converse("conv-r", exchanges("low"), first=1)
        j.close_all()
    finally:
        j.service.shutdown(5)
    item = store.get_run(ids[-1])["review_item"]  # type: ignore[index]
    assert item is not None
    assert ["every", "judge_retention"] == item["reasons"]


class TestTranscript:
    """transcript(): each turn's own user messages and answer from the turns' conversations."""

    def test_history_dropped_answers_kept(self) -> None:
        """A turn's conversation repeats the earlier turns: only what it added is its own."""
        first = [
            {"kind": "message", "role": "user", "content": "hi"},
            {"kind": "message", "role": "assistant", "content": "hello", "final": True},
        ]
        second = [
            *first,
            {"kind": "message", "role": "user", "content": "my name is Ana"},
            {"kind": "tool", "name": "lookup", "result": "x"},
            {"kind": "message", "role": "assistant", "content": "thinking"},
            {"kind": "final", "content": "Nice to meet you, Ana."},
        ]
        assert (
            TranscriptTurn(1, "a", ("hi",), "hello"),
            TranscriptTurn(2, "b", ("my name is Ana",), "Nice to meet you, Ana."),
        ) == transcript(["a", "b"], [first, second])

    def test_turn_without_content_keeps_its_place(self) -> None:
        """A turn whose content was not captured is an empty turn; the next turn still drops the history."""
        one = [{"kind": "message", "role": "user", "content": "q1"}, {"kind": "final", "content": "a1"}]
        three = [
            {"kind": "message", "role": "user", "content": "q1"},
            {"kind": "message", "role": "assistant", "content": "a1"},
            {"kind": "message", "role": "user", "content": "q3"},
            {"kind": "message", "role": "assistant", "content": "a3"},
        ]
        assert (
            TranscriptTurn(1, "a", ("q1",), "a1"),
            TranscriptTurn(2, "b", (), None),
            TranscriptTurn(3, "c", ("q3",), "a3"),
        ) == transcript(["a", "b", "c"], [one, [], three])
