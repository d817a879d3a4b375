"""LLM judge verdicts in SQL: stored with the run, flags merged, and paired with human verdicts.

* :class:`SqlJudgeSink` implements :class:`scorers.judge.model.JudgeSink` on the store's
  engine: it upserts ``judge_results`` and, when the judge scores add flag reasons, merges
  them into the run's flag and creates or updates its review item, in one transaction.
* :func:`results_for` reads a run's verdicts for ``GET /api/v1/runs/{trace_id}``.
* :class:`SqlVerdictPairSource` joins ``judge_results`` with the human verdicts table of the
  review workbench (its name and columns are parameters) for the agreement gauges.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
import structlog
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine

from review_queue.errors import StoreUnavailableError
from review_queue.sessions import recount_flagged
from review_queue.snapshot import add_to_flag, item_row
from review_queue.tables import judge_results, review_items, review_verdicts, runs, upsert, verdict_run
from scorers.judge.model import JudgeResult, VerdictPair
from scorers.model import Flag, Priority, ScoredRun

__all__ = ["SqlJudgeSink", "SqlVerdictPairSource", "merge_reasons", "result_row", "results_for", "verdict_documents"]

log = structlog.get_logger(__name__)

_SQLITE_BEGIN = "vigil_sqlite_begin"  # the execution option review_queue.store's "begin" hook reads


def merge_reasons(
    old_reasons: Sequence[str], old_priority: str | None, flag: Flag
) -> tuple[list[str], Priority] | None:
    """The union of a stored flag and a new decision, or None when nothing is new.

    Reasons keep their stored order, new ones are appended; the priority is the higher.
    """
    added = [r for r in flag.reasons if r not in old_reasons]
    if not added:
        return None
    priority = flag.priority
    if old_priority is not None and Priority(old_priority).rank > priority.rank:
        priority = Priority(old_priority)
    return [*old_reasons, *added], priority


class SqlJudgeSink:
    """Stores judge verdicts next to the run index.

    Args:
        engine: the store's engine (``SqlStore.engine``).
        clock: Unix epoch seconds for ``created_at``/``updated_at``.
        retry_after_s: the ``retry_after`` of :class:`StoreUnavailableError`.
        on_completion_revoked: called with the agent when a failing judge verdict is the first
            failing verdict (judge or human) on a run counted as a completed task (``scorers.slo``).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.time,
        retry_after_s: float = 2.0,
        on_completion_revoked: Callable[[str], None] | None = None,
    ) -> None:
        self._engine = engine
        self._on_revoked = on_completion_revoked
        self._clock = clock
        self._retry_after = retry_after_s
        insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
        self._upsert_result = upsert(engine.dialect.name, judge_results, ("trace_id", "judge"), kept=("created_at",))
        item = insert(review_items)
        item_set: dict[str, Any] = {
            name: item.excluded[name] for name in ("priority", "priority_rank", "reasons", "snapshot", "updated_at")
        }
        item_set["version"] = review_items.c.version + 1
        self._upsert_item = item.on_conflict_do_update(index_elements=[review_items.c.trace_id], set_=item_set)
        self._lock_run = sa.select(
            runs.c.flagged, runs.c.flag_reasons, runs.c.flag_priority, runs.c.sample_rate, runs.c.flag_added
        ).where(runs.c.trace_id == sa.bindparam("tid"))
        if engine.dialect.name == "postgresql":
            self._lock_run = self._lock_run.with_for_update()

    def write_judgement(self, result: JudgeResult, scored: ScoredRun, flag: Flag | None) -> bool:
        """Upsert the verdict; with ``flag``, merge it into the run's flag (see the protocol).

        1. Upsert ``judge_results`` on (trace id, judge).
        2. With a flag: read the run's flag under a row lock (SQLite: the ``BEGIN IMMEDIATE``
           write lock), merge reasons; when something is new, update the run's flag columns
           and upsert its review item (state kept) with the merged reasons and a fresh snapshot.
        3. Commit.

        Returns:
            True when the run was not flagged before.

        Raises:
            StoreUnavailableError: the database cannot be reached; nothing was written.
        """
        now = self._clock()
        try:
            with self._engine.connect() as conn:
                conn.execution_options(**{_SQLITE_BEGIN: "BEGIN IMMEDIATE"})
                with conn.begin():
                    revoke = result.passed is False and _first_failure(conn, result.trace_id)
                    conn.execute(self._upsert_result, [result_row(result, now)])
                    new_flag = flag is not None and self._merge_flag(conn, scored, flag, now)
            if revoke and self._on_revoked is not None:
                self._on_revoked(scored.run.agent)
            return new_flag
        except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
            if "no such table" in str(exc.orig):
                raise
            raise StoreUnavailableError(self._retry_after, f"database unavailable: {exc.orig}") from exc

    def _merge_flag(self, conn: sa.Connection, scored: ScoredRun, flag: Flag, now: float) -> bool:
        row = conn.execute(self._lock_run, {"tid": scored.run.trace_id}).first()
        if row is None:  # the run row is gone (deleted): nothing to flag
            return False
        was_flagged, old_reasons, old_priority, old_rate, old_added = row
        merged = merge_reasons(
            list(old_reasons or []) if was_flagged else [], old_priority if was_flagged else None, flag
        )
        if merged is None:
            return False
        reasons, priority = merged
        rate = old_rate if was_flagged and old_rate is not None else flag.sample_rate
        conn.execute(
            sa.update(runs)
            .where(runs.c.trace_id == scored.run.trace_id)
            .values(
                flagged=True,
                flag_reasons=reasons,
                flag_priority=priority.value,
                flag_added=(added := add_to_flag(old_added, flag.reasons, flag.priority)),
                sample_rate=rate,
                updated_at=now,
                version=runs.c.version + 1,
            )
        )
        if not was_flagged and scored.run.session_id is not None:  # its session counts one more flagged turn
            recount_flagged(conn, scored.run.session_id, now)
        merged_flag = Flag(tuple(reasons), priority, rate)
        snapshot_of = ScoredRun(
            scored.run, scored.scores, merged_flag, scored.scorer_errors, scored.rescored, scored.evidence
        )
        item = item_row(snapshot_of, merged_flag, now)
        if added.get("session_id"):  # the last turn of a flagged session: its item stays the session's
            item["snapshot"].update(subject="session", session_id=added["session_id"])
        conn.execute(self._upsert_item, [item])
        return not was_flagged


