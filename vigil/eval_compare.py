"""``vigil eval compare BASE NEW`` and the ``--baseline`` gate of ``vigil eval run|score``: paired tests.

Two JSON reports (``vigil eval run|score --json FILE``) are paired run by run on (eval set, case,
repeat); runs present on one side only are counted and left out. Per metric:

* ``pass`` (the case passed): McNemar's exact test on the discordant pairs
  (:func:`scorers.eval.stats.mcnemar`), the difference's interval from the paired bootstrap;
* every continuous metric present on both sides of a pair — each criterion's score, every number
  of a result (but its ``repeat``) and of its ``measures`` (tool-call accuracy, task completion,
  steps, tokens, latency: :mod:`scorers.eval.dimensions`) or ``metrics`` object — the
  paired bootstrap of the mean difference (:func:`scorers.eval.stats.paired_bootstrap`).

Both tests hold the eval set's cases fixed: the question is whether the agent changed *on these
cases*, the noise being its own non-determinism from run to run (given a case, its repeats are
independent draws, so pairs are the resampled unit). The summary intervals of ``--repeat``
(:mod:`vigil.eval_stats`) answer the other question — how well the eval set's pass
rate estimates the agent's on cases like them — and resample cases.

Scores are better higher; the metrics in :data:`LOWER_IS_BETTER` better lower. The p-values
of one comparison are adjusted together (Holm, over the metrics some pair differs on):
"significant" means the adjusted p-value is under ``alpha``, so looking at eight metrics at once
does not turn noise into a verdict. The price is power: three cases run three times cannot show
much after that, so gate on enough cases and repeats. A
**drop** is a significant change the wrong way by more than ``tolerance`` (relative to the
base's value; 0 by default): ``--fail-on-drop`` and the ``--baseline`` gate exit 1 on one and
name the metric and the cases that got worse.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TextIO

from scorers.eval import stats

__all__ = [
    "LOWER_IS_BETTER",
    "Comparison",
    "MetricComparison",
    "Pair",
    "add_compare_command",
    "add_gate_arguments",
    "compare_runs",
    "comparison_json",
    "gate",
    "load_runs",
    "print_comparison",
    "runs_from_report",
]

EXIT_DROP: Final = 1
EXIT_INPUT: Final = 2
PASS: Final = "pass"
LOWER_IS_BETTER: Final = frozenset(
    {
        "steps",
        "tokens",
        "input_tokens",
        "output_tokens",
        "latency_ms",
        "latency_s",
        "duration_ms",
        "duration_s",
        "cost_usd",
        "errors",
    }
)
"""Metric names that are better lower (efficiency); every other metric is better higher."""
WALL_CLOCK: Final = frozenset({"latency_ms", "latency_s", "duration_ms", "duration_s"})
"""Metrics read on the wall clock. Two reports' runs of a case are minutes apart, often on a shared CI
runner: pairing removes the case's own variation, not the machine's load between the two reports, so
a busier runner makes the same agent significantly "slower" (the example agent's latency rose 27 %,
p 0.016, between two runs of one suite). They are tested and shown, but only ``--gate-wall-clock``
lets them fail a gate."""

_NOT_METRICS: Final = frozenset({"repeat", "passed", "eval_id", "eval_set_id"})

Key = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class Pair:
    """One run of a report as compared: its pass verdict and its metric values."""

    key: Key
    passed: bool
    values: Mapping[str, float]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _finite(value: Any, where: str, name: str) -> float | None:
    """A metric's value (``None`` when not a number).

    Raises:
        ValueError: the value is NaN or infinite (Python's JSON reader accepts both; no test can use them).
    """
    number = _number(value)
    if number is not None and not math.isfinite(number):
        raise ValueError(f"{where}: {name!r} is {value!r}, not a finite number")
    return number


def runs_from_report(doc: Any, source: str) -> dict[Key, Pair]:
    """The runs of a JSON report by (eval set, case, repeat).

    Raises:
        ValueError: not a ``vigil eval`` JSON report, a ``repeat`` that is not a non-negative integer, a
            criterion without a ``name``, a NaN or infinite metric, or two results of one (eval set, case,
            repeat) (one line naming ``source`` and the result).
    """
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise ValueError(f"{source}: not a vigil eval JSON report (expected an object with 'results')")
    out: dict[Key, Pair] = {}
    rows: dict[Key, int] = {}
    for n, r in enumerate(doc["results"]):
        where = f"{source}: results[{n}]"
        if not isinstance(r, dict) or "eval_id" not in r or not isinstance(r.get("passed"), bool):
            raise ValueError(f"{where}: expected an object with 'eval_id' and 'passed'")
        repeat = r.get("repeat", 0)
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 0:
            raise ValueError(f"{where}: 'repeat' must be a non-negative integer, got {json.dumps(repeat)}")
        values: dict[str, float] = {}
        for m, c in enumerate(r.get("criteria") or ()):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
                raise ValueError(f"{where}: criteria[{m}]: expected an object with a 'name'")
            score = _finite(c.get("score"), f"{where}: criteria[{m}]", "score")
            if score is not None:
                values[c["name"]] = score
        numbers = [(k, v) for k, v in r.items() if k not in _NOT_METRICS]
        for nested in ("measures", "metrics"):
            more = r.get(nested)
            numbers += list(more.items()) if isinstance(more, dict) else []
        for name, value in numbers:
            number = _finite(value, where, str(name))
            if number is not None:
                values[str(name)] = number
        key = (str(r.get("eval_set_id", "")), str(r["eval_id"]), repeat)
        if key in rows:
            raise ValueError(
                f"{where}: case {_case(key)!r} repeat {repeat} again (first at results[{rows[key]}]): "
                "one result per case and repeat"
            )
        rows[key] = n
        out[key] = Pair(key, r["passed"], values)
    return out


def load_runs(path: Path) -> dict[Key, Pair]:
    """:func:`runs_from_report` of a file.

    Raises:
        ValueError: unreadable, not JSON, or not a report (one line naming the file).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return runs_from_report(doc, str(path))


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric compared over its pairs.

    Attributes:
        name: ``pass`` or the metric's name.
        test: ``mcnemar`` or ``paired bootstrap``.
        pairs: pairs compared (each its own resampled unit).
        base / new: the means (the pass rate for ``pass``).
        difference: ``new - base`` with its interval.
        p_value / p_adjusted: raw and Holm-adjusted over the comparison's metrics.
        significant: ``p_adjusted < alpha``.
        worse: the change goes the wrong way for the metric.
        gated: whether a drop of this metric fails the comparison (a :data:`WALL_CLOCK` metric only
            with ``gate_wall_clock``).
        drop: significant, worse, beyond the tolerance, and gated.
        cases: the cases that got worse, worst first (at most 10).
    """

    name: str
    test: str
    pairs: int
    base: float
    new: float
    difference: stats.Interval
    p_value: float
    p_adjusted: float
    significant: bool
    worse: bool
    gated: bool
    drop: bool
    cases: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Comparison:
    """A whole comparison: the metrics and what could not be paired."""

    metrics: tuple[MetricComparison, ...]
    alpha: float
    tolerance: float
    only_base: int
    only_new: int
    family: int
    """Metrics the Holm adjustment was over: those some pair differs on."""

    @property
    def drops(self) -> list[MetricComparison]:
        """The metrics that dropped."""
        return [m for m in self.metrics if m.drop]


def _case(key: Key) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def _worse_cases(keys: Sequence[Key], diffs: Sequence[float], lower_better: bool) -> tuple[str, ...]:
    per: dict[str, float] = {}
    for key, d in zip(keys, diffs, strict=True):
        per[_case(key)] = per.get(_case(key), 0.0) + (d if lower_better else -d)
    return tuple(c for c, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0)[:10]


def compare_runs(
    base: Mapping[Key, Pair],
    new: Mapping[Key, Pair],
    *,
    alpha: float = 0.05,
    tolerance: float = 0.0,
    gate_wall_clock: bool = False,
    confidence: float = stats.CONFIDENCE,
    resamples: int = stats.RESAMPLES,
    seed: int = stats.SEED,
) -> Comparison:
    """Pair ``base`` and ``new`` and test every metric (see the module docstring); ``gate_wall_clock``: a
    :data:`WALL_CLOCK` metric can drop too."""
    keys = [k for k in base if k in new]
    names: dict[str, None] = {PASS: None} if keys else {}
    for k in keys:
        names.update((name, None) for name in base[k].values if name in new[k].values)
    tested: list[tuple[str, list[Key], list[float], list[float], stats.PairedDifference, float]] = []
    for name in names:
        if name == PASS:
            ks = keys
            xs, ys = [float(base[k].passed) for k in ks], [float(new[k].passed) for k in ks]
        else:
            ks = [k for k in keys if name in base[k].values and name in new[k].values]
            xs, ys = [base[k].values[name] for k in ks], [new[k].values[name] for k in ks]
        boot = stats.paired_bootstrap(xs, ys, confidence=confidence, resamples=resamples, seed=seed)
        p = stats.mcnemar([x > 0 for x in xs], [y > 0 for y in ys]).p_value if name == PASS else boot.p_value
        tested.append((name, ks, xs, ys, boot, p))
    # A metric no pair differs on cannot be significant (its p-value is 1 whatever happens): it
    # is left out of the family Holm adjusts over (Tarone's refinement for discrete tests).
    family = [i for i, t in enumerate(tested) if any(x != y for x, y in zip(t[2], t[3], strict=True))]
    adjusted = [1.0] * len(tested)
    for i, p_adj in zip(family, stats.holm([tested[i][5] for i in family]), strict=True):
        adjusted[i] = p_adj
    out: list[MetricComparison] = []
    for (name, ks, xs, ys, boot, p), p_adj in zip(tested, adjusted, strict=True):
        lower = name in LOWER_IS_BETTER
        diff = boot.difference.estimate
        worse = diff > 0 if lower else diff < 0
        significant = p_adj < alpha
        beyond = abs(diff) > tolerance * abs(boot.base_mean)
        gated = gate_wall_clock or name not in WALL_CLOCK
        out.append(
            MetricComparison(
                name,
                "mcnemar" if name == PASS else "paired bootstrap",
                len(ks),
                boot.base_mean,
                boot.new_mean,
                boot.difference,
                p,
                p_adj,
                significant,
                worse,
                gated,
                significant and worse and beyond and gated,
                _worse_cases(ks, [y - x for x, y in zip(xs, ys, strict=True)], lower),
            )
        )
    return Comparison(
        tuple(out),
        alpha,
        tolerance,
        sum(1 for k in base if k not in new),
        sum(1 for k in new if k not in base),
        len(family),
    )


def print_comparison(cmp: Comparison, out: TextIO, *, base: str = "base", new: str = "new") -> None:
    """One line per metric, then the verdict naming what dropped."""
    pairs = cmp.metrics[0].pairs if cmp.metrics else 0
    conf = f"{cmp.metrics[0].difference.confidence:.0%}" if cmp.metrics else ""
    print(
        f"vigil eval compare: {base} -> {new}: {pairs} paired run(s)"
        + (
            f"; {cmp.only_base} only in {base}, {cmp.only_new} only in {new} (left out)"
            if cmp.only_base or cmp.only_new
            else ""
        ),
        file=out,
    )
    head = f"difference [{conf} interval]"
    print(f"{'metric':24} {'base':>9} {'new':>9} {head:>34} {'p':>8} {'p(Holm)':>8}  verdict", file=out)
    for m in cmp.metrics:
        if m.drop:
            verdict = "DROP (significant)"
        elif m.significant and m.worse and not m.gated:
            verdict = "worse (significant, wall clock: not gated)"
        elif m.significant:
            verdict = ("worse" if m.worse else "better") + " (significant" + (", within tolerance)" if m.worse else ")")
        else:
            verdict = "no significant change"
        d = m.difference
        interval = f"{d.estimate:+.4g} [{d.low:+.4g}, {d.high:+.4g}]"
        print(
            f"{m.name:24} {m.base:9.4g} {m.new:9.4g} {interval:>34} {m.p_value:8.3g} {m.p_adjusted:8.3g}  {verdict}",
            file=out,
        )
    drops = cmp.drops
    tol = f", tolerance {cmp.tolerance:.0%}" if cmp.tolerance else ""
    if drops:
        for m in drops:
            cases = ", ".join(m.cases) if m.cases else "-"
            print(f"DROP {m.name}: {m.base:.4g} -> {m.new:.4g} (p {m.p_adjusted:.3g}); worse cases: {cases}", file=out)
    same = len(cmp.metrics) - cmp.family
    left_out = f"; {same} no pair differs on left out" if same else ""
    print(
        f"{len(drops)} significant drop(s) at alpha {cmp.alpha:g} (Holm over {cmp.family} metric(s){left_out}{tol}).",
        file=out,
    )


def comparison_json(cmp: Comparison) -> dict[str, Any]:
    """The comparison as JSON."""
    return {
        "alpha": cmp.alpha,
        "tolerance": cmp.tolerance,
        "only_base": cmp.only_base,
        "only_new": cmp.only_new,
        "family": cmp.family,
        "drop": bool(cmp.drops),
        "metrics": [
            {
                "name": m.name,
                "test": m.test,
                "pairs": m.pairs,
                "base": m.base,
                "new": m.new,
                "difference": m.difference.estimate,
                "low": m.difference.low,
                "high": m.difference.high,
                "confidence": m.difference.confidence,
                "p_value": m.p_value,
                "gated": m.gated,
                "p_adjusted": m.p_adjusted,
                "significant": m.significant,
                "worse": m.worse,
                "drop": m.drop,
                "worse_cases": list(m.cases),
            }
            for m in cmp.metrics
        ],
    }


def _unit_float(text: str) -> float:
    value = float(text)
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {text}")
    return value


def _alpha(text: str) -> float:
    value = _unit_float(text)
    if value == 0.0:
        raise argparse.ArgumentTypeError("must be in (0, 1)")
    return value


def _add_test_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--alpha", type=_alpha, default=0.05, help="significance level (default 0.05; Holm over metrics)")
    p.add_argument(
        "--tolerance",
        type=_unit_float,
        default=0.0,
        help="ignore significant drops smaller than this share of the base value (default 0)",
    )
    p.add_argument(
        "--gate-wall-clock",
        action="store_true",
        help="let wall-clock metrics (latency, duration) fail too; by default they are tested and shown but "
        "not gated, as the machine's load between the two reports moves them",
    )


def add_compare_command(ev_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``vigil eval compare``."""
    p = ev_sub.add_parser("compare", help="paired tests of two JSON reports: which metrics changed significantly")
    p.add_argument("base", type=Path, help="JSON report of the base (vigil eval run|score --json FILE)")
    p.add_argument("new", type=Path, help="JSON report of the new agent")
    _add_test_arguments(p)
    p.add_argument("--fail-on-drop", action="store_true", help="exit 1 when a metric dropped significantly")
    p.add_argument("--json", dest="compare_json", action="store_true", help="the comparison as JSON on stdout")
    p.set_defaults(func=_cmd_compare)


def add_gate_arguments(p: argparse.ArgumentParser) -> None:
    """``--alpha``, ``--tolerance`` and ``--gate-wall-clock`` of the ``--baseline`` gate of ``vigil eval run|score``."""
    _add_test_arguments(p)


def _cmd_compare(args: argparse.Namespace) -> int:
    try:
        base, new = load_runs(args.base), load_runs(args.new)
    except ValueError as exc:
        print(f"vigil eval compare: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if not any(k in new for k in base):
        print(f"vigil eval compare: {args.base} and {args.new} share no (case, repeat)", file=sys.stderr)
        return EXIT_INPUT
    cmp = compare_runs(base, new, alpha=args.alpha, tolerance=args.tolerance, gate_wall_clock=args.gate_wall_clock)
    if args.compare_json:
        json.dump(comparison_json(cmp), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_comparison(cmp, sys.stdout, base=str(args.base), new=str(args.new))
    return EXIT_DROP if args.fail_on_drop and cmp.drops else 0


def gate(args: argparse.Namespace, report: Mapping[str, Any], out: TextIO) -> int | None:
    """The ``--baseline`` verdict of a run: None without a baseline (``args.baseline_report``, the
    loaded JSON report); else 0, 1 (a significant drop, named on ``out``) or 2 (the baseline is not
    a report of runs, or shares no case and repeat with this one)."""
    doc = getattr(args, "baseline_report", None)
    if doc is None:
        return None
    name = str(getattr(args, "baseline", "baseline"))
    try:
        base = runs_from_report(doc, name)
    except ValueError as exc:
        print(f"vigil eval: --baseline {exc}", file=sys.stderr)
        return EXIT_INPUT
    try:
        new = runs_from_report(report, "this run")
    except ValueError as exc:
        print(f"vigil eval: --baseline: {exc}", file=sys.stderr)
        return EXIT_INPUT
    if not any(k in new for k in base):
        print(f"vigil eval: --baseline {name} shares no (case, repeat) with this run", file=sys.stderr)
        return EXIT_INPUT
    cmp = compare_runs(base, new, alpha=args.alpha, tolerance=args.tolerance, gate_wall_clock=args.gate_wall_clock)
    print_comparison(cmp, out, base=name, new="this run")
    return EXIT_DROP if cmp.drops else 0
