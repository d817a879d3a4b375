"""Reports of ``vigil eval``: a rich console table with the failures explained, JSON, JUnit XML for
CI, and Markdown for a pull-request comment.

Every report opens with the summary by dimension (:mod:`scorers.eval.dimensions`): capability's
tool-call accuracy and task completion, efficiency's steps, tokens and latency per task (against a
baseline JSON report when one is given: its value and the change), robustness's pass rate; then
one row per case with its dimension, tags and measures, then the failures explained (the agent's
error, the criteria below threshold). With ``--repeat N`` every case runs N times; the table and the
JSON give each case's pass rate, JUnit XML has one test case per run (``<eval_id>#<repeat>``);
each pass rate comes with its interval (:mod:`vigil.eval_stats`).

Agent output (answers, errors) reaches the Markdown report escaped (:func:`markdown_text`): no HTML,
no table break, no code span opens from it.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from scorers.eval.dimensions import DimensionSummary, summarise_dimensions
from scorers.eval.evaluate import CaseResult
from vigil.eval_stats import junit_properties, statistics_json
from vigil.markdown import markdown_text

__all__ = [
    "CaseSummary",
    "SummaryRow",
    "junit_xml",
    "load_baseline",
    "markdown_report",
    "markdown_text",
    "print_report",
    "report_json",
    "summarise",
    "summary_rows",
]

Baseline = Mapping[str, Any]


@dataclass(frozen=True)
class CaseSummary:
    """A case over its repeats."""

    eval_set_id: str
    eval_id: str
    runs: int
    passed: int
    dimension: str = "capability"
    tags: tuple[str, ...] = ()

    @property
    def pass_rate(self) -> float:
        """Share of the runs that passed."""
        return self.passed / self.runs if self.runs else 0.0


def summarise(results: Sequence[CaseResult]) -> list[CaseSummary]:
    """One summary per case, in first-seen order."""
    order: dict[tuple[str, str], list[CaseResult]] = {}
    for r in results:
        order.setdefault((r.eval_set_id, r.eval_id), []).append(r)
    return [
        CaseSummary(s, c, len(rs), sum(r.passed for r in rs), rs[0].dimension, rs[0].tags)
        for (s, c), rs in order.items()
    ]


# --- the summary by dimension ------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryRow:
    """One line of the dimension summary: a metric of a dimension, formatted, with its baseline."""

    dimension: str
    metric: str
    value: str
    baseline: str = ""
    change: str = ""


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return "–"
    text = f"{value:,.0f}" if digits == 0 else f"{value:,.{digits}f}"
    return text + unit


def _signed(value: float | None, unit: str = "", digits: int = 2) -> str:
    if value is None:
        return ""
    if math.isclose(value, 0.0, abs_tol=10**-digits / 2):
        return "±0" + unit
    return ("+" if value > 0 else "−") + _num(abs(value), unit, digits)


def summary_rows(summaries: Sequence[DimensionSummary]) -> list[SummaryRow]:
    """The rows every report shows: per dimension, the metrics that answer its question."""
    rows: list[SummaryRow] = []
    for d in summaries:
        passed = f"{_pct(d.pass_rate)} ({d.passed}/{d.runs})"
        if d.dimension == "capability":
            rows.append(SummaryRow(d.dimension, "tool-call accuracy", _pct(d.tool_accuracy)))
            rows.append(SummaryRow(d.dimension, "task completion", _pct(d.task_completion)))
            rows.append(SummaryRow(d.dimension, "cases passed", passed))
        elif d.dimension == "efficiency":
            base = d.baseline or {}
            for name, label, unit, digits in (
                ("steps", "steps per task", "", 2),
                ("tokens", "tokens per task", "", 0),
                ("latency_ms", "latency per task", " ms", 0),
            ):
                rows.append(
                    SummaryRow(
                        d.dimension,
                        label,
                        _num(getattr(d, name), unit, digits),
                        _num(base.get(name), unit, digits) if d.baseline is not None else "",
                        _signed(d.delta(name), unit, digits),
                    )
                )
            rows.append(SummaryRow(d.dimension, "cases passed", passed))
        else:
            rows.append(SummaryRow(d.dimension, "pass rate over edge cases", passed))
    return rows


def load_baseline(path: str | Path) -> dict[str, Any]:
    """A JSON report of an earlier ``vigil eval`` run (``--json``), to compare efficiency with (a report
    written before dimensions existed has no ``dimensions`` block: nothing to compare).

    Raises:
        ValueError: not a JSON report (one line, naming the file).
        FileNotFoundError: no such file.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: expected a JSON report of vigil eval (--json): {exc}") from None
    if not isinstance(data, dict) or not any(isinstance(data.get(k), dict | list) for k in ("dimensions", "results")):
        raise ValueError(f"{path}: expected a JSON report of vigil eval (--json): an object with 'results'")
    return data