def _first_failure(conn: sa.Connection, trace_id: str) -> bool:
    """Whether the run was counted as a completed task and has no failing verdict yet."""
    completed = conn.execute(sa.select(runs.c.task_completed).where(runs.c.trace_id == trace_id)).scalar()
    if not completed:
        return False
    judged = sa.select(judge_results.c.trace_id).where(
        judge_results.c.trace_id == trace_id, judge_results.c.passed.is_(False)
    )
    reviewed = sa.select(review_verdicts.c.trace_id).where(verdict_run == trace_id, review_verdicts.c.verdict == "fail")
    return conn.execute(judged.union_all(reviewed).limit(1)).first() is None


def result_row(result: JudgeResult, now: float) -> dict[str, Any]:
    """A verdict as a ``judge_results`` row (bounded, NUL-free: PostgreSQL text holds none)."""
    return {
        "trace_id": result.trace_id,
        "judge": result.judge[:64],
        "rubric_version": result.rubric_version[:128],
        "model": result.model[:256],
        "score": result.score,
        "passed": result.passed,
        "reasoning": result.reasoning.replace("\x00", "\ufffd"),
        "error": None if result.error is None else result.error.replace("\x00", "\ufffd"),
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cost_usd": result.cost_usd,
        "latency_s": result.latency_s,
        "content_hash": result.content_hash[:64],
        "cached": result.cached,
        "created_at": now,
        "updated_at": now,
    }


