"""The random review sample's rate from a review budget: expected random items per day within it.

With ``review_budget_per_day`` (``VIGIL_REVIEW_BUDGET_PER_DAY``) the random stratum's rate is no longer
a fixed share: :class:`ReviewBudget` sets it to ``budget / expected runs per day`` (at most 1), from the
traffic the store saw, refreshed every minute on a thread of its own (never on the scoring path, which
only reads the last rates). Agents with a budget of their own (``review_budget_agents``, YAML only) get
``their budget / their runs per day``; the others share the fleet's budget.

The rate in force is recorded on every run when it is decided (:class:`scorers.model.SampleDesign`), so
a rate that changes over a window leaves every estimate unbiased: each reviewed run of the stratum is
weighed by the inverse of *its* probability (:mod:`scorers.quality`). Until the traffic is known (a
new database) the configured ``sample_rate`` is used.

**Sampling where the prediction is least sure** (``review_sample_allocation: uncertainty``): the same
expected number of random items a day, spread unevenly over the runs Vigil predicts completed
(:func:`scorers.slo.task_completed`) and the others — each group's rate in proportion to the spread of
the reviewers' verdicts in it, ``sqrt(q (1 - q))`` with ``q`` its pass rate on the sample so far (Neyman
allocation; for prediction-powered inference, Zrnic & Candès 2024, "Active Statistical Inference",
arXiv:2403.03208). Completed runs mostly pass, so their verdicts say less; the others are sampled more.
Each run's own rate is recorded and weighs its verdict, so the estimates stay unbiased; every group
keeps at least :data:`ALLOCATION_FLOOR` of the even rate, so no run is left without a chance and the
groups' pass rates keep being learnt.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping
from typing import Final

from scorers.model import Run
from scorers.slo import task_completed

__all__ = ["ALLOCATION_FLOOR", "CellRates", "ReviewBudget", "budget_rates", "uncertainty_rates"]

ALLOCATION_FLOOR: Final = 0.25
"""The least share of the even rate a group of runs keeps when the sample goes where it is least sure."""

CellRates = tuple[float, tuple[float, float]]
"""An agent's inputs to :func:`uncertainty_rates`: the share of its runs predicted completed, and the
reviewers' pass rate ``(on runs predicted completed, on the others)``."""


def uncertainty_rates(
    rate: float, completed_share: float, pass_rates: tuple[float, float], floor: float = ALLOCATION_FLOOR
) -> tuple[float, float]:
    """``(rate of runs predicted completed, rate of the others)``, the expected sample unchanged.

    Neyman allocation: each group's rate in proportion to ``sqrt(q (1 - q))`` (its verdicts' spread),
    scaled so ``share × r1 + (1 - share) × r0 = rate``; each at least ``floor × rate`` and at most 1.
    A group of no runs, or no spread anywhere, leaves the even rate.
    """
    spread = [math.sqrt(max(0.0, q * (1.0 - q))) for q in pass_rates]
    s = completed_share
    mean = s * spread[0] + (1.0 - s) * spread[1]
    if not 0.0 < s < 1.0 or mean <= 0 or rate <= 0:
        return rate, rate
    done, other = rate * spread[0] / mean, rate * spread[1] / mean
    least = floor * rate
    if done < least:
        done, other = least, (rate - s * least) / (1.0 - s)
    elif other < least:
        done, other = (rate - (1.0 - s) * least) / s, least
    return min(1.0, done), min(1.0, other)


def budget_rates(
    per_day: int | None, per_agent: Mapping[str, int], traffic: Mapping[str, float], fallback: float
) -> tuple[float, dict[str, float]]:
    """``(fleet rate, {agent: rate})`` that make the expected random items per day fit the budgets.

    Args:
        per_day: the fleet's budget (items a day), ``None`` for none (the fleet keeps ``fallback``).
        per_agent: budgets of agents of their own.
        traffic: expected runs per day by agent.
        fallback: the rate where the traffic is not known yet.
    """

    def fitting(budget: float, runs: float) -> float:
        return min(1.0, budget / runs) if runs > 0 else fallback

    own = {agent: fitting(budget, traffic.get(agent, 0.0)) for agent, budget in per_agent.items()}
    shared = sum(runs for agent, runs in traffic.items() if agent not in per_agent)
    fleet = fallback if per_day is None else fitting(per_day, shared)
    return fleet, own


class ReviewBudget:
    """The rate in force per agent; :meth:`refresh` recomputes it from ``traffic`` (run it periodically).

    Args:
        per_day: the fleet's budget of random review items a day (``None``: none).
        per_agent: agents' own budgets.
        fallback: the configured ``sample_rate`` (until the traffic is known).
        traffic: expected runs per day by agent (a store query; see :func:`review_queue.quality.runs_per_day`).
        cells: with sampling where the prediction is least sure, each agent's :data:`CellRates` (a store
            query: :func:`review_queue.quality.allocation_inputs`); ``None``: one rate for all of an
            agent's runs.
    """

    def __init__(
        self,
        per_day: int | None,
        per_agent: Mapping[str, int],
        fallback: float,
        traffic: Callable[[], Mapping[str, float]],
        cells: Callable[[], Mapping[str, CellRates]] | None = None,
    ) -> None:
        self._per_day = per_day
        self._per_agent = dict(per_agent)
        self._fallback = fallback
        self._traffic = traffic
        self._cells = cells
        self._fleet = fallback
        self._own: dict[str, float] = dict.fromkeys(per_agent, fallback)
        self._split: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def rate(self, agent: str) -> float:
        """The random stratum's even rate for a run of ``agent`` now (two dict reads)."""
        return self._own.get(agent, self._fleet)

    def rate_of(self, run: Run) -> float:
        """The random stratum's rate for ``run`` now: its agent's, or its group's when the sample goes
        where the prediction is least sure (the scoring path calls it once per run)."""
        split = self._split.get(run.agent)  # empty unless cells are given
        if split is None:
            return self.rate(run.agent)
        return split[0] if task_completed(run) else split[1]

    def refresh(self) -> None:
        """Recompute the rates from the traffic (database reads: off the scoring path)."""
        with self._lock:
            fleet, own = budget_rates(self._per_day, self._per_agent, self._traffic(), self._fallback)
            split = {}
            if self._cells is not None:
                for agent, (share, passes) in self._cells().items():
                    split[agent] = uncertainty_rates(own.get(agent, fleet), share, passes)
            self._own = own  # one assignment each: readers see the old dict or the new one
            self._fleet = fleet
            self._split = split
