"""Score one eval case against the agent's actual turns under an :class:`EvalConfig`.

A case passes when every configured criterion that applies passed its threshold; a judged
criterion the judge could not answer (not configured, budget spent, endpoint failing) fails the
case. ``task_success`` (when configured) is its own criterion summing up the others. A case whose
metadata lists ``checks`` (a robustness edge case, which has no reference answer) is judged by those
rules (:mod:`scorers.eval.robustness`) instead of the config's criteria. Every result carries the
case's dimension and tags and its measures (:mod:`scorers.eval.dimensions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from collector.model import fast_constructor
from scorers.eval import criteria as c
from scorers.eval.criteria import ActualTurn, CriterionResult
from scorers.eval.dimensions import CaseMeasures, measure
from scorers.eval.judged import EvalJudge
from scorers.eval.model import CriterionConfig, EvalCase, EvalConfig
from scorers.eval.robustness import check

__all__ = ["CaseResult", "evaluate_case"]


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's verdict.

    Attributes:
        eval_set_id / eval_id: the case.
        results: one per configured criterion, in config order (``task_success`` last).
        passed: every applicable criterion passed (and the agent ran without error).
        trace_ids: the traces of the turns scored.
        error: why the case could not be run or scored (the agent raised, no trace arrived…).
        repeat: the repetition (0-based) under ``--repeat``.
        turns: what the agent did, turn by turn.
        dimension / tags: the case's (:class:`scorers.eval.model.CaseMetadata`).
        measures: tool-call accuracy, task completion, steps, tokens, latency
            (:mod:`scorers.eval.dimensions`).
    """

    eval_set_id: str
    eval_id: str
    results: tuple[CriterionResult, ...]
    passed: bool
    trace_ids: tuple[str, ...] = ()
    error: str | None = None
    repeat: int = 0
    turns: tuple[ActualTurn, ...] = field(default=(), repr=False)
    dimension: str = "capability"
    tags: tuple[str, ...] = ()
    measures: CaseMeasures = field(default_factory=CaseMeasures)

    def score(self, name: str) -> float | None:
        """A criterion's score, or None."""
        return next((r.score for r in self.results if r.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "eval_set_id": self.eval_set_id,
            "eval_id": self.eval_id,
            "dimension": self.dimension,
            "tags": list(self.tags),
            "repeat": self.repeat,
            "passed": self.passed,
            "error": self.error,
            "trace_ids": list(self.trace_ids),
            "criteria": [r.as_dict() for r in self.results],
            "measures": self.measures.as_dict(),
        }


_new_case_result = fast_constructor(CaseResult)
_UNMEASURED = CaseMeasures()


def evaluate_case(
    case: EvalCase,
    actual: Sequence[ActualTurn],
    config: EvalConfig,
    *,
    eval_set_id: str = "",
    judge: EvalJudge | None = None,
    error: str | None = None,
    repeat: int = 0,
    explain: bool = True,
) -> CaseResult:
    """Score ``case`` against ``actual`` (one turn per expected invocation, in order). Pure but for the judge.

    Args:
        case: the case with its expected invocations.
        actual: what the agent did, turn by turn.
        config: the criteria and thresholds.
        eval_set_id: recorded in the result.
        judge: asks the judged criteria (None: they are left unscored and fail the case).
        error: an error that stopped the run (the case fails; criteria are still scored on what exists).
        repeat: recorded in the result.
        explain: explain failed tool trajectories and measure the case (:mod:`scorers.eval.dimensions`);
            off online, where only the scores are kept.
    """
    expected = case.turns
    results: list[CriterionResult] = []
    success: CriterionConfig | None = None
    checks = case.metadata.checks if case.metadata is not None else None
    if checks:
        results = [check(name, actual, error, judge=judge, expected=expected) for name in checks]
    else:
        for name, cfg in config.criteria.items():
            if name == "task_success":
                success = cfg
                continue
            results.append(_criterion(name, cfg, case, actual, judge, explain=explain))
    if success is not None:
        results.append(c.task_success(results, success))
    passed = (
        error is None
        and all(r.passed is not False for r in results)
        and not any(r.passed is None and r.detail.startswith("judge") for r in results)
    )
    return _new_case_result(
        eval_set_id,
        case.eval_id,
        tuple(results),
        passed,
        tuple(t.trace_id for t in actual if t.trace_id),
        error,
        repeat,
        tuple(actual) if expected else (),
        case.dimension,
        case.tags,
        measure(case, actual) if explain else _UNMEASURED,
    )


def _criterion(
    name: str,
    cfg: CriterionConfig,
    case: EvalCase,
    actual: Sequence[ActualTurn],
    judge: EvalJudge | None,
    *,
    explain: bool = True,
) -> CriterionResult:
    expected = case.turns
    if name == "tool_trajectory":
        return c.tool_trajectory(actual, expected, cfg, explain=explain)
    if name == "response_match":
        return c.response_match(actual, expected, cfg)
    if name == "tool_recall":
        return c.tool_recall(actual, expected, cfg)
    if name == "tool_precision":
        return c.tool_precision(actual, expected, cfg)
    if name == "param_accuracy":
        return c.param_accuracy(actual, expected, cfg)
    if name == "phrase_recall":
        return c.phrase_recall(actual, case.expected_phrases or list(cfg.phrases), cfg)
    if judge is None:
        return CriterionResult(name, None, cfg.threshold, None, "judge: no judge configured (eval config 'judge')")
    if name == "final_response_match":
        return judge.final_response_match(actual, expected, cfg)
    rubrics = list(case.rubrics or ()) or list(cfg.rubrics)
    return judge.rubric_quality(name, actual, expected, rubrics, cfg)
