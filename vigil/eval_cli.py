"""``vigil eval …``: run an agent over an eval set, score captured traces, manage eval sets.

* ``vigil eval run --agent module:callable EVALSET [--config CFG]``: an in-process Vigil
  (:class:`vigil.evalrun.EvalHarness`), the agent called for every case with bounded
  concurrency (``--concurrency``), ``--repeat N`` times; the report on stdout (``--json``,
  ``--junit FILE``, ``--markdown FILE`` for a pull-request comment; ``--baseline REPORT.json``
  compares efficiency with an earlier JSON report); exit 1 when a case fails its thresholds, or
  with ``--baseline`` only when a metric dropped significantly from that report
  (:mod:`vigil.eval_compare`).
* ``vigil eval score EVALSET --traces DIR``: the same scoring over captured OTLP files.
* ``vigil eval show EVALSET``: the cases of an eval set.
* ``vigil eval export``: reviewed runs as an eval set (also ``vigil export``).
* ``vigil eval add --from-run TRACE_ID EVALSET``: one stored run appended as a case (duplicates skipped),
  with ``--dimension`` and ``--tag``; ``--from-session ID``: a stored session's turns as one multi-turn
  case (:mod:`vigil.eval_session`).
* ``vigil eval robustness EVALSET``: edge cases derived from the set's cases
  (:mod:`scorers.eval.robustness`), written to ``--out`` and/or run with ``--agent`` like ``run``.
* ``vigil eval compare BASE NEW``: paired tests of two JSON reports, per metric (``--fail-on-drop``).

Exit status: 0 every case passed, 1 a case failed (or nothing was scored), 2 bad input (the
message names the file, the JSON path and what was expected).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scorers.eval.evaluate import CaseResult
from scorers.eval.model import (
    DIMENSIONS,
    EvalConfig,
    EvalFileError,
    EvalSet,
    load_eval_config,
    load_eval_set,
)
from scorers.pipeline import Pipeline
from vigil.eval_compare import add_compare_command, add_gate_arguments, gate
from vigil.eval_report import (
    junit_xml,
    load_baseline,
    markdown_report,
    print_report,
    report_json,
    write_json,
)
from vigil.eval_stats import markdown_intervals, print_intervals

if TYPE_CHECKING:
    from scorers.eval.judged import EvalJudge

__all__ = ["add_eval_commands"]

EXIT_FAILED = 1
EXIT_INPUT = 2


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_eval_commands(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    add_export_arguments: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Register ``vigil eval`` and its sub-commands."""
    ev = sub.add_parser("eval", help="reference-based evaluation: run, score, show, export, add")
    ev_sub = ev.add_subparsers(dest="eval_command", required=True)

    run = ev_sub.add_parser("run", help="run an agent over an eval set through an in-process Vigil and score it")
    run.add_argument("evalset", type=Path, help="eval set file (ADK EvalSet JSON or legacy list)")
    run.add_argument("--agent", required=True, help="module:callable taking the user message (and the history)")
    _add_scoring_arguments(run)
    run.add_argument("--concurrency", type=_positive_int, default=4, help="cases run at once (default 4)")
    run.add_argument("--repeat", type=_positive_int, default=1, help="runs per case; the pass rate is reported")
    run.add_argument("--span-timeout", type=float, default=10.0, help="seconds to wait for a turn's spans")
    run.set_defaults(func=_cmd_eval_run)

    score = ev_sub.add_parser("score", help="score captured OTLP traces against an eval set (nothing is run)")
    score.add_argument("evalset", type=Path, help="eval set file")
    score.add_argument("--traces", type=Path, nargs="+", required=True, help="OTLP files or directories")
    _add_scoring_arguments(score)
    score.set_defaults(func=_cmd_eval_score)

    show = ev_sub.add_parser("show", help="list the cases of an eval set")
    show.add_argument("evalset", type=Path, help="eval set file")
    show.add_argument("--json", action="store_true", help="the normalised eval set as JSON")
    show.set_defaults(func=_cmd_eval_show)

    export = ev_sub.add_parser("export", help="export reviewed runs as an evaluation set")
    add_export_arguments(export)

    add = ev_sub.add_parser("add", help="append a stored run to an eval set as a case (redacted as stored)")
    add.add_argument("evalset", type=Path, help="eval set file (created when missing)")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-run", dest="trace_id", help="trace id of a stored run")
    source.add_argument("--from-session", dest="session_id", help="a stored session: its turns as one multi-turn case")
    add.add_argument("--eval-id", default=None, help="the case id (default: the trace id or the session id)")
    add.add_argument("--dimension", choices=DIMENSIONS, default=None, help="the case's dimension (default capability)")
    add.add_argument("--tag", action="append", default=[], dest="tags", help="a free tag (repeatable)")
    add.set_defaults(func=_cmd_eval_add)

    rob = ev_sub.add_parser("robustness", help="derive edge cases from an eval set; write them and/or run them")
    rob.add_argument("evalset", type=Path, help="the source eval set")
    rob.add_argument("--out", type=Path, default=None, help="write the derived eval set here")
    rob.add_argument("--agent", default=None, help="module:callable: run the derived cases as vigil eval run does")
    rob.add_argument("--kind", action="append", default=None, dest="kinds", help="only these edge-case kinds")
    rob.add_argument("--limit", type=_positive_int, default=3, help="source cases used (default 3)")
    _add_scoring_arguments(rob)
    rob.add_argument("--concurrency", type=_positive_int, default=4, help="cases run at once (default 4)")
    rob.add_argument("--repeat", type=_positive_int, default=1, help="runs per case")
    rob.add_argument("--span-timeout", type=float, default=10.0, help="seconds to wait for a turn's spans")
    rob.set_defaults(func=_cmd_eval_robustness)

    add_compare_command(ev_sub)


