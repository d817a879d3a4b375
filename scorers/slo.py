"""Quality targets (SLOs) per agent, and the definition of a completed task.

``vigil.yaml``'s ``slo`` section declares targets for every agent (``targets``, merged over the
six defaults of :data:`DEFAULT_TARGETS`) and per agent (``agents: {name: {target: {...}}}``,
merged over the fleet's). :func:`parse_slo` validates it (one-line :class:`SloConfigError`s);
``vigil/slo.py`` turns the result into Prometheus rules.

Every target is stated on one *SLI*, a ratio of two per-agent rates (:class:`Sli`): completed
runs / runs, summed step efficiency / runs scored for it, passed verdicts / verdicts, blocked
runs / runs, steps / runs, completed sessions / closed sessions, or, for a threshold on a run
histogram, runs on the good side of a bucket bound / runs. A target is one of:

* ``at_least`` — the SLI must stay at or above ``objective``; the error budget is
  ``1 - objective`` of the events over the window (a mean score in [0, 1] counts each run as
  ``1 - score`` of an error, so a mean efficiency of 0.6 is a 0.4 error ratio);
* ``at_most`` — the SLI must stay at or below ``objective`` (budget ``objective``);
* ``band`` — at most ``max`` (budget, like ``at_most``) and at least ``min`` (a floor: too few
  safety blocks means the guardrails are not triggering);
* ``trend`` — no budget: the SLI over the last day must not exceed the same day a week earlier
  by more than ``max_rise``.

**Task completion** (:func:`task_completed`): a run completed its task when it ended normally —
its root span ended (``complete``) and the status is ``ok``, i.e. it neither errored, hit an
iteration cap nor was safety-blocked — and it produced a final answer (:func:`answered`). The
first failing verdict given later (an LLM judge's or a reviewer's) revokes the completion once
(counted apart, so the exported ratio stays exact over the window the verdict falls in; see
docs/quality.md, "Quality targets").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import lru_cache
from typing import Any, Final

from scorers.errors import SloConfigError
from scorers.model import Run, RunStatus, StepKind
from scorers.signals import normalise_reason

__all__ = [
    "DEFAULT_TARGETS",
    "HISTOGRAMS",
    "SLIS",
    "Direction",
    "Sli",
    "SloConfig",
    "Target",
    "answered",
    "parse_slo",
    "task_completed",
]

NOT_AN_ANSWER: Final = frozenset(
    {"tool_calls", "tool_call", "function_call", "function_calls", "tool_use", "length", "max_tokens"}
)
"""Finish reasons of a last LLM call that did not produce the final answer (it asked for a tool,
or was cut off). Blocks (``content_filter``, ``safety``) already make the run ``blocked``."""


def answered(run: Run) -> bool:
    """Whether the run produced a final answer.

    Yes when the answer text was captured (``final_output``, non-blank). Otherwise the last LLM
    call decides: it answered unless its finish reason says it asked for a tool or was cut off
    (:data:`NOT_AN_ANSWER`). A run with no LLM call and no captured answer (a plain tool chain)
    counts as answered when it ended normally: Vigil has nothing to say otherwise.
    """
    final = run.final_output
    if final is not None and final.strip():
        return True
    for step in reversed(run.steps):
        if step.kind is StepKind.LLM:
            return not any(_not_an_answer(r) for r in step.finish_reasons)
    return True


@lru_cache(maxsize=1024)
def _not_an_answer(reason: str) -> bool:
    """Whether a finish reason (any spelling) is in :data:`NOT_AN_ANSWER`; remembered (reasons repeat).

    Called twice per run on the scoring thread (the completion counter and the run row).
    """
    return normalise_reason(reason) in NOT_AN_ANSWER


def task_completed(run: Run) -> bool:
    """Whether the run completed its task, before any verdict (see the module docstring)."""
    return run.complete and run.status is RunStatus.OK and not run.errored and answered(run)


class Direction(str, Enum):
    """How a target bounds its SLI."""

    AT_LEAST = "at_least"
    AT_MOST = "at_most"
    BAND = "band"
    TREND = "trend"


@dataclass(frozen=True, slots=True)
class Sli:
    """A per-agent ratio of two rates, as PromQL over a range ``[W]`` (``{W}`` in the templates).

    Attributes:
        name: the SLI's name in configuration.
        numerator / denominator: PromQL of ``sum by (environment, agent)`` rates; ``{W}`` is the
            range. The numerator may be absent where the denominator exists (it is completed
            with zeros).
        unit: ``ratio`` (0-1, shown as a percentage) or ``count``.
        description: what the ratio means, for humans.
        source: the role exporting the metrics (``runs``: the scorer or ``vigil run``;
            ``review``: the review role).
    """

    name: str
    numerator: str
    denominator: str
    unit: str
    description: str
    source: str = "runs"


def _rate(metric: str, selector: str = "") -> str:
    inner = f"{metric}{{{selector}}}" if selector else metric
    return f"sum by (environment, agent) (rate({inner}[{{W}}]))"


_RUNS = _rate("vigil_runs_total")
_SAMPLE = "vigil_review_sample_weight_total"
_PASSED = _rate(_SAMPLE, 'verdict="pass"')
_NOT_ERRORED = _rate("vigil_runs_total", 'outcome!="error"')

SLIS: Final[Mapping[str, Sli]] = {
    "task_completion": Sli(
        "task_completion",
        f"clamp_min({_rate('vigil_task_completions_total')}"
        f" - ({_rate('vigil_task_completions_revoked_total')} or {_rate('vigil_task_completions_total')} * 0), 0)",
        _RUNS,
        "ratio",
        "completed runs / runs (ended normally with a final answer, no error, limit or block; "
        "minus completions a failing review verdict revoked)",
    ),
    "step_efficiency": Sli(
        "step_efficiency",
        _rate("vigil_run_step_efficiency_sum"),
        _rate("vigil_run_step_efficiency_count"),
        "ratio",
        "mean step efficiency of the runs scored for it",
    ),
    "review_pass_rate": Sli(
        "review_pass_rate",
        f"({_PASSED} or {_rate(_SAMPLE)} * 0)",
        _rate(_SAMPLE),
        "ratio",
        "passed first verdicts / first verdicts, on runs of the random review sample, each weighed by the "
        "runs it stands for (1 / its inclusion probability; rule-flagged runs are mostly failures: counting "
        "them would judge the rules, not the agent)",
        "review",
    ),
    "safety_block_rate": Sli(
        "safety_block_rate",
        f"({_rate('vigil_safety_blocks_total')} or {_RUNS} * 0)",
        _RUNS,
        "ratio",
        "safety-blocked runs / runs",
    ),
    "steps_per_task": Sli(
        "steps_per_task",
        _rate("vigil_run_steps_sum"),
        _rate("vigil_run_steps_count"),
        "count",
        "mean LLM calls (steps) per run",
    ),
    "error_free": Sli(
        "error_free",
        f"({_NOT_ERRORED} or {_RUNS} * 0)",
        _RUNS,
        "ratio",
        "runs whose exception did not reach the caller / runs",
    ),
    "tool_success": Sli(
        "tool_success",
        f"clamp_min({_rate('vigil_tool_calls_total')} - ({_rate('vigil_tool_errors_total')}"
        f" or {_rate('vigil_tool_calls_total')} * 0), 0)",
        _rate("vigil_tool_calls_total"),
        "ratio",
        "tool calls that did not fail / tool calls",
    ),
    "session_completion": Sli(
        "session_completion",
        f"({_rate('vigil_sessions_completed_total')} or {_rate('vigil_sessions_closed_total')} * 0)",
        _rate("vigil_sessions_closed_total"),
        "ratio",
        "completed sessions / closed sessions (not abandoned: not ended right after a failed, blocked or cut-off turn)",
        "review",
    ),
}
"""The named SLIs a target may use (``sli:``); the six defaults are named after theirs."""

HISTOGRAMS: Final[Mapping[str, tuple[str, tuple[float, ...]]]] = {
    "step_efficiency": ("vigil_run_step_efficiency", (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)),
    "run_duration": (
        "vigil_run_duration_seconds",
        (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640),
    ),
    "run_steps": ("vigil_run_steps", (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50, 75, 100)),
    "run_tokens": ("vigil_run_tokens", (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)),
}
"""Run histograms a *quantile* target may use (``histogram:``, ``below:`` or ``above:`` one of
its bucket bounds): "90 % of runs under 10 s" is ``{histogram: run_duration, below: 10,
objective: 0.9}`` — the same as p90 ≤ 10 s. Kept equal to ``scorers.metrics``' buckets (tested)."""


