"""Tests for the built-in scorers, including hypothesis properties over arbitrary runs."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorers import builtin
from scorers.efficiency import StepEfficiency
from scorers.model import Run, RunStatus, Step, StepKind, ToolCall
from scorers.registry import BUILTIN_NAMES, build_chain

RANGES: dict[str, tuple[float, float]] = {
    "tool_error_rate": (0.0, 1.0),
    "step_efficiency": (0.0, 1.0),
    "max_iterations_hit": (0.0, 1.0),
    "safety_block": (0.0, 1.0),
    "repeated_tool_calls": (1.0, float("inf")),
    "latency": (0.0, float("inf")),
    "tokens": (0.0, float("inf")),
}

tool_calls = st.builds(
    ToolCall,
    span_id=st.text("0123456789abcdef", min_size=16, max_size=16),
    name=st.sampled_from(["search", "calc", "fetch"]),
    arguments=st.one_of(st.none(), st.sampled_from(['{"q":"a"}', '{"q":"b"}', "raw"])),
    error=st.one_of(st.none(), st.just("ValueError: boom")),
)


@st.composite
def runs(draw: st.DrawFn) -> Run:
    """Arbitrary well-formed runs (counts consistent with their tool calls)."""
    tools = tuple(draw(st.lists(tool_calls, max_size=12)))
    start = draw(st.integers(0, 2**62))
    return Run(
        trace_id=draw(st.text("0123456789abcdef", min_size=32, max_size=32)),
        agent=draw(st.sampled_from(["a", "b", "unknown"])),
        status=draw(st.sampled_from(list(RunStatus))),
        complete=draw(st.booleans()),
        start_ns=start,
        end_ns=start + draw(st.integers(0, 10**13)),
        llm_calls=draw(st.integers(0, 200)),
        tool_calls=len(tools),
        tool_errors=sum(1 for t in tools if t.error),
        input_tokens=draw(st.integers(0, 10**7)),
        output_tokens=draw(st.integers(0, 10**7)),
        hit_max_iterations=draw(st.booleans()),
        safety_blocked=draw(st.booleans()),
        optimal_steps=draw(st.one_of(st.none(), st.integers(1, 20))),
        tools=tools,
        steps=tuple(Step(str(i), None, "a", StepKind.AGENT) for i in range(draw(st.integers(0, 3)))),
    )


class TestProperties:
    """Invariants every built-in scorer keeps."""

    @given(run=runs())
    @settings(max_examples=300)
    def test_in_range_deterministic_never_raises(self, run: Run) -> None:
        """Each scorer returns None or a value in its documented range, the same twice."""
        for name, scorer in build_chain(BUILTIN_NAMES, optimal_steps={"a": 3}):
            first = scorer(run)
            second = scorer(run)
            if first is None:
                assert second is None
                continue
            lo, hi = RANGES[name]
            assert lo <= first.value <= hi, (name, first)
            assert second is not None
            assert first.value == second.value
            assert name == first.name


class TestToolErrorRate:
    """tool_error_rate."""

    def test_no_tools_no_opinion(self) -> None:
        """A run without tool calls gets None."""
        assert builtin.tool_error_rate(Run(trace_id="t")) is None

    def test_fraction(self) -> None:
        """1 failed of 4 is 0.25, citing the failed span."""
        tools = (ToolCall("s1", "x", error="E"), *(ToolCall(f"s{i}", "x") for i in range(2, 5)))
        score = builtin.tool_error_rate(Run(trace_id="t", tool_calls=4, tool_errors=1, tools=tools))
        assert score is not None
        assert (0.25, ("s1",)) == (score.value, score.span_ids)


class TestRepeatedToolCalls:
    """repeated_tool_calls (loops)."""

    def test_counts_identical_calls(self) -> None:
        """Three identical search calls score 3."""
        tools = (
            ToolCall("1", "search", arguments='{"q":"x"}'),
            ToolCall("2", "search", arguments='{"q":"x"}'),
            ToolCall("3", "search", arguments='{"q":"y"}'),
            ToolCall("4", "search", arguments='{"q":"x"}'),
        )
        score = builtin.repeated_tool_calls(Run(trace_id="t", tools=tools))
        assert score is not None
        assert 3.0 == score.value

    def test_uncaptured_arguments_are_not_compared(self) -> None:
        """Calls without captured arguments give no opinion."""
        tools = (ToolCall("1", "search"), ToolCall("2", "search"))
        assert builtin.repeated_tool_calls(Run(trace_id="t", tools=tools)) is None


class TestStepEfficiency:
    """step_efficiency and the source of the optimal count."""

    def test_span_attribute_wins(self) -> None:
        """optimal_steps on the run beats the configured value."""
        scorer = StepEfficiency({"a": 1})
        score = scorer(Run(trace_id="t", agent="a", llm_calls=4, optimal_steps=2))
        assert score is not None
        assert 0.5 == score.value

    def test_configured(self) -> None:
        """Per-agent configuration: 12 steps for a 2-step job is 1/6."""
        score = StepEfficiency({"a": 2})(Run(trace_id="t", agent="a", llm_calls=12))
        assert score is not None
        assert pytest.approx(2 / 12) == score.value

    def test_capped_at_one(self) -> None:
        """Fewer steps than optimal is still 1."""
        score = StepEfficiency({"a": 5})(Run(trace_id="t", agent="a", llm_calls=2))
        assert score is not None
        assert 1.0 == score.value

    def test_learned_baseline_after_min_samples(self) -> None:
        """With no configuration the 10th percentile of successful runs becomes optimal."""
        scorer = StepEfficiency(min_samples=10)
        for _ in range(9):
            assert scorer(Run(trace_id="t", agent="b", llm_calls=2)) is None
        scorer(Run(trace_id="t", agent="b", llm_calls=2))
        score = scorer(Run(trace_id="t", agent="b", llm_calls=8))
        assert score is not None
        assert 0.25 == score.value

    def test_failed_runs_do_not_teach(self) -> None:
        """Errored or incomplete runs do not feed the baseline."""
        scorer = StepEfficiency(min_samples=1)
        scorer(Run(trace_id="t", agent="b", llm_calls=1, status=RunStatus.ERROR))
        scorer(Run(trace_id="t", agent="b", llm_calls=1, complete=False))
        assert scorer(Run(trace_id="t", agent="b", llm_calls=5)) is None
        assert 5 == scorer._optimal(Run(trace_id="t", agent="b"))[0]

    def test_bad_configuration_refused(self) -> None:
        """An optimal count below 1 is a start-up error."""
        with pytest.raises(ValueError, match="agent 'a'"):
            StepEfficiency({"a": 0})