def _criteria(results: Sequence[CaseResult]) -> list[str]:
    names: dict[str, None] = {}
    for r in results:
        for c in r.results:
            names.setdefault(c.name, None)
    return list(names)


def print_report(results: Sequence[CaseResult], out: TextIO, baseline: Baseline | None = None) -> None:
    """The summary by dimension, the table (one row per case; mean score per criterion and the
    case's measures over the repeats) and every failure explained."""
    console = Console(file=out, highlight=False, width=None if out.isatty() else 200)
    dims = Table(title="vigil eval: by dimension", title_justify="left")
    for col in ("dimension", "metric", "value"):
        dims.add_column(col, justify="right" if col == "value" else "left")
    rows = summary_rows(summarise_dimensions(results, baseline))
    if baseline is not None:
        dims.add_column("baseline", justify="right")
        dims.add_column("change", justify="right")
    for row in rows:
        cells = [row.dimension, row.metric, row.value]
        if baseline is not None:
            cells += [row.baseline, row.change]
        dims.add_row(*cells)
    if rows:
        console.print(dims, markup=False)
    names = _criteria(results)
    table = Table(title="vigil eval", title_justify="left")
    table.add_column("eval set")
    longest = max((len(r.eval_id) for r in results), default=4)
    table.add_column("case", overflow="fold", min_width=min(longest, 30))
    table.add_column("dimension")
    for n in names:
        table.add_column(n, justify="right")
    for col in ("tools", "facts", "steps", "tokens", "ms"):
        table.add_column(col, justify="right")
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
        measures = _case_measures(mine)
        accuracy = measures[0]
        if accuracy not in {"–", "100 %"}:
            measures[0] = f"[red]{accuracy}[/red]"
        table.add_row(
            _escape(summary.eval_set_id), _escape(summary.eval_id), summary.dimension, *cells, *measures, verdict
        )
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


def _escape(text: str) -> str:
    """Text for a rich cell with markup on: ``[`` cannot open a tag."""
    return text.replace("[", "\\[")


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _case_measures(runs: Sequence[CaseResult]) -> list[str]:
    """A case's tool-call accuracy, task completion, steps, tokens and latency (means over its runs)."""
    ms = [r.measures for r in runs]
    accuracy = _mean([m.tool_accuracy for m in ms])
    completion = _mean([m.task_completion for m in ms])
    return [
        "–" if accuracy is None else f"{accuracy * 100:.0f} %",
        "–" if completion is None else f"{completion * 100:.0f} %",
        _num(_mean([float(m.steps) for m in ms]), digits=1),
        _num(_mean([float(m.tokens) for m in ms]), digits=0),
        _num(_mean([m.latency_ms for m in ms]), digits=0),
    ]


def _repeated(results: Sequence[CaseResult]) -> bool:
    return any(r.repeat for r in results)


def report_json(results: Sequence[CaseResult], baseline: Baseline | None = None) -> dict[str, Any]:
    """The JSON report: the summary by dimension (with the baseline's values and the change when one
    is given), every case run with its criteria and measures, and per-case pass rates."""
    return {
        "passed": all(r.passed for r in results),
        "dimensions": {d.dimension: d.as_dict() for d in summarise_dimensions(results, baseline)},
        "results": [r.as_dict() for r in results],
        "cases": [
            {
                "eval_set_id": s.eval_set_id,
                "eval_id": s.eval_id,
                "dimension": s.dimension,
                "tags": list(s.tags),
                "runs": s.runs,
                "passed": s.passed,
                "pass_rate": s.pass_rate,
            }
            for s in summarise(results)
        ],
    } | ({"statistics": statistics_json(results)} if _repeated(results) else {})


def write_json(results: Sequence[CaseResult], out: TextIO, baseline: Baseline | None = None) -> None:
    """Write :func:`report_json` (indented)."""
    json.dump(report_json(results, baseline), out, ensure_ascii=False, indent=1)
    out.write("\n")


# --- Markdown ---------------------------------------------------------------------------------


