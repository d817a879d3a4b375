"""Intervals of ``vigil eval --repeat N``: each case's pass rate and the summary's, for every report.

* per case: the pass rate over its N runs with its Wilson interval (:func:`scorers.eval.stats.wilson`);
* the summary (all cases, and each dimension when the results carry one): the pass rate over
  every run with a percentile bootstrap interval that resamples *cases* with all their repeats
  (:func:`scorers.eval.stats.bootstrap_ratio`; repeats of one case are not independent draws),
  seeded, :data:`scorers.eval.stats.RESAMPLES` resamples — widened to the Wilson interval of all
  the runs where that is wider (when every case passed all its runs, or none, the resampled cases
  cannot vary and the bootstrap alone would say ``[1.00, 1.00]``).

:func:`print_intervals` writes the console table, :func:`statistics_json` the ``statistics``
object of the JSON report, :func:`junit_properties` adds them as ``<properties>`` of each JUnit
``<testsuite>``, :func:`markdown_intervals` the Markdown report's section.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from scorers.eval import stats
from scorers.eval.evaluate import CaseResult
from vigil.markdown import markdown_text

__all__ = [
    "CaseInterval",
    "case_intervals",
    "junit_properties",
    "markdown_intervals",
    "print_intervals",
    "statistics_json",
    "summaries",
]


@dataclass(frozen=True, slots=True)
class CaseInterval:
    """One case over its repeats: ``passed`` of ``runs`` and the Wilson interval of the rate."""

    eval_set_id: str
    eval_id: str
    runs: int
    passed: int
    interval: stats.Interval


def _dimension(result: CaseResult) -> str | None:
    value = getattr(result, "dimension", None)
    return value if isinstance(value, str) and value else None


def case_intervals(results: Sequence[CaseResult], confidence: float = stats.CONFIDENCE) -> list[CaseInterval]:
    """One per case, in first-seen order."""
    counts: dict[tuple[str, str], list[int]] = {}
    for r in results:
        tally = counts.setdefault((r.eval_set_id, r.eval_id), [0, 0])
        tally[0] += 1
        tally[1] += bool(r.passed)
    return [CaseInterval(s, c, n, k, stats.wilson(k, n, confidence)) for (s, c), (n, k) in counts.items()]


def summaries(
    results: Sequence[CaseResult], confidence: float = stats.CONFIDENCE, seed: int = stats.SEED
) -> dict[str, stats.Interval]:
    """The pass rate over every run, ``"all"`` and per dimension (when the results carry one), with
    the cluster-bootstrap interval over cases."""
    groups: dict[str, list[CaseResult]] = {"all": list(results)}
    for r in results:
        dim = _dimension(r)
        if dim is not None:
            groups.setdefault(dim, []).append(r)
    out: dict[str, stats.Interval] = {}
    for name, rs in groups.items():
        cases = case_intervals(rs, confidence)
        if cases:
            passed, runs = [c.passed for c in cases], [c.runs for c in cases]
            boot = stats.bootstrap_ratio(passed, runs, confidence=confidence, seed=seed)
            # Where every case sits at 0/N or N/N the resampled cases cannot vary: never claim
            # more than the runs would give as independent draws (Wilson over all of them).
            runs_only = stats.wilson(sum(passed), sum(runs), confidence)
            out[name] = stats.Interval(
                boot.estimate, min(boot.low, runs_only.low), max(boot.high, runs_only.high), confidence
            )
    return out


def statistics_json(results: Sequence[CaseResult], confidence: float = stats.CONFIDENCE) -> dict[str, Any]:
    """``{"confidence", "method", "cases": [...], "summary": {group: {...}}}`` of the JSON report."""

    def interval(i: stats.Interval) -> dict[str, float]:
        return {"pass_rate": i.estimate, "low": round(i.low, 6), "high": round(i.high, 6)}

    return {
        "confidence": confidence,
        "method": {
            "case": "Wilson score interval",
            "summary": f"percentile bootstrap over cases, {stats.RESAMPLES} resamples, seed {stats.SEED},"
            " at least the Wilson interval of the runs",
        },
        "cases": [
            {"eval_set_id": c.eval_set_id, "eval_id": c.eval_id, "runs": c.runs, "passed": c.passed}
            | interval(c.interval)
            for c in case_intervals(results, confidence)
        ],
        "summary": {name: interval(i) for name, i in summaries(results, confidence).items()},
    }


def print_intervals(results: Sequence[CaseResult], out: TextIO, confidence: float = stats.CONFIDENCE) -> None:
    """The pass rate of every case with its interval, then the summaries' (nothing without repeats)."""
    from rich.console import Console
    from rich.table import Table

    if not any(r.repeat for r in results):
        return
    pct = f"{confidence:.0%}"
    console = Console(file=out, highlight=False, width=None if out.isatty() else 140)
    table = Table(title=f"pass rates ({pct} intervals: Wilson per case, bootstrap over cases)", title_justify="left")
    for col in ("eval set", "case", "runs", "passed", "pass rate", f"{pct} interval"):
        table.add_column(col, justify="left" if col in {"eval set", "case"} else "right", overflow="fold")
    for c in case_intervals(results, confidence):
        table.add_row(
            c.eval_set_id, c.eval_id, str(c.runs), str(c.passed), f"{c.interval.estimate:.2f}", _bounds(c.interval)
        )
    for name, i in summaries(results, confidence).items():
        runs = [r for r in results if name == "all" or _dimension(r) == name]
        table.add_row(
            "", f"summary: {name}", str(len(runs)), str(sum(r.passed for r in runs)), f"{i.estimate:.2f}", _bounds(i)
        )
    console.print(table, markup=False)


