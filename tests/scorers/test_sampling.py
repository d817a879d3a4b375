"""Tests of scorers.sampling: the random sample's rate from a review budget, recorded on every run."""

from __future__ import annotations

import pytest

from scorers.model import Run, RunStatus
from scorers.pipeline import Pipeline
from scorers.rules import compile_rules, sample_point
from scorers.sampling import ALLOCATION_FLOOR, ReviewBudget, budget_rates, uncertainty_rates


def test_the_fleet_budget_is_spread_over_the_traffic() -> None:
    """100 items a day over 4,000 + 1,000 runs a day: a rate of 2 % for both agents."""
    fleet, own = budget_rates(100, {}, {"support": 4000.0, "billing": 1000.0}, 0.05)
    assert (0.02, {}) == (pytest.approx(fleet), own)


def test_agents_with_their_own_budget_leave_the_fleets_to_the_others() -> None:
    fleet, own = budget_rates(50, {"billing": 100}, {"support": 5000.0, "billing": 400.0}, 0.05)
    assert pytest.approx(0.01) == fleet
    assert {"billing": pytest.approx(0.25)} == own


def test_small_traffic_caps_the_rate_at_1_and_unknown_traffic_keeps_the_configured_rate() -> None:
    assert (1.0, {"a": 1.0}) == budget_rates(500, {"a": 10}, {"a": 3.0, "b": 20.0}, 0.05)
    assert (0.05, {"a": 0.05}) == budget_rates(500, {"a": 10}, {}, 0.05)
    assert (0.05, {}) == budget_rates(None, {}, {"b": 20.0}, 0.05)


def test_the_pipeline_records_the_rate_in_force() -> None:
    """Before the first refresh the configured rate; after it the budget's; each run's design carries the
    rate its decision used, and its draw is the trace id's point below that rate."""
    traffic = {"support": 1000.0}
    budget = ReviewBudget(10, {}, 0.05, lambda: traffic)
    pipeline = Pipeline((), compile_rules(None), 0.05, rate_for=budget.rate_of)
    first = pipeline.decide_run(Run(trace_id="a" * 32, agent="support")).design
    assert first is not None
    assert 0.05 == first.rate
    budget.refresh()
    traffic["support"] = 20.0
    second = pipeline.decide_run(Run(trace_id="b" * 32, agent="support")).design
    assert second is not None
    assert (0.01, sample_point("b" * 32) < 0.01) == (pytest.approx(second.rate), second.drawn)
    budget.refresh()
    assert 0.5 == budget.rate("support")


class TestUncertaintyRates:
    """Sampling where the prediction is least sure: the same expected sample, spread by the verdicts' spread."""

    def test_the_group_whose_verdicts_vary_more_is_sampled_more_and_the_expected_sample_is_kept(self) -> None:
        done, other = uncertainty_rates(0.05, 0.78, (0.974, 0.18))
        assert other > 2 * done
        assert 0.78 * done + 0.22 * other == pytest.approx(0.05)
        spread = [(q * (1 - q)) ** 0.5 for q in (0.974, 0.18)]
        assert done / other == pytest.approx(spread[0] / spread[1])

    def test_no_group_falls_below_the_floor(self) -> None:
        done, other = uncertainty_rates(0.05, 0.9, (1.0, 0.5))
        assert done == pytest.approx(ALLOCATION_FLOOR * 0.05)
        assert 0.9 * done + 0.1 * other == pytest.approx(0.05)

    def test_rates_are_capped_at_1(self) -> None:
        assert uncertainty_rates(0.8, 0.5, (0.99, 0.5))[1] == 1.0

    @pytest.mark.parametrize(("share", "passes"), [(0.0, (0.9, 0.5)), (1.0, (0.9, 0.5)), (0.5, (1.0, 0.0))])
    def test_one_group_or_no_spread_keeps_the_even_rate(self, share: float, passes: tuple[float, float]) -> None:
        assert (0.05, 0.05) == uncertainty_rates(0.05, share, passes)

    def test_the_budget_gives_each_run_its_groups_rate(self) -> None:
        """The pipeline records, per run, the rate of its group: completed runs the lower one."""
        budget = ReviewBudget(None, {}, 0.05, dict, lambda: {"support": (0.78, (0.974, 0.18))})
        pipeline = Pipeline((), compile_rules(None), 0.05, rate_for=budget.rate_of)
        completed = Run(trace_id="c" * 32, agent="support", complete=True, final_output="done")
        errored = Run(trace_id="e" * 32, agent="support", complete=True, status=RunStatus.ERROR, errored=True)
        assert 0.05 == budget.rate_of(completed)  # before the first refresh: the even rate
        budget.refresh()
        expected = uncertainty_rates(0.05, 0.78, (0.974, 0.18))
        for run, rate in ((completed, expected[0]), (errored, expected[1])):
            design = pipeline.decide_run(run).design
            assert design is not None
            assert rate == pytest.approx(design.rate)
        other = Run(trace_id="d" * 32, agent="billing", complete=True, final_output="done")
        assert 0.05 == budget.rate_of(other)  # an agent not seen yet: the even rate
