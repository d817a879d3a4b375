"""The SQL run index and review queue: :class:`SqlStore` on SQLite or PostgreSQL.

The schema is created only by the Alembic migrations shipped in
``review_queue/migrations``; call :func:`upgrade_database` (or :meth:`SqlStore.upgrade`)
once at start-up. Writes are batched upserts keyed by trace id, one transaction per call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, Final

import orjson
import sqlalchemy as sa
import structlog
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool

from review_queue import details as run_details_doc
from review_queue import judges, listing, queries
from review_queue.errors import ReviewQueueError, StoreUnavailableError
from review_queue.model import ItemState, WriteOutcome
from review_queue.queries import InvalidCursorError, QueueStat
from review_queue.sessions import ClosedSession, SessionConfig, SessionRefresher, recount_flagged, turn_features
from review_queue.snapshot import DESIGN_COLUMNS, add_to_flag, item_row, keep_added, partial_snapshot, run_row
from review_queue.tables import review_events, review_items, run_details, runs, sessions
from scorers.model import Priority, ScoredRun
from scorers.pricing import PriceTable

__all__ = [
    "InvalidCursorError",
    "QueueStat",
    "SqlStore",
    "create_store_engine",
    "guard",
    "upgrade_database",
    "write_transaction",
]

log = structlog.get_logger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
"""The Alembic script location shipped as package data."""
HEAD_REVISION: Final = "0015"
"""The newest migration's revision (``review_queue/migrations/versions``; a test holds it to Alembic's
head). A database already there is not handed to Alembic at start-up, so a long-lived process whose
database is current never imports it."""

_SQLITE_BEGIN = "vigil_sqlite_begin"
_IN_CHUNK = 900
_ADVISORY_LOCK_ID = 0x56494749  # "VIGI": serialises concurrent upgrades of one PostgreSQL database.


def create_store_engine(url: str, *, connect_timeout_s: float = 5.0) -> Engine:
    """Create the engine for a store URL with Vigil's connection settings.

    SQLite gets WAL, ``synchronous=NORMAL``, foreign keys, ``check_same_thread=False`` and
    explicit ``BEGIN`` (``BEGIN IMMEDIATE`` for writes). ``postgresql://`` URLs use psycopg 3.

    Args:
        url: a SQLAlchemy URL (``sqlite:///vigil.db``, ``postgresql+psycopg://…``).
        connect_timeout_s: connect timeout (PostgreSQL) / busy timeout (SQLite).

    Raises:
        ReviewQueueError: the URL names an unsupported backend or a missing driver.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    options: dict[str, Any] = {"json_serializer": _dumps}
    if backend == "sqlite":
        options["connect_args"] = {"check_same_thread": False, "timeout": connect_timeout_s}
        if parsed.database in (None, "", ":memory:"):
            options["poolclass"] = StaticPool
        engine = sa.create_engine(parsed, **options)
        sa.event.listen(engine, "connect", _sqlite_on_connect)
        sa.event.listen(engine, "begin", _sqlite_on_begin)
        return engine
    if backend != "postgresql":
        raise ReviewQueueError(f"unsupported database backend {backend!r}: use sqlite or postgresql")
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    try:
        import psycopg  # noqa: F401  # checked here for a helpful message
    except ImportError as exc:
        raise ReviewQueueError("PostgreSQL needs psycopg 3: pip install 'vigil[postgres]'") from exc
    options.update(pool_pre_ping=True, connect_args={"connect_timeout": max(1, int(connect_timeout_s))})
    return sa.create_engine(parsed, **options)


def upgrade_database(url: str) -> None:
    """Migrate the database at ``url`` to the newest schema (Alembic ``upgrade head``).

    Safe to call from several processes at once on PostgreSQL (an advisory lock
    serialises them) and idempotent.

    Raises:
        StoreUnavailableError: the database cannot be reached.
    """
    engine = create_store_engine(url)
    try:
        _upgrade(engine, retry_after=2.0)
    finally:
        engine.dispose()


_MIGRATE_URL_ENV: Final = "VIGIL_MIGRATE_DATABASE_URL"
_UNAVAILABLE_EXIT: Final = 3


def upgrade_database_in_child(url: str, timeout_s: float = 600.0) -> bool:
    """:func:`upgrade_database` in a short-lived child process unless the database is already current.

    For long-lived processes (``vigil run``): Alembic, once imported, stays resident (~10 MB), and it
    is needed only the few times a database is behind. A current database is checked here, with one
    query; a database behind (or new) is migrated by ``python -c`` in a child that exits when done.
    An in-memory SQLite database is migrated here (a child could not see it).

    Returns:
        True when a child migrated the database.

    Raises:
        StoreUnavailableError: the database cannot be reached (here or in the child).
        ReviewQueueError: the child failed otherwise (its last line of error output).
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        upgrade_database(url)
        return False
    engine = create_store_engine(url)
    try:
        with engine.connect() as conn:
            if schema_revision(conn) == HEAD_REVISION:
                return False
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
        raise StoreUnavailableError(2.0, f"cannot migrate: {_first_line(exc.orig or exc)}") from exc
    finally:
        engine.dispose()
    code = "import review_queue.store as s; s._migrate_from_environment()"
    env = {**os.environ, _MIGRATE_URL_ENV: url}  # not on the command line: ps would show a password
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ReviewQueueError(f"database migration did not finish within {timeout_s:g} s") from exc
    if done.returncode == 0:
        log.info("database_upgraded", backend=parsed.get_backend_name(), revision=HEAD_REVISION, process="child")
        return True
    said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    if done.returncode == _UNAVAILABLE_EXIT:
        raise StoreUnavailableError(2.0, said)
    raise ReviewQueueError(f"database migration failed: {said}")


def _migrate_from_environment() -> None:
    """The child of :func:`upgrade_database_in_child`: migrate, say why on stderr if it cannot."""
    try:
        upgrade_database(os.environ[_MIGRATE_URL_ENV])
    except StoreUnavailableError as exc:
        print(exc, file=sys.stderr)
        sys.exit(_UNAVAILABLE_EXIT)


class SqlStore:
    """Run index and review queue in SQL; implements :class:`review_queue.model.RunSink`.

    Thread-safe: every call checks a connection out of the engine's pool. All methods
    block on database I/O; call them from worker threads in async code.

    Args:
        url: SQLAlchemy URL (see :func:`create_store_engine`).
        clock: returns Unix epoch seconds; stamps ``created_at``/``updated_at``.
        retry_after_s: the ``retry_after`` of :class:`StoreUnavailableError`.
        prices: prices each run's ``cost_usd`` (summed into its session); ``None`` stores NULL.
        sessions: the session settings (re-ask threshold, request-for-a-human vocabulary).
    """

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
        retry_after_s: float = 2.0,
        prices: PriceTable | None = None,
        sessions: SessionConfig | None = None,
    ) -> None:
        self._engine = create_store_engine(url)
        self._clock = clock
        self._retry_after = retry_after_s
        self._prices = prices
        dialect = self._engine.dialect.name
        self._sessions = SessionRefresher(dialect, sessions)
        self._upsert_runs, self._upsert_items = _upserts(dialect)
        self._raw: dict[tuple[str, tuple[str, ...]], _RawUpsert | None] = {}
        # Read inside the write transaction: (run version, item version or NULL), and stored span counts.
        self._versions = _by_ids_query(
            dialect, runs.c.trace_id, runs.c.version, review_items.c.version, with_items=True
        )
        self._flag_state = _by_ids_query(dialect, runs.c.trace_id, runs.c.span_count, runs.c.flag_added)
        self._keep_flag = (
            sa.update(runs)
            .where(runs.c.trace_id == sa.bindparam("tid"))
            .values(flag_reasons=sa.bindparam("reasons"), flag_priority=sa.bindparam("priority"))
        )
        self._reason_filter = queries.reason_filter_for(dialect)
        self._insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        self._upsert_details = _details_upsert(dialect)

    @property
    def retry_after_s(self) -> float:
        """The ``retry_after`` this store's :class:`StoreUnavailableError` carries."""
        return self._retry_after

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for other review-queue modules sharing the database)."""
        return self._engine

    def upgrade(self) -> None:
        """Migrate this store's database to the newest schema (see :func:`upgrade_database`)."""
        _upgrade(self._engine, self._retry_after)

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Upsert ``runs`` and their review items in one transaction; one outcome per run, in order.

        1. Upsert run rows (executemany, in trace-id order so concurrent writers lock rows in
           one order): a known trace id updates every column, bumps ``version`` and keeps
           ``created_at``. A flag is sticky: a re-score without a flag keeps the earlier one.
           A re-score from fewer spans than the stored one changes nothing (run and item):
           it is a re-delivered tail of the trace, not new information. A re-score with a flag
           replaces the scorer's reasons and keeps the ones added after scoring (``flag_added``:
           a session rule or judge, a run judge, a send-to-review), at the higher priority.
        2. Upsert review items of flagged runs: an existing item takes the new priority,
           reasons (with the added ones), sample rate and snapshot (a session's item stays the
           session's), bumps its ``version`` and keeps its state (a done item stays done).
        3. Read back both versions (one query per 900 runs): version 1 means this transaction
           inserted the row, so ``new_run``/``new_flag`` are exact even with concurrent writers
           (the rows stay locked until commit).
        4. Recompute the ``sessions`` rows of the runs' session ids from their runs and upsert them
           (:class:`review_queue.sessions.SessionRefresher`; nothing for a batch without session ids).
        5. Commit. The same trace id twice in one call is applied in order, as two writes.

        Raises:
            StoreUnavailableError: the database cannot be reached or is locked; nothing was written.
        """
        if not runs:
            return []
        now = self._clock()
        outcomes: list[WriteOutcome | None] = [None] * len(runs)
        written: dict[str, dict[str, Any]] = {}  # trace id -> its run row as written, when it has a session
        updated: set[str] = set()  # sessions with a run updated (not inserted) here, or written twice
        with self._guard("write"), self._engine.connect() as conn:
            conn.execution_options(**{_SQLITE_BEGIN: "BEGIN IMMEDIATE"})
            with conn.begin():
                for batch in _rounds(runs):
                    for position, outcome, row in self._write_round(conn, batch, now):
                        outcomes[position] = outcome
                        session_id = row["session_id"]
                        if session_id is None:
                            continue
                        if not outcome.new_run or row["trace_id"] in written:
                            updated.add(session_id)
                        written[row["trace_id"]] = row
                if written:
                    inserted: dict[str, list[dict[str, Any]]] = {}
                    for row in written.values():
                        if row["session_id"] not in updated:
                            inserted.setdefault(row["session_id"], []).append(row)
                    session_ids = sorted({row["session_id"] for row in written.values()})
                    self.refresh_sessions(conn, session_ids, now, inserted=inserted)
        return [outcome for outcome in outcomes if outcome is not None]

    @property
    def sessions(self) -> SessionRefresher:
        """The session refresher (shared with feedback and the idle close)."""
        return self._sessions

    def refresh_sessions(
        self,
        conn: sa.Connection,
        session_ids: Sequence[str],
        now: float,
        *,
        close_before_ns: int | None = None,
        inserted: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> list[ClosedSession]:
        """Recompute and upsert the ``sessions`` rows of ``session_ids`` in ``conn``'s transaction;
        returns the sessions closed now (``close_before_ns`` and ``inserted``: see
        :meth:`SessionRefresher.refresh`)."""
        rows, closed = self._sessions.refresh(
            conn, session_ids, now, close_before_ns=close_before_ns, inserted=inserted
        )
        if rows:  # copies: the raw upsert encodes JSON values in place, the closed rows are read on
            self._execute_many(conn, self._sessions.upsert, sessions, sorted(map(dict, rows), key=_by_session_id))
        return closed

    def get_run(self, trace_id: str) -> dict[str, Any] | None:
        """Return a run in the API shape plus ``review_item`` (with its snapshot) and ``judges``
        (its LLM judge verdicts), or ``None``.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        with self._guard("get_run"), self._engine.connect() as conn:
            doc = queries.get_run(conn, trace_id)
            if doc is not None:
                doc["judges"] = judges.results_for(conn, trace_id)
            return doc

    def list_runs(
        self,
        agent: str | None = None,
        flagged: bool | None = None,
        reason: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        *,
        session: str | None = None,
        user: str | None = None,
        text: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Return runs newest first (by index time) and the next page's cursor, or ``None``.

        Args:
            agent: only this agent's runs.
            flagged: only flagged (True) or unflagged (False) runs.
            reason: only runs flagged for this reason.
            limit: page size (≥ 1).
            session: only the turns of this session (``runs.session_id``).
            user: only the runs of this end user (``runs.user_id``).
            text: only runs whose user message or final answer contains it (:mod:`review_queue.search`).
            cursor: ``next_cursor`` of the previous page.

        Raises:
            InvalidCursorError: the cursor is malformed.
            StoreUnavailableError: the database cannot be reached.
        """
        with self._guard("list_runs"), self._engine.connect() as conn:
            return queries.list_runs(
                conn,
                self._reason_filter,
                agent=agent,
                flagged=flagged,
                reason=reason,
                limit=max(1, limit),
                cursor=cursor,
                session=session,
                user=user,
                text=text,
            )

    def list_queue(
        self, limit: int = 50, cursor: str | None = None, item_filter: listing.ItemFilter | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Return the items ``item_filter`` picks (pending ones by default), highest priority first then
        oldest, and the next cursor.

        Raises:
            InvalidCursorError: the cursor is malformed.
            StoreUnavailableError: the database cannot be reached.
        """
        f = item_filter or listing.ItemFilter(state=ItemState.PENDING.value)
        with self._guard("list_queue"), self._engine.connect() as conn:
            return queries.list_queue(conn, limit=max(1, limit), cursor=cursor, where=listing.where(conn, f))

    def queue_stats(self) -> list[QueueStat]:
        """Return count and oldest ``created_at`` per (state, priority); one ``GROUP BY``.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        with self._guard("queue_stats"), self._engine.connect() as conn:
            return queries.queue_stats(conn)

    def write_details(self, rows: list[dict[str, Any]]) -> None:
        """Upsert ``run_details`` rows (:func:`review_queue.details.details_row`) in one transaction.

        A row built from fewer spans than the stored one (a re-delivered tail) changes nothing.

        Raises:
            StoreUnavailableError: the database cannot be reached; nothing was written.
        """
        if not rows:
            return
        rows = sorted(rows, key=_by_trace_id)
        with self._guard("write_details"), self._engine.connect() as conn, write_transaction(conn):
            self._execute_many(conn, self._upsert_details, run_details, rows)

    def get_details(self, trace_id: str) -> dict[str, Any] | None:
        """The details document of a run (:mod:`review_queue.details`), or ``None`` when not kept.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        with self._guard("get_details"), self._engine.connect() as conn:
            row = conn.execute(
                sa.select(run_details.c.body, run_details.c.codec).where(run_details.c.trace_id == trace_id)
            ).first()
        return None if row is None else run_details_doc.decode(row[0], row[1])

    def send_to_review(self, trace_id: str, actor: str) -> tuple[int, bool] | None:
        """Put a run in the review queue by hand: a pending item with reason ``manual`` (normal priority).

        A run that already has an item keeps it (nothing changes). The run row becomes flagged
        with reason ``manual`` (so listings and stats count it) and the audit trail records who.

        Returns:
            ``(item id, created)``, or ``None`` when the run is unknown.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        now = self._clock()
        with self._guard("send_to_review"), self._engine.connect() as conn, write_transaction(conn):
            query = sa.select(runs).where(runs.c.trace_id == trace_id)
            if conn.dialect.name == "postgresql":  # a re-score of the run waits (see write)
                query = query.with_for_update()
            row = conn.execute(query).mappings().first()
            if row is None:
                return None
            existing = conn.execute(sa.select(review_items.c.id).where(review_items.c.trace_id == trace_id)).scalar()
            if existing is not None:
                return int(existing), False
            reasons = [*(row["flag_reasons"] or []), MANUAL_REASON] if row["flagged"] else [MANUAL_REASON]
            priority = row["flag_priority"] or "normal"
            conn.execute(
                sa.update(runs)
                .where(runs.c.trace_id == trace_id)
                .values(
                    flagged=True,
                    flag_priority=priority,
                    flag_reasons=reasons,
                    flag_added=add_to_flag(row["flag_added"], [MANUAL_REASON], Priority.NORMAL),
                    sample_rate=float(row["sample_rate"] or 0.0),
                    updated_at=now,
                )
            )
            if not row["flagged"] and row["session_id"] is not None:  # its session counts one more flagged turn
                recount_flagged(conn, str(row["session_id"]), now)
            item = {
                "trace_id": trace_id,
                "state": "pending",
                "priority": priority,
                "priority_rank": {"low": 0, "normal": 1, "high": 2}.get(priority, 1),
                "reasons": reasons,
                "sample_rate": float(row["sample_rate"] or 0.0),
                "snapshot": _manual_snapshot(row),
                "created_at": now,
                "updated_at": now,
                "version": 1,
                "span_count": row["span_count"],
            }
            item_id = int(conn.execute(sa.insert(review_items).values(item).returning(review_items.c.id)).scalar_one())
            event = {"item_id": item_id, "actor": actor[:128], "action": "send_to_review", "detail": {}, "at": now}
            conn.execute(sa.insert(review_events).values(event))
        log.info("sent_to_review", trace_id=trace_id, item_id=item_id)
        return item_id, True

    def has_session_prefix(self, prefix: str) -> bool:
        """Whether a stored run's session id starts with ``prefix`` (a range of ``ix_runs_session``, no scan).

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        if not prefix:
            raise ValueError("empty prefix")
        bound = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        query = sa.select(runs.c.trace_id).where(runs.c.session_id >= prefix, runs.c.session_id < bound).limit(1)
        with self._guard("has_session_prefix"), self._engine.connect() as conn:
            return conn.execute(query).first() is not None

    def ping(self) -> bool:
        """Return True when the database answers and the schema is migrated (for ``/readyz``)."""
        try:
            with self._engine.connect() as conn:
                conn.execute(sa.select(runs.c.trace_id).limit(1))
        except sa_exc.SQLAlchemyError as exc:
            log.warning("store_ping_failed", error=_first_line(exc))
            return False
        return True

    def close(self) -> None:
        """Close every pooled connection. The store must not be used afterwards."""
        self._engine.dispose()

    def _write_round(
        self, conn: sa.Connection, batch: list[tuple[int, ScoredRun]], now: float
    ) -> list[tuple[int, WriteOutcome, dict[str, Any]]]:
        """Upsert one round's runs and items; each run's position, outcome and row as written."""
        by_trace = {scored.run.trace_id: self._run_row(scored, now) for _, scored in batch}
        run_rows = sorted(by_trace.values(), key=_by_trace_id)
        trace_ids = [row["trace_id"] for row in run_rows]
        self._execute_many(conn, self._upsert_runs, runs, run_rows)
        flagged = [scored for _, scored in batch if scored.flag is not None]
        added: dict[str, Mapping[str, Any]] = {}
        if flagged:  # a tail re-score (fewer spans than stored) must not create or change an item
            ids = [s.run.trace_id for s in flagged]
            stored = {tid: (count, extra) for tid, count, extra in _rows_by_ids(conn, self._flag_state, ids)}
            flagged = [s for s in flagged if stored.get(s.run.trace_id, (0, None))[0] <= s.run.span_count]
            added = {s.run.trace_id: extra for s in flagged if (extra := stored.get(s.run.trace_id, (0, None))[1])}
        item_rows = [item_row(scored, scored.flag, now) for scored in flagged if scored.flag is not None]
        if added:  # reasons added after scoring (session, judge, by hand) outlive the re-score
            self._keep_added(conn, item_rows, added)
        written_items = {row["trace_id"] for row in item_rows}
        if item_rows:
            item_rows.sort(key=_by_trace_id)
            self._execute_many(conn, self._upsert_items, review_items, item_rows)
        versions = {tid: (run_v, item_v) for tid, run_v, item_v in _rows_by_ids(conn, self._versions, trace_ids)}
        outcomes = []
        for position, scored in batch:
            run_version, item_version = versions[scored.run.trace_id]
            new_flag = scored.run.trace_id in written_items and item_version == 1
            outcome = WriteOutcome(scored.run.trace_id, run_version == 1, new_flag)
            outcomes.append((position, outcome, by_trace[scored.run.trace_id]))
        return outcomes

    def _keep_added(
        self, conn: sa.Connection, item_rows: list[dict[str, Any]], added: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Put back what ``flag_added`` holds into re-scored runs (rows already locked by their upsert) and
        into their items about to be upserted; a session's item stays the session's."""
        updates = []
        for row in item_rows:
            extra = added.get(row["trace_id"])
            if extra is None:
                continue
            reasons, priority = keep_added(row["reasons"], Priority(row["priority"]), extra)
            row.update(reasons=reasons, priority=priority.value, priority_rank=priority.rank)
            if extra.get("session_id"):
                row["snapshot"].update(subject="session", session_id=extra["session_id"])
            updates.append({"tid": row["trace_id"], "reasons": reasons, "priority": priority.value})
        if updates:
            conn.execute(self._keep_flag, updates)

    def _run_row(self, scored: ScoredRun, now: float) -> dict[str, Any]:
        row = run_row(scored, now)
        row["cost_usd"] = None if self._prices is None else self._prices.run_cost(scored.run).usd
        row["session_turn"] = turn_features(scored.run, self._sessions.config)
        return row

    def _execute_many(
        self, conn: sa.Connection, statement: sa.Executable, table: sa.Table, rows: list[dict[str, Any]]
    ) -> None:
        """executemany of an upsert: the raw driver path (see :class:`_RawUpsert`)."""
        shape = (table.name, tuple(rows[0]))
        if shape not in self._raw:
            self._raw[shape] = _RawUpsert.build(statement, table, self._engine.dialect, shape[1])
        raw = self._raw[shape]
        if raw is None:
            conn.execute(statement, rows)
        else:
            raw.execute(conn, rows)

    def _guard(self, operation: str) -> AbstractContextManager[None]:
        return guard(operation, self._retry_after)


@contextmanager
def guard(operation: str, retry_after: float) -> Iterator[None]:
    """Turn "database unreachable" errors raised inside the block into :class:`StoreUnavailableError`.

    Other database errors propagate unchanged (they are bugs, not outages).
    """
    try:
        yield
    except sa_exc.DBAPIError as exc:
        if not _is_unavailable(exc):
            raise
        reason = _first_line(exc.orig or exc)
        log.warning("store_unavailable", operation=operation, error=reason)
        raise StoreUnavailableError(retry_after, f"database unavailable: {reason}") from exc
    except sa_exc.TimeoutError as exc:
        log.warning("store_unavailable", operation=operation, error="connection pool timeout")
        raise StoreUnavailableError(retry_after, "database connection pool exhausted") from exc


MANUAL_REASON = "manual"
"""The flag reason of a run a reviewer or admin sent to review by hand."""

_MANUAL_FIELDS = (
    "trace_id", "agent", "service", "dialect", "status", "complete", "start_ns", "end_ns", "duration_s", "llm_calls",
    "tool_calls", "tool_errors", "input_tokens", "output_tokens", "hit_max_iterations", "safety_blocked", "errored",
    "error_type",
)  # fmt: skip


def _manual_snapshot(row: sa.RowMapping) -> dict[str, Any]:
    """The snapshot of a run sent to review by hand: its stored summary (the page reads its details document)."""
    return partial_snapshot(row, _MANUAL_FIELDS, evidence=list(row["evidence"] or []))


def write_transaction(conn: sa.Connection) -> sa.RootTransaction:
    """Begin a write transaction on ``conn``: ``BEGIN IMMEDIATE`` on SQLite (takes the write lock up front)."""
    conn.execution_options(**{_SQLITE_BEGIN: "BEGIN IMMEDIATE"})
    return conn.begin()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]


def _is_unavailable(exc: sa_exc.DBAPIError) -> bool:
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return False
    # SQLite reports a missing table as OperationalError; that is a deployment bug, not an outage.
    return "no such table" not in str(exc.orig) and "no such column" not in str(exc.orig)


def _by_trace_id(row: dict[str, Any]) -> str:
    return str(row["trace_id"])


def _by_session_id(row: dict[str, Any]) -> str:
    return str(row["session_id"])


def _by_ids_query(dialect: str, *columns: sa.ColumnElement[Any], with_items: bool = False) -> sa.Select[Any]:
    """Build "``columns`` of each run in :ids" (review items outer-joined when ``with_items``)."""
    item_join = review_items.c.trace_id == runs.c.trace_id
    if dialect != "postgresql":
        source: sa.FromClause = runs.outerjoin(review_items, item_join) if with_items else runs
        return sa.select(*columns).select_from(source).where(runs.c.trace_id.in_(sa.bindparam("ids", expanding=True)))
    # Join an unnest()ed array rather than IN (...): psycopg prepares repeated statements, and
    # PostgreSQL's generic plan for a long IN list of parameters is a quadratic sequential scan.
    id_array = sa.bindparam("ids", type_=postgresql.ARRAY(sa.String))
    ids = sa.func.unnest(id_array).table_valued("trace_id").render_derived(name="ids")
    source = ids.join(runs, runs.c.trace_id == ids.c.trace_id)
    if with_items:
        source = source.outerjoin(review_items, item_join)
    return sa.select(*columns).select_from(source)


def _rows_by_ids(conn: sa.Connection, query: sa.Select[Any], trace_ids: list[str]) -> Iterator[Any]:
    """The rows of a :func:`_by_ids_query` for ``trace_ids``, in chunks of :data:`_IN_CHUNK` ids."""
    for start in range(0, len(trace_ids), _IN_CHUNK):
        yield from conn.execute(query, {"ids": trace_ids[start : start + _IN_CHUNK]})


def _rounds(batch: Sequence[ScoredRun]) -> list[list[tuple[int, ScoredRun]]]:
    """Split a batch so that no round holds a trace id twice (an upsert touches a row once)."""
    rounds: list[list[tuple[int, ScoredRun]]] = []
    seen: dict[str, int] = {}
    for position, scored in enumerate(batch):
        index = seen.get(scored.run.trace_id, -1) + 1
        seen[scored.run.trace_id] = index
        if index == len(rounds):
            rounds.append([])
        rounds[index].append((position, scored))
    return rounds


class _RawUpsert:
    """An upsert compiled once to driver SQL, executed without per-row SQLAlchemy processing.

    SQLAlchemy's executemany converts every row through its bind processors (~10 µs a run
    row). The only conversion that matters here is JSON encoding (booleans, numbers, text
    and NULL go through both drivers unchanged), so rows are turned into tuples here: JSON
    columns encoded with :func:`_dumps` (``None`` becomes ``'null'``, as SQLAlchemy's JSON
    type stores it), constants of the statement (``version + 1``) appended. One
    ``executemany`` of the single-row statement runs them:

    * SQLite: through SQLAlchemy's driver connection (``exec_driver_sql``).
    * PostgreSQL (psycopg 3): on a raw cursor with PostgreSQL's own ``$n`` placeholders
      (psycopg then skips its per-statement ``%s`` conversion), pipelined and prepared by
      psycopg; the JSON text goes in with psycopg's "unknown" type, which PostgreSQL casts
      to JSONB. Same connection, same transaction. (Multi-row ``VALUES`` statements were
      tried: less client CPU, but PostgreSQL planned each 500-row statement afresh and
      spent ~55 µs more per run than on the prepared single-row one.)
    """

    __slots__ = ("constants", "json_columns", "pick", "raw_cursor", "sql")

    def __init__(
        self,
        sql: str,
        columns: Sequence[str],
        json_columns: Sequence[str],
        constants: tuple[Any, ...],
        *,
        raw_cursor: bool = False,
    ):
        self.sql = _numbered(sql) if raw_cursor else sql
        self.pick = itemgetter(*columns)
        self.json_columns = tuple(json_columns)
        self.constants = constants
        self.raw_cursor = raw_cursor

    @classmethod
    def build(
        cls, statement: sa.Executable, table: sa.Table, dialect: sa.Dialect, keys: Sequence[str]
    ) -> _RawUpsert | None:
        """The raw form of ``statement`` for rows with ``keys``; ``None`` for other dialects or shapes."""
        raw_cursor = dialect.name == "postgresql" and dialect.driver == "psycopg"
        if raw_cursor:
            from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

            dialect = PGDialect_psycopg(paramstyle="format")  # type: ignore[no-untyped-call]  # positional %s
        elif dialect.name != "sqlite":
            return None
        compiled = statement.compile(dialect=dialect, column_keys=list(keys))  # type: ignore[attr-defined]
        names: list[str] = list(compiled.positiontup or ())
        columns = [name for name in names if name in table.c]
        extra = names[len(columns) :]
        if not columns or names[: len(columns)] != columns or any(name in table.c for name in extra):
            return None  # binds are not "every column, then constants": let SQLAlchemy handle it
        json_columns = [name for name in columns if isinstance(table.c[name].type, sa.JSON)]
        constants = tuple(compiled.params[name] for name in extra)
        return cls(str(compiled), columns, json_columns, constants, raw_cursor=raw_cursor)

    def parameters(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """Driver parameters of ``rows`` (the row dicts' JSON values are replaced by their text)."""
        out = []
        for row in rows:
            for name in self.json_columns:
                row[name] = _dumps(row[name])
            out.append((*self.pick(row), *self.constants))
        return out

    def execute(self, conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
        """Upsert ``rows`` with one executemany."""
        if not self.raw_cursor:
            conn.exec_driver_sql(self.sql, self.parameters(rows))
            return
        import psycopg

        driver = conn.connection.driver_connection
        if not isinstance(driver, psycopg.Connection):
            raise TypeError(f"PostgreSQL store needs psycopg 3, got {type(driver).__name__}")
        with psycopg.RawCursor(driver) as cursor:
            cursor.executemany(self.sql, self.parameters(rows))


def _numbered(sql: str) -> str:
    """``%s`` placeholders of a ``format``-style statement as PostgreSQL's ``$1…$n`` (``%%`` → ``%``)."""
    pieces = sql.split("%s")
    out = [pieces[0].replace("%%", "%")]
    for number, piece in enumerate(pieces[1:], start=1):
        out.append(f"${number}")
        out.append(piece.replace("%%", "%"))
    return "".join(out)


def _upserts(dialect: str) -> tuple[sa.Executable, sa.Executable]:
    """Build the run and item upsert statements of a dialect once.

    A re-score from fewer spans than the stored one keeps every stored column (``CASE``
    per column rather than a ``WHERE`` on the conflict, so ``version`` still grows and
    "version 1 = inserted by this transaction" stays exact): after a crash or rebalance the
    new owner of a partition re-reads from the committed offset, which may lie past the
    first records of a run already written, and re-assembles that run from its tail only.
    """
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    run_insert = insert(runs)
    new = run_insert.excluded
    newer = runs.c.span_count <= new.span_count
    sticky = ("flag_priority", "flag_reasons", "sample_rate")
    fixed = {"trace_id", "created_at", "version", "flagged", "flag_added", *sticky, *DESIGN_COLUMNS}
    run_set: dict[str, Any] = {c.name: sa.case((newer, new[c.name]), else_=c) for c in runs.c if c.name not in fixed}
    for name in DESIGN_COLUMNS:  # the first decision's, for good (a late flag never moves a run between strata)
        run_set[name] = sa.func.coalesce(runs.c[name], new[name])
    run_set["version"] = runs.c.version + 1
    run_set["flagged"] = sa.or_(runs.c.flagged, sa.and_(newer, new.flagged))
    for name in sticky:
        run_set[name] = sa.case((sa.and_(newer, new.flagged), new[name]), else_=runs.c[name])
    item_insert = insert(review_items)
    item_new = item_insert.excluded
    item_newer = review_items.c.span_count <= item_new.span_count
    item_cols = ("priority", "priority_rank", "reasons", "sample_rate", "snapshot", "updated_at", "span_count")
    item_set: dict[str, Any] = {
        name: sa.case((item_newer, item_new[name]), else_=review_items.c[name]) for name in item_cols
    }
    item_set["version"] = review_items.c.version + 1
    return (
        run_insert.on_conflict_do_update(index_elements=[runs.c.trace_id], set_=run_set),
        item_insert.on_conflict_do_update(index_elements=[review_items.c.trace_id], set_=item_set),
    )


def _details_upsert(dialect: str) -> sa.Executable:
    """The ``run_details`` upsert: a row built from fewer spans than the stored one changes nothing.

    Built once and run through :class:`_RawUpsert` like the run and item upserts (SQLAlchemy's
    per-row bind processing of the ~10 KB bodies was most of the write's client CPU).
    """
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(run_details)
    return stmt.on_conflict_do_update(
        index_elements=[run_details.c.trace_id],
        set_={
            name: stmt.excluded[name]
            for name in ("span_count", "codec", "body", "created_at", "final_output", "user_message")
        },
        where=run_details.c.span_count <= stmt.excluded.span_count,
    )


def _upgrade(engine: Engine, retry_after: float) -> None:
    try:
        with engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_ADVISORY_LOCK_ID)))
            if schema_revision(conn) == HEAD_REVISION:
                log.info("database_current", backend=engine.dialect.name, revision=HEAD_REVISION)
                return
            from alembic import command  # only to migrate: ~10 MB resident for the process's lifetime
            from alembic.config import Config

            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    except (sa_exc.OperationalError, sa_exc.InterfaceError) as exc:
        raise StoreUnavailableError(retry_after, f"cannot migrate: {_first_line(exc.orig or exc)}") from exc
    log.info("database_upgraded", backend=engine.dialect.name)


def schema_revision(conn: sa.Connection) -> str | None:
    """The schema revision Alembic recorded in the database (``None``: never migrated)."""
    if not sa.inspect(conn).has_table("alembic_version"):
        return None
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    # Let the "begin" event issue BEGIN itself: pysqlite's implicit BEGIN skips SELECTs, and a
    # write must take the lock up front (BEGIN IMMEDIATE) so that busy_timeout applies.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def _sqlite_on_begin(conn: sa.Connection) -> None:
    conn.exec_driver_sql(conn.get_execution_options().get(_SQLITE_BEGIN, "BEGIN"))


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _dumps(value: Any) -> str:
    """Compact UTF-8 JSON text of a column value.

    orjson first (a flagged run's snapshot encodes ~8x faster); the standard library for
    what orjson refuses (integers beyond 64 bits, lone surrogates, non-string keys).
    Non-finite floats never reach here (see :mod:`review_queue.snapshot`).
    """
    try:
        text = orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = _JSON.encode(value)
    if "\\u0000" in text:  # PostgreSQL JSONB cannot hold NUL: replace it (rare, so checked after)
        text = _JSON.encode(_without_nul(value))
    return text


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value