def results_for(conn: sa.Connection, trace_id: str) -> list[dict[str, Any]]:
    """The run's verdicts in the API shape, by judge name."""
    return verdict_documents(conn, judge_results, judge_results.c.trace_id == trace_id, "trace_id")


def verdict_documents(
    conn: sa.Connection, table: sa.Table, where: sa.ColumnElement[bool], key: str
) -> list[dict[str, Any]]:
    """Verdict rows of ``table`` (``judge_results``, ``session_judge_results``) in the API shape, by judge
    name: every column but the subject ``key``, times as datetimes."""
    out = []
    for row in conn.execute(sa.select(table).where(where).order_by(table.c.judge)).mappings():
        doc = {c.name: row[c.name] for c in table.c if c.name not in (key, "created_at", "updated_at")}
        doc["created_at"] = datetime.fromtimestamp(row["created_at"], tz=UTC)
        doc["updated_at"] = datetime.fromtimestamp(row["updated_at"], tz=UTC)
        out.append(doc)
    return out


class SqlVerdictPairSource:
    """Judge verdicts paired with human verdicts from another table of the same database.

    Implements :class:`scorers.judge.model.VerdictPairSource`. The human table is named by
    parameters so the review workbench's schema can be plugged in at composition time.

    Args:
        engine: the store's engine.
        table: the human verdicts table.
        trace_column: its trace id column.
        verdict_column: its verdict column.
        pass_values: values of ``verdict_column`` that mean "pass" (others mean "fail";
            NULL rows are ignored). ``(True,)`` for a boolean column.
        latest_column: when a run can have several human verdicts, the column ordering them
            (only the row with the greatest value per run counts); None: every row counts.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        table: str = "verdicts",
        trace_column: str = "trace_id",
        verdict_column: str = "verdict",
        pass_values: Sequence[object] = ("pass",),
        latest_column: str | None = None,
    ) -> None:
        self._engine = engine
        self._table = table
        self._pass = tuple(pass_values)
        self._query = _pairs_query(table, trace_column, verdict_column, latest_column)
        self._missing_logged = False

    def verdict_pairs(self) -> list[VerdictPair]:
        """Every (judge verdict, human verdict) pair of runs that have both.

        No pairs (logged once) while the human verdicts table does not exist.

        Raises:
            StoreUnavailableError: the database cannot be read.
        """
        try:
            with self._engine.connect() as conn:
                if not sa.inspect(conn).has_table(self._table):
                    if not self._missing_logged:
                        log.info("human_verdicts_table_missing", table=self._table)
                        self._missing_logged = True
                    return []
                rows = conn.execute(self._query).all()
        except sa_exc.SQLAlchemyError as exc:
            raise StoreUnavailableError(2.0, f"cannot read verdicts: {str(exc).splitlines()[0]}") from exc
        return [VerdictPair(judge, rubric, bool(passed), human in self._pass) for judge, rubric, passed, human in rows]


def _pairs_query(table: str, trace_column: str, verdict_column: str, latest_column: str | None) -> sa.Select[Any]:
    columns: list[sa.ColumnClause[Any]] = [sa.column(trace_column), sa.column(verdict_column)]
    if latest_column is not None:
        columns.append(sa.column(latest_column))
    human = sa.table(table, *columns).alias("human")
    jr = judge_results
    query = (
        sa.select(jr.c.judge, jr.c.rubric_version, jr.c.passed, human.c[verdict_column])
        .select_from(jr.join(human, human.c[trace_column] == jr.c.trace_id))
        .where(jr.c.passed.is_not(None), human.c[verdict_column].is_not(None))
    )
    if latest_column is not None:
        newer = sa.table(table, sa.column(trace_column), sa.column(latest_column)).alias("newer")
        latest = (
            sa.select(sa.func.max(newer.c[latest_column]))
            .where(newer.c[trace_column] == human.c[trace_column])
            .scalar_subquery()
        )
        query = query.where(human.c[latest_column] == latest)
    return query
