"""How good the agents are in production: the quality estimates read from the store.

Reads, for a window of runs (a day, 7 days or 28 days by the runs' ``created_at``), each run's place in
the review sample's design (``runs.sample_p``, ``sample_drawn``, ``rule_flagged``; migration ``0013``)
and its *first* completed human verdict, and estimates per agent and for the fleet with
:mod:`scorers.quality`:

- ``review_pass_rate``: the share of production runs a reviewer would pass;
- ``task_completion``: Vigil's completion heuristic corrected by the reviewers (a run counts as
  completed when the heuristic says so and a reviewer would pass it);
- ``category:<name>``: the share of production runs a reviewer fails with that category.

**The unit of a verdict** is a run's first completed verdict that applies to it (``run`` verdicts of
its own item and ``turn`` verdicts naming it; :data:`review_queue.tables.verdict_run`). A second
reviewer of the same item is a check on the first, not a second draw: counting both would weigh the
items that need two reviewers twice. Session verdicts judge conversations, a different population;
they are not mixed into run figures.

**Strata.** The two rule strata — flagged by a rule at the first decision, or not — have exactly known
sizes ``N_h`` (every run is counted). Runs decided while the queue shed (``sample_p = 0``) had no chance
of entering the sample and runs stored before the design existed (``sample_p`` NULL) are left out of
every estimate and counted (``design.shed``, ``design.before_design``). A stratum with runs but too few
labelled sample members to say anything is *collapsed* into the other (the estimate then weighs the
sample's labelled members by ``1 / p`` alone, and says so: ``collapsed: true``).

**Judges.** An LLM judge that judges the random stratum (``select: random_sample``) adds a method
``judge:<name>``: PPI++ with its passes on the stratum's members as the prediction; where reviewers
cover only part of the sample, the unreviewed members it judged narrow the interval.

**Headline.** The narrowest prediction-powered estimate (``ppi``: Vigil's completion verdict on every
run as the prediction, or a judge's) where one exists, else the random stratum alone (``sample``);
``status`` is ``met`` when the whole interval meets the target, ``not met`` when none of it does, else
``not enough data``. The plain share of verdicts (``naive``) is given beside it for comparison, never as
the agent's quality.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import sqlalchemy as sa

from review_queue.session_queries import signal_clause
from review_queue.sessions import ABANDONED
from review_queue.tables import judge_results, review_verdicts, runs, sessions, verdict_run
from scorers.quality import (
    CONFIDENCE,
    Estimate,
    Labelled,
    PredictedStratum,
    Stratum,
    change,
    cohen_kappa,
    corrected,
    mean_ci,
    narrowest,
    post_stratified,
    sampled_predictions,
    stratified_ppi,
    wilson_bounds,
)
from scorers.slo import Direction, SloConfig, Target

__all__ = [
    "FLEET",
    "WINDOWS",
    "QualityError",
    "allocation_inputs",
    "estimate_dict",
    "judge_calibration",
    "quality_report",
    "runs_per_day",
    "status",
    "window_seconds",
]

WINDOWS: Final[Mapping[str, float]] = {"1d": 86_400.0, "7d": 7 * 86_400.0, "28d": 28 * 86_400.0}
"""The windows an estimate is made over, by name."""

FLEET: Final = "*"
"""The agent name of the fleet's figures."""

HUMAN_TARGETS: Final = ("review_pass_rate", "task_completion")
"""The targets a human verdict decides or corrects."""


class QualityError(ValueError):
    """A bad request for estimates (an unknown window)."""


def window_seconds(name: str) -> float:
    """The length of the window ``name`` (``1d``, ``7d``, ``28d``).

    Raises:
        QualityError: an unknown window.
    """
    try:
        return WINDOWS[name]
    except KeyError:
        raise QualityError(f"unknown window {name!r}: use one of {', '.join(WINDOWS)}") from None


