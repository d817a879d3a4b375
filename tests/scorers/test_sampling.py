"""Tests of scorers.sampling: the random sample's rate from a review budget, recorded on every run."""

from __future__ import annotations

import pytest

from scorers.model import Run
from scorers.pipeline import Pipeline
from scorers.rules import compile_rules, sample_point
from scorers.sampling import ReviewBudget, budget_rates


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
    pipeline = Pipeline((), compile_rules(None), 0.05, rate_for=budget.rate)
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