def markdown_report(results: Sequence[CaseResult], baseline: Baseline | None = None) -> str:
    """The Markdown report (a pull-request comment): the summary by dimension, the cases, the failures."""
    total = len(results)
    passed = sum(r.passed for r in results)
    mark = "✅" if results and passed == total else "❌"
    lines = [f"## {mark} vigil eval: {passed}/{total} case run(s) passed", ""]
    rows = summary_rows(summarise_dimensions(results, baseline))
    if rows:
        head = ["dimension", "metric", "value"] + (["baseline", "change"] if baseline is not None else [])
        lines += ["| " + " | ".join(head) + " |", "|" + "|".join(["---", "---"] + ["---:"] * (len(head) - 2)) + "|"]
        for row in rows:
            cells = [row.dimension, row.metric, row.value]
            if baseline is not None:
                cells += [row.baseline, row.change]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "| case | dimension | tags | tool calls | facts | steps | tokens | latency ms | passed |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for summary in summarise(results):
        mine = [r for r in results if (r.eval_set_id, r.eval_id) == (summary.eval_set_id, summary.eval_id)]
        verdict = ("✅ " if summary.passed == summary.runs else "❌ ") + f"{summary.passed}/{summary.runs}"
        case = markdown_text(f"{summary.eval_set_id}/{summary.eval_id}")
        tags = markdown_text(", ".join(summary.tags))
        lines.append(
            f"| {case} | {summary.dimension} | {tags} | " + " | ".join(_case_measures(mine)) + f" | {verdict} |"
        )
    failures = [r for r in results if not r.passed]
    if failures:
        lines += ["", "### Failures", ""]
        repeated = _repeated(results)
        for r in failures:
            where = markdown_text(f"{r.eval_set_id}/{r.eval_id}") + (f" (repeat {r.repeat + 1})" if repeated else "")
            reasons = [f"error: {markdown_text(r.error)}"] if r.error else []
            for c in _failed(r):
                score = "n/a" if c.score is None else f"{c.score:.2f}"
                reasons.append(f"{c.name} {score} < {c.threshold:g}: {markdown_text(c.detail)}")
            lines.append(f"- **{where}** ({r.dimension}): " + "; ".join(reasons or ["failed"]))
    return "\n".join(lines) + "\n"


def _failed(r: CaseResult) -> list[Any]:
    return [c for c in r.results if c.passed is False or (c.passed is None and c.detail.startswith("judge"))]


def junit_xml(results: Sequence[CaseResult], baseline: Baseline | None = None) -> str:
    """JUnit XML: a ``<testsuite>`` per eval set, its ``<properties>`` the summary by dimension of its
    cases (``capability.tool_accuracy``, ``efficiency.steps``… and ``….baseline`` when given); a
    ``<testcase>`` per case run, its properties the criteria, its dimension, tags and measures;
    ``<failure>`` names the criteria below threshold and why, ``<error>`` an agent that raised or a
    run that never arrived."""
    root = ET.Element("testsuites", name="vigil eval")
    suites: dict[str, ET.Element] = {}
    counts: dict[str, list[int]] = {}
    repeated = _repeated(results)
    for r in results:
        suite = suites.get(r.eval_set_id)
        if suite is None:
            suite = suites[r.eval_set_id] = ET.SubElement(root, "testsuite", name=r.eval_set_id)
            counts[r.eval_set_id] = [0, 0, 0]
            _suite_properties(suite, [x for x in results if x.eval_set_id == r.eval_set_id], baseline)
        tally = counts[r.eval_set_id]
        tally[0] += 1
        name = f"{r.eval_id}#{r.repeat + 1}" if repeated else r.eval_id
        case = ET.SubElement(suite, "testcase", classname=r.eval_set_id, name=name)
        props = ET.SubElement(case, "properties")
        for c in r.results:
            value = "" if c.score is None else f"{c.score:.4f}"
            ET.SubElement(props, "property", name=c.name, value=value)
        ET.SubElement(props, "property", name="dimension", value=r.dimension)
        if r.tags:
            ET.SubElement(props, "property", name="tags", value=",".join(r.tags))
        for key, measured in r.measures.as_dict().items():
            if measured is not None:
                ET.SubElement(props, "property", name=key, value=f"{measured:g}")
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


def _suite_properties(suite: ET.Element, results: Sequence[CaseResult], baseline: Baseline | None) -> None:
    """The summary by dimension of one suite's case runs, as ``<property name="dim.metric">``."""
    props = ET.SubElement(suite, "properties")
    for d in summarise_dimensions(results, baseline):
        for key, value in d.as_dict().items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                ET.SubElement(props, "property", name=f"{d.dimension}.{key}", value=f"{value:g}")
        for key, value in (d.baseline or {}).items():
            if value is not None:
                ET.SubElement(props, "property", name=f"{d.dimension}.{key}.baseline", value=f"{value:g}")