@dataclass(slots=True)
class _Cell:
    """One agent's rule stratum in one window."""

    size: int = 0
    completed: int = 0
    drawn: int = 0
    first: list[tuple[bool, bool, float, bool, frozenset[str]]] = field(default_factory=list)
    """First verdicts: (drawn, passed, 1 / p, task completed, categories)."""
    first_ids: list[str] = field(default_factory=list)
    """The trace id of each first verdict's run (as ``first``)."""
    members: list[tuple[str, float, bool]] = field(default_factory=list)
    """The random stratum's members (trace id, 1 / p, task completed); loaded only where a judge judged."""


@dataclass(slots=True)
class _Agent:
    cells: dict[bool, _Cell] = field(default_factory=lambda: {True: _Cell(), False: _Cell()})
    shed: int = 0
    before_design: int = 0
    judged: dict[str, dict[str, bool]] = field(default_factory=dict)
    """Each LLM judge's pass on the random stratum's members it judged: judge → trace id → passed."""


def _load(conn: sa.Connection, since: float, until: float, *, judges: bool = True) -> dict[str, _Agent]:
    """Every agent's strata in [since, until): sizes, completions, sample members and first verdicts
    (and, with ``judges``, the LLM judges' passes on the sample: :func:`_load_judged`)."""
    in_window = sa.and_(runs.c.created_at >= since, runs.c.created_at < until)
    agents: dict[str, _Agent] = {}
    one = sa.literal(1)
    population = (
        sa.select(
            runs.c.agent,
            runs.c.rule_flagged,
            sa.func.count(),
            sa.func.sum(sa.case((runs.c.task_completed.is_(True), one), else_=0)),
            sa.func.sum(sa.case((runs.c.sample_drawn.is_(True), one), else_=0)),
        )
        .where(in_window, runs.c.sample_p > 0)
        .group_by(runs.c.agent, runs.c.rule_flagged)
    )
    for agent, flagged, count, completed, drawn in conn.execute(population):
        cell = agents.setdefault(agent, _Agent()).cells[bool(flagged)]
        cell.size += int(count)
        cell.completed += int(completed or 0)
        cell.drawn += int(drawn or 0)
    uncovered = (
        sa.select(runs.c.agent, runs.c.sample_p.is_(None), sa.func.count())
        .where(in_window, sa.or_(runs.c.sample_p.is_(None), runs.c.sample_p <= 0))
        .group_by(runs.c.agent, runs.c.sample_p.is_(None))
    )
    for agent, legacy, count in conn.execute(uncovered):
        entry = agents.setdefault(agent, _Agent())
        if legacy:
            entry.before_design += int(count)
        else:
            entry.shed += int(count)
    verdicts = (
        sa.select(
            runs.c.trace_id,
            runs.c.agent,
            runs.c.rule_flagged,
            runs.c.sample_drawn,
            runs.c.sample_p,
            runs.c.task_completed,
            review_verdicts.c.verdict,
            review_verdicts.c.categories,
        )
        .join(review_verdicts, verdict_run == runs.c.trace_id)
        .where(in_window, runs.c.sample_p > 0)
        .order_by(runs.c.trace_id, review_verdicts.c.created_at, review_verdicts.c.id)
    )
    seen: set[str] = set()
    for trace_id, agent, flagged, drawn, rate, completed, verdict, categories in conn.execute(verdicts):
        if trace_id in seen:
            continue  # the unit is a run's first verdict
        seen.add(trace_id)
        cell = agents.setdefault(agent, _Agent()).cells[bool(flagged)]
        cats = frozenset(str(c) for c in categories or ())
        cell.first.append((bool(drawn), verdict == "pass", 1.0 / float(rate), bool(completed), cats))
        cell.first_ids.append(trace_id)
    if judges:
        _load_judged(conn, in_window, agents)
    return agents


