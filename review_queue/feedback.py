"""User feedback: stored by trace id, joined to the run, and re-evaluated against the flag rules.

Feedback may arrive before the run is scored or long after:

* **before** — the stream worker asks :meth:`FeedbackStore.summaries` for the batch it is
  about to score and passes each run's summary to the rules (variable ``feedback``), so the
  run is flagged with the full snapshot;
* **after** — :meth:`FeedbackStore.join` rebuilds the run's rule variables from its stored
  row, re-evaluates every rule with the feedback, and merges the result into the run's flag
  (flags are sticky: reasons are only ever added). An unflagged run gets a review item whose
  snapshot holds the stored summary (steps and messages were not kept for unflagged runs).

Each feedback row is joined once its run exists (``joined_at``); :meth:`FeedbackStore.join_pending`
sweeps rows whose run appeared after they did, which closes the race between a feedback
write and a concurrent run write on PostgreSQL. Idempotent on the client's feedback id.

Feedback for a trace id that is not (yet) a stored run is **held, within bounds**: at most
``pending_max`` unjoined rows (:data:`DEFAULT_PENDING_MAX`; beyond it, new feedback for unknown runs
is refused with :class:`~review_queue.errors.OverCapacityError`, counted ``pending_full``), each for at
most ``pending_s`` (:data:`DEFAULT_PENDING_S`; :meth:`FeedbackStore.expire_pending` then deletes it,
counted ``expired``). So no caller can grow the database without bound with made-up trace ids.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from review_queue.errors import InvalidInputError, OverCapacityError
from review_queue.model import FeedbackIn
from review_queue.snapshot import partial_snapshot
from review_queue.store import SqlStore, guard, write_transaction
from review_queue.tables import feedback, review_events, review_items, runs
from scorers.model import OUTCOME_FIELDS, Flag, Priority, Run, RunStatus
from scorers.rules import Rule, decide

__all__ = ["FeedbackResult", "FeedbackStore", "parse_score", "summarize"]

log = structlog.get_logger(__name__)

JOIN_BATCH = 200
"""Feedback rows joined per sweep transaction."""

DEFAULT_PENDING_MAX = 10_000
"""Unjoined feedback rows (their run not stored yet) held at most; the default of ``VIGIL_FEEDBACK_PENDING_MAX``."""

DEFAULT_PENDING_S = 3600.0
"""Seconds unjoined feedback waits for its run before it is dropped; the default of ``VIGIL_FEEDBACK_PENDING_S``
(runs are scored within ``max_idle_s`` + the quiet period of their first span, 300 s by default)."""


def parse_score(score: object) -> tuple[str, float]:
    """Map a client score to ``(kind, value)``: thumbs ``up``/``down``/bool → 1.0/0.0, a number as is.

    Raises:
        InvalidInputError: anything else (or a non-finite number).
    """
    if isinstance(score, bool):
        return "thumbs", 1.0 if score else 0.0
    if isinstance(score, str):
        text = score.strip().lower()
        thumbs = {"up": 1.0, "thumbs_up": 1.0, "+1": 1.0, "down": 0.0, "thumbs_down": 0.0, "-1": 0.0}
        if text in thumbs:
            return "thumbs", thumbs[text]
        raise InvalidInputError(f"score must be up, down, true, false or a number, got {score!r}")
    if isinstance(score, int | float) and float(score) == float(score) and abs(float(score)) != float("inf"):
        return "score", float(score)
    raise InvalidInputError(f"score must be up, down, true, false or a finite number, got {score!r}")


def summarize(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The rule variable ``feedback`` for one run's feedback rows (oldest first).

    Keys: ``count``, ``thumbs_up`` / ``thumbs_down`` (any such thumb), ``min_score``,
    ``max_score``, ``mean_score``, ``last_score`` (over all scores, thumbs as 1/0),
    ``comments`` (how many carry text). Empty dict when there is no feedback, so rules test
    ``has(feedback.thumbs_down)``.
    """
    items = list(rows)
    if not items:
        return {}
    scores = [float(r["score"]) for r in items]
    thumbs = [float(r["score"]) for r in items if r["kind"] == "thumbs"]
    return {
        "count": len(items),
        "thumbs_up": any(s >= 0.5 for s in thumbs),
        "thumbs_down": any(s < 0.5 for s in thumbs),
        "min_score": min(scores),
        "max_score": max(scores),
        "mean_score": sum(scores) / len(scores),
        "last_score": scores[-1],
        "comments": sum(1 for r in items if r["comment"]),
    }