def histogram_sli(histogram: str, bound: float, *, below: bool) -> Sli:
    """The SLI "share of runs at or below ``bound``" (or above it) of a run histogram."""
    metric, _ = HISTOGRAMS[histogram]
    le = _le(bound)
    count = _rate(f"{metric}_count")
    under = _rate(f"{metric}_bucket", f'le="{le}"')
    if below:
        return Sli(f"{histogram}<={le}", under, count, "ratio", f"runs with {histogram} <= {le} / runs")
    return Sli(
        f"{histogram}>{le}",
        f"clamp_min({count} - {under}, 0)",
        count,
        "ratio",
        f"runs with {histogram} > {le} / runs",
    )


def _le(bound: float) -> str:
    """The ``le`` label value prometheus_client writes for a bucket bound (``10.0``, ``0.5``)."""
    return repr(float(bound))


@dataclass(frozen=True, slots=True)
class Target:
    """One quality target of one scope (the fleet default, or one agent).

    Attributes:
        name: the target's name (``task_completion``…; lowercase, digits, underscores).
        sli: what it is stated on.
        direction: how it bounds the SLI.
        objective: the bound (``at_least`` / ``at_most``), the ceiling ``max`` of a band, or
            the allowed week-over-week rise of a trend (0.2 = 20 %).
        floor: the band's ``min`` (0 for none).
        min_events: events (runs, verdicts) a window needs before an alert may fire.
        tolerance: largest relative drop ``vigil slo compare`` accepts from a baseline.
    """

    name: str
    sli: Sli
    direction: Direction
    objective: float
    floor: float = 0.0
    min_events: int = 20
    tolerance: float = 0.05

    @property
    def budget(self) -> float | None:
        """The error budget as a share of events (``None`` for a trend)."""
        if self.direction is Direction.AT_LEAST:
            return 1.0 - self.objective
        if self.direction in (Direction.AT_MOST, Direction.BAND):
            return self.objective
        return None


