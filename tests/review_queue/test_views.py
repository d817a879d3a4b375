"""Tests of review_queue.views (pure helpers of the UI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from review_queue import views
from review_queue.views import WATERFALL_WIDTH, age, clock_time, waterfall

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"


class TestWaterfall:
    """Bars on a shared time axis."""

    def test_geometry(self) -> None:
        """Offsets and widths are proportional to time; depth follows parents."""
        t = 10**18  # epoch nanoseconds; 0 means "unknown"
        steps = [
            {"span_id": "a", "parent_id": None, "name": "root", "kind": "agent", "start_ns": t, "end_ns": t + 1000},
            {"span_id": "b", "parent_id": "a", "name": "llm", "kind": "llm", "start_ns": t + 250, "end_ns": t + 750},
            {"span_id": "c", "parent_id": "b", "name": "tool", "kind": "tool", "start_ns": t + 500, "end_ns": t + 500},
        ]
        rows = waterfall(steps, t, t + 1000)["rows"]
        assert [(0.0, WATERFALL_WIDTH), (250.0, 500.0), (500.0, 2.0)] == [(r["x"], r["width"]) for r in rows]
        assert [0, 1, 2] == [r["depth"] for r in rows]

    def test_empty_and_unknown_bounds(self) -> None:
        """No steps gives no rows; unknown run bounds come from the steps."""
        assert [] == waterfall([], 0, 0)["rows"]
        rows = waterfall([{"span_id": "a", "start_ns": 10, "end_ns": 20}], 0, 0)["rows"]
        assert (0.0, WATERFALL_WIDTH) == (rows[0]["x"], rows[0]["width"])

    def test_parent_cycle_terminates(self) -> None:
        """A parent cycle in bad data does not hang."""
        steps = [{"span_id": "a", "parent_id": "b"}, {"span_id": "b", "parent_id": "a"}]
        assert 2 == len(waterfall(steps, 0, 0)["rows"])


class TestFormat:
    """Human ages and times."""

    def test_age(self) -> None:
        """Seconds, minutes, hours, days."""
        assert ["5s", "2m", "3h", "2d"] == [age(5), age(150), age(3 * 3600 + 5), age(2 * 86400 + 1)]

    def test_clock(self) -> None:
        """UTC timestamp, empty for None."""
        assert ("1970-01-01 00:01:00", "") == (clock_time(60), clock_time(None))

    def test_snippet(self) -> None:
        """One line, cut at a word with an ellipsis within the limit; short text as it is; None empty."""
        assert ("", "hi there") == (views.snippet(None), views.snippet("  hi\n\tthere "))
        cut = views.snippet("word " * 40, 30)
        assert cut.endswith("…")
        assert len(cut) <= 30
        assert "word word" in cut
        assert not cut[:-1].endswith(" ")
        assert 20 == len(views.snippet("x" * 50, 20))  # no space: cut mid-word


class TestEvidence:
    def test_grouped_and_deduplicated(self) -> None:
        """A reason named after its signal repeats that signal's evidence: shown once."""
        one = {"signal": "hit_max_iterations", "rule": "limit.cutoff", "span_id": "a", "source": "s", "value": "v"}
        other = {**one, "signal": "tool_loop", "rule": "rule:tool_loop"}
        grouped = views.evidence_by_signal([one, dict(one), other, {"no": "signal"}, "junk"])  # type: ignore[list-item]
        assert {"hit_max_iterations": [one], "tool_loop": [other]} == grouped

    def test_none(self) -> None:
        assert {} == views.evidence_by_signal(None)


def test_score_rows_give_unit_direction_and_the_rules_that_test_them() -> None:
    from review_queue.views import score_rows
    from scorers.rules import compile_rules, score_thresholds

    rows = {r["name"]: r for r in score_rows(
        {"step_efficiency": 0.25, "repeated_tool_calls": 1.0, "latency": 2.5, "safety_block": 1.0, "custom": 7.0},
        score_thresholds(compile_rules(None)),
    )}  # fmt: skip
    step = rows["step_efficiency"]
    assert ("0.25", "higher is better", True) == (step["value"], step["direction"], step["crossed"])
    assert [{"rule": "low_step_efficiency", "op": "<", "threshold": 0.3, "crossed": True}] == step["tests"]
    loop = rows["repeated_tool_calls"]
    assert ("1 call", "lower is better", False) == (loop["value"], loop["direction"], loop["crossed"])
    assert ("2.50 s", []) == (rows["latency"]["value"], rows["latency"]["tests"])
    assert "yes" == rows["safety_block"]["value"]
    assert ("7", "") == (rows["custom"]["value"], rows["custom"]["direction"])  # a plugin's score: no unit