def _add_scoring_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        dest="eval_config",
        type=Path,
        default=None,
        help="eval config: criteria and thresholds (ADK test_config.json or YAML); default ADK's",
    )
    p.add_argument("--json", dest="json_out", default=None, help="write the JSON report to this file ('-': stdout)")
    p.add_argument("--junit", type=Path, default=None, help="write a JUnit XML report to this file")
    p.add_argument("--markdown", type=Path, default=None, help="write a Markdown report (a pull-request comment)")
    p.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a JSON report of an earlier run: efficiency is compared with it, and the exit is 1 only"
        " on a significant drop from it (not on any failed case)",
    )
    add_gate_arguments(p)


def _inputs(args: argparse.Namespace) -> tuple[EvalSet, EvalConfig]:
    eval_set = load_eval_set(args.evalset)
    config = load_eval_config(args.eval_config) if args.eval_config else EvalConfig()
    return eval_set, config


def _pipeline(args: argparse.Namespace) -> Pipeline:
    from vigil.scoring import Scoring
    from vigil.settings import Settings
    from vigil.tools import configure_logging

    settings = Settings.load(config_file=args.config, overrides={"eval_sets": ()})
    configure_logging("warning")
    return Scoring.from_settings(settings).pipeline(None, None)


def _report(args: argparse.Namespace, results: Sequence[CaseResult]) -> int:
    baseline = args.baseline_report
    if args.json_out == "-":
        write_json(results, sys.stdout, baseline)
    else:
        print_report(results, sys.stdout, baseline)
        print_intervals(results, sys.stdout)
        if args.json_out:
            with open(args.json_out, "w", encoding="utf-8") as out:
                write_json(results, out, baseline)
    if args.junit:
        args.junit.write_text(junit_xml(results, baseline), encoding="utf-8")
    if args.markdown:
        args.markdown.write_text(markdown_report(results, baseline) + markdown_intervals(results), encoding="utf-8")
    if not results:
        print("vigil eval: no case was scored", file=sys.stderr)
        return EXIT_FAILED
    verdict = gate(args, report_json(results, baseline), sys.stderr if args.json_out == "-" else sys.stdout)
    if verdict is not None:
        return verdict
    return 0 if all(r.passed for r in results) else EXIT_FAILED


def _prepare(args: argparse.Namespace, command: str) -> tuple[EvalSet, EvalConfig, EvalJudge | None, Pipeline] | None:
    """The eval set, the config, its judge (None when no criterion is judged) and the configured
    pipeline; None after printing the one-line error of ``vigil eval <command>`` when an input is bad."""
    from vigil.evalrun import judge_from

    try:
        eval_set, config = _inputs(args)
        judge = judge_from(config, os.environ)
        args.baseline_report = load_baseline(args.baseline) if args.baseline else None
    except (EvalFileError, FileNotFoundError, ValueError) as exc:
        print(f"vigil eval {command}: {exc}", file=sys.stderr)
        return None
    return eval_set, config, judge, _pipeline(args)


def _cmd_eval_run(args: argparse.Namespace) -> int:
    prepared = _prepare(args, "run")
    if prepared is None:
        return EXIT_INPUT
    return _run_agent(args, "run", prepared)


