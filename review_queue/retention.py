"""Retention and deletion requests: what Vigil stores about a run, and for how long.

- :func:`purge_traces` deletes everything about given trace ids (``vigil purge --trace-id``):
  the run-index row, its review item with the snapshot, verdicts and audit events, user
  feedback and judge verdicts. For deletion requests of data subjects.
- :func:`apply_retention` deletes runs (and everything hanging off them) and feedback about
  runs that never arrived, older than the retention period. Runs whose review item is done are kept when
  ``keep_reviewed`` is set (they are the evaluation set and the audit trail); their
  item's snapshot is kept with them.
- :func:`apply_details_retention` deletes the details documents (:mod:`review_queue.details`) of
  unflagged runs older than the details retention period (``VIGIL_DETAILS_RETENTION_DAYS``, 7 by
  default; 0 keeps details of flagged runs only). A flagged run's details live as long as the run.
- :class:`Retention` runs :func:`apply_retention` on a daemon thread (hourly by default) in
  the processes that serve the store.

Deletions go child tables first, so they do not depend on the database enforcing cascades. The
sessions the deleted runs were turns of are recomputed from their remaining turns in the same
transaction (:mod:`review_queue.sessions`), and deleted when none remains.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
import structlog
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.engine import Engine

from collector.lifecycle import Periodic
from review_queue.errors import StoreUnavailableError
from review_queue.sessions import SessionRefresher
from review_queue.store import guard, write_transaction
from review_queue.tables import (
    feedback,
    judge_results,
    review_events,
    review_items,
    review_verdicts,
    run_details,
    runs,
    session_judge_results,
    sessions,
)

__all__ = ["Retention", "apply_details_retention", "apply_retention", "deletion_counter", "purge_traces"]

log = structlog.get_logger(__name__)

_CHUNK = 500
"""Trace ids deleted per statement (bounded IN lists, bounded transactions)."""


def _delete_traces(conn: sa.Connection, trace_ids: Sequence[str]) -> dict[str, int]:
    of_runs = sa.select(runs.c.session_id).where(runs.c.trace_id.in_(trace_ids), runs.c.session_id.is_not(None))
    session_ids = sorted({str(s) for s in conn.execute(of_runs.distinct()).scalars()})
    items = sa.select(review_items.c.id).where(review_items.c.trace_id.in_(trace_ids)).scalar_subquery()
    counts = {
        "review_verdicts": conn.execute(sa.delete(review_verdicts).where(review_verdicts.c.item_id.in_(items))),
        "review_events": conn.execute(sa.delete(review_events).where(review_events.c.item_id.in_(items))),
        "review_items": conn.execute(sa.delete(review_items).where(review_items.c.trace_id.in_(trace_ids))),
        "judge_results": conn.execute(sa.delete(judge_results).where(judge_results.c.trace_id.in_(trace_ids))),
        "feedback": conn.execute(sa.delete(feedback).where(feedback.c.trace_id.in_(trace_ids))),
        "run_details": conn.execute(sa.delete(run_details).where(run_details.c.trace_id.in_(trace_ids))),
        "runs": conn.execute(sa.delete(runs).where(runs.c.trace_id.in_(trace_ids))),
    }
    deleted = {table: int(result.rowcount or 0) for table, result in counts.items()}
    if session_ids:
        deleted["session_judge_results"], deleted["sessions"] = _refresh_sessions(conn, session_ids)
    return deleted


def _refresh_sessions(conn: sa.Connection, session_ids: list[str]) -> tuple[int, int]:
    """Recompute the sessions of deleted turns from the turns left; delete those left with none, and their
    session judge verdicts (returns how many of each)."""
    refresher = SessionRefresher(conn.dialect.name)
    rows, _ = refresher.refresh(conn, session_ids, time.time())
    if rows:
        conn.execute(refresher.upsert, rows)
    gone = sorted(set(session_ids) - {str(row["session_id"]) for row in rows})
    if not gone:
        return 0, 0
    verdicts = conn.execute(sa.delete(session_judge_results).where(session_judge_results.c.session_id.in_(gone)))
    dropped = conn.execute(sa.delete(sessions).where(sessions.c.session_id.in_(gone)))
    return int(verdicts.rowcount or 0), int(dropped.rowcount or 0)


def _chunks(conn: sa.Connection, query: sa.Select[Any]) -> Iterator[list[str]]:
    """The first column of what ``query`` selects, :data:`_CHUNK` rows at a time, until it selects
    nothing: the caller deletes each chunk before the next is read (no read transaction is held)."""
    while True:
        ids = [row[0] for row in conn.execute(query.limit(_CHUNK))]
        conn.rollback()
        if not ids:
            return
        yield ids


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def purge_traces(engine: Engine, trace_ids: Sequence[str], *, retry_after_s: float = 2.0) -> dict[str, int]:
    """Delete every stored row about ``trace_ids``; returns rows deleted per table.

    Raises:
        StoreUnavailableError: the database cannot be reached; nothing was deleted.
    """
    ids = sorted({t.lower() for t in trace_ids})
    total: dict[str, int] = {}
    with guard("purge", retry_after_s), engine.connect() as conn, write_transaction(conn):
        for start in range(0, len(ids), _CHUNK):
            _add(total, _delete_traces(conn, ids[start : start + _CHUNK]))
    log.info("traces_purged", traces=len(ids), **total)
    return total


def apply_retention(
    engine: Engine, *, now: float, days: float, keep_reviewed: bool = True, retry_after_s: float = 2.0
) -> dict[str, int]:
    """Delete runs created more than ``days`` ago (and what hangs off them), and old unjoined feedback.

    Returns:
        Rows deleted per table.

    Raises:
        StoreUnavailableError: the database cannot be reached (what was deleted stays deleted:
            each chunk is its own transaction).
    """
    cutoff = now - days * 86_400
    old = sa.select(runs.c.trace_id).where(runs.c.created_at < cutoff)
    if keep_reviewed:
        reviewed = sa.select(review_items.c.trace_id).where(review_items.c.state == "done")
        old = old.where(runs.c.trace_id.not_in(reviewed))
    total: dict[str, int] = {}
    with guard("retention", retry_after_s), engine.connect() as conn:
        for ids in _chunks(conn, old):
            with write_transaction(conn):
                _add(total, _delete_traces(conn, ids))
        with write_transaction(conn):
            orphaned = feedback.c.trace_id.not_in(sa.select(runs.c.trace_id))  # never joined to a stored run
            stale = conn.execute(sa.delete(feedback).where(feedback.c.created_at < cutoff, orphaned))
            total["feedback"] = total.get("feedback", 0) + int(stale.rowcount or 0)
    if any(total.values()):
        log.info("retention_applied", days=days, **total)
    return total


def apply_details_retention(engine: Engine, *, now: float, days: float, retry_after_s: float = 2.0) -> int:
    """Delete details of unflagged runs written more than ``days`` ago (all of them when ``days`` is 0).

    Also deletes details whose run is gone. Returns the rows deleted.

    Raises:
        StoreUnavailableError: the database cannot be reached.
    """
    flagged = sa.select(runs.c.trace_id).where(runs.c.flagged.is_(True))
    old = sa.select(run_details.c.trace_id).where(run_details.c.trace_id.not_in(flagged))
    if days > 0:
        old = old.where(run_details.c.created_at < now - days * 86_400)
    deleted = 0
    with guard("details_retention", retry_after_s), engine.connect() as conn:
        for ids in _chunks(conn, old):
            with write_transaction(conn):
                result = conn.execute(sa.delete(run_details).where(run_details.c.trace_id.in_(ids)))
                deleted += int(result.rowcount or 0)
    if deleted:
        log.info("details_retention_applied", days=days, run_details=deleted)
    return deleted


def deletion_counter(registry: CollectorRegistry) -> Callable[[dict[str, int]], None]:
    """``vigil_retention_deleted_rows_total{table}`` on ``registry``; returns the callback that counts."""
    counter = Counter(
        "vigil_retention_deleted_rows", "Rows deleted by the retention period, by table.", ["table"], registry=registry
    )
    for table in (
        "runs",
        "review_items",
        "review_verdicts",
        "review_events",
        "judge_results",
        "feedback",
        "run_details",
        "session_judge_results",
    ):
        counter.labels(table)

    def count(deleted: dict[str, int]) -> None:
        for table, rows in deleted.items():
            counter.labels(table).inc(rows)

    return count


class Retention:
    """Applies the retention periods every ``interval_s`` on a daemon thread.

    Args:
        engine: the store's engine.
        days: the retention period; 0 disables run retention.
        keep_reviewed: keep runs whose review is done.
        interval_s: seconds between passes.
        clock: Unix seconds.
        on_deleted: called with each pass's counts (metrics).
        details_days: the details retention period of unflagged runs (0: flagged runs only);
            ``None``: details are not managed here.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        days: float,
        keep_reviewed: bool = True,
        interval_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
        on_deleted: Callable[[dict[str, int]], None] | None = None,
        details_days: float | None = None,
    ) -> None:
        self._engine = engine
        self._days = days
        self._keep_reviewed = keep_reviewed
        self._interval = interval_s
        self._clock = clock
        self._on_deleted = on_deleted
        self._details_days = details_days
        # Retention must never take the process down: a failed pass is logged, the next one retries.
        self._periodic = Periodic("vigil-retention", self.tick, interval_s, immediately=True, event="retention_failed")

    def tick(self) -> dict[str, int]:
        """One pass (empty while the database is down: the next pass retries)."""
        try:
            now = self._clock()
            counts = (
                apply_retention(self._engine, now=now, days=self._days, keep_reviewed=self._keep_reviewed)
                if self._days > 0
                else {}
            )
            if self._details_days is not None:
                details = apply_details_retention(self._engine, now=now, days=self._details_days)
                counts["run_details"] = counts.get("run_details", 0) + details
        except StoreUnavailableError as exc:
            log.warning("retention_skipped", error=str(exc))
            return {}
        if self._on_deleted is not None:
            self._on_deleted(counts)
        return counts

    def start(self) -> None:
        """Start the thread (a first pass runs right away); nothing when retention is off."""
        if self._days > 0 or self._details_days is not None:
            self._periodic.start()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop the thread; True when it ended within ``timeout_s`` (:class:`collector.lifecycle.Component`)."""
        return self._periodic.shutdown(timeout_s)