def _load_judged(conn: sa.Connection, in_window: sa.ColumnElement[bool], agents: dict[str, _Agent]) -> None:
    """The LLM judges' passes on the random stratum's members, and those members (where a judge judged).

    A judge's verdicts count here only on the random stratum, whatever else it judges: there they are
    predictions on a random sample of each rule stratum (:func:`scorers.quality.sampled_predictions`).
    A member a judge did not judge (an error, a spent budget) is predicted by Vigil's own completion
    verdict: any prediction fixed before the label keeps PPI unbiased.
    """
    drawn = sa.and_(in_window, runs.c.sample_p > 0, runs.c.sample_drawn.is_(True))
    judged = (
        sa.select(runs.c.agent, judge_results.c.judge, runs.c.trace_id, judge_results.c.passed)
        .join(judge_results, judge_results.c.trace_id == runs.c.trace_id)
        .where(drawn, judge_results.c.passed.is_not(None))
    )
    with_judge: set[str] = set()
    for agent, judge, trace_id, passed in conn.execute(judged):
        agents.setdefault(agent, _Agent()).judged.setdefault(judge, {})[trace_id] = bool(passed)
        with_judge.add(agent)
    if not with_judge:
        return
    members = sa.select(
        runs.c.agent, runs.c.rule_flagged, runs.c.trace_id, runs.c.sample_p, runs.c.task_completed
    ).where(drawn, runs.c.agent.in_(sorted(with_judge)))
    for agent, flagged, trace_id, rate, completed in conn.execute(members):
        agents[agent].cells[bool(flagged)].members.append((trace_id, 1.0 / float(rate), bool(completed)))


def _load_sessions(conn: sa.Connection, since: float, until: float) -> dict[str, _Agent]:
    """Every agent's closed sessions in [since, until) by rule stratum, and their first session verdicts.

    The prediction of a session's pass is Vigil's own: not abandoned (the session completion SLI).
    """
    in_window = sa.and_(sessions.c.status == "closed", sessions.c.closed_at >= since, sessions.c.closed_at < until)
    kept = sa.not_(signal_clause(conn.dialect.name, ABANDONED))
    one = sa.literal(1)
    agents: dict[str, _Agent] = {}
    population = (
        sa.select(
            sessions.c.agent,
            sessions.c.rule_flagged,
            sa.func.count(),
            sa.func.sum(sa.case((kept, one), else_=0)),
            sa.func.sum(sa.case((sessions.c.sample_drawn.is_(True), one), else_=0)),
        )
        .where(in_window, sessions.c.sample_p > 0)
        .group_by(sessions.c.agent, sessions.c.rule_flagged)
    )
    for agent, flagged, count, completed, drawn in conn.execute(population):
        cell = agents.setdefault(agent, _Agent()).cells[bool(flagged)]
        cell.size, cell.completed, cell.drawn = int(count), int(completed or 0), int(drawn or 0)
    legacy = (
        sa.select(sessions.c.agent, sa.func.count())
        .where(in_window, sessions.c.sample_p.is_(None))
        .group_by(sessions.c.agent)
    )
    for agent, count in conn.execute(legacy):
        agents.setdefault(agent, _Agent()).before_design += int(count)
    verdicts = (
        sa.select(
            sessions.c.session_id,
            sessions.c.agent,
            sessions.c.rule_flagged,
            sessions.c.sample_drawn,
            sessions.c.sample_p,
            kept,
            review_verdicts.c.verdict,
            review_verdicts.c.categories,
        )
        .select_from(review_verdicts)
        .join(runs, runs.c.trace_id == review_verdicts.c.trace_id)
        .join(sessions, sessions.c.session_id == runs.c.session_id)
        .where(review_verdicts.c.target == "session", in_window, sessions.c.sample_p > 0)
        .order_by(sessions.c.session_id, review_verdicts.c.created_at, review_verdicts.c.id)
    )
    seen: set[str] = set()
    for session_id, agent, flagged, drawn, rate, completed, verdict, categories in conn.execute(verdicts):
        if session_id in seen:
            continue  # the unit is a session's first session verdict
        seen.add(session_id)
        cats = frozenset(str(c) for c in categories or ())
        cell = agents.setdefault(agent, _Agent()).cells[bool(flagged)]
        cell.first.append((bool(drawn), verdict == "pass", 1.0 / float(rate), bool(completed), cats))
    return agents


