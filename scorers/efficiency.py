"""Step efficiency: how close a run came to the optimal number of steps.

A *step* is one LLM call (``Run.llm_calls``: model calls after de-duplicating nested
instrumentation of the same call); a run without LLM spans falls back to its agent turns.
``step_efficiency = min(1, optimal / actual)``.

The optimal step count comes, in order, from:

1. the root-span attribute ``vigil.optimal_steps`` (``Run.optimal_steps``),
2. the per-agent configuration (``optimal_steps: {agent: n}`` in ``vigil.yaml``),
3. a learned per-agent baseline: the 10th percentile of the step counts of the agent's
   last ``window`` successful complete runs, once ``min_samples`` have been seen.

Without any of these the scorer has no opinion (None). The learned baseline makes this
scorer stateful; state is per process and bounded (``window`` runs × ``max_agents``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from collector.model import fast_constructor
from scorers.model import Run, RunStatus, Score, StepKind

_score = fast_constructor(Score)


class StepEfficiency:
    """Scorer ``step_efficiency`` in [0, 1].

    Args:
        optimal_by_agent: configured optimal steps per agent name (values ≥ 1).
        window: successful runs remembered per agent for the learned baseline.
        min_samples: runs needed before the learned baseline is used.
        max_agents: agents tracked for baselines (others get no learned baseline).

    Raises:
        ValueError: a configured optimal count is below 1.
    """

    name = "step_efficiency"

    def __init__(
        self,
        optimal_by_agent: Mapping[str, int] | None = None,
        *,
        window: int = 200,
        min_samples: int = 20,
        max_agents: int = 1000,
    ) -> None:
        for agent, n in (optimal_by_agent or {}).items():
            if n < 1:
                raise ValueError(f"optimal_steps for agent {agent!r} must be >= 1, got {n}")
        self._configured = dict(optimal_by_agent or {})
        self._window = window
        self._min_samples = min_samples
        self._max_agents = max_agents
        self._history: dict[str, deque[int]] = {}

    def __call__(self, run: Run) -> Score | None:
        """Score ``run`` and learn from it when it succeeded."""
        steps = _steps(run)
        optimal, source = self._optimal(run)
        self._learn(run, steps)
        if optimal is None or steps <= 0:
            return None
        value = min(1.0, optimal / steps)
        return _score(self.name, value, f"{steps} steps, optimal {optimal} ({source})", ())

    def _optimal(self, run: Run) -> tuple[int | None, str]:
        if run.optimal_steps is not None and run.optimal_steps >= 1:
            return run.optimal_steps, "span attribute"
        configured = self._configured.get(run.agent)
        if configured is not None:
            return configured, "configured"
        history = self._history.get(run.agent)
        if history is not None and len(history) >= self._min_samples:
            ordered = sorted(history)
            return max(1, ordered[len(ordered) // 10]), "learned"
        return None, "none"

    def _learn(self, run: Run, steps: int) -> None:
        if run.status is not RunStatus.OK or not run.complete or steps <= 0:
            return
        history = self._history.get(run.agent)
        if history is None:
            if len(self._history) >= self._max_agents:
                return
            history = self._history[run.agent] = deque(maxlen=self._window)
        history.append(steps)


def _steps(run: Run) -> int:
    if run.llm_calls > 0:
        return run.llm_calls
    return sum(1 for s in run.steps if s.kind is StepKind.AGENT)
