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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

__all__ = ["ReviewBudget", "budget_rates"]


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
    """

    def __init__(
        self,
        per_day: int | None,
        per_agent: Mapping[str, int],
        fallback: float,
        traffic: Callable[[], Mapping[str, float]],
    ) -> None:
        self._per_day = per_day
        self._per_agent = dict(per_agent)
        self._fallback = fallback
        self._traffic = traffic
        self._fleet = fallback
        self._own: dict[str, float] = dict.fromkeys(per_agent, fallback)
        self._lock = threading.Lock()

    def rate(self, agent: str) -> float:
        """The random stratum's rate for a run of ``agent`` now (two dict reads; the scoring path calls it)."""
        return self._own.get(agent, self._fleet)

    def refresh(self) -> None:
        """Recompute the rates from the traffic (a database read: off the scoring path)."""
        with self._lock:
            fleet, own = budget_rates(self._per_day, self._per_agent, self._traffic(), self._fallback)
            self._own = own  # one assignment each: readers see the old dict or the new one
            self._fleet = fleet
