"""Regression tests on traces captured from real third-party instrumentors (tests/fixtures/traces).

The captures were produced by the e2e drivers (LangGraph + OpenInference, OpenAI Agents SDK +
OpenInference, openai + genai-openai) against the fake OpenAI server; each ``*.truth.json`` is
what the driver observed. These run without the instrumentors installed, so a normaliser
change that breaks a real dialect fails fast here, before the slower e2e suite.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from collector.model import Span
from collector.otlp import decode_json
from scorers.normalise import normalise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
DRIVERS = sorted(p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json"))
FIELDS = (
    "agent", "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens",
    "hit_max_iterations", "safety_blocked", "errored",
)  # fmt: skip


def _traces(driver: str) -> dict[str, list[Span]]:
    result = decode_json((FIXTURES / f"{driver}.json").read_bytes())
    traces: dict[str, list[Span]] = {}
    for batch in result.batches:
        traces.setdefault(batch.trace_id, []).extend(batch.spans)
    return traces


class TestCapturedTraces:
    """Every derived field of every captured run equals the driver's ground truth."""

    def test_fixtures_present(self) -> None:
        """All three instrumentor captures are present."""
        assert ["langgraph_agent", "openai_agents", "openai_plain"] == DRIVERS

    @pytest.mark.parametrize("driver", DRIVERS)
    def test_matches_truth(self, driver: str) -> None:
        """Normalising each captured trace reproduces what the driver did."""
        truth: dict[str, Any] = json.loads((FIXTURES / f"{driver}.truth.json").read_text())
        traces = _traces(driver)
        problems = []
        for expected in truth["runs"]:
            run = normalise(traces[expected["trace_id"]])
            assert run.complete, expected["scenario"]
            for name in FIELDS:
                if getattr(run, name) != expected[name]:
                    problems.append(
                        f"{expected['scenario']}.{name}: want {expected[name]!r}, got {getattr(run, name)!r}"
                    )
        assert [] == problems