@dataclass(frozen=True, slots=True)
class SloConfig:
    """The validated ``slo`` section.

    Attributes:
        window_days: the error-budget window (28 by default).
        targets: the fleet's targets by name.
        agents: per agent, its targets by name (the fleet's merged with its overrides; a
            target with ``enabled: false`` is left out).
    """

    window_days: int = 28
    targets: Mapping[str, Target] = field(default_factory=dict)
    agents: Mapping[str, Mapping[str, Target]] = field(default_factory=dict)


DEFAULT_TARGETS: Final[Mapping[str, Target]] = {
    "task_completion": Target("task_completion", SLIS["task_completion"], Direction.AT_LEAST, 0.85),
    "step_efficiency": Target("step_efficiency", SLIS["step_efficiency"], Direction.AT_LEAST, 0.6),
    "review_pass_rate": Target("review_pass_rate", SLIS["review_pass_rate"], Direction.AT_LEAST, 0.9, min_events=10),
    "safety_block_rate": Target(
        "safety_block_rate", SLIS["safety_block_rate"], Direction.BAND, 0.005, floor=0.0005, tolerance=1.0
    ),
    "steps_per_task": Target("steps_per_task", SLIS["steps_per_task"], Direction.TREND, 0.2, tolerance=0.2),
    "session_completion": Target(
        "session_completion", SLIS["session_completion"], Direction.AT_LEAST, 0.9, min_events=10
    ),
}
"""The six targets every agent has unless configured otherwise: task completion ≥ 85 %, mean
step efficiency ≥ 0.6, human review pass rate ≥ 90 %, safety-block rate between 0.05 % and
0.5 %, mean steps per task not rising more than 20 % week over week, session completion ≥ 90 %.

Session completion is stricter than a run's: a session is lost only when it *ends* on a failed
turn (a user who meets a failure and retries, successfully, is not), and that is the worst outcome
a conversation has — the user gave up. Its ``min_events`` is 10 like the verdicts': closed sessions
are fewer than runs (several turns each). An agent whose runs carry no session id exports no
session metrics, so its session target has no series and never alerts (like ``review_pass_rate``
without reviewers)."""