def _fleet(agents: Mapping[str, _Agent]) -> _Agent:
    fleet = _Agent()
    for entry in agents.values():
        fleet.shed += entry.shed
        fleet.before_design += entry.before_design
        for flagged, cell in entry.cells.items():
            into = fleet.cells[flagged]
            into.size += cell.size
            into.completed += cell.completed
            into.drawn += cell.drawn
            into.first.extend(cell.first)
            into.first_ids.extend(cell.first_ids)
            into.members.extend(cell.members)
        for judge, said in entry.judged.items():
            fleet.judged.setdefault(judge, {}).update(said)
    return fleet


_Label = tuple[float, float]  # (label, prediction)


def _label(target: str, passed: bool, completed: bool, categories: frozenset[str]) -> _Label:
    if target == "review_pass_rate":
        return float(passed), float(completed)
    if target == "task_completion":
        return float(passed and completed), float(completed)
    category = target.removeprefix("category:")
    return float(not passed and category in categories), 0.0


def _estimates(entry: _Agent, target: str, confidence: float) -> dict[str, Any]:
    """The estimates of ``target`` for one agent (or the fleet) and the plain share of its verdicts."""
    sample: dict[bool, list[Labelled]] = {True: [], False: []}
    flagged_all: list[Labelled] = []
    everyone: list[Labelled] = []
    for flagged, cell in entry.cells.items():
        for drawn, passed, weight, done, cats in cell.first:
            y, prediction = _label(target, passed, done, cats)
            everyone.append(Labelled(y))
            if flagged:
                flagged_all.append(Labelled(y))
            if drawn:
                sample[flagged].append(Labelled(y, prediction, weight))
    sizes = {flagged: cell.size for flagged, cell in entry.cells.items()}
    population = sizes[True] + sizes[False]
    merged = sample[True] + sample[False]

    def thin(least: int) -> bool:  # a stratum with runs and fewer than ``least`` labelled sample members
        return any(sizes[h] > 0 and len(sample[h]) < least for h in (True, False))

    collapsed = thin(1) and len(merged) >= 1
    by_stratum = [Stratum(population, merged)] if collapsed else [Stratum(sizes[h], sample[h]) for h in (True, False)]
    methods = {
        "sample": post_stratified("sample", by_stratum, confidence),
        "stratified": post_stratified(
            "stratified", [Stratum(sizes[True], flagged_all), Stratum(sizes[False], sample[False])], confidence
        ),
    }
    if target in HUMAN_TARGETS:  # Vigil's completion verdict predicts these on every run
        completed = {flagged: float(cell.completed) for flagged, cell in entry.cells.items()}
        if thin(2) and len(merged) >= 2:
            total = completed[True] + completed[False]
            parts = [PredictedStratum(population, total, total, merged)]
            collapsed = True
        else:
            parts = [PredictedStratum(sizes[h], completed[h], completed[h], sample[h]) for h in (True, False)]
        methods["ppi"] = stratified_ppi(parts, confidence=confidence)
        for judge, said in sorted(entry.judged.items()):
            methods[f"judge:{judge}"] = _judged(
                entry, target, f"judge:{judge}", said, collapsed=collapsed, confidence=confidence
            )
    return {"methods": methods, "naive": mean_ci("naive", everyone, population, confidence), "collapsed": collapsed}


def _judged(
    entry: _Agent, target: str, method: str, said: Mapping[str, bool], *, collapsed: bool, confidence: float
) -> Estimate:
    """PPI++ with a judge's passes on the random stratum as the prediction (``judge:<name>``).

    Per rule stratum (one, when the strata are ``collapsed``): the members nobody reviewed, weighed
    ``1 / p``, stand for the stratum's mean prediction; the reviewed members correct it.
    """

    def predict(trace_id: str, completed: bool) -> float:
        passed = said.get(trace_id, completed)
        return float(passed and completed) if target == "task_completion" else float(passed)

    cells = [entry.cells[True], entry.cells[False]]
    groups = [cells] if collapsed else [[c] for c in cells]
    parts = []
    for group in groups:
        labels, reviewed = [], set()
        for cell in group:
            for trace_id, (drawn, passed, weight, done, cats) in zip(cell.first_ids, cell.first, strict=True):
                if drawn:
                    reviewed.add(trace_id)
                    labels.append(Labelled(_label(target, passed, done, cats)[0], predict(trace_id, done), weight))
        rest = [(predict(t, done), w) for cell in group for t, w, done in cell.members if t not in reviewed]
        size, total, squares = sampled_predictions(rest)
        parts.append(PredictedStratum(sum(c.size for c in group), total, squares, labels, predicted=size))
    return stratified_ppi(parts, confidence=confidence, method=method)


