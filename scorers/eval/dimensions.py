"""Eval results by dimension: capability, efficiency, robustness.

Each case carries a dimension (``metadata.dimension``, default ``capability``; see
:class:`scorers.eval.model.CaseMetadata`). Every case is measured the same way
(:func:`measure`), and each dimension is summed up by the measures that answer its question:

* **capability** (can the agent do the task?):

  - *tool-call accuracy*: per case, the share of the expected tool calls the agent made, matched by
    tool name, each by its own actual call, turn by turn (as ``tool_recall``); a case that expects no
    tool call has none. The dimension's value is the mean over its cases that have one.
  - *task completion*: per case, the share of its *expected facts* found in the agent's answers
    (normalised text contained, as ``phrase_recall``). The expected facts are the case's
    ``metadata.expected_facts`` when set, else its ``expected_phrases``; a case with neither has no
    task completion. The dimension's value is the mean over its cases that have one.

* **efficiency** (does it do it fast and cheaply?): per task (case), *steps* (LLM calls, as
  :mod:`scorers.efficiency` counts a step), *tokens* (input + output) and *latency* (each turn's wall
  time, first span start to last span end, summed over the turns), averaged over the dimension's
  cases; compared with the same means of a baseline report when one is given.

* **robustness** (does it hold up on unusual input?): the *pass rate* over its cases (edge cases
  judged by the rules of :mod:`scorers.eval.robustness`, or by the config's criteria).

Every dimension also reports its cases' pass rate. Under ``--repeat N`` every run of a case counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scorers.eval import criteria as c
from scorers.eval.criteria import ActualTurn
from scorers.eval.model import DIMENSIONS, CriterionConfig, EvalCase

__all__ = [
    "EFFICIENCY_MEASURES",
    "CaseMeasures",
    "DimensionSummary",
    "MeasuredRun",
    "measure",
    "summarise_dimensions",
]

_ANY = CriterionConfig(threshold=0.0)

EFFICIENCY_MEASURES = ("steps", "tokens", "latency_ms")
"""The efficiency measures, per task; a baseline compares each."""


@dataclass(frozen=True, slots=True)
class CaseMeasures:
    """What one case run measured (see the module docstring).

    Attributes:
        tool_accuracy: share of the expected tool calls made; None when the case expects none.
        task_completion: share of the expected facts in the answers; None when the case has none.
        steps: LLM calls over the turns.
        tokens: input + output tokens over the turns.
        latency_ms: wall time over the turns.
    """

    tool_accuracy: float | None = None
    task_completion: float | None = None
    steps: int = 0
    tokens: int = 0
    latency_ms: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "tool_accuracy": self.tool_accuracy,
            "task_completion": self.task_completion,
            "steps": self.steps,
            "tokens": self.tokens,
            "latency_ms": round(self.latency_ms, 3),
        }


def measure(case: EvalCase, actual: Sequence[ActualTurn]) -> CaseMeasures:
    """The measures of one run of ``case`` (its actual turns, in order)."""
    expects_tools = any(inv.tool_uses for inv in case.turns)
    accuracy = c.tool_recall(actual, case.turns, _ANY).score if expects_tools else None
    facts = case.facts
    completion = c.phrase_recall(actual, facts, _ANY).score if facts else None
    return CaseMeasures(
        accuracy,
        completion,
        sum(t.steps for t in actual),
        sum(t.tokens for t in actual),
        sum(t.latency_ms for t in actual),
    )


@dataclass(frozen=True)
class DimensionSummary:
    """One dimension over its case runs.

    Attributes:
        dimension: ``capability``, ``efficiency`` or ``robustness``.
        runs / passed: case runs, and those that passed.
        tool_accuracy / task_completion: means over the runs that have them (None: none has).
        steps / tokens / latency_ms: means per task over the runs.
        baseline: the baseline report's means of this dimension (``steps``, ``tokens``,
            ``latency_ms``, ``pass_rate``…), when one was given and has the dimension.
    """

    dimension: str
    runs: int
    passed: int
    tool_accuracy: float | None
    task_completion: float | None
    steps: float | None
    tokens: float | None
    latency_ms: float | None
    baseline: Mapping[str, float | None] | None = None

    @property
    def pass_rate(self) -> float:
        """Share of the runs that passed."""
        return self.passed / self.runs if self.runs else 0.0

    def delta(self, name: str) -> float | None:
        """This summary's ``name`` minus the baseline's (None without both)."""
        mine = getattr(self, name)
        theirs = (self.baseline or {}).get(name)
        return None if mine is None or theirs is None else float(mine) - float(theirs)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (read back as a baseline by :func:`summarise_dimensions`)."""
        out: dict[str, Any] = {
            "runs": self.runs,
            "passed": self.passed,
            "pass_rate": self.pass_rate,
            "tool_accuracy": self.tool_accuracy,
            "task_completion": self.task_completion,
            "steps": self.steps,
            "tokens": self.tokens,
            "latency_ms": None if self.latency_ms is None else round(self.latency_ms, 3),
        }
        if self.baseline is not None:
            out["baseline"] = dict(self.baseline)
            out["delta"] = {n: self.delta(n) for n in (*EFFICIENCY_MEASURES, "pass_rate")}
        return out


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


class MeasuredRun(Protocol):
    """What a summary reads of a case run (:class:`scorers.eval.evaluate.CaseResult` is one)."""

    @property
    def dimension(self) -> str: ...

    @property
    def passed(self) -> bool: ...

    @property
    def measures(self) -> CaseMeasures: ...


def summarise_dimensions(
    results: Sequence[MeasuredRun], baseline: Mapping[str, Any] | None = None
) -> list[DimensionSummary]:
    """One summary per dimension that has case runs, in :data:`DIMENSIONS` order.

    Args:
        results: the case runs.
        baseline: a JSON report of an earlier run (``vigil eval … --json``); its ``dimensions``
            block is attached to the matching summaries.
    """
    prior = baseline.get("dimensions") if isinstance(baseline, Mapping) else None
    out = []
    for dim in DIMENSIONS:
        mine = [r for r in results if r.dimension == dim]
        if not mine:
            continue
        ms = [r.measures for r in mine]
        then = prior.get(dim) if isinstance(prior, Mapping) else None
        out.append(
            DimensionSummary(
                dim,
                len(mine),
                sum(r.passed for r in mine),
                _mean(m.tool_accuracy for m in ms),
                _mean(m.task_completion for m in ms),
                _mean(float(m.steps) for m in ms),
                _mean(float(m.tokens) for m in ms),
                _mean(m.latency_ms for m in ms),
                _numbers(then) if isinstance(then, Mapping) else None,
            )
        )
    return out


def _numbers(block: Mapping[str, Any]) -> dict[str, float | None]:
    """The numeric means of a baseline's dimension block (anything else dropped)."""
    keys = ("pass_rate", "tool_accuracy", "task_completion", *EFFICIENCY_MEASURES)
    out: dict[str, float | None] = {}
    for k in keys:
        v = block.get(k)
        out[k] = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
    return out
