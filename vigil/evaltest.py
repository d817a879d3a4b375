"""pytest integration: ``assert_eval_passes("evals/support.json", agent=my_agent)``.

Runs ``agent`` over the eval set through the process's in-process Vigil
(:func:`vigil.evalrun.shared_harness`), and raises ``AssertionError`` with the
per-criterion report when a case fails. No pytest import: it works under any test runner::

    from vigil.evaltest import assert_eval_passes

    def test_support_agent() -> None:
        assert_eval_passes("evals/support.json", agent=support.answer, config="evals/criteria.json")
"""

from __future__ import annotations

import io
from pathlib import Path

from scorers.eval.evaluate import CaseResult
from scorers.eval.model import EvalConfig, EvalSet, load_eval_config, load_eval_set
from vigil.eval_report import print_report, summarise
from vigil.evalrun import Agent, RunOptions, judge_closed, judge_from, shared_harness

__all__ = ["assert_eval_passes", "run_eval"]


def run_eval(
    evalset: str | Path | EvalSet,
    agent: Agent,
    config: str | Path | EvalConfig | None = None,
    *,
    repeat: int = 1,
    concurrency: int = 4,
    span_timeout_s: float = 10.0,
) -> list[CaseResult]:
    """Run ``agent`` over ``evalset`` and return every case result (nothing asserted)."""
    import os

    eval_set = evalset if isinstance(evalset, EvalSet) else load_eval_set(evalset)
    cfg = config if isinstance(config, EvalConfig) else (load_eval_config(config) if config else EvalConfig())
    judge = judge_from(cfg, os.environ)
    options = RunOptions(concurrency=concurrency, repeat=repeat, span_timeout_s=span_timeout_s)
    with judge_closed(judge):
        return shared_harness().run(eval_set, agent, cfg, options=options, judge=judge)


def assert_eval_passes(
    evalset: str | Path | EvalSet,
    agent: Agent,
    config: str | Path | EvalConfig | None = None,
    *,
    repeat: int = 1,
    min_pass_rate: float = 1.0,
    concurrency: int = 4,
) -> list[CaseResult]:
    """Assert every case passes (with ``repeat``, at least ``min_pass_rate`` of each case's runs).

    Raises:
        AssertionError: the report (table and every failure explained) as the message.
    """
    results = run_eval(evalset, agent, config, repeat=repeat, concurrency=concurrency)
    failing = [s for s in summarise(results) if s.pass_rate < min_pass_rate]
    if failing or not results:
        out = io.StringIO()
        print_report(results, out)
        names = ", ".join(f"{s.eval_id} ({s.passed}/{s.runs})" for s in failing) or "no case was run"
        raise AssertionError(f"eval cases below pass rate {min_pass_rate:g}: {names}\n{out.getvalue()}")
    return results
