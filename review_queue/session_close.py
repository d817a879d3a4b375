"""Closing idle sessions, flagging closed sessions into the review queue, and their metrics.

:class:`SessionCloser` (run by :class:`review_queue.maintenance.Maintenance`) closes every open
session whose last turn ended more than ``idle_s`` ago (:mod:`review_queue.sessions`): its row is
recomputed from its runs (``abandoned`` is decided now), the session rules are evaluated, and the
metrics count it — in one transaction per sweep, so a closer killed half-way closes nothing twice.

**Session rules** are CEL expressions over the closed session (``session_signals.rules`` in ``vigil.yaml``,
merged over :data:`DEFAULT_SESSION_RULES` like the run rules: same name replaces, ``enabled: false``
removes). Variables: ``agent``, ``user_id`` (``""`` when unknown), ``turns``, ``duration_s``,
``input_tokens``, ``output_tokens``, ``cost_usd``, ``turns_flagged``, ``limit_hits``, ``blocks``,
``errors``, ``thumbs_down`` (counts of turns), ``reasks``, ``human_requests`` (counts of signals),
``abandoned`` (bool), ``signals`` (the list of signal names) and ``random_sample``: the session id's
:func:`scorers.rules.sample_point` below ``session_signals.sample_rate`` (default the run sample rate), so
5 % of sessions are sampled whatever their turns, deterministically; the rate is recorded on the item.

**A flagged session is one review item**: the item of its *last turn's* run (``review_items`` stay
one per trace id). Its reasons gain the session rules that matched and its snapshot gains
``subject: "session"`` and ``session_id`` — the page shows the whole session from there. A last turn
already in the queue keeps its item (state, claims) and gains the session's reasons. That run becomes
flagged, and the session row's ``turns_flagged`` is recounted from its runs in the same transaction, so
the row always equals what a refresh computes (a replayed turn changes nothing).

**Session judges** (optional, ``session_judges`` in ``vigil.yaml``; :mod:`scorers.judge.session`): once a
sweep is committed, each closed session is offered to them with its rule variables; they judge it on their
own threads and a failing verdict adds ``judge_<name>`` to the session's item the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram

from review_queue.errors import StoreUnavailableError
from review_queue.sessions import ABANDONED, HUMAN, REASK, ClosedSession, recount_flagged
from review_queue.snapshot import add_to_flag, partial_snapshot
from review_queue.store import SqlStore, guard, write_transaction
from review_queue.tables import review_events, review_items, runs, sessions
from scorers import cel_core as cel
from scorers.errors import RuleError
from scorers.judge import SessionJudgeService
from scorers.metrics import DEFAULT_MAX_AGENTS, LabelCap
from scorers.model import Priority
from scorers.rules import DEFAULT_SAMPLE_RATE, merge_rule_specs, rule_expr_priority, sample_point

__all__ = [
    "DEFAULT_SESSION_RULES",
    "SAMPLE_SESSION_VARIABLES",
    "SessionCloser",
    "SessionMetrics",
    "SessionRule",
    "compile_session_rules",
    "flag_session",
    "session_variables",
]

log = structlog.get_logger(__name__)

CLOSE_BATCH = 500
"""Sessions closed per sweep transaction (the next tick takes the rest)."""

SESSION_RANDOM_SAMPLE = "session_random_sample"
"""The session rule of the random session sample (its expression is ``random_sample``)."""

DEFAULT_SESSION_RULES: Mapping[str, Mapping[str, str]] = {
    "session_abandoned": {"expr": "abandoned", "priority": "normal"},
    "session_human_request": {"expr": "human_requests > 0", "priority": "normal"},
    "session_reasked": {"expr": "reasks >= 2", "priority": "normal"},
    "session_thumbs_down": {"expr": "thumbs_down > 0", "priority": "normal"},
    SESSION_RANDOM_SAMPLE: {"expr": "random_sample", "priority": "low"},
}
"""Session rules in force when none are configured."""

SAMPLE_SESSION_VARIABLES: Mapping[str, Any] = {
    "agent": "sample", "user_id": "", "turns": 1, "duration_s": 0.0, "input_tokens": 0, "output_tokens": 0,
    "cost_usd": 0.0, "turns_flagged": 0, "limit_hits": 0, "blocks": 0, "errors": 0, "thumbs_down": 0,
    "reasks": 0, "human_requests": 0, "abandoned": False, "signals": [], "random_sample": False,
}  # fmt: skip
"""The variables of a sample closed session: rules and session judge selectors are dry-run on them."""
_RANK = {"low": 0, "normal": 1, "high": 2}
_SUMMARY = (
    "trace_id", "agent", "service", "dialect", "status", "complete", "start_ns", "end_ns", "duration_s", "llm_calls",
    "tool_calls", "tool_errors", "input_tokens", "output_tokens", "hit_max_iterations", "safety_blocked", "errored",
    "error_type",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionRule:
    """A compiled session rule."""

    name: str
    expr: str
    priority: Priority
    program: cel.Program


def compile_session_rules(config: Mapping[str, Any] | None) -> tuple[SessionRule, ...]:
    """Merge ``config`` over :data:`DEFAULT_SESSION_RULES`, compile and dry-run each rule.

    Raises:
        RuleError: naming the first bad rule.
    """
    merged: dict[str, Any] = {k: dict(v) for k, v in DEFAULT_SESSION_RULES.items()}
    merge_rule_specs(merged, config, "session rule")
    out = []
    for name, spec in merged.items():
        expr, priority = rule_expr_priority(name, spec)
        try:
            program = cel.compile(expr)
            result = program.execute(dict(SAMPLE_SESSION_VARIABLES))
        except (ValueError, RuntimeError, TypeError) as exc:
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            raise RuleError(name, f"invalid session rule: {first}") from exc
        if not isinstance(result, bool):
            raise RuleError(name, f"must evaluate to a boolean, got {type(result).__name__}")
        out.append(SessionRule(name, expr, priority, program))
    return tuple(out)


def session_variables(row: Mapping[str, Any], sample_rate: float) -> dict[str, Any]:
    """The CEL variables of a closed session row (see the module docstring)."""
    names = [str(s["signal"]) for s in row["signals"]]
    return {
        "agent": row["agent"],
        "user_id": row["user_id"] or "",
        "turns": int(row["turns"]),
        "duration_s": float(row["duration_s"]),
        "input_tokens": int(row["input_tokens"]),
        "output_tokens": int(row["output_tokens"]),
        "cost_usd": float(row["cost_usd"]),
        "turns_flagged": int(row["turns_flagged"]),
        "limit_hits": int(row["limit_hits"]),
        "blocks": int(row["blocks"]),
        "errors": int(row["errors"]),
        "thumbs_down": int(row["thumbs_down"]),
        "reasks": names.count(REASK),
        "human_requests": names.count(HUMAN),
        "abandoned": ABANDONED in names,
        "signals": names,
        "random_sample": sample_point(str(row["session_id"])) < sample_rate,
    }


class SessionMetrics:
    """Counters of closed sessions, by agent (capped with an ``other`` overflow).

    ``vigil_sessions_closed_total``, ``vigil_session_turns`` (histogram of turns per closed session),
    ``vigil_sessions_completed_total`` (closed without ``abandoned``), ``vigil_sessions_reasked_total``,
    ``vigil_sessions_abandoned_total``, ``vigil_sessions_escalated_total`` (a request for a human): rates
    are these over ``vigil_sessions_closed_total``. Exemplars carry the last turn's trace id.
    """

    def __init__(self, registry: CollectorRegistry, *, max_agents: int = DEFAULT_MAX_AGENTS) -> None:
        self._agent = LabelCap(max_agents)
        r = registry
        self.closed = Counter("vigil_sessions_closed", "Sessions closed after their idle time.", ["agent"], registry=r)
        self.turns = Histogram(
            "vigil_session_turns", "Turns per closed session.", ["agent"],
            buckets=(1, 2, 3, 5, 8, 13, 21, 34, 55, 100, 200), registry=r,
        )  # fmt: skip
        self.completed = Counter("vigil_sessions_completed", "Closed sessions not abandoned.", ["agent"], registry=r)
        self.reasked = Counter("vigil_sessions_reasked", "Closed sessions with a re-ask.", ["agent"], registry=r)
        self.abandoned = Counter(
            "vigil_sessions_abandoned", "Closed sessions ended right after a failed turn.", ["agent"], registry=r
        )
        self.escalated = Counter(
            "vigil_sessions_escalated", "Closed sessions where the user asked for a human.", ["agent"], registry=r
        )

    def session_closed(self, closed: ClosedSession) -> None:
        """Count one closed session."""
        agent = self._agent(str(closed.row["agent"]))
        exemplar = {"trace_id": closed.last_trace_id}
        names = {str(s["signal"]) for s in closed.row["signals"]}
        self.closed.labels(agent).inc(exemplar=exemplar)
        self.turns.labels(agent).observe(int(closed.row["turns"]), exemplar)
        for counter, hit in (
            (self.completed, ABANDONED not in names),
            (self.reasked, REASK in names),
            (self.abandoned, ABANDONED in names),
            (self.escalated, HUMAN in names),
        ):
            child = counter.labels(agent)
            if hit:
                child.inc(exemplar=exemplar)


class SessionCloser:
    """Closes idle sessions, flags them by the session rules, counts them.

    Args:
        store: the run store (its session refresher and engine).
        rules: :func:`compile_session_rules`.
        sample_rate: the session sample rate (``random_sample``).
        idle_s: seconds without a new turn after which a session closes.
        metrics: counts closed sessions (``None``: not counted).
        clock: Unix epoch seconds.
        judges: the session judges, offered each closed session after the sweep commits (``None``: none).
    """

    def __init__(
        self,
        store: SqlStore,
        rules: Sequence[SessionRule] = (),
        *,
        sample_rate: float = DEFAULT_SAMPLE_RATE,
        idle_s: float | None = None,
        metrics: SessionMetrics | None = None,
        clock: Callable[[], float] = time.time,
        judges: SessionJudgeService | None = None,
    ) -> None:
        self._store = store
        self._judges = judges
        self._rules = tuple(rules)
        self._rate = sample_rate
        self._idle_s = store.sessions.config.idle_s if idle_s is None else idle_s
        self._metrics = metrics
        self._clock = clock

    @property
    def judges(self) -> SessionJudgeService | None:
        """The session judges closed sessions are offered to (a component of the process), or None."""
        return self._judges

    def close_idle(self) -> list[ClosedSession]:
        """Close up to :data:`CLOSE_BATCH` idle sessions in one transaction; returns them.

        Raises:
            StoreUnavailableError: the database cannot be reached; nothing was closed.
        """
        now = self._clock()
        cutoff = int((now - self._idle_s) * 1e9)
        idle = (
            sa.select(sessions.c.session_id)
            .where(sessions.c.status == "open", sessions.c.last_ns < cutoff)
            .order_by(sessions.c.last_ns)
            .limit(CLOSE_BATCH)
        )
        engine = self._store.engine
        with guard("close_sessions", self._store.retry_after_s), engine.connect() as conn, write_transaction(conn):
            ids = [str(i) for i in conn.execute(idle).scalars()]
            if ids and conn.dialect.name == "postgresql":
                # Writers lock their run rows, then the session (review_queue.sessions); take them in
                # the same order, so a turn re-scored while its session closes waits instead of deadlocking.
                turns = sa.select(runs.c.trace_id).where(runs.c.session_id.in_(ids)).order_by(runs.c.trace_id)
                conn.execute(turns.with_for_update())
            closed = self._store.refresh_sessions(conn, ids, now, close_before_ns=cutoff) if ids else []
            for one in closed:
                self._review(conn, one, now)
        for one in closed:
            if self._metrics is not None:
                self._metrics.session_closed(one)
            if self._judges is not None:
                self._judges.submit(
                    str(one.row["session_id"]), one.last_trace_id, session_variables(one.row, self._rate)
                )
        if closed:
            log.info("sessions_closed", sessions=len(closed))
        return closed

    def tick(self) -> int:
        """One sweep for :class:`review_queue.maintenance.Maintenance`; 0 while the database is down."""
        try:
            return len(self.close_idle())
        except StoreUnavailableError as exc:
            log.warning("session_close_skipped", error=str(exc))
            return 0

    def _review(self, conn: sa.Connection, closed: ClosedSession, now: float) -> None:
        variables = session_variables(closed.row, self._rate)
        matched = []
        for rule in self._rules:
            try:
                if rule.program.execute(variables) is True:
                    matched.append(rule)
            except (RuntimeError, ValueError, TypeError, LookupError, ArithmeticError) as exc:
                log.warning("session_rule_failed", rule=rule.name, error=str(exc))
        session_id = str(closed.row["session_id"])
        ruled = any(r.name != SESSION_RANDOM_SAMPLE for r in matched)
        design = {"p": self._rate, "drawn": bool(variables["random_sample"]), "ruled": ruled, "id": session_id}
        conn.execute(_RECORD_DESIGN, design)  # the first close's, for good (a reopened session keeps it)
        if matched:
            top = max((r.priority for r in matched), key=_rank)
            flag_session(conn, closed, [r.name for r in matched], top, rate=self._rate, now=now)


_RECORD_DESIGN = (
    sa.update(sessions)
    .where(sessions.c.session_id == sa.bindparam("id"))
    .values(
        sample_p=sa.func.coalesce(sessions.c.sample_p, sa.bindparam("p")),
        sample_drawn=sa.func.coalesce(sessions.c.sample_drawn, sa.bindparam("drawn")),
        rule_flagged=sa.func.coalesce(sessions.c.rule_flagged, sa.bindparam("ruled")),
    )
)


def _rank(priority: Priority) -> int:
    return priority.rank


def flag_session(
    conn: sa.Connection, closed: ClosedSession, reasons: Sequence[str], priority: Priority, *, rate: float, now: float
) -> int | None:
    """Put a closed session in the review queue as its last turn's item (see the module docstring).

    Returns the item id, or ``None`` when the last turn's run is gone (deleted by retention).
    """
    trace_id = closed.last_trace_id
    query = sa.select(runs).where(runs.c.trace_id == trace_id)
    if conn.dialect.name == "postgresql":  # a re-score of the run waits, and this reads its latest flag
        query = query.with_for_update()
    run = conn.execute(query).mappings().first()
    if run is None:
        return None
    session_id = str(closed.row["session_id"])
    item = conn.execute(sa.select(review_items).where(review_items.c.trace_id == trace_id)).mappings().first()
    old = list(run["flag_reasons"] or []) if run["flagged"] else []
    all_reasons = [*old, *(r for r in reasons if r not in old)]
    top = priority if not run["flag_priority"] else max(priority, Priority(run["flag_priority"]), key=_rank)
    conn.execute(
        sa.update(runs)
        .where(runs.c.trace_id == trace_id)
        .values(
            flagged=True,
            flag_priority=top.value,
            flag_reasons=all_reasons,
            flag_added=add_to_flag(run["flag_added"], reasons, priority, session_id=session_id),
            sample_rate=rate,
            updated_at=now,
        )
    )
    if not run["flagged"]:  # the session row counts its flagged turns: it gains this one
        recount_flagged(conn, session_id, now)
    if item is not None:
        snapshot = {**item["snapshot"], "subject": "session", "session_id": session_id}
        item_reasons = [*item["reasons"], *(r for r in reasons if r not in item["reasons"])]
        rank = max(int(item["priority_rank"]), top.rank)
        conn.execute(
            sa.update(review_items)
            .where(review_items.c.id == item["id"])
            .values(
                reasons=item_reasons,
                snapshot=snapshot,
                priority_rank=rank,
                priority={v: k for k, v in _RANK.items()}[rank],
                updated_at=now,
                version=review_items.c.version + 1,
            )
        )
        item_id = int(item["id"])
    else:
        snapshot = partial_snapshot(run, _SUMMARY, evidence=list(run["evidence"] or []))
        snapshot.update(subject="session", session_id=session_id)
        values = {
            "trace_id": trace_id,
            "state": "pending",
            "priority": top.value,
            "priority_rank": top.rank,
            "reasons": list(reasons),
            "sample_rate": rate,
            "snapshot": snapshot,
            "created_at": now,
            "updated_at": now,
            "version": 1,
            "span_count": run["span_count"],
        }
        item_id = int(conn.execute(sa.insert(review_items).values(values).returning(review_items.c.id)).scalar_one())
    detail = {"session_id": session_id, "reasons": list(reasons)}
    conn.execute(
        sa.insert(review_events).values(item_id=item_id, actor="vigil", action="session_flag", detail=detail, at=now)
    )
    return item_id
