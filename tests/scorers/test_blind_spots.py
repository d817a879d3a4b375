"""What a trace cannot show (scorers.blind_spots), on captured traces and on the shapes that decide it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from collector.otlp import decode_json
from scorers.blind_spots import Shape, blind_spots, shape_of_run
from scorers.normalise import normalise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SEEN = Shape(
    content_captured=True, llm_calls=2, answered=2, with_reasons=2, with_tokens=2, guardrail_spans=0, skipped=0,
    errored=False, hit_max_iterations=False, safety_blocked=False,
)  # fmt: skip


def _captured(stack: str, scenario: str) -> tuple[str, ...]:
    truth = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    trace_id = next(r["trace_id"] for r in truth["runs"] if r["scenario"] == scenario)
    spans = [
        s
        for b in decode_json((FIXTURES / f"{stack}.json").read_bytes()).batches
        if b.trace_id == trace_id
        for s in b.spans
    ]
    return blind_spots(shape_of_run(normalise(spans)))


def test_callback_guardrail_without_model_span() -> None:
    """ADK's before_model_callback guardrail (unobservable.json): no model span, no guardrail span."""
    found = _captured("google_adk", "ad_guardrail")
    assert 1 == len(found)
    assert found[0].startswith("this trace cannot show whether a guardrail answered instead of the model, because")


def test_content_capture_off() -> None:
    """ADK without content capture: a callback block or a refusal in the text cannot show."""
    found = _captured("google_adk", "ad_normal")
    assert any("because content capture is off and no guardrail span was recorded" in f for f in found)


def test_skipped_request() -> None:
    """PydanticAI's SkipModelRequest: the skip carries no reason."""
    assert any("model request(s) were skipped" in f for f in _captured("pydantic_ai_guards", "pg_input_guard"))


def test_missing_finish_reasons_and_tokens() -> None:
    """DSPy's own model spans record neither (unobservable.json's token entries)."""
    found = _captured("dspy_react", "dr_normal")
    assert any("by finish reason" in f for f in found)
    assert any("token usage" in f for f in found)


def test_a_complete_trace_has_none() -> None:
    assert () == blind_spots(SEEN)
    assert () == _captured("strands_agents", "st_normal")


def test_failed_calls_and_set_signals_are_not_blind_spots() -> None:
    """A call that failed records no finish reason or usage by nature; a set signal was shown."""
    failed = dataclasses.replace(SEEN, answered=0, with_reasons=0, with_tokens=0, errored=True)
    assert () == blind_spots(failed)
    blocked = dataclasses.replace(SEEN, llm_calls=0, answered=0, with_reasons=0, with_tokens=0, safety_blocked=True)
    assert () == blind_spots(blocked)