def _headline(methods: Mapping[str, Estimate]) -> Estimate:
    """The narrowest prediction-powered estimate (Vigil's prediction or a judge's), else the sample's."""
    powered = [e for name, e in methods.items() if name == "ppi" or name.startswith("judge:")]
    return narrowest(powered) or methods["sample"]


def status(target: Target | None, estimate: Estimate) -> str | None:
    """``met`` / ``not met`` / ``not enough data`` by the whole interval (``None``: no bound to meet)."""
    if target is None or target.direction is Direction.TREND:
        return None
    if estimate.low is None or estimate.high is None:
        return "not enough data"
    low, high = estimate.low, estimate.high
    if target.direction is Direction.AT_LEAST:
        inside, outside = low >= target.objective, high < target.objective
    elif target.direction is Direction.AT_MOST:
        inside, outside = high <= target.objective, low > target.objective
    else:
        inside = target.floor <= low and high <= target.objective
        outside = high < target.floor or low > target.objective
    return "met" if inside else "not met" if outside else "not enough data"


def estimate_dict(e: Estimate | None) -> dict[str, Any] | None:
    """An estimate as JSON: ``{method, value, low, high, n, population}``."""
    if e is None:
        return None
    return {"method": e.method, "value": e.value, "low": e.low, "high": e.high, "n": e.n, "population": e.population}


def _targets_of(config: SloConfig, agent: str) -> Mapping[str, Target]:
    return config.targets if agent == FLEET else config.agents.get(agent, config.targets)


def _rows(
    entry: _Agent,
    before: _Agent | None,
    names: Iterable[str],
    targets: Mapping[str, Target],
    confidence: float,
    *,
    error: tuple[float, float] | None = None,
) -> list[dict[str, Any]]:
    rows = []
    for name in names:
        now = _estimates(entry, name, confidence)
        fix = error if name == "review_pass_rate" else None
        if fix is not None:  # reviewers of known error rates: every design-based figure corrected, never the naive
            now["methods"] = {m: corrected(e, *fix) for m, e in now["methods"].items()}
        headline = _headline(now["methods"])
        previous = _headline(_estimates(before, name, confidence)["methods"]) if before is not None else None
        if fix is not None and previous is not None:
            previous = corrected(previous, *fix)
        moved = change(previous, headline, confidence) if previous is not None else None
        target = targets.get(name) if name in HUMAN_TARGETS else None
        rows.append(
            {
                "target": name,
                "objective": None if target is None else target.objective,
                "direction": None if target is None else target.direction.value,
                "estimate": estimate_dict(headline),
                "status": status(target, headline),
                "methods": {m: estimate_dict(e) for m, e in now["methods"].items()},
                "naive": estimate_dict(now["naive"]),
                "collapsed": now["collapsed"],
                "previous": estimate_dict(previous),
                "change": None if moved is None else {"delta": moved.delta, "p_value": moved.p_value},
                "corrected_for": None if fix is None else {"false_pass": fix[0], "false_fail": fix[1]},
            }
        )
    return rows


def _design(entry: _Agent) -> dict[str, int]:
    flagged, unflagged = entry.cells[True], entry.cells[False]
    drawn = [x for cell in (flagged, unflagged) for x in cell.first if x[0]]
    return {
        "runs": flagged.size + unflagged.size,
        "shed": entry.shed,
        "before_design": entry.before_design,
        "rule_flagged": flagged.size,
        "rule_flagged_reviewed": len(flagged.first),
        "sample": flagged.drawn + unflagged.drawn,
        "sample_reviewed": len(drawn),
    }


