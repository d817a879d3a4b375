"""Composition of ``vigil run``: every role in one process on the embedded stream.

Receivers (OTLP/HTTP, OTLP/gRPC) → bounded in-process stream → stream worker (assemble, normalise,
score, decide) → store (SQLite by default) → REST API, and Prometheus ``/metrics`` on
its own port. SIGTERM/SIGINT stop the receivers first, then the worker drains every
record and in-flight run into the store, then the API stops.

On SIGTERM every run whose root span ended is scored and written; runs still waiting for
their root are saved to ``VIGIL_STATE_PATH`` (:mod:`scorers.state`) and resumed by the next
start, which loads the file only once its own signal handlers are in place. Requests refused
while stopping get 503 or a closed connection, and the sender's retry delivers them to the next
process. A SIGKILL or a crash: every accepted body is in the write-ahead spool
(``VIGIL_SPOOL_PATH``, :mod:`collector.spool`) until the runs it fed are written, and the next
start replays what is left. Stop budget: :func:`vigil.roles.stop_budget_s`.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TextIO

import structlog
from prometheus_client import CollectorRegistry

from collector.budget import MemoryMetrics, Pressure
from collector.errors import DecodeError
from collector.grpc_receiver import create_grpc_server
from collector.lifecycle import Closing, Component, Components, Hooks, Periodic, Together
from collector.limits import IntakeBudget, LimitedPublisher, MemoryLimiter, intake_budget_bytes
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.otlp import decode_json, decode_protobuf
from collector.owed import OwedMetrics, OwedPublisher, OwedSpans
from collector.receiver import create_otlp_app
from collector.spool import Spool, SpoolingPublisher, SpoolMetrics, stamp
from collector.stream import InProcessStream, Publisher
from review_queue import listing
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.errors import StoreUnavailableError
from review_queue.maintenance import Maintenance
from review_queue.model import FeedbackIn
from review_queue.retention import Retention, deletion_counter
from review_queue.services import ReviewServices
from review_queue.store import SqlStore, guard, upgrade_database
from scorers.acks import AckTracker
from scorers.judge import AgreementCollector, JudgeService
from scorers.metrics import RunMetrics
from scorers.model import ScoredRun
from scorers.sampling import ReviewBudget
from scorers.state import load_state, save_state
from scorers.worker import StreamWorker
from vigil.components import (
    GRPC_STOP_GRACE_S,
    GrpcServer,
    HttpServer,
    StopSignal,
    probe_server,
    serve_until_signal,
)
from vigil.connections import HttpMetrics
from vigil.exposure import refuse_open_api, warn_open_ingest
from vigil.scoring import (
    Scoring,
    details_writer,
    open_store,
    review_services,
    session_closer,
    store_sink,
    then,
)
from vigil.settings import Settings

log = structlog.get_logger(__name__)


@dataclass
class Embedded:
    """Every component of ``vigil run``, wired but not started."""

    settings: Settings
    registry: CollectorRegistry
    stream: InProcessStream
    collector_metrics: CollectorMetrics
    store: SqlStore
    worker: StreamWorker
    run_metrics: RunMetrics
    services: ReviewServices
    judges: JudgeService | None = None
    agreement: AgreementCollector | None = None
    spool: Spool | None = None
    details: DetailsWriter | None = None
    intake: IntakeBudget | None = None
    owed: OwedSpans | None = None
    budget: ReviewBudget | None = None


JUDGE_DRAIN_S = 10.0
"""Seconds queued judge requests get to finish when ``vigil run`` stops (the rest are counted as dropped)."""

DRAIN_TIMEOUT_S = 30.0
"""Seconds a stopping role gets for its drain once its receivers are closed: ``vigil run``
scores and writes (or saves) what it accepted, ``vigil collector`` flushes its producer,
``vigil scorer`` writes what is closed and commits. See :func:`vigil.roles.stop_budget_s`."""

UPKEEP_STOP_S = 5.0
"""Seconds each background upkeep thread (lease expiry, retention) gets to stop."""

GC_THRESHOLDS = (100_000, 50, 1000)
"""Generation-0 threshold raised from 700: the pipeline allocates many short-lived objects
per run, and the default makes the collector run (and walk the live heap) thousands of
times a second. Measured +30–50 % pipeline throughput (see BENCHMARKS.md)."""


YOUNG_GC_INTERVAL_S = 10.0
"""How often :class:`YoungCollector` collects generations 0 and 1 (in ``vigil run`` and ``vigil scorer``)."""


MMAP_THRESHOLD_BYTES = 1 << 20
"""Blocks of this size or more are mapped on their own and given back to the system when freed."""

_M_MMAP_THRESHOLD = -3  # glibc <malloc.h>


SWITCH_INTERVAL_S = 0.001
"""How long a thread holding the GIL runs before a waiting one may take it (CPython's default: 5 ms).
The scoring and details threads are busy for long stretches under load, and the event loop that
answers OTLP requests waits for the GIL several times a request: at 1 ms the heavy workload's bodies
are answered about a third sooner for the same CPU (BENCHMARKS.md, "heavy-content row")."""


def tune_gc() -> None:
    """Freeze start-up objects out of the collector's way and raise its thresholds; fix the C
    allocator's mmap threshold (:func:`tune_malloc`); shorten the GIL's switch interval
    (:data:`SWITCH_INTERVAL_S`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    tune_malloc()
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def tune_malloc() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD_BYTES`; False where there is no ``mallopt``.

    By default glibc raises the threshold to the size of any mapped block that is freed (up to
    32 MiB), so after the first large request body is freed, later bodies, their inflated copies
    and gRPC's message buffers come from the heaps of the threads that touch them, and freed
    space there is kept (one heap per thread, up to eight per core) rather than returned: resident
    memory then stays hundreds of MiB above what is live, and a burst of large bodies peaks
    higher. A fixed threshold turns the adjustment off (``mallopt(3)``). An operator's own
    ``MALLOC_MMAP_THRESHOLD_`` in the environment is left as it is (returns False).
    """
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def trim_malloc() -> bool:
    """Give the C allocator's free pages back to the system (glibc ``malloc_trim(0)``); False where
    there is none.

    The decoded spans' large strings (captured messages, tool results) come from the C heaps of
    the threads that decode them and are freed by the worker a few seconds later, interleaved
    with longer-lived ones (the late-span cache): the heaps' free space grew by ~30 MiB over a
    20,000-run flood and stayed resident. Trimming every :data:`YOUNG_GC_INTERVAL_S` releases the
    free pages inside the heaps as well as at their tops (2–100 ms on a 130 MiB heap, measured;
    BENCHMARKS.md, "issue 25: where the resident memory goes").
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class YoungCollector:
    """Collects the young generations every ``interval_s`` on a daemon thread.

    With :data:`GC_THRESHOLDS` a generation-0 collection comes only every 100,000 net container
    allocations. Each store write leaves a few hundred objects in reference cycles (SQLAlchemy
    statement objects), so at a modest rate (100 runs/s) garbage piled up for ~9 minutes
    between collections and resident memory rose by its high-water mark (obmalloc keeps the
    arenas). A young collection every few seconds walks only the container objects allocated
    since the last one (never more than the 100,000 of the threshold) and keeps the heap flat
    (BENCHMARKS.md, "overload at 10× and memory").

    Args:
        interval_s: seconds between collections.
        collect: the collection function (``gc.collect``; injected in tests).
    """

    def __init__(
        self,
        interval_s: float = YOUNG_GC_INTERVAL_S,
        collect: Callable[[int], int] = gc.collect,
        trim: Callable[[], object] | None = None,
    ) -> None:
        self._collect = collect
        self._trim = trim_malloc if trim is None else trim
        self._periodic = Periodic("vigil-young-gc", self._tick, interval_s, event="young_gc_failed")

    def _tick(self) -> None:
        self._collect(1)
        self._trim()

    def start(self) -> None:
        """Start collecting (idempotent)."""
        self._periodic.start()

    def shutdown(self, timeout: float) -> bool:
        """Stop collecting; True when the thread ended within ``timeout``."""
        return self._periodic.shutdown(timeout)


def build(
    settings: Settings,
    registry: CollectorRegistry | None = None,
    *,
    on_written: Callable[[Sequence[ScoredRun]], None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Embedded:
    """Wire the embedded pipeline. Raises the packages' errors on bad configuration.

    Args:
        settings: the process settings.
        registry: the Prometheus registry (a fresh one by default).
        on_written: called with each batch of runs once durably written (benchmarks, demo).
        environ: where the judges' ``api_key_env`` variables are read (default ``os.environ``).
    """
    registry = registry or CollectorRegistry()
    scoring = Scoring.from_settings(settings, environ)
    collector_metrics = CollectorMetrics(registry)
    budgets = settings.memory_budgets()
    pressure = Pressure()  # raised by the assembler when its runs in flight stay over their caps: the stream refuses
    stream = InProcessStream(
        settings.queue_max_batches,
        settings.retry_after_s,
        collector_metrics,
        max_bytes=budgets.stream,
        pressure=pressure,
    )
    upgrade_database(settings.database_url)
    store = open_store(settings)
    run_metrics = scoring.run_metrics(registry)
    owed = OwedSpans(metrics=OwedMetrics(registry))  # refused spans whose runs the assembler keeps
    assembler = scoring.assembler(run_metrics, pressure, owed)
    judges, agreement = scoring.judging(store, registry, run_metrics)
    if judges is not None:
        on_written = then(judges.submit, on_written)
    budget = scoring.budget(store)
    pipeline = scoring.pipeline(run_metrics, judges, budget)
    details = details_writer(settings, store, registry, scoring.redactor)
    on_written = then(details.submit, on_written)  # after the commit, on the writer's own thread
    sink = store_sink(settings, store, registry, scoring.redactor)
    services = review_services(
        settings, store, registry, scoring.rules, redact=scoring.redactor.text, run_metrics=run_metrics
    )
    spool = _spool(settings, store, registry)
    worker = StreamWorker(
        stream,
        assembler,
        pipeline,
        sink,
        run_metrics,
        on_written=on_written,
        feedback=services.feedback.summaries,
        acks=None if spool is None else AckTracker(spool.ack),
    )
    intake = IntakeBudget(budgets.intake)  # the receivers' admission (run_components)
    memory = MemoryMetrics(registry)
    memory.budgets(budgets)
    memory.held.labels("intake").set_function(lambda: float(intake.reserved))
    memory.bind("stream", stream.account)
    memory.bind("inflight", assembler.inflight_account)
    memory.bind("late", assembler.closed_account)
    memory.bind("details", details.account)
    if judges is not None:
        memory.bind("judge", judges.account)
    if spool is not None:
        memory.bind("spool", spool.account)
    return Embedded(
        settings,
        registry,
        stream,
        collector_metrics,
        store,
        worker,
        run_metrics,
        services,
        judges,
        agreement,
        spool,
        details,
        intake,
        owed,
        budget,
    )


BUDGET_REFRESH_S = 60.0
"""Seconds between two computations of a review budget's rates from the stored traffic."""


def _spool(settings: Settings, store: SqlStore, registry: CollectorRegistry) -> Spool | None:
    """The write-ahead spool (not opened yet: :func:`replay_spool` does), or None when ``spool_path`` is empty."""
    if not settings.spool_path:
        return None
    return spool_from_settings(settings, registry, before_delete=partial(durable_store, store))


def spool_from_settings(
    settings: Settings, registry: CollectorRegistry, before_delete: Callable[[], None] | None = None
) -> Spool:
    """A spool at ``spool_path`` with the settings' fsync policy, disk budget and memory budget (not opened)."""
    return Spool(
        settings.spool_path,
        fsync=settings.spool_fsync,
        max_bytes=settings.spool_max_mb * 1024 * 1024,
        interval_s=settings.spool_fsync_interval_ms / 1000,
        retry_after_s=settings.retry_after_s,
        metrics=SpoolMetrics(registry),
        before_delete=before_delete,
        memory_bytes=settings.memory_budgets().spool,
    )


def durable_store(store: SqlStore) -> None:
    """Make every committed store write survive a power loss before spool segments are deleted.

    SQLite runs in WAL mode with ``synchronous=NORMAL``: a commit reaches the WAL file but is
    fsynced only at a checkpoint, so a passive checkpoint (which fsyncs the WAL first) is run.
    PostgreSQL commits are durable already (``synchronous_commit`` on by default).
    """
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA wal_checkpoint(PASSIVE)")


async def serve(
    emb: Embedded,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    *,
    demo_rate: float | None = None,
    demo_seed: int | None = None,
) -> bool:
    """Run every role until SIGTERM/SIGINT, then drain. Returns True when the drain completed.

    With ``demo_rate`` the demo fleet (:mod:`collector.demo.fleet`) also runs, on a thread, sending
    that many runs per second to the OTLP/HTTP receiver; it is stopped and flushed first. It plays
    ``demo_seed``, or (None) a fresh seed no earlier start on this database played (:func:`demo_seed_for`).
    """
    stop = StopSignal()  # before the state is loaded: from here on a SIGTERM saves it again
    components, servers = await run_components(emb, drain_timeout_s, demo_rate, demo_seed)
    s = emb.settings
    started = {
        "otlp_http": s.otlp_http_port,
        "otlp_grpc": s.otlp_grpc_port or None,
        "api": s.http_port,
        "metrics": s.metrics_port,
        "database": _redact(s.database_url),
    }
    banner = start_banner(s)
    progress = asyncio.create_task(show_progress(emb, stop.event))
    try:
        await serve_until_signal(
            "vigil", components, servers, started, stop=stop, on_started=lambda: print(banner, flush=True)
        )
    finally:
        progress.cancel()
    drained = components.clean.get("worker", False)
    # What this process counted in vigil_runs_total / vigil_flagged_runs_total (gone with it):
    # after a restart, the next process counts only runs new to the index.
    log.info("vigil_stopped", drained=drained, new_runs=emb.worker.new_runs, new_flags=emb.worker.new_flags)
    return drained


PROGRESS_S = 60.0
"""How often ``vigil run`` prints its progress line, when its stdout is a terminal a person watches."""


def progress_line(now: float, scored: int, flagged: int, pending: int | None) -> str:
    """``vigil run``'s periodic line: the runs this process scored and flagged, and the queue's pending items."""
    queue = "queue unavailable" if pending is None else f"{pending:,} pending review"
    clock = time.strftime("%H:%M:%S", time.localtime(now))
    return f"{clock} · {scored:,} runs scored · {flagged:,} flagged (since start) · {queue}"


async def show_progress(
    emb: Embedded, stop: asyncio.Event, every_s: float = PROGRESS_S, out: TextIO | None = None
) -> None:
    """Print :func:`progress_line` every ``every_s`` until ``stop``, when ``out`` (stdout) is a terminal:
    a log collector reading stdout gets the start line only, and the JSON log on stderr either way."""
    out = out or sys.stdout
    if not out.isatty():
        return
    while True:
        try:
            await asyncio.wait_for(stop.wait(), every_s)
            return
        except TimeoutError:
            pass
        pending = await asyncio.to_thread(_pending, emb.store)
        print(progress_line(time.time(), emb.worker.new_runs, emb.worker.new_flags, pending), file=out, flush=True)


def _pending(store: SqlStore) -> int | None:
    try:
        with guard("progress", store.retry_after_s), store.engine.connect() as conn:
            return listing.item_counts(conn, listing.ItemFilter())["pending"]
    except StoreUnavailableError:
        return None


def _browsable(host: str) -> str:
    """A host a browser on this machine can open: a wildcard listen address reads as loopback."""
    if host in ("", "0.0.0.0", "::", "[::]"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def start_banner(s: Settings) -> str:
    """The line ``vigil run`` prints on stdout once it serves (the JSON log stays on stderr): where the
    reviewer UI, the OTLP receivers and the metrics are, and where the UI's token comes from."""
    ui = f"http://{_browsable(s.bind_host('http'))}:{s.http_port}/"
    otlp = f"http://{_browsable(s.bind_host('otlp_http'))}:{s.otlp_http_port}"
    grpc = f" (gRPC {_browsable(s.bind_host('otlp_grpc'))}:{s.otlp_grpc_port})" if s.otlp_grpc_port else ""
    metrics = f"http://{_browsable(s.bind_host('metrics'))}:{s.metrics_port}/metrics"
    token = (
        "log in with VIGIL_ADMIN_TOKEN"
        if s.admin_token is not None
        else "log in with a token from `vigil tokens create --role admin`, or an empty one while none exists"
    )
    return (
        f"Vigil is running. Reviewer UI and API: {ui} ({token}) · OTLP: {otlp}{grpc} · metrics: {metrics} · "
        f"store: {_redact(s.database_url)} · Ctrl-C stops it."
    )


DEMO_STOP_S = 10.0
"""Seconds the demo fleet gets to finish its runs and flush when ``vigil run --demo`` stops."""


async def run_components(
    emb: Embedded,
    drain_timeout_s: float = DRAIN_TIMEOUT_S,
    demo_rate: float | None = None,
    demo_seed: int | None = None,
) -> tuple[Components, list[HttpServer]]:
    """The components of ``vigil run`` in start order (they stop in reverse), and its HTTP servers.

    Stop order: the demo fleet (its last spans must reach the receiver), the receivers (HTTP and
    gRPC together), the stream worker's drain (and the state file), the judges (the worker's last
    batches were submitted to them), the upkeep threads, the API and probe servers, the store.
    """
    s = emb.settings
    loop = asyncio.get_running_loop()
    token = s.admin_token.get_secret_value() if s.admin_token else None
    ingest = s.ingest_token.get_secret_value() if s.ingest_token else None
    # Stored ingest/admin tokens are accepted on OTLP whenever ingest is authenticated.
    token_check = emb.services.access.auth.ingest_allowed if (s.ingest_auth or ingest) else None
    refuse_open_api(s, emb.services.access.auth.open())
    warn_open_ingest(s, token_check is not None)
    limiter = MemoryLimiter(s.memory_limit_mb * 1024 * 1024)
    intake = emb.intake or IntakeBudget(intake_budget_bytes(limiter.limit_bytes))
    emb.collector_metrics.bind_intake(lambda: intake.reserved, intake.budget_bytes)
    publisher: Publisher = LimitedPublisher(emb.stream, limiter, s.retry_after_s, emb.collector_metrics)
    if emb.spool is not None:
        publisher = SpoolingPublisher(publisher, emb.spool)
    if emb.owed is not None:  # a body refused once decoded: its spans are recorded, their runs kept
        publisher = OwedPublisher(publisher, emb.owed)
    otlp_app = create_otlp_app(
        publisher,
        emb.collector_metrics,
        max_body_bytes=s.max_body_bytes,
        retry_after_s=s.retry_after_s,
        ingest_token=ingest,
        token_check=token_check,
        intake=intake,
    )
    limits, http_metrics = s.connection_limits(), HttpMetrics(emb.registry)
    receiver = HttpServer(
        otlp_app, s.bind_host("otlp_http"), s.otlp_http_port, loop, listener="otlp_http", limits=limits,
        metrics=http_metrics,
    )  # fmt: skip
    api_app = create_api_app(
        emb.store,
        admin_token=token,
        ready=lambda: emb.worker.healthy and receiver.server.started,  # ready once spans can come in
        judge_agreement=None if emb.agreement is None else emb.agreement.current,
        services=emb.services,
        self_telemetry=s.self_telemetry,
    )
    api = HttpServer(
        api_app, s.bind_host("http"), s.http_port, loop, listener="api", limits=limits, metrics=http_metrics
    )
    metrics = probe_server(
        s.bind_host("metrics"),
        s.metrics_port,
        emb.registry,
        lambda: {"worker": emb.worker.healthy, "otlp_http": receiver.server.started},
        limits=limits, metrics=http_metrics,
    )  # fmt: skip
    receivers: list[Component] = [receiver]
    if s.otlp_grpc_port:  # 0 disables the gRPC receiver
        grpc_server = await create_grpc_server(
            publisher,
            emb.collector_metrics,
            host=s.bind_host("otlp_grpc"),
            port=s.otlp_grpc_port,
            max_message_bytes=s.max_body_bytes,
            retry_after_s=s.retry_after_s,
            ingest_token=ingest,
            token_check=token_check,
            handshake_timeout_s=s.http_header_timeout_s,
            intake=intake,
        )
        receivers.append(GrpcServer(grpc_server, loop))
    retention = Retention(
        emb.store.engine,
        days=s.retention_days,
        keep_reviewed=s.retention_keep_reviewed,
        on_deleted=deletion_counter(emb.registry),
        details_days=s.details_retention_days,
    )
    c = Components()
    c.add("gc", Hooks(on_start=tune_gc))
    c.add("young_gc", YoungCollector())
    c.add("store", Closing(emb.store))
    c.add("http", Together(api, metrics), max(api.stop_budget_s, metrics.stop_budget_s))
    c.add("retention", retention, UPKEEP_STOP_S)
    if emb.budget is not None:
        refresh = Periodic("review-budget", emb.budget.refresh, BUDGET_REFRESH_S, immediately=True)
        c.add("review_budget", refresh, UPKEEP_STOP_S)
    closer = session_closer(s, emb.store, emb.registry, judge_metrics=emb.judges.metrics if emb.judges else None)
    if closer.judges is not None:  # started before the closer offers it sessions, stopped after
        c.add("session_judges", closer.judges, UPKEEP_STOP_S)
    c.add("maintenance", Maintenance(emb.services.workbench, emb.services.feedback, sessions=closer), UPKEEP_STOP_S)
    if emb.details is not None:
        c.add("details", emb.details, UPKEEP_STOP_S)
    if emb.judges is not None:
        c.add("judges", emb.judges, JUDGE_DRAIN_S)
    c.add("worker", Drain(emb.worker, s.state_path, emb.spool, s.memory_budgets().inflight), drain_timeout_s)
    c.add("receivers", Together(*receivers), max(receiver.stop_budget_s, GRPC_STOP_GRACE_S))
    if demo_rate:
        c.add("demo", _demo(emb, receiver, demo_rate, demo_seed_for(emb.store, demo_seed)), DEMO_STOP_S)
    return c, [receiver, api, metrics]


class Drain:
    """The stream worker as a component: resumes the saved state, and drains (and saves) at shutdown.

    Args:
        worker: the stream worker.
        state_path: where runs still waiting for their root are saved (:mod:`scorers.state`); None: nowhere.
        spool: the write-ahead spool, replayed at start and closed at the end of the drain.
        state_max_bytes: bound of the state file (the in-flight byte budget); 0: none.
    """

    def __init__(
        self, worker: StreamWorker, state_path: str | None, spool: Spool | None = None, state_max_bytes: int = 0
    ) -> None:
        self._worker = worker
        self._state_path = state_path
        self._spool = spool
        self._state_max = state_max_bytes

    def start(self) -> None:
        """Load the saved state (deleting the file), replay the spool, then start the worker."""
        if self._state_path:
            load_state(self._state_path, self._worker.assembler, self._worker.adopt)
        if self._spool is not None:
            replay_spool(self._spool, self._worker)
        self._worker.start()

    def shutdown(self, timeout: float) -> bool:
        """Score and write every finished run within ``timeout``; save the unfinished ones; close the spool."""
        save = partial(save_state, self._state_path, max_bytes=self._state_max) if self._state_path else None
        try:
            return self._worker.shutdown(timeout, save=save)
        finally:
            if self._spool is not None:
                self._spool.close()  # what was not written or saved stays in it for the next start


def replay_spool(spool: Spool, worker: StreamWorker) -> int:
    """Replay the spool left by the previous process through the worker, one segment at a time.

    After each segment the runs whose root span has ended are scored and written at once
    (:meth:`StreamWorker.replay`), so memory holds about one segment, not the whole spool; a
    span of such a run replayed later re-scores it (late spans). A body that no longer decodes
    (it did when it was accepted) is logged and acknowledged. Returns the bodies replayed.

    Raises:
        SpoolError: the spool directory is in use by another process or cannot be created.
    """
    replayed = 0
    for segment in spool.open():
        batches: list[TraceBatch] = []
        for record in segment:
            replayed += 1
            try:
                decoded = decode_json(record.body) if record.encoding == "json" else decode_protobuf(record.body)
            except DecodeError as exc:
                log.error("spool_record_undecodable", seq=record.seq, error=str(exc))
                spool.ack(record.seq)
                continue
            if not decoded.batches:
                spool.ack(record.seq)
                continue
            batches.extend(stamp(decoded.batches, record.seq))
        worker.replay(batches)
    return replayed


def demo_seed_for(store: SqlStore, seed: int | None) -> int:
    """The demo fleet's seed: ``seed`` when given (``--demo-seed``: the same runs every start), else a fresh
    one whose session ids (:func:`collector.demo.plan.session_prefix`) no run in ``store`` has, so a restart
    on the same database starts new sessions instead of adding turns to an earlier start's."""
    from collector.demo.plan import fresh_seed, session_prefix

    if seed is not None:
        return seed
    return fresh_seed(lambda drawn: store.has_session_prefix(session_prefix(drawn)))


def _demo(emb: Embedded, receiver: HttpServer, rate: float, seed: int) -> Component:
    """The demo fleet playing ``seed``, started once the OTLP/HTTP receiver listens.

    Its users' thumbs-down go straight to the feedback store (as ``POST /api/v1/feedback`` would).
    """
    from collector.demo.fleet import DemoFleet  # only `vigil run --demo` pays for openai and the helpers

    s = emb.settings
    bound = s.bind_host("otlp_http")
    host = "127.0.0.1" if bound in ("0.0.0.0", "::", "") else bound
    token = {"Authorization": f"Bearer {s.ingest_token.get_secret_value()}"} if s.ingest_token else None
    fleet = DemoFleet(
        f"http://{host}:{s.otlp_http_port}",
        rate_per_s=rate,
        seed=seed,
        progress=False,
        headers=token,
        on_feedback=partial(_demo_feedback, emb.services),
    )

    def start() -> None:
        if receiver.wait_listening():
            fleet.start()

    return Hooks(on_start=start, on_shutdown=fleet.shutdown)


def _demo_feedback(services: ReviewServices, trace_id: str, feedback: str) -> None:
    score = 0.0 if feedback == "thumbs_down" else 1.0
    services.feedback.record(FeedbackIn(trace_id, "thumbs", score, "demo user", "demo", f"demo-{trace_id}"))


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
