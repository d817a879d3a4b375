"""Tests of scorers.slo: the task-completion definition, the targets' configuration and its errors."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from scorers import metrics
from scorers.errors import SloConfigError
from scorers.metrics import RunMetrics
from scorers.model import Run, RunStatus, ScoredRun, Step, StepKind
from scorers.slo import DEFAULT_TARGETS, HISTOGRAMS, Direction, answered, parse_slo, task_completed


def llm(*reasons: str) -> Step:
    return Step("s", None, "chat", StepKind.LLM, finish_reasons=reasons)


class TestTaskCompleted:
    """A run completed when it ended normally with a final answer, without error, limit or block."""

    @pytest.mark.parametrize(
        ("run", "expected"),
        [
            (Run("a" * 32, final_output="Paris"), True),
            (Run("a" * 32, steps=(llm("stop"),)), True),
            (Run("a" * 32, steps=(llm("tool_calls"),)), False),  # ended asking for a tool
            (Run("a" * 32, steps=(llm("length"),)), False),  # cut off
            (Run("a" * 32, steps=(llm("tool_calls"),), final_output="Paris"), True),  # the answer was captured
            (Run("a" * 32, steps=(llm("stop"), llm("MAX_TOKENS"))), False),  # the last call decides
            (Run("a" * 32, final_output="   "), True),  # blank text: no LLM call says otherwise
            (Run("a" * 32), True),  # no LLM call, nothing against it
        ],
    )
    def test_answered(self, run: Run, expected: bool) -> None:
        """Captured answer text, else the last LLM call's finish reason."""
        assert expected == answered(run)

    @pytest.mark.parametrize(
        "fields",
        [
            {"status": RunStatus.ERROR, "errored": True},
            {"status": RunStatus.LIMIT_HIT, "hit_max_iterations": True},
            {"status": RunStatus.BLOCKED, "safety_blocked": True},
            {"complete": False},
            {"steps": (llm("tool_calls"),)},
        ],
    )
    def test_not_completed(self, fields: dict[str, Any]) -> None:
        """An error, a limit, a block, an idle timeout or no final answer: not completed."""
        answer: dict[str, Any] = {} if "steps" in fields else {"final_output": "x"}
        assert not task_completed(Run("a" * 32, **answer, **fields))
        assert task_completed(Run("a" * 32, final_output="x"))

    def test_exported_as_its_own_counter(self) -> None:
        """vigil_task_completions_total counts completed runs; it exists at 0 from an agent's first run."""
        registry = CollectorRegistry()
        m = RunMetrics(registry)
        m.observe_run(ScoredRun(Run("b" * 32, agent="x", status=RunStatus.ERROR, errored=True), {}, None))
        assert 0.0 == registry.get_sample_value("vigil_task_completions_total", {"agent": "x"})
        m.observe_run(ScoredRun(Run("c" * 32, agent="x", final_output="ok"), {}, None))
        assert 1.0 == registry.get_sample_value("vigil_task_completions_total", {"agent": "x"})


class TestParse:
    """The ``slo`` section of vigil.yaml."""

    def test_defaults(self) -> None:
        """No section: the five targets of the issue and session completion (issue 26)."""
        config = parse_slo(None)
        assert 28 == config.window_days
        assert {
            "task_completion": (Direction.AT_LEAST, 0.85),
            "step_efficiency": (Direction.AT_LEAST, 0.6),
            "review_pass_rate": (Direction.AT_LEAST, 0.9),
            "safety_block_rate": (Direction.BAND, 0.005),
            "steps_per_task": (Direction.TREND, 0.2),
            "session_completion": (Direction.AT_LEAST, 0.9),
        } == {n: (t.direction, t.objective) for n, t in config.targets.items()}
        assert 0.0005 == config.targets["safety_block_rate"].floor
        assert {} == config.agents

    def test_fleet_and_agent_overrides(self) -> None:
        """Fleet targets merge over the defaults, agent targets over the fleet; enabled: false drops one."""
        config = parse_slo(
            {
                "window": "7d",
                "targets": {
                    "task_completion": {"objective": 0.9, "tolerance": 0.02},
                    "fast_runs": {"histogram": "run_duration", "below": 10, "objective": 0.95},
                },
                "agents": {
                    "billing": {"task_completion": {"objective": 0.97}, "safety_block_rate": {"enabled": False}}
                },
            }
        )
        assert 7 == config.window_days
        assert (0.9, 0.02) == (config.targets["task_completion"].objective, config.targets["task_completion"].tolerance)
        billing = config.agents["billing"]
        assert (0.97, 0.02) == (billing["task_completion"].objective, billing["task_completion"].tolerance)
        assert "safety_block_rate" not in billing
        assert 'le="10.0"' in billing["fast_runs"].sli.numerator
        assert 7 == len(config.targets)

    @pytest.mark.parametrize(
        ("data", "message"),
        [
            ({"targets": {"task_completion": {"objective": 1.5}}}, "task_completion.objective: 1.5 must be"),
            ({"targets": {"task_completion": {"objective": "high"}}}, "objective: 'high' must be a number"),
            ({"targets": {"task_completion": {"objectiv": 0.9}}}, "slo.targets.task_completion.objectiv: unknown key"),
            ({"targets": {"mine": {"objective": 0.9}}}, "slo.targets.mine.sli: missing"),
            ({"targets": {"mine": {"sli": "nope"}}}, "slo.targets.mine.sli: 'nope' is not one of"),
            ({"targets": {"Bad-Name": {}}}, "target name 'Bad-Name'"),
            ({"targets": {"x": {"histogram": "run_duration", "below": 7}}}, "slo.targets.x.below: 7 must be a bucket"),
            ({"targets": {"safety_block_rate": {"min": 0.01}}}, "slo.targets.safety_block_rate.min: 0.01 must be"),
            ({"window": "4w"}, "slo.window: '4w' must be days"),
            ({"agents": {"billing": {"task_completion": {"objective": 0}}}}, "slo.agents.billing.task_completion"),
            ({"agents": ["billing"]}, "slo.agents: must be a mapping"),
            ({"target": {}}, "slo.target: unknown key"),
        ],
    )
    def test_one_line_errors(self, data: dict[str, Any], message: str) -> None:
        """Every mistake names the path of the key, on one line."""
        with pytest.raises(SloConfigError) as info:
            parse_slo(data)
        assert message in str(info.value)
        assert "\n" not in str(info.value)

    def test_histogram_bounds_match_the_metrics(self) -> None:
        """The bucket bounds a quantile target may use are the histograms' own."""
        assert HISTOGRAMS["step_efficiency"][1] == metrics.RATIO_BUCKETS
        assert HISTOGRAMS["run_duration"][1] == metrics.DURATION_BUCKETS
        assert HISTOGRAMS["run_steps"][1] == metrics.STEP_BUCKETS
        assert HISTOGRAMS["run_tokens"][1] == metrics.TOKEN_BUCKETS

    def test_default_budgets(self) -> None:
        """Error budgets: 15 % of runs, 0.4 of mean efficiency, 10 % of verdicts, 0.5 % of runs; no trend budget."""
        budgets = {n: t.budget for n, t in DEFAULT_TARGETS.items()}
        assert pytest.approx(0.15) == budgets["task_completion"]
        assert budgets["steps_per_task"] is None

    def test_one_sli_per_target_name(self) -> None:
        """An agent cannot restate a target on another SLI under the same name."""
        with pytest.raises(SloConfigError, match=r"slo\.agents\.billing\.task_completion: an agent may change"):
            parse_slo({"agents": {"billing": {"task_completion": {"sli": "error_free"}}}})
