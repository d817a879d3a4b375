"""Composition of ``vigil run``: every role in one process on the embedded stream.

Receivers (OTLP/HTTP, OTLP/gRPC) → bounded in-process stream → stream worker (assemble, normalise,
score, decide) → store (SQLite by default) → REST API, and Prometheus ``/metrics`` on
its own port. SIGTERM/SIGINT stop the receivers first, then the worker drains every
record and in-flight run into the store, then the API stops.

On SIGTERM every run whose root span ended is scored and written; runs still waiting for
their root are saved to ``VIGIL_STATE_PATH`` (:mod:`scorers.state`) and resumed by the next
start, which loads the file only once its own signal handlers are in place. Requests refused
while stopping get 503 or a closed connection, and the sender's retry delivers them to the next
process. A SIGKILL or a crash loses what was accepted and not yet written; the Kafka
deployment re-delivers instead. Stop budget: :func:`review_queue.app.roles.stop_budget_s`.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

import structlog
from prometheus_client import CollectorRegistry

from collector.grpc_receiver import create_grpc_server
from collector.lifecycle import Closing, Component, Components, Hooks, Together
from collector.limits import LimitedPublisher, MemoryLimiter
from collector.metrics import CollectorMetrics
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from review_queue.api import create_api_app
from review_queue.app.components import (
    GRPC_STOP_GRACE_S,
    GrpcServer,
    HttpServer,
    StopSignal,
    probe_server,
    serve_until_signal,
)
from review_queue.app.connections import HttpMetrics
from review_queue.app.scoring import Scoring, review_services, store_sink, then
from review_queue.app.settings import Settings
from review_queue.maintenance import Maintenance
from review_queue.model import FeedbackIn
from review_queue.retention import Retention, deletion_counter
from review_queue.services import ReviewServices
from review_queue.store import SqlStore, upgrade_database
from scorers.judge import AgreementCollector, JudgeService
from scorers.metrics import RunMetrics
from scorers.model import ScoredRun
from scorers.state import load_state, save_state
from scorers.worker import StreamWorker

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


JUDGE_DRAIN_S = 10.0
"""Seconds queued judge requests get to finish when ``vigil run`` stops (the rest are counted as dropped)."""

DRAIN_TIMEOUT_S = 30.0
"""Seconds a stopping role gets for its drain once its receivers are closed: ``vigil run``
scores and writes (or saves) what it accepted, ``vigil collector`` flushes its producer,
``vigil scorer`` writes what is closed and commits. See :func:`review_queue.app.roles.stop_budget_s`."""

UPKEEP_STOP_S = 5.0
"""Seconds each background upkeep thread (lease expiry, retention) gets to stop."""

GC_THRESHOLDS = (100_000, 50, 1000)
"""Generation-0 threshold raised from 700: the pipeline allocates many short-lived objects
per run, and the default makes the collector run (and walk the live heap) thousands of
times a second. Measured +30–50 % pipeline throughput (see BENCHMARKS.md)."""


YOUNG_GC_INTERVAL_S = 10.0
"""How often :class:`YoungCollector` collects generations 0 and 1 (in ``vigil run`` and ``vigil scorer``)."""


def tune_gc() -> None:
    """Freeze start-up objects out of the collector's way and raise its thresholds."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


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

    def __init__(self, interval_s: float = YOUNG_GC_INTERVAL_S, collect: Callable[[int], int] = gc.collect) -> None:
        self._interval = interval_s
        self._collect = collect
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start collecting (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="vigil-young-gc", daemon=True)
            self._thread.start()

    def shutdown(self, timeout: float) -> bool:
        """Stop collecting; True when the thread ended within ``timeout``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._collect(1)


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
    stream = InProcessStream(settings.queue_max_batches, settings.retry_after_s, collector_metrics)
    upgrade_database(settings.database_url)
    store = SqlStore(settings.database_url)
    run_metrics = scoring.run_metrics(registry)
    assembler = scoring.assembler(run_metrics)
    judges, agreement = scoring.judging(store, registry, run_metrics)
    if judges is not None:
        on_written = then(judges.submit, on_written)
    pipeline = scoring.pipeline(run_metrics, judges)
    sink = store_sink(settings, store, registry, scoring.redactor)
    services = review_services(settings, store, registry, scoring.rules, redact=scoring.redactor.text)
    worker = StreamWorker(
        stream, assembler, pipeline, sink, run_metrics, on_written=on_written, feedback=services.feedback.summaries
    )
    return Embedded(
        settings, registry, stream, collector_metrics, store, worker, run_metrics, services, judges, agreement
    )


async def serve(emb: Embedded, drain_timeout_s: float = DRAIN_TIMEOUT_S, *, demo_rate: float | None = None) -> bool:
    """Run every role until SIGTERM/SIGINT, then drain. Returns True when the drain completed.

    With ``demo_rate`` the demo fleet (:mod:`collector.demo.fleet`) also runs, on a thread, sending
    that many runs per second to the OTLP/HTTP receiver; it is stopped and flushed first.
    """
    stop = StopSignal()  # before the state is loaded: from here on a SIGTERM saves it again
    components, servers = await run_components(emb, drain_timeout_s, demo_rate)
    s = emb.settings
    started = {
        "otlp_http": s.otlp_http_port,
        "otlp_grpc": s.otlp_grpc_port or None,
        "api": s.http_port,
        "metrics": s.metrics_port,
        "database": _redact(s.database_url),
    }
    await serve_until_signal("vigil", components, servers, started, stop=stop)
    drained = components.clean.get("worker", False)
    # What this process counted in vigil_runs_total / vigil_flagged_runs_total (gone with it):
    # after a restart, the next process counts only runs new to the index.
    log.info("vigil_stopped", drained=drained, new_runs=emb.worker.new_runs, new_flags=emb.worker.new_flags)
    return drained


DEMO_STOP_S = 10.0
"""Seconds the demo fleet gets to finish its runs and flush when ``vigil run --demo`` stops."""


async def run_components(
    emb: Embedded, drain_timeout_s: float = DRAIN_TIMEOUT_S, demo_rate: float | None = None
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
    limiter = MemoryLimiter(s.memory_limit_mb * 1024 * 1024)
    publisher = LimitedPublisher(emb.stream, limiter, s.retry_after_s, emb.collector_metrics)
    otlp_app = create_otlp_app(
        publisher,
        emb.collector_metrics,
        max_body_bytes=s.max_body_bytes,
        retry_after_s=s.retry_after_s,
        ingest_token=ingest,
        token_check=token_check,
    )
    limits, http_metrics = s.connection_limits(), HttpMetrics(emb.registry)
    receiver = HttpServer(
        otlp_app, s.otlp_http_host, s.otlp_http_port, loop, listener="otlp_http", limits=limits, metrics=http_metrics
    )
    api_app = create_api_app(
        emb.store,
        admin_token=token,
        ready=lambda: emb.worker.healthy and receiver.server.started,  # ready once spans can come in
        judge_agreement=None if emb.agreement is None else emb.agreement.current,
        services=emb.services,
        self_telemetry=s.self_telemetry,
    )
    api = HttpServer(api_app, s.http_host, s.http_port, loop, listener="api", limits=limits, metrics=http_metrics)
    metrics = probe_server(
        s.http_host,
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
            host=s.otlp_http_host,
            port=s.otlp_grpc_port,
            max_message_bytes=s.max_body_bytes,
            retry_after_s=s.retry_after_s,
            ingest_token=ingest,
            token_check=token_check,
            handshake_timeout_s=s.http_header_timeout_s,
        )
        receivers.append(GrpcServer(grpc_server, loop))
    retention = Retention(
        emb.store.engine,
        days=s.retention_days,
        keep_reviewed=s.retention_keep_reviewed,
        on_deleted=deletion_counter(emb.registry),
    )
    c = Components()
    c.add("gc", Hooks(on_start=tune_gc))
    c.add("young_gc", YoungCollector())
    c.add("store", Closing(emb.store))
    c.add("http", Together(api, metrics), max(api.stop_budget_s, metrics.stop_budget_s))
    c.add("retention", retention, UPKEEP_STOP_S)
    c.add("maintenance", Maintenance(emb.services.workbench, emb.services.feedback), UPKEEP_STOP_S)
    if emb.judges is not None:
        c.add("judges", emb.judges, JUDGE_DRAIN_S)
    c.add("worker", Drain(emb.worker, s.state_path), drain_timeout_s)
    c.add("receivers", Together(*receivers), max(receiver.stop_budget_s, GRPC_STOP_GRACE_S))
    if demo_rate:
        c.add("demo", _demo(emb, receiver, demo_rate), DEMO_STOP_S)
    return c, [receiver, api, metrics]


class Drain:
    """The stream worker as a component: resumes the saved state, and drains (and saves) at shutdown.

    Args:
        worker: the stream worker.
        state_path: where runs still waiting for their root are saved (:mod:`scorers.state`); None: nowhere.
    """

    def __init__(self, worker: StreamWorker, state_path: str | None) -> None:
        self._worker = worker
        self._state_path = state_path

    def start(self) -> None:
        """Load the saved state (deleting the file) into the assembler, then start the worker."""
        if self._state_path:
            load_state(self._state_path, self._worker.assembler)
        self._worker.start()

    def shutdown(self, timeout: float) -> bool:
        """Score and write every finished run within ``timeout``; save the unfinished ones."""
        save = partial(save_state, self._state_path) if self._state_path else None
        return self._worker.shutdown(timeout, save=save)


def _demo(emb: Embedded, receiver: HttpServer, rate: float) -> Component:
    """The demo fleet, started once the OTLP/HTTP receiver listens.

    Its users' thumbs-down go straight to the feedback store (as ``POST /api/v1/feedback`` would).
    """
    from collector.demo.fleet import DemoFleet  # only `vigil run --demo` pays for openai and the helpers

    s = emb.settings
    host = "127.0.0.1" if s.otlp_http_host in ("0.0.0.0", "::", "") else s.otlp_http_host
    token = {"Authorization": f"Bearer {s.ingest_token.get_secret_value()}"} if s.ingest_token else None
    fleet = DemoFleet(
        f"http://{host}:{s.otlp_http_port}",
        rate_per_s=rate,
        seed=0,
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