class FeedbackResult(dict[str, Any]):
    """What :meth:`FeedbackStore.record` did: ``feedback_id``, ``trace_id``, ``duplicate``,
    ``joined`` (the run exists and the rules saw the feedback), ``flag`` (the run's flag or None)."""


class FeedbackStore:
    """Feedback persistence and its join to runs.

    Args:
        engine: the store's engine.
        rules: the compiled flag rules (the same as the pipeline's).
        sample_rate: the random sample rate in force.
        clock: Unix epoch seconds.
        on_received: ``(source, kind)`` called once per new (non-duplicate) feedback, for metrics.
        redact: applied to the user's comment before it is stored (the run redactor's ``text``).
        retry_after_s: ``retry_after`` of :class:`~review_queue.errors.StoreUnavailableError`.
        pending_max: unjoined feedback rows held at most (0: no feedback for unknown runs is held).
        pending_s: seconds unjoined feedback waits for its run.
        on_refused: ``(reason)`` called per refused feedback, for metrics.
        on_dropped: ``(reason, count)`` called when held feedback is dropped, for metrics.
        sessions: the run store, whose session rows are recomputed when feedback joins a turn of a
            session (``thumbs_down``); ``None``: not recomputed.
    """

    def __init__(
        self,
        engine: Engine,
        rules: Sequence[Rule],
        sample_rate: float,
        *,
        clock: Callable[[], float] = time.time,
        on_received: Callable[[str, str], None] | None = None,
        redact: Callable[[str], str] | None = None,
        retry_after_s: float = 2.0,
        pending_max: int = DEFAULT_PENDING_MAX,
        pending_s: float = DEFAULT_PENDING_S,
        on_refused: Callable[[str], None] | None = None,
        on_dropped: Callable[[str, int], None] | None = None,
        sessions: SqlStore | None = None,
    ) -> None:
        self._engine = engine
        self._sessions = sessions
        self._pending_max = pending_max
        self._pending_s = pending_s
        self._on_refused = on_refused
        self._on_dropped = on_dropped
        self._redact = redact
        self._rules = tuple(rules)
        self._priorities = {rule.name: rule.priority for rule in rules}
        self._rate = sample_rate
        self._clock = clock
        self._on_received = on_received
        self._retry_after = retry_after_s
        dialect = engine.dialect.name
        self._insert = postgresql.insert if dialect == "postgresql" else sqlite.insert

    def record(self, fb: FeedbackIn) -> FeedbackResult:
        """Store one feedback (a repeated ``feedback_id`` is a no-op) and join it if the run exists.

        Raises:
            StoreUnavailableError: the database cannot be reached.
            OverCapacityError: the run is not stored and ``pending_max`` feedback rows already wait for theirs.
        """
        row = {
            "feedback_id": fb.feedback_id,
            "trace_id": fb.trace_id,
            "kind": fb.kind,
            "score": fb.score,
            "comment": self._redact(fb.comment) if self._redact and fb.comment else fb.comment,
            "source": fb.source,
            "created_at": self._clock(),
            "joined_at": None,
        }
        stmt = self._insert(feedback).values(row).on_conflict_do_nothing(index_elements=["feedback_id"])
        with guard("feedback", self._retry_after), self._engine.connect() as conn, write_transaction(conn):
            if self._backlog_full(conn, fb):
                if self._on_refused is not None:
                    self._on_refused("pending_full")
                raise OverCapacityError(
                    f"run {fb.trace_id} is not stored and {self._pending_max} feedback already wait for "
                    "their runs; retry once the run is scored",
                    retry_after=min(self._pending_s, 60.0),
                )
            inserted = conn.execute(stmt.returning(feedback.c.id)).first() is not None
            stored_trace = conn.execute(
                sa.select(feedback.c.trace_id).where(feedback.c.feedback_id == fb.feedback_id)
            ).scalar_one()
            flag = self._join(conn, str(stored_trace))
        if inserted and self._on_received is not None:
            self._on_received(fb.source, fb.kind)
        result = FeedbackResult(feedback_id=fb.feedback_id, trace_id=stored_trace, duplicate=not inserted)
        result.update(joined=flag is not False, flag=None if flag is False else flag)
        return result

    def expire_pending(self) -> int:
        """Delete feedback that waited ``pending_s`` for a run that never came; returns how many.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        cutoff = self._clock() - self._pending_s
        stale = sa.and_(
            feedback.c.joined_at.is_(None),
            feedback.c.created_at < cutoff,
            ~sa.exists().where(runs.c.trace_id == feedback.c.trace_id),
        )
        with guard("feedback_expire", self._retry_after), self._engine.connect() as conn, write_transaction(conn):
            dropped = int(conn.execute(sa.delete(feedback).where(stale)).rowcount or 0)
        if dropped:
            log.info("feedback_expired", rows=dropped, waited_s=self._pending_s)
            if self._on_dropped is not None:
                self._on_dropped("expired", dropped)
        return dropped

    def _backlog_full(self, conn: sa.Connection, fb: FeedbackIn) -> bool:
        """Whether ``fb`` is new feedback for a run not stored while ``pending_max`` rows already wait."""
        if conn.execute(sa.select(feedback.c.id).where(feedback.c.feedback_id == fb.feedback_id)).first():
            return False  # a retry of stored feedback: answered as a duplicate
        if conn.execute(sa.select(runs.c.trace_id).where(runs.c.trace_id == fb.trace_id)).first():
            return False
        waiting = sa.select(feedback.c.id).where(feedback.c.joined_at.is_(None)).limit(self._pending_max).subquery()
        return int(conn.execute(sa.select(sa.func.count()).select_from(waiting)).scalar_one()) >= self._pending_max

    def summaries(self, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The ``feedback`` rule variable of every run in ``trace_ids`` that has feedback.

        The stream worker calls it once per batch before scoring.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        if not trace_ids:
            return {}
        found: dict[str, list[Mapping[str, Any]]] = {}
        with guard("feedback_summaries", self._retry_after), self._engine.connect() as conn:
            for start in range(0, len(trace_ids), 900):
                chunk = list(trace_ids[start : start + 900])
                query = sa.select(feedback).where(feedback.c.trace_id.in_(chunk)).order_by(feedback.c.id)
                for row in conn.execute(query).mappings():
                    found.setdefault(row["trace_id"], []).append(dict(row))
        return {trace_id: summarize(rows) for trace_id, rows in found.items()}

    def join_pending(self) -> int:
        """Join feedback whose run has appeared since it arrived; returns runs re-evaluated.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        query = (
            sa.select(feedback.c.trace_id)
            .where(feedback.c.joined_at.is_(None), sa.exists().where(runs.c.trace_id == feedback.c.trace_id))
            .distinct()
            .limit(JOIN_BATCH)
        )
        with guard("feedback_join", self._retry_after), self._engine.connect() as conn, write_transaction(conn):
            trace_ids = [str(t) for t in conn.execute(query).scalars()]
            for trace_id in trace_ids:
                self._join(conn, trace_id)
        return len(trace_ids)

    def for_run(self, trace_id: str) -> list[dict[str, Any]]:
        """Every feedback on one run, oldest first (for the run view)."""
        with guard("feedback_for_run", self._retry_after), self._engine.connect() as conn:
            query = sa.select(feedback).where(feedback.c.trace_id == trace_id).order_by(feedback.c.id)
            return [
                {k: row[k] for k in ("feedback_id", "kind", "score", "comment", "source", "created_at")}
                for row in conn.execute(query).mappings()
            ]

    def _join(self, conn: sa.Connection, trace_id: str) -> dict[str, Any] | bool | None:
        """Re-evaluate one run with its feedback; False when the run is not stored yet."""
        found = conn.execute(sa.select(runs).where(runs.c.trace_id == trace_id)).mappings().first()
        if found is None:
            return False
        run_row: dict[str, Any] = dict(found)
        rows = conn.execute(sa.select(feedback).where(feedback.c.trace_id == trace_id).order_by(feedback.c.id))
        summary = summarize(dict(r) for r in rows.mappings())
        decision = decide(_run_from_row(run_row), run_row["scores"] or {}, self._rules, self._rate, feedback=summary)
        merged = self._merge(run_row, decision)
        now = self._clock()
        if merged is not None:
            self._write_flag(conn, run_row, merged, now)
        pending = sa.and_(feedback.c.trace_id == trace_id, feedback.c.joined_at.is_(None))
        conn.execute(sa.update(feedback).where(pending).values(joined_at=now))
        if self._sessions is not None and run_row.get("session_id"):
            self._sessions.refresh_sessions(conn, [str(run_row["session_id"])], now)
        flag = merged or _stored_flag(run_row)
        return None if flag is None else {"reasons": list(flag.reasons), "priority": flag.priority.value}

    def _merge(self, run_row: Mapping[str, Any], decision: Flag | None) -> Flag | None:
        """The union of the stored flag and ``decision``, or None when nothing new was added."""
        old = list(run_row["flag_reasons"] or []) if run_row["flagged"] else []
        new = [r for r in (decision.reasons if decision else ()) if r not in old]
        if not new:
            return None
        reasons = sorted([*old, *new], key=lambda r: -self._priority(r).rank)
        top = max((self._priority(r) for r in reasons), key=lambda p: p.rank)
        if run_row["flagged"] and run_row["flag_priority"]:
            top = max(top, Priority(run_row["flag_priority"]), key=lambda p: p.rank)
        rate = run_row["sample_rate"] if run_row["sample_rate"] is not None else self._rate
        return Flag(tuple(reasons), top, float(rate))

    def _priority(self, reason: str) -> Priority:
        return self._priorities.get(reason, Priority.LOW)

    def _write_flag(self, conn: sa.Connection, run_row: Mapping[str, Any], flag: Flag, now: float) -> None:
        trace_id = run_row["trace_id"]
        conn.execute(
            sa.update(runs)
            .where(runs.c.trace_id == trace_id)
            .values(
                flagged=True,
                flag_priority=flag.priority.value,
                flag_reasons=list(flag.reasons),
                sample_rate=flag.sample_rate,
                updated_at=now,
            )
        )
        item = {
            "trace_id": trace_id,
            "state": "pending",
            "priority": flag.priority.value,
            "priority_rank": flag.priority.rank,
            "reasons": list(flag.reasons),
            "sample_rate": flag.sample_rate,
            "snapshot": _row_snapshot(run_row),
            "created_at": now,
            "updated_at": now,
            "version": 1,
        }
        stmt = self._insert(review_items).values(item)
        stmt = stmt.on_conflict_do_update(
            index_elements=[review_items.c.trace_id],
            set_={
                "priority": stmt.excluded.priority,
                "priority_rank": stmt.excluded.priority_rank,
                "reasons": stmt.excluded.reasons,
                "updated_at": stmt.excluded.updated_at,
                "version": review_items.c.version + 1,
            },
        )
        conn.execute(stmt)
        item_id = conn.execute(sa.select(review_items.c.id).where(review_items.c.trace_id == trace_id)).scalar_one()
        detail = {"reasons": list(flag.reasons), "priority": flag.priority.value}
        event = {"item_id": item_id, "actor": "system", "action": "feedback_flag", "detail": detail, "at": now}
        conn.execute(sa.insert(review_events).values(event))
        log.info("feedback_flagged", trace_id=trace_id, reasons=list(flag.reasons))


_ROW_RUN_FIELDS = (
    "trace_id", "agent", "service", "dialect", "complete", "start_ns", "end_ns", *OUTCOME_FIELDS, "error_type"
)  # fmt: skip


def _run_from_row(row: Mapping[str, Any]) -> Run:
    """The run's rule variables as stored (attributes and steps were not kept)."""
    fields = {name: row[name] for name in _ROW_RUN_FIELDS}
    return Run(status=RunStatus(row["status"]), **fields)


def _stored_flag(row: Mapping[str, Any]) -> Flag | None:
    if not row["flagged"]:
        return None
    return Flag(tuple(row["flag_reasons"] or ()), Priority(row["flag_priority"]), float(row["sample_rate"] or 0.0))


def _row_snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    return partial_snapshot(row, (*_ROW_RUN_FIELDS, "status", "duration_s"))