_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
_WINDOW = re.compile(r"(\d+)d")
_KEYS = frozenset(
    {"sli", "direction", "objective", "min", "max", "max_rise", "min_events", "tolerance", "enabled",
     "histogram", "below", "above"}
)  # fmt: skip


def parse_slo(data: Mapping[str, Any] | None) -> SloConfig:
    """Validate the ``slo`` section of ``vigil.yaml`` (``None``: the defaults).

    Raises:
        SloConfigError: one line naming the target and key, e.g.
            ``slo.agents.billing.task_completion.objective: must be a number in (0, 1)``.
    """
    if data is None:
        return SloConfig(targets=dict(DEFAULT_TARGETS))
    if not isinstance(data, Mapping):
        raise SloConfigError("slo: must be a mapping (window, targets, agents)")
    unknown = set(data) - {"window", "targets", "agents"}
    if unknown:
        raise SloConfigError(f"slo.{sorted(unknown)[0]}: unknown key (expected window, targets, agents)")
    window = str(data.get("window", "28d"))
    match = _WINDOW.fullmatch(window)
    if match is None or not 1 <= int(match.group(1)) <= 90:
        raise SloConfigError(f"slo.window: {window!r} must be days between 1d and 90d, e.g. 28d")
    fleet = _merge("slo.targets", DEFAULT_TARGETS, _mapping("slo.targets", data.get("targets")))
    agents: dict[str, dict[str, Target]] = {}
    for agent, overrides in _mapping("slo.agents", data.get("agents")).items():
        if not isinstance(agent, str) or not agent or '"' in agent or "\\" in agent:
            raise SloConfigError(f"slo.agents: agent name {agent!r} must be a non-empty string without quotes")
        agents[agent] = _merge(f"slo.agents.{agent}", fleet, _mapping(f"slo.agents.{agent}", overrides))
    _check_consistent(fleet, agents)
    enabled = {n: t for n, t in fleet.items() if t is not _DISABLED}
    per_agent = {a: {n: t for n, t in ts.items() if t is not _DISABLED} for a, ts in agents.items()}
    return SloConfig(int(match.group(1)), enabled, per_agent)


def _check_consistent(fleet: Mapping[str, Target], agents: Mapping[str, Mapping[str, Target]]) -> None:
    """One target name means one SLI and direction everywhere (its series are recorded once)."""
    seen = {n: (t.sli, t.direction) for n, t in fleet.items() if t is not _DISABLED}
    for agent, targets in agents.items():
        for name, target in targets.items():
            if target is _DISABLED:
                continue
            first = seen.setdefault(name, (target.sli, target.direction))
            if first != (target.sli, target.direction):
                raise SloConfigError(
                    f"slo.agents.{agent}.{name}: an agent may change a target's bounds, not its sli or direction;"
                    " give it another name"
                )


_DISABLED: Final = Target("disabled", SLIS["error_free"], Direction.AT_LEAST, 0.5)


def _mapping(where: str, value: object) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SloConfigError(f"{where}: must be a mapping")
    return value


def _merge(where: str, base: Mapping[str, Target], overrides: Mapping[str, Any]) -> dict[str, Target]:
    out = dict(base)
    for name, given in overrides.items():
        path = f"{where}.{name}"
        if not isinstance(name, str) or _NAME.fullmatch(name) is None:
            raise SloConfigError(f"{where}: target name {name!r} must be lowercase letters, digits and underscores")
        spec = _mapping(path, given)
        unknown = set(spec) - _KEYS
        if unknown:
            expected = ", ".join(sorted(_KEYS))
            raise SloConfigError(f"{path}.{sorted(unknown)[0]}: unknown key (expected one of {expected})")
        if spec.get("enabled", True) is False:
            out[name] = _DISABLED
            continue
        prior = base.get(name)
        out[name] = _target(path, name, spec, prior if prior is not _DISABLED else None)
    return out


