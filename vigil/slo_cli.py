"""``vigil slo generate | summary | compare``: the command-line side of :mod:`vigil.slo`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import httpx

from vigil import slo
from vigil.settings import Settings

RULES_FILE = "slo_rules.yml"


def add_slo_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``vigil slo …``."""
    p = sub.add_parser("slo", help="quality targets: Prometheus rules, summaries, baseline comparison")
    slo_sub = p.add_subparsers(dest="slo_command", required=True)
    gen = slo_sub.add_parser("generate", help="write recording rules and burn-rate alerts for the configured targets")
    gen.add_argument("-o", "--out", type=Path, help=f"directory to write {RULES_FILE} into (default: print it)")
    gen.add_argument("--tests", action="store_true", help="also write promtool tests into OUT/tests/")
    gen.add_argument("--defaults", action="store_true", help="ignore vigil.yaml: the six default targets")
    gen.set_defaults(func=_cmd_generate)
    summ = slo_sub.add_parser("summary", help="export the targets' current values as JSON (for vigil slo compare)")
    src = summ.add_mutually_exclusive_group(required=True)
    src.add_argument("--metrics-url", action="append", help="a Vigil /metrics URL (repeat for several roles)")
    src.add_argument("--metrics-file", type=Path, action="append", help="a saved /metrics text")
    src.add_argument("--prometheus", help="a Prometheus base URL holding the generated rules")
    summ.add_argument("--window", default="7d", help="window of a --prometheus summary (default 7d)")
    summ.add_argument("-o", "--out", type=Path, help="file to write (default: stdout)")
    summ.set_defaults(func=_cmd_summary)
    comp = slo_sub.add_parser(
        "compare", help="fail when a target dropped significantly, by more than its tolerance, from a baseline"
    )
    comp.add_argument("current", type=Path, help="summary of the candidate")
    comp.add_argument("baseline", type=Path, help="summary of the baseline")
    comp.add_argument(
        "--tolerance", action="append", default=[], metavar="TARGET=X", help="override a tolerance (0.05 = 5 %%)"
    )
    comp.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance of a change where the summaries carry counts (default 0.05; Holm over values)",
    )
    comp.set_defaults(func=_cmd_compare)


def _config(args: argparse.Namespace) -> Any:
    if getattr(args, "defaults", False):
        from scorers.slo import parse_slo

        return parse_slo(None)
    return Settings.load(config_file=args.config).slo_config()


def _cmd_generate(args: argparse.Namespace) -> int:
    config = _config(args)
    text = slo.rules_text(config)
    print(f"vigil slo generate: {slo.retention_note(config)}", file=sys.stderr)
    if args.out is None:
        sys.stdout.write(text)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / RULES_FILE).write_text(text)
    written = [args.out / RULES_FILE]
    if args.tests:
        (args.out / "tests").mkdir(exist_ok=True)
        for name, doc in slo.promtool_tests(config, f"../{RULES_FILE}").items():
            (args.out / "tests" / name).write_text(slo.render(doc, slo.TESTS_HEADER))
            written.append(args.out / "tests" / name)
    for path in written:
        print(f"wrote {path}")
    return 0


def _cmd_summary(args: argparse.Namespace) -> int:
    config = _config(args)
    if args.prometheus:
        base = args.prometheus.rstrip("/")

        def query(expr: str) -> list[dict[str, Any]]:
            resp = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=30)
            body = resp.json()
            if body.get("status") != "success":
                raise SystemExit(f"vigil: prometheus query failed: {body.get('error')}")
            result: list[dict[str, Any]] = body["data"]["result"]
            return result

        doc = slo.summary_from_prometheus(config, query, base, args.window)
    else:
        sources = args.metrics_url or [str(p) for p in args.metrics_file]
        texts = (
            [httpx.get(u, timeout=30).raise_for_status().text for u in args.metrics_url]
            if args.metrics_url
            else [p.read_text() for p in args.metrics_file]
        )
        doc = slo.summary_from_metrics(config, "".join(texts), ", ".join(sources))
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    tolerances: dict[str, float] = {}
    for item in args.tolerance:
        name, _, value = item.partition("=")
        try:
            tolerances[name] = float(value)
        except ValueError:
            print(f"vigil: --tolerance {item!r}: expected TARGET=NUMBER", file=sys.stderr)
            return 2
    if not 0.0 < args.alpha < 1.0:
        print(f"vigil: --alpha {args.alpha}: expected a number in (0, 1)", file=sys.stderr)
        return 2
    try:
        findings = slo.compare(
            slo.load_summary(args.current.read_text()),
            slo.load_summary(args.baseline.read_text()),
            tolerances,
            args.alpha,
        )
    except (OSError, ValueError) as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    for finding in findings:
        print(finding.line())
    failed = [f for f in findings if not f.ok]
    noise = [f for f in findings if f.ok and f.beyond]
    print(
        f"{len(findings) - len(failed) - len(noise)} of {len(findings)} within tolerance"
        + (f", {len(noise)} beyond it but not significant at alpha {args.alpha:g} (noise)" if noise else "")
        + (f", {len(failed)} failed" if failed else "")
    )
    return 1 if failed else 0