def test_the_depth_chart_starts_with_the_first_item() -> None:
    from review_queue.listing import since_first

    history = {"buckets": [0.0, 10.0, 20.0, 30.0], "total": [0, 0, 3, 4], "agents": {"a": [0, 0, 3, 4]}}
    assert {"buckets": [20.0, 30.0], "total": [3, 4], "agents": {"a": [3, 4]}} == since_first(history, 25.0, 10.0)
    assert [10.0, 20.0, 30.0] == since_first(history, 15.0, 10.0)["buckets"]
    assert [20.0, 30.0] == since_first(history, None, 10.0)["buckets"]  # no item ever: two buckets, for a line


def _captured_details(stack: str, scenario: str) -> dict[str, Any]:
    """The details document of one captured run (tests/fixtures/traces), as the details writer stores it."""
    from collector.otlp import decode_json
    from review_queue.details import build_details
    from scorers.model import ScoredRun
    from scorers.normalise import normalise
    from scorers.redact import Redactor

    truth = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    trace_id = next(r["trace_id"] for r in truth["runs"] if r["scenario"] == scenario)
    batches = decode_json((FIXTURES / f"{stack}.json").read_bytes()).batches
    spans = [s for b in batches if b.trace_id == trace_id for s in b.spans]
    return build_details(ScoredRun(normalise(spans), {}, None), Redactor())


@pytest.mark.parametrize(
    ("stack", "scenario", "source", "said"),
    [
        ("pydantic_ai_guards", "pg_input_guard", "pydantic_ai.all_messages", "book me a flight."),
        ("agno", "ag_pii_guardrail", "input.value", "book a hotel."),
    ],
)
def test_blocked_input_read_where_the_trace_carries_it(stack: str, scenario: str, source: str, said: str) -> None:
    """An input-guard run has no user message in its conversation; its input is read from the span that has it
    (redacted as stored: the card number in it is not)."""
    doc = _captured_details(stack, scenario)
    assert not [e for e in doc["conversation"] if e.get("role") == "user"]
    found = views.blocked_input(doc["spans"], doc["conversation"], blocked=True)
    assert found is not None
    assert source == found["source"]
    assert found["text"].endswith(said)
    assert "[REDACTED:card]" in found["text"]
    assert found["span_id"] in {s["span_id"] for s in doc["spans"]}


def test_blocked_input_said_missing_where_the_trace_has_none() -> None:
    """OpenAI Agents SDK input guardrail: a guardrail span and a tripped turn span, no input anywhere."""
    doc = _captured_details("openai_agents", "ag_guardrail")
    found = views.blocked_input(doc["spans"], doc["conversation"], blocked=False)  # the guardrail entry says blocked
    assert found == {"text": None, "span_id": "", "span_name": "", "source": "", "blocked": True}


def test_no_blocked_input_when_the_conversation_has_the_user_message() -> None:
    doc = _captured_details("openai_agents", "ag_output_guardrail")  # blocked on the way out: the input is shown
    assert views.blocked_input(doc["spans"], doc["conversation"], blocked=True) is None
    doc = _captured_details("pydantic_ai_guards", "pg_normal")
    assert views.blocked_input(doc["spans"], doc["conversation"], blocked=False) is None


def test_span_messages_of_a_model_call_and_a_tool_call() -> None:
    """A model span shows the messages its attributes carry (history then answer); a tool span its call entry."""
    doc = _captured_details("pydantic_ai_guards", "pg_normal")
    found = views.span_messages(doc["spans"], doc["conversation"])
    chats = [s for s in doc["spans"] if s["kind"] == "llm"]
    second = found[chats[1]["span_id"]]["entries"]
    assert [e["role"] for e in second][-1] == "assistant"
    assert "user" in [e["role"] for e in second]
    assert "output" == second[-1]["side"]  # gen_ai.output.messages
    assert {"input"} == {e["side"] for e in second[:-1]}  # gen_ai.input.messages
    assert len(second) > len(found[chats[0]["span_id"]]["entries"])  # the second call resends the first's history
    tool = next(s for s in doc["spans"] if s["kind"] == "tool")
    assert ["tool"] == [e["kind"] for e in found[tool["span_id"]]["entries"]]


def test_span_messages_keep_the_latest() -> None:
    pairs = [{"role": "user", "parts": [{"type": "text", "content": f"m{i}"}]} for i in range(50)]
    span = {"span_id": "a", "kind": "llm", "attributes": {"gen_ai.input.messages": json.dumps(pairs)}}
    found = views.span_messages([span], [])["a"]
    assert views.SPAN_MESSAGES_SHOWN == len(found["entries"])
    assert 50 - views.SPAN_MESSAGES_SHOWN == found["earlier"]
    assert "m49" == found["entries"][-1]["content"]