def _run_agent(
    args: argparse.Namespace,
    command: str,
    prepared: tuple[EvalSet, EvalConfig, EvalJudge | None, Pipeline],
) -> int:
    from vigil.evalrun import AgentError, EvalHarness, RunOptions, judge_closed, load_agent

    eval_set, config, judge, pipeline = prepared

    options = RunOptions(concurrency=args.concurrency, repeat=args.repeat, span_timeout_s=args.span_timeout)
    with judge_closed(judge), EvalHarness(pipeline) as harness, harness.active():
        try:
            agent = load_agent(args.agent)
        except AgentError as exc:
            print(f"vigil eval {command}: {exc}", file=sys.stderr)
            return EXIT_INPUT
        results = harness.run(eval_set, agent, config, options=options, judge=judge)
    return _report(args, results)


def _cmd_eval_score(args: argparse.Namespace) -> int:
    from vigil.evalrun import judge_closed, score_traces
    from vigil.explain import ExplainError

    prepared = _prepare(args, "score")
    if prepared is None:
        return EXIT_INPUT
    eval_set, config, judge, pipeline = prepared
    with judge_closed(judge):
        try:
            results = score_traces(args.traces, [eval_set], config, pipeline, judge)
        except (ExplainError, FileNotFoundError) as exc:
            print(f"vigil eval score: {exc}", file=sys.stderr)
            return EXIT_INPUT
    return _report(args, results)


def _cmd_eval_show(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    try:
        eval_set = load_eval_set(args.evalset)
    except (EvalFileError, FileNotFoundError) as exc:
        print(f"vigil eval show: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if args.json:
        print(json.dumps(eval_set.document(), ensure_ascii=False, indent=1))
        return 0
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 140)
    table = Table(title=f"{eval_set.eval_set_id}: {len(eval_set.eval_cases)} case(s)", title_justify="left")
    for col in ("case", "dimension", "turn", "user", "expected tools", "expected response"):
        table.add_column(col, overflow="fold")
    for case in eval_set.eval_cases:
        dimension = case.dimension + "".join(f"\n#{t}" for t in case.tags)
        if not case.turns:
            table.add_row(case.eval_id, dimension, "-", "(scenario: no scripted turns; skipped by vigil eval)", "", "")
        for n, inv in enumerate(case.turns, 1):
            tools = ", ".join(f"{c.name}({json.dumps(c.arguments, ensure_ascii=False)})" for c in inv.tool_uses)
            first = n == 1
            table.add_row(
                case.eval_id if first else "",
                dimension if first else "",
                str(n),
                _cut(inv.user_text),
                _cut(tools),
                _cut(inv.expected_response),
            )
    console.print(table, markup=False)
    return 0


def _cut(text: str, limit: int = 100) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cmd_eval_add(args: argparse.Namespace) -> int:
    from review_queue.export import case_from_run
    from vigil.eval_session import add_from_session, append_case
    from vigil.tools import review_store

    if args.session_id is not None:
        return add_from_session(args)
    trace_id = args.trace_id.lower()
    store = review_store(args)
    try:
        case, why = case_from_run(store.engine, trace_id, time.time())
    finally:
        store.close()
    if case is None:
        reasons = {
            "unknown_run": "no stored run has this trace id",
            "no_snapshot": "the run was not flagged, so only its summary is stored (no content to build a case)",
            "no_user_message": "the run captured no user message",
            "failed_without_correction": "a reviewer failed the run without a corrected answer",
        }
        print(f"vigil eval add: {trace_id}: {reasons.get(why, why)}", file=sys.stderr)
        return EXIT_FAILED
    return append_case(args, case)


def _cmd_eval_robustness(args: argparse.Namespace) -> int:
    from scorers.eval.robustness import KINDS, derive, untranslated

    prepared = _prepare(args, "robustness")
    if prepared is None:
        return EXIT_INPUT
    source, config, judge, pipeline = prepared
    kinds = args.kinds or KINDS
    try:
        derived = derive(source, kinds=kinds, limit=args.limit)
    except ValueError as exc:
        print(f"vigil eval robustness: {exc}", file=sys.stderr)
        return EXIT_INPUT
    missing = untranslated(source, args.limit) if "language" in kinds else []
    if missing:
        print(
            f"vigil eval robustness: {args.evalset}: no language edge case for {', '.join(missing)} "
            '(add the question in another language as metadata.translations, e.g. {"fr": "..."})',
            file=sys.stderr,
        )
    if not derived.eval_cases:
        print(f"vigil eval robustness: {args.evalset} has no case with a conversation to derive from", file=sys.stderr)
        return EXIT_INPUT
    if args.out:
        args.out.write_text(json.dumps(derived.document(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {len(derived.eval_cases)} edge case(s) to {args.out}", file=sys.stderr)
    if not args.agent:
        if not args.out:
            print(json.dumps(derived.document(), ensure_ascii=False, indent=1))
        return 0
    return _run_agent(args, "robustness", (derived, config, judge, pipeline))
