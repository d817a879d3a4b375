"""``vigil quality``: the production quality estimates of :mod:`review_queue.quality` as a table or JSON.

The same numbers as ``GET /api/v1/quality`` and the stats page, read from the configured database.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from review_queue.quality import WINDOWS, quality_report

__all__ = ["add_quality_command", "print_report"]


def add_quality_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``vigil quality``."""
    p = sub.add_parser(
        "quality",
        help="how good each agent is in production: estimates from the review sample with 95 %% intervals",
        description="Estimates of the review pass rate, task completion corrected by reviewers and each failure "
        "category's share of production runs, per agent and for the fleet, from the random review sample's design "
        "(and Vigil's completion verdict on every run, by prediction-powered inference). The plain share of all "
        "verdicts is shown beside them for comparison only: it mixes the rule-flagged runs in.",
    )
    p.add_argument("--window", choices=tuple(WINDOWS), default="7d", help="the runs of the last day, 7 or 28 days")
    p.add_argument("--agent", default=None, help="only this agent ('*': the fleet)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (as GET /api/v1/quality)")
    p.set_defaults(func=_cmd_quality)


def _cmd_quality(args: argparse.Namespace) -> int:
    from vigil.settings import Settings
    from vigil.tools import review_store

    store = review_store(args)
    try:
        with store.engine.connect() as conn:
            settings = Settings.load(config_file=args.config)
            report = quality_report(
                conn,
                settings.slo_config(),
                time.time(),
                window=args.window,
                agent=args.agent,
                reviewer_error=settings.reviewer_error(),
            )
    finally:
        store.close()
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print_report(report, sys.stdout)
    return 0


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f} %"


def _cells(row: dict[str, Any]) -> list[str]:
    """One table row: figure, estimate, interval, n, method, status, change, the share of all verdicts."""
    e = row["estimate"]
    interval = "–" if e["value"] is None else f"[{_pct(e['low'])}, {_pct(e['high'])}]"
    moved = row["change"]
    change = "–"
    if moved is not None:
        change = f"{moved['delta'] * 100:+.1f} pts"
        if moved["p_value"] is not None:
            change += f" (p = {moved['p_value']:.2g})"
    figure = row["target"].replace("category:", "failed: ")
    if row["objective"] is not None:
        figure += f" (target {'>=' if row['direction'] == 'at_least' else '<='} {row['objective'] * 100:g} %)"
    naive = row["naive"]
    status = row["status"] or "–"
    shares = f"{_pct(naive['value'])} of {naive['n']}"
    return [figure, _pct(e["value"]), interval, str(e["n"]), e["method"], status, change, shares]


def print_report(report: dict[str, Any], out: TextIO) -> None:
    """The report as one table per agent (the fleet first)."""
    console = Console(file=out, width=160, highlight=False)
    if not report["agents"]:
        console.print(f"No runs in the last {report['window']}.")
    for entry in report["agents"]:
        d = entry["design"]
        name = "all agents" if entry["agent"] == "*" else entry["agent"]
        title = (
            f"{name} · last {report['window']} · {d['runs']} runs · random sample {d['sample']} "
            f"({d['sample_reviewed']} with a verdict) · rule-flagged {d['rule_flagged']} "
            f"({d['rule_flagged_reviewed']} reviewed)"
        )
        if d["shed"] or d["before_design"]:
            title += f" · not covered: {d['shed']} shed, {d['before_design']} before the design"
        table = Table(title=title, title_justify="left")
        for column in ("figure", "estimate", "95 % interval", "n", "method", "status", "vs previous", "all verdicts*"):
            table.add_column(column, justify="left" if column in ("figure", "method", "status") else "right")
        for row in entry["estimates"]:
            table.add_row(*_cells(row))
        sessions = entry["sessions"]
        if sessions["design"]["runs"]:
            for row in sessions["estimates"]:
                cells = _cells(row)
                cells[0] += f" · {sessions['design']['runs']} closed sessions, {sessions['design']['sample']} sampled"
                table.add_row(*cells)
        console.print(table)
    if report.get("judges"):
        judges = Table(title="LLM judges against the reviewers (runs of the random sample only)", title_justify="left")
        for column in ("judge", "agent", "n", "agreement [95 %]", "kappa [95 %]"):
            judges.add_column(column, justify="left" if column in ("judge", "agent") else "right")
        for j in report["judges"]:
            a, k = j["agreement"], j["kappa"]
            kappa = "–" if k is None else f"{k['value']:.2f} [{k['low']:.2f}, {k['high']:.2f}]"
            agreement = f"{_pct(a['value'])} [{_pct(a['low'])}, {_pct(a['high'])}]"
            judges.add_row(j["judge"], "all agents" if j["agent"] == "*" else j["agent"], str(j["n"]), agreement, kappa)
        console.print(judges)
    console.print(
        "* the share of all verdicts that passed (rule-flagged runs included): how the queue went, not the agent's "
        "quality. Methods: ppi = prediction-powered (Vigil's completion verdict on every run + the reviewed random "
        "sample), sample = the reviewed random sample alone."
    )
