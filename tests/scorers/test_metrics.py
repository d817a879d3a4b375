"""Tests for scorers.metrics: bounded labels, exemplars, counting once."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from scorers.metrics import OVERFLOW, LabelCap, RunMetrics
from scorers.model import Evidence, Flag, Priority, Run, ScoredRun, Step, StepKind, ToolCall


def scored(agent: str, tool: str = "search", *, flagged: bool = False) -> ScoredRun:
    run = Run(trace_id="f" * 32, agent=agent, start_ns=0, end_ns=2 * 10**9, llm_calls=3, tool_calls=1,
              input_tokens=10, output_tokens=5, tools=(ToolCall("s", tool, error="E"),), tool_errors=1)  # fmt: skip
    flag = Flag(("errored", "random_sample"), Priority.NORMAL, 0.05) if flagged else None
    return ScoredRun(run, {"step_efficiency": 0.5}, flag)


class TestDetections:
    """vigil_detections_total: once per (signal, rule) a run shows, whatever the number of spans."""

    def test_counted_once_per_run_and_rule(self) -> None:
        """Two spans matched by one rule count once; another rule counts apart; a second run counts again;
        an over-long (user) rule id is counted under 'other'."""
        registry = CollectorRegistry()
        metrics = RunMetrics(registry)
        long_rule = "user." + "x" * 60
        evidence = (
            Evidence("errored", "error.status", "s1", "a", "status.message", "boom"),
            Evidence("errored", "error.status", "s2", "b", "status.message", "boom"),
            Evidence("hit_max_iterations", "limit.cutoff", "s3", "c", "structure", "8"),
            Evidence("errored", long_rule, "s4", "d", "status.message", "x"),
            Evidence("errored", long_rule + "y", "s5", "e", "status.message", "y"),
        )
        run = Run(trace_id="e" * 32, agent="a", evidence=evidence)
        for _ in range(2):
            metrics.observe_run(ScoredRun(run, {}, None))

        def count(signal: str, rule: str) -> float | None:
            return registry.get_sample_value("vigil_detections_total", {"signal": signal, "rule": rule})

        assert (2.0, 2.0, 2.0) == (
            count("errored", "error.status"),
            count("hit_max_iterations", "limit.cutoff"),
            count("errored", "other"),
        )
        assert count("hit_max_iterations", "error.status") is None


class TestLabelCap:
    """Agent and tool names are capped with an overflow value."""

    def test_overflow(self) -> None:
        """Values past the limit become 'other'; admitted values stay."""
        cap = LabelCap(2)
        assert ["a", "b", OVERFLOW, "a"] == [cap("a"), cap("b"), cap("c"), cap("a")]


class TestRunMetrics:
    """What a run adds to the registry."""

    def test_agents_capped_in_every_metric(self) -> None:
        """With a cap of 2 agents, a third agent's run is counted under 'other'."""
        registry = CollectorRegistry()
        metrics = RunMetrics(registry, max_agents=2, max_tools=1)
        for agent in ("a", "b", "c"):
            metrics.observe_run(scored(agent, tool=agent))
        assert 1.0 == registry.get_sample_value(
            "vigil_runs_total", {"agent": "other", "outcome": "ok", "complete": "true"}
        )
        assert 1.0 == registry.get_sample_value("vigil_tool_errors_total", {"agent": "b", "tool": "other"})
        agents = {s.labels.get("agent") for m in registry.collect() for s in m.samples} - {None}
        assert {"a", "b", "other"} == agents

    def test_tokens_and_flags(self) -> None:
        """Tokens by direction, and one flag count per reason."""
        registry = CollectorRegistry()
        metrics = RunMetrics(registry)
        item = scored("a", flagged=True)
        metrics.observe_run(item)
        metrics.observe_flag(item)
        assert 10.0 == registry.get_sample_value("vigil_tokens_total", {"agent": "a", "direction": "input"})
        assert 1.0 == registry.get_sample_value("vigil_flags_total", {"reason": "random_sample", "priority": "normal"})
        assert 1.0 == registry.get_sample_value("vigil_flagged_runs_total", {"agent": "a", "priority": "normal"})

    def test_exemplars_carry_trace_id_in_openmetrics_only(self) -> None:
        """The trace id is an exemplar in OpenMetrics output and never a label."""
        registry = CollectorRegistry()
        RunMetrics(registry).observe_run(scored("a"))
        assert b'trace_id="' + b"f" * 32 in generate_openmetrics(registry)
        assert b"trace_id" not in generate_latest(registry)

    def test_estimated_cost_and_unpriced_tokens(self) -> None:
        """Each run adds its estimated USD to the agent's cost counter; unknown models' tokens are counted apart."""
        registry = CollectorRegistry()
        metrics = RunMetrics(registry, prices={"house-model": (10.0, 20.0)})
        steps = (
            Step("1", None, "chat", StepKind.LLM, model="house-model", input_tokens=1000, output_tokens=500),
            Step("2", None, "chat", StepKind.LLM, model="unknown-model", input_tokens=7, output_tokens=3),
        )
        run = Run(trace_id="e" * 32, agent="a", steps=steps, input_tokens=1007, output_tokens=503)
        metrics.observe_run(ScoredRun(run, {}, None))
        usd = registry.get_sample_value("vigil_estimated_cost_usd_total", {"agent": "a"})
        assert usd is not None
        assert abs(0.02 - usd) < 1e-12
        assert 10.0 == registry.get_sample_value("vigil_unpriced_tokens_total", {"agent": "a"})

    def test_assembler_events_exist_at_zero(self) -> None:
        """Every assembler event series exists before its first event, so increase() sees it."""
        registry = CollectorRegistry()
        RunMetrics(registry)
        for event in ("late_spans", "late_evicted", "duplicate_spans", "spans_dropped_cap", "evicted_inflight"):
            assert 0.0 == registry.get_sample_value("vigil_assembler_events_total", {"event": event})
