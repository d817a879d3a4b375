"""Tests for scorers.judge.session against the local fake OpenAI-compatible server (no network):
selection, sampling, verdicts and their parsing, flag reasons, budget, cache and store outages."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from collector.demo.fakeopenai import FakeOpenAI, TextTurn, Usage
from collector.errors import BackpressureError
from scorers.judge.config import parse_session_judges
from scorers.judge.metrics import JudgeMetrics
from scorers.judge.model import TranscriptTurn
from scorers.judge.session import Conversation, SessionJudgeService, flag_reason
from scorers.model import Priority
from scorers.rules import sample_point
from tests.support.judge import InMemorySessionJudgeSink

LOW = TextTurn(json.dumps({"reasoning": "Turn 3 gives another price than turn 1.", "score": 0.2}), Usage(500, 30))
HIGH = TextTurn(json.dumps({"reasoning": "Consistent.", "score": 0.95}), Usage(500, 30))
VARS: dict[str, Any] = {"turns": 3, "agent": "support", "abandoned": False}
SAMPLE: dict[str, Any] = {"turns": 1, "agent": "sample", "abandoned": False}


def _conversation(scenario: str, turns: int = 3) -> Conversation:
    return Conversation(
        "support",
        tuple(
            TranscriptTurn(i, f"{i:032x}", (f"[[scenario:{scenario}]] question {i}",), f"answer {i}")
            for i in range(1, turns + 1)
        ),
    )


class Harness:
    """A session judge service over the fake server, an in-memory sink and loader, a fresh registry."""

    def __init__(self, fake: FakeOpenAI, judges: dict[str, dict[str, Any]], clock: Any = None) -> None:
        entries = {
            name: {"model": "judge-model", "base_url": fake.base_url, "max_retries": 0, **entry}
            for name, entry in judges.items()
        }
        specs = parse_session_judges(entries, {}, sample=SAMPLE)
        self.conversations: dict[str, Conversation | None] = {}
        self.loads: list[str] = []
        self.load_failures = 0
        self._lock = threading.Lock()
        self.registry = CollectorRegistry()
        self.sink = InMemorySessionJudgeSink()
        options: dict[str, Any] = {} if clock is None else {"clock": clock}
        self.service = SessionJudgeService(specs, self.sink, self._load, metrics=JudgeMetrics(self.registry), **options)
        self.service.start()

    def _load(self, session_id: str) -> Conversation | None:
        with self._lock:
            if self.load_failures:
                self.load_failures -= 1
                raise BackpressureError(0.01)
            self.loads.append(session_id)
        return self.conversations.get(session_id)

    def judge(self, session_id: str, conversation: Conversation | None, variables: dict[str, Any] = VARS) -> None:
        self.conversations[session_id] = conversation
        self.service.submit(session_id, f"{99:032x}", variables)
        assert self.service.flush(30)

    def metric(self, name: str, judge: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"judge": judge, **labels})
        return 0.0 if value is None else value


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A started fake server with a failing and a passing verdict."""
    with FakeOpenAI({"low": [LOW], "high": [HIGH]}) as server:
        yield server


@pytest.fixture
def three(fake: FakeOpenAI) -> Iterator[Harness]:
    """The three session rubrics, defaults otherwise."""
    h = Harness(
        fake,
        {
            "contradiction": {"rubric": "contradiction"},
            "completeness": {"rubric": "conversation_completeness"},
            "retention": {"rubric": "knowledge_retention"},
        },
    )
    yield h
    h.service.shutdown(5)


class TestVerdicts:
    """Each judge's verdict is parsed, stored by (session, judge), and a failing one carries a reason."""

    def test_failing_verdicts_carry_reasons(self, three: Harness) -> None:
        """Score 0.2 < 0.5: stored with reasoning, rubric, tokens, the last turn, and a reason per judge."""
        three.judge("s-1", _conversation("low"))
        result = three.sink.results[("s-1", "contradiction")]
        assert (0.2, False, "Turn 3 gives another price than turn 1.") == (
            result.score,
            result.passed,
            result.reasoning,
        )
        assert ("contradiction@1", "judge-model", 500, 30, f"{99:032x}") == (
            result.rubric_version,
            result.model,
            result.input_tokens,
            result.output_tokens,
            result.trace_id,
        )
        assert {
            "contradiction": "contradiction@1",
            "completeness": "conversation_completeness@1",
            "retention": "knowledge_retention@1",
        } == {judge: r.rubric_version for (_, judge), r in three.sink.results.items()}
        assert sorted((flag_reason(n), Priority.NORMAL) for n in ("contradiction", "completeness", "retention")) == (
            sorted(three.sink.reasons["s-1"])
        )
        assert ["s-1"] == three.loads  # one load for the three judges
        assert 1 == three.metric("vigil_judge_requests_total", "retention", outcome="ok")
        assert 500 == three.metric("vigil_judge_tokens_total", "completeness", kind="input")
        assert 1 == three.metric("vigil_judge_score_count", "contradiction")

    def test_passing_verdict_adds_no_reason(self, three: Harness) -> None:
        """Score 0.95: stored as a pass, nothing flagged."""
        three.judge("s-1", _conversation("high"))
        assert {True} == {r.passed for r in three.sink.results.values()}
        assert {} == three.sink.reasons

    def test_malformed_verdict_is_an_error_not_a_flag(self, three: Harness, fake: FakeOpenAI) -> None:
        """An answer that is no verdict (twice) is stored as an error, counted, and flags nothing."""
        fake.register("junk", [TextTurn('{"score": 7}')])
        three.judge("s-1", _conversation("junk"))
        result = three.sink.results[("s-1", "contradiction")]
        assert result.score is None
        assert result.error is not None
        assert result.error.startswith("malformed")
        assert 1 == three.metric("vigil_judge_requests_total", "contradiction", outcome="malformed")
        assert {} == three.sink.reasons


