"""Reports of ``vigil eval``: a rich console table with the failures explained, JSON, and JUnit XML for CI.

With ``--repeat N`` every case runs N times; the table and the JSON give each case's pass rate,
JUnit XML has one test case per run (``<eval_id>#<repeat>``); each pass rate comes with its
interval (:mod:`review_queue.app.eval_stats`).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from review_queue.app.eval_stats import junit_properties, print_intervals, statistics_json
from scorers.eval.evaluate import CaseResult

__all__ = ["CaseSummary", "junit_xml", "print_report", "report_json", "summarise"]


@dataclass(frozen=True)
class CaseSummary:
    """A case over its repeats."""

    eval_set_id: str
    eval_id: str
    runs: int
    passed: int

    @property
    def pass_rate(self) -> float:
        """Share of the runs that passed."""
        return self.passed / self.runs if self.runs else 0.0


def summarise(results: Sequence[CaseResult]) -> list[CaseSummary]:
    """One summary per case, in first-seen order."""
    order: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        order.setdefault((r.eval_set_id, r.eval_id), []).append(r)
    return [CaseSummary(s, c, len(rs), sum(r.passed for r in rs)) for (s, c), rs in order.items()]


def _criteria(results: Sequence[CaseResult]) -> list[str]:
    names: dict[str, None] = {}
    for r in results:
        for c in r.results:
            names.setdefault(c.name, None)
    return list(names)


def print_report(results: Sequence[CaseResult], out: TextIO) -> None:
    """The table (one row per case; mean score per criterion over the repeats) and every failure explained."""
    console = Console(file=out, highlight=False, width=None if out.isatty() else 140)
    names = _criteria(results)
    table = Table(title="vigil eval", title_justify="left")
    table.add_column("eval set")
    table.add_column("case", overflow="fold")
    for n in names:
        table.add_column(n, justify="right")
    table.add_column("passed", justify="right")
    for summary in summarise(results):
        mine = [r for r in results if (r.eval_set_id, r.eval_id) == (summary.eval_set_id, summary.eval_id)]
        cells = []
        for n in names:
            scores = [c.score for r in mine for c in r.results if c.name == n and c.score is not None]
            ok = all(c.passed is not False for r in mine for c in r.results if c.name == n)
            text = "-" if not scores else f"{sum(scores) / len(scores):.2f}"
            cells.append(text if ok else f"[red]{text} ✗[/red]")
        verdict = f"{summary.passed}/{summary.runs}"
        verdict = f"[green]{verdict}[/green]" if summary.passed == summary.runs else f"[red]{verdict}[/red]"
        table.add_row(summary.eval_set_id, summary.eval_id, *cells, verdict)
    console.print(table)
    for r in results:
        if r.passed:
            continue
        where = f"{r.eval_set_id}/{r.eval_id}" + (f" (repeat {r.repeat + 1})" if _repeated(results) else "")
        console.print(f"[bold red]FAIL[/bold red] {where}", markup=True)
        if r.error:
            console.print(f"  error: {r.error}", markup=False)
        for c in r.results:
            if c.passed is False or (c.passed is None and c.detail.startswith("judge")):
                score = "n/a" if c.score is None else f"{c.score:.2f}"
                console.print(f"  {c.name} {score} < {c.threshold:g}: {c.detail}", markup=False)
    total = len(results)
    passed = sum(r.passed for r in results)
    console.print(f"{passed}/{total} case run(s) passed.", markup=False)
    if _repeated(results):
        print_intervals(results, out)


def _repeated(results: Sequence[CaseResult]) -> bool:
    return any(r.repeat for r in results)


def report_json(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The JSON report: every case run with its criteria, and per-case pass rates."""
    return {
        "passed": all(r.passed for r in results),
        "results": [r.as_dict() for r in results],
        "cases": [
            {
                "eval_set_id": s.eval_set_id,
                "eval_id": s.eval_id,
                "runs": s.runs,
                "passed": s.passed,
                "pass_rate": s.pass_rate,
            }
            for s in summarise(results)
        ],
    } | ({"statistics": statistics_json(results)} if _repeated(results) else {})


def write_json(results: Sequence[CaseResult], out: TextIO) -> None:
    """Write :func:`report_json` (indented)."""
    json.dump(report_json(results), out, ensure_ascii=False, indent=1)
    out.write("\n")


def junit_xml(results: Sequence[CaseResult]) -> str:
    """JUnit XML: a ``<testsuite>`` per eval set, a ``<testcase>`` per case run; ``<failure>`` names the
    criteria below threshold and why, ``<error>`` an agent that raised or a run that never arrived."""
    root = ET.Element("testsuites", name="vigil eval")
    suites: dict[str, ET.Element] = {}
    counts: dict[str, list[int]] = {}
    repeated = _repeated(results)
    for r in results:
        suite = suites.get(r.eval_set_id)
        if suite is None:
            suite = suites[r.eval_set_id] = ET.SubElement(root, "testsuite", name=r.eval_set_id)
            counts[r.eval_set_id] = [0, 0, 0]
        tally = counts[r.eval_set_id]
        tally[0] += 1
        name = f"{r.eval_id}#{r.repeat + 1}" if repeated else r.eval_id
        case = ET.SubElement(suite, "testcase", classname=r.eval_set_id, name=name)
        props = ET.SubElement(case, "properties")
        for c in r.results:
            value = "" if c.score is None else f"{c.score:.4f}"
            ET.SubElement(props, "property", name=c.name, value=value)
        if r.trace_ids:
            ET.SubElement(props, "property", name="trace_ids", value=",".join(r.trace_ids))
        failed = [c for c in r.results if c.passed is False or (c.passed is None and c.detail.startswith("judge"))]
        if r.error:
            tally[2] += 1
            ET.SubElement(case, "error", message=r.error[:300], type="AgentError").text = r.error
        elif failed:
            tally[1] += 1
            message = "; ".join(
                f"{c.name} {'n/a' if c.score is None else f'{c.score:.2f}'} < {c.threshold:g}" for c in failed
            )
            body = "\n".join(f"{c.name}: {c.detail}" for c in failed)
            ET.SubElement(case, "failure", message=message, type="EvalFailure").text = body
    for set_id, suite in suites.items():
        tests, failures, errors = counts[set_id]
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", str(errors))
    root.set("tests", str(len(results)))
    root.set("failures", str(sum(c[1] for c in counts.values())))
    root.set("errors", str(sum(c[2] for c in counts.values())))
    if repeated:
        junit_properties(root, results)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