def markdown_intervals(results: Sequence[CaseResult], confidence: float = stats.CONFIDENCE) -> str:
    """The pass rates with their intervals as a Markdown section ("" without repeats); case ids
    pass through ``escape`` (the Markdown report's, for text that may come from an agent)."""
    if not any(r.repeat for r in results):
        return ""
    pct = f"{confidence:.0%}"
    lines = [
        "",
        f"### Pass rates ({pct} intervals: Wilson per case, bootstrap over cases)",
        "",
        "| case | runs | passed | pass rate | interval |",
        "|---|---:|---:|---:|---:|",
    ]
    for c in case_intervals(results, confidence):
        case = markdown_text(f"{c.eval_set_id}/{c.eval_id}")
        lines.append(f"| {case} | {c.runs} | {c.passed} | {c.interval.estimate:.2f} | {_bounds(c.interval)} |")
    for name, i in summaries(results, confidence).items():
        runs = [r for r in results if name == "all" or _dimension(r) == name]
        passed = sum(r.passed for r in runs)
        lines.append(f"| **summary: {name}** | {len(runs)} | {passed} | {i.estimate:.2f} | {_bounds(i)} |")
    return "\n".join(lines) + "\n"


def _bounds(i: stats.Interval) -> str:
    return f"[{i.low:.2f}, {i.high:.2f}]"


def junit_properties(root: ET.Element, results: Sequence[CaseResult], confidence: float = stats.CONFIDENCE) -> None:
    """Add ``pass_rate:<case>`` properties (``0.80 [0.38, 0.96]``) to each ``<testsuite>`` of ``root``
    and the summaries' to the first, in the suite's ``<properties>`` (made first in it when missing)."""
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    props: dict[str, ET.Element] = {}
    for name, suite in suites.items():
        element = suite.find("properties")
        if element is None:
            element = ET.Element("properties")
            suite.insert(0, element)
        props[str(name)] = element
    for c in case_intervals(results, confidence):
        if c.eval_set_id in props:
            ET.SubElement(props[c.eval_set_id], "property", name=f"pass_rate:{c.eval_id}", value=c.interval.text())
    if props:
        first = next(iter(props.values()))
        for name, i in summaries(results, confidence).items():
            ET.SubElement(first, "property", name=f"pass_rate_summary:{name}", value=i.text())
        ET.SubElement(first, "property", name="confidence", value=f"{confidence:g}")