class TestSelection:
    """The selector, the sample and the content decide what is judged."""

    def test_one_turn_sessions_are_not_judged_by_default(self, three: Harness, fake: FakeOpenAI) -> None:
        """The default selector is turns >= 2."""
        three.judge("s-1", _conversation("low", 1), {**VARS, "turns": 1})
        assert {} == three.sink.results
        assert [] == fake.served()

    def test_no_content_is_dropped_and_counted(self, three: Harness, fake: FakeOpenAI) -> None:
        """Content capture off (no text) or a session gone: nothing asked, counted as no_content."""
        three.judge("s-1", Conversation("support", (TranscriptTurn(1, "a" * 32, (), None),)))
        three.judge("s-2", None)
        assert [] == fake.served()
        assert 2 == three.metric("vigil_judge_dropped_total", "contradiction", reason="no_content")

    def test_sample_rate_is_deterministic_per_session(self, fake: FakeOpenAI) -> None:
        """At sample_rate 0.5 exactly the sessions whose point is below it are judged."""
        h = Harness(fake, {"contradiction": {"rubric": "contradiction", "sample_rate": 0.5}})
        ids = [f"s-{i}" for i in range(12)]
        expected = {s for s in ids if sample_point(f"contradiction:{s}") < 0.5}
        assert 0 < len(expected) < len(ids)
        for s in ids:
            h.judge(s, _conversation("high"))
        h.service.shutdown(5)
        assert expected == {s for s, _ in h.sink.results}

    def test_selector_over_session_variables(self, fake: FakeOpenAI) -> None:
        """A selector of your own sees the session rule variables."""
        h = Harness(fake, {"contradiction": {"rubric": "contradiction", "select": "agent == 'billing'"}})
        h.judge("s-1", _conversation("high"))
        h.judge("s-2", _conversation("high"), {**VARS, "agent": "billing"})
        h.service.shutdown(5)
        assert {"s-2"} == {s for s, _ in h.sink.results}


class TestBudgetCacheOutages:
    """The run judges' budget, cache and store retries hold for session judges."""

    def test_budget_exhausted_skips_and_counts(self, fake: FakeOpenAI) -> None:
        """A budget smaller than one request's estimate: nothing asked, counted per session."""
        h = Harness(fake, {"contradiction": {"rubric": "contradiction", "budget": {"tokens_per_hour": 100}}})
        h.judge("s-1", _conversation("low"))
        h.judge("s-2", _conversation("low"))
        h.service.shutdown(5)
        assert [] == fake.served()
        assert {} == h.sink.results
        assert 2 == h.metric("vigil_judge_budget_exhausted_total", "contradiction")

    def test_same_conversation_is_served_from_the_cache(self, fake: FakeOpenAI) -> None:
        """A second session with the same conversation is not asked again: cached, free, same verdict."""
        h = Harness(fake, {"contradiction": {"rubric": "contradiction"}})
        h.judge("s-1", _conversation("low"))
        h.judge("s-2", _conversation("low"))
        h.service.shutdown(5)
        assert 1 == len(fake.served())
        again = h.sink.results[("s-2", "contradiction")]
        assert (True, 0, 0.2) == (again.cached, again.input_tokens, again.score)
        assert 1 == h.metric("vigil_judge_requests_total", "contradiction", outcome="cached")
        assert [(flag_reason("contradiction"), Priority.NORMAL)] == h.sink.reasons["s-2"]

    def test_store_outage_is_retried(self, three: Harness) -> None:
        """A store down for a load and a write is retried; the verdicts land."""
        three.load_failures = 1
        three.sink.fail_next(2)
        three.judge("s-1", _conversation("low"))
        assert 3 == len(three.sink.results)

    def test_shutdown_stops_accepting(self, three: Harness, fake: FakeOpenAI) -> None:
        """After shutdown nothing is queued or asked."""
        three.service.shutdown(5)
        three.service.submit("s-1", "a" * 32, VARS)
        assert 0 == three.service.pending()
        assert [] == fake.served()