def _target(path: str, name: str, spec: Mapping[str, Any], prior: Target | None) -> Target:
    sli = _sli(path, name, spec, prior)
    direction = _direction(path, spec, prior, sli)
    base = prior if prior is not None and prior.direction is direction else None
    objective = base.objective if base is not None else None
    floor = base.floor if base is not None else 0.0
    if direction is Direction.BAND:
        objective = _number(path, "max", spec.get("max", objective), 0.0, 1.0)
        floor = _number(path, "min", spec.get("min", floor), 0.0, objective, closed_low=True)
    elif direction is Direction.TREND:
        objective = _number(path, "max_rise", spec.get("max_rise", objective), 0.0, math.inf)
    else:
        upper = 1.0 if sli.unit == "ratio" else math.inf
        objective = _number(path, "objective", spec.get("objective", objective), 0.0, upper)
    min_events = spec.get("min_events", base.min_events if base is not None else 20)
    if not isinstance(min_events, int) or isinstance(min_events, bool) or min_events < 1:
        raise SloConfigError(f"{path}.min_events: {min_events!r} must be a whole number >= 1")
    default_tol = base.tolerance if base is not None else 0.05
    tolerance = _number(path, "tolerance", spec.get("tolerance", default_tol), 0.0, math.inf, closed_low=True)
    target = Target(name, sli, direction, objective, floor, min_events, tolerance)
    return target if base is None else replace(base, **{f: getattr(target, f) for f in _FIELDS})


_FIELDS: Final = ("sli", "direction", "objective", "floor", "min_events", "tolerance")


def _sli(path: str, name: str, spec: Mapping[str, Any], prior: Target | None) -> Sli:
    if "histogram" in spec:
        hist = spec["histogram"]
        if hist not in HISTOGRAMS:
            raise SloConfigError(f"{path}.histogram: {hist!r} is not one of {', '.join(HISTOGRAMS)}")
        if ("below" in spec) == ("above" in spec):
            raise SloConfigError(f"{path}: a histogram target needs exactly one of below, above")
        below = "below" in spec
        bound = spec["below" if below else "above"]
        bounds = HISTOGRAMS[hist][1]
        if isinstance(bound, bool) or not isinstance(bound, int | float) or float(bound) not in bounds:
            key = "below" if below else "above"
            raise SloConfigError(f"{path}.{key}: {bound!r} must be a bucket bound of {hist}: {list(bounds)}")
        return histogram_sli(hist, float(bound), below=below)
    sli_name = spec.get("sli")
    if sli_name is None:
        if prior is not None:
            return prior.sli
        if name in SLIS:
            return SLIS[name]
        raise SloConfigError(f"{path}.sli: missing (one of {', '.join(SLIS)}, or histogram with below/above)")
    if sli_name not in SLIS:
        raise SloConfigError(f"{path}.sli: {sli_name!r} is not one of {', '.join(SLIS)}")
    return SLIS[sli_name]


def _direction(path: str, spec: Mapping[str, Any], prior: Target | None, sli: Sli) -> Direction:
    value = spec.get("direction")
    if value is None:
        if "max" in spec or "min" in spec:
            return Direction.BAND
        if "max_rise" in spec:
            return Direction.TREND
        if prior is not None and prior.sli == sli:
            return prior.direction
        return Direction.AT_LEAST
    try:
        return Direction(value)
    except ValueError:
        names = ", ".join(d.value for d in Direction)
        raise SloConfigError(f"{path}.direction: {value!r} is not one of {names}") from None


def _number(path: str, key: str, value: object, low: float, high: float, *, closed_low: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = (low <= number if closed_low else low < number) and (number < high if high == 1.0 else number <= high)
    if not ok:
        bracket = "[" if closed_low else "("
        upper = "1)" if high == 1.0 else ("inf)" if high == math.inf else f"{high:g}]")
        raise SloConfigError(f"{path}.{key}: {value!r} must be a number in {bracket}{low:g}, {upper}")
    return float(value)  # type: ignore[arg-type]