def quality_report(
    conn: sa.Connection,
    config: SloConfig,
    now: float,
    *,
    window: str = "7d",
    agent: str | None = None,
    confidence: float = CONFIDENCE,
    compare: bool = True,
    reviewer_error: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The estimates of the window ending at ``now``, per agent and for the fleet (``agent``: one only).

    Each agent's entry: ``agent`` (``*`` = the fleet), ``design`` (runs in the design, runs shed and
    before the design, rule-flagged runs and how many have a verdict, sample members and how many have
    one) and ``estimates``: one row per target and failure category, with the headline estimate, its
    status, each method's estimate, the naive share, and the previous window's headline with the change
    and its p-value (``compare``); ``sessions``: the same ``design`` counted in sessions closed in the
    window, and ``session_review_pass_rate`` from their first session verdicts (the prediction: not
    abandoned). ``judges``: :func:`judge_calibration`. ``reviewer_error``: the reviewers' known
    ``(false_pass, false_fail)`` rates; the pass rates are then corrected for them
    (:func:`scorers.quality.corrected`; the row's ``corrected_for`` says so).

    Raises:
        QualityError: an unknown window.
    """
    length = window_seconds(window)
    agents = _load(conn, now - length, now)
    earlier = _load(conn, now - 2 * length, now - length) if compare else {}
    convs = _load_sessions(conn, now - length, now)
    convs_earlier = _load_sessions(conn, now - 2 * length, now - length) if compare else {}
    categories = sorted(
        {c for e in agents.values() for cell in e.cells.values() for *_, cats in cell.first for c in cats}
    )
    names = [*HUMAN_TARGETS, *(f"category:{c}" for c in categories)]
    entries: list[tuple[str, _Agent, _Agent | None, _Agent, _Agent | None]] = []
    if agent is None or agent == FLEET:
        entries.append(
            (
                FLEET,
                _fleet(agents),
                _fleet(earlier) if compare else None,
                _fleet(convs),
                _fleet(convs_earlier) if compare else None,
            )
        )
    for name in sorted(set(agents) | set(convs)):
        if agent is None or agent == name:
            before = earlier.get(name, _Agent()) if compare else None
            conv_before = convs_earlier.get(name, _Agent()) if compare else None
            entries.append((name, agents.get(name, _Agent()), before, convs.get(name, _Agent()), conv_before))
    return {
        "window": window,
        "since": now - length,
        "until": now,
        "confidence": confidence,
        "judges": [
            j for j in judge_calibration(conn, now - length, now, confidence) if agent is None or j["agent"] == agent
        ],
        "agents": [
            {
                "agent": name,
                "design": _design(entry),
                "estimates": _rows(entry, before, names, _targets_of(config, name), confidence, error=reviewer_error),
                "sessions": {
                    "design": _design(conv),
                    "estimates": [
                        {**row, "target": "session_review_pass_rate"}
                        for row in _rows(conv, conv_before, ["review_pass_rate"], {}, confidence, error=reviewer_error)
                    ],
                },
            }
            for name, entry, before, conv, conv_before in entries
        ],
    }


def judge_calibration(
    conn: sa.Connection, since: float, until: float, confidence: float = CONFIDENCE
) -> list[dict[str, Any]]:
    """How far each LLM judge agrees with the reviewers, on runs of the random sample only.

    Measured anywhere else the figure is biased: rule-flagged runs are mostly failures, and some are
    flagged *because of* the judge's own score. Per judge (and agent, ``*`` for all): the pairs (the
    judge's pass, the run's first verdict's pass), the share that agree with its Wilson interval,
    and Cohen's κ with its interval (``None`` with fewer than two pairs or one class only).
    """
    in_window = sa.and_(runs.c.created_at >= since, runs.c.created_at < until, runs.c.sample_drawn.is_(True))
    judged = (
        sa.select(runs.c.trace_id, runs.c.agent, judge_results.c.judge, judge_results.c.passed)
        .join(judge_results, judge_results.c.trace_id == runs.c.trace_id)
        .where(in_window, judge_results.c.passed.is_not(None))
    )
    rows = conn.execute(judged).all()
    if not rows:
        return []
    first: dict[str, bool] = {}
    verdicts = (
        sa.select(verdict_run, review_verdicts.c.verdict)
        .join(runs, runs.c.trace_id == verdict_run)
        .where(in_window)
        .order_by(review_verdicts.c.created_at, review_verdicts.c.id)
    )
    for trace_id, verdict in conn.execute(verdicts):
        first.setdefault(trace_id, verdict == "pass")
    pairs: dict[tuple[str, str], list[tuple[bool, bool]]] = {}
    for trace_id, agent, judge, passed in rows:
        if trace_id in first:
            for key in ((judge, FLEET), (judge, agent)):
                pairs.setdefault(key, []).append((bool(passed), first[trace_id]))
    out = []
    for (judge, agent), both in sorted(pairs.items()):
        agree = sum(1 for j, h in both if j == h)
        low, high = wilson_bounds(agree / len(both), len(both), confidence)
        kappa = cohen_kappa(both, confidence)
        out.append(
            {
                "judge": judge,
                "agent": agent,
                "n": len(both),
                "agreement": {"value": agree / len(both), "low": low, "high": high},
                "kappa": None if kappa is None else {"value": kappa[0], "low": kappa[1], "high": kappa[2]},
            }
        )
    return out


ALLOCATION_WINDOW: Final = "28d"
"""The verdicts the sample's allocation learns each group's pass rate from."""


def allocation_inputs(engine: sa.Engine, now: float) -> dict[str, tuple[float, tuple[float, float]]]:
    """Per agent, what sampling where the prediction is least sure needs (:data:`scorers.sampling.CellRates`).

    The share of the last day's runs Vigil predicts completed, and the reviewers' pass rate on the random
    sample's runs predicted completed and on the others over :data:`ALLOCATION_WINDOW`, first verdicts
    weighed ``1 / p``, smoothed ``(passes + 1) / (verdicts + 2)`` (no verdict yet: ½ each, the even rate).
    """
    day = now - 86_400.0
    shares = (
        sa.select(
            runs.c.agent,
            sa.func.count(),
            sa.func.sum(sa.case((runs.c.task_completed.is_(True), 1), else_=0)),
        )
        .where(runs.c.created_at >= day)
        .group_by(runs.c.agent)
    )
    out: dict[str, tuple[float, tuple[float, float]]] = {}
    with engine.connect() as conn:
        counts = {str(a): (int(n), int(c or 0)) for a, n, c in conn.execute(shares)}
        agents = _load(conn, now - WINDOWS[ALLOCATION_WINDOW], now, judges=False)
    for agent, (total, completed) in counts.items():
        seen = {True: [0.0, 0.0, 0], False: [0.0, 0.0, 0]}  # predicted completed → [passes, weight, verdicts]
        entry = agents.get(agent, _Agent())
        for cell in entry.cells.values():
            for drawn, passed, weight, done, _ in cell.first:
                if drawn:
                    seen[done][0] += weight * passed
                    seen[done][1] += weight
                    seen[done][2] += 1
        rates = [(passes / weight * n + 1) / (n + 2) if n else 0.5 for passes, weight, n in (seen[True], seen[False])]
        out[agent] = (completed / total if total else 0.0, (rates[0], rates[1]))
    return out


def runs_per_day(engine: sa.Engine, now: float) -> dict[str, float]:
    """Expected runs a day by agent, from the runs stored in the last day (for a review budget).

    The larger of the last hour's count times 24 and the last day's count scaled to a whole day (the
    time since the day's first run, at least an hour): a spike raises the estimate at once, so a
    budget is never overrun by more than an hour's surge, and a quiet hour does not halve a day's.
    """
    hour, day = now - 3600.0, now - 86_400.0
    query = (
        sa.select(
            runs.c.agent,
            sa.func.sum(sa.case((runs.c.created_at >= hour, 1), else_=0)),
            sa.func.count(),
            sa.func.min(runs.c.created_at),
        )
        .where(runs.c.created_at >= day)
        .group_by(runs.c.agent)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    out = {}
    for agent, last_hour, last_day, first in rows:
        span = max(3600.0, now - float(first))
        out[str(agent)] = max(float(last_hour or 0) * 24, float(last_day) * 86_400.0 / span)
    return out
