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
import contextlib
import gc
import signal
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import structlog
import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector.grpc_receiver import create_grpc_server
from collector.limits import LimitedPublisher, MemoryLimiter
from collector.metrics import CollectorMetrics
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from review_queue.api import create_api_app
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

if TYPE_CHECKING:
    from collector.demo.fleet import DemoFleet

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

GRPC_STOP_GRACE_S = 2.0
"""Seconds in-flight OTLP/gRPC calls get to finish when ``vigil run`` stops."""

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

    def stop(self) -> None:
        """Stop collecting and wait for the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

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


def metrics_app(registry: CollectorRegistry, ready: Embedded) -> Starlette:
    """``/metrics`` (Prometheus and OpenMetrics with exemplars), ``/healthz``, ``/readyz``."""

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        ok = ready.worker.healthy
        return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return Starlette(
        routes=[
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )


HTTP_STOP_GRACE_S = 5.0
"""Seconds in-flight HTTP requests get to finish when a role stops. Connections still open
after it (a client stalled mid-upload) are aborted without a response: the request was not
accepted, and the sender retries it. Without this bound one stalled client kept the process
from ever exiting, until the orchestrator's SIGKILL lost everything not yet drained."""

PROBE_STOP_GRACE_S = 1.0
"""The stop grace of the ``/metrics``, ``/healthz``, ``/readyz`` servers (tiny requests)."""


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to :func:`serve` and bounds its graceful stop.

    Stopping closes the listening socket (new connections are refused) and idle keep-alive
    connections, lets requests in flight finish for ``stop_grace_s``, then aborts the
    connections still open (no response is written: no 500 for a request that was never
    accepted) and gives their handlers ``cancel_s`` to notice before cancelling them.
    """

    def __init__(self, config: uvicorn.Config, stop_grace_s: float = HTTP_STOP_GRACE_S) -> None:
        super().__init__(config)
        self.stop_grace_s = stop_grace_s
        self.cancel_s = stop_grace_s

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def _wait_tasks_to_complete(self) -> None:
        """uvicorn's wait for in-flight requests, bounded by ``stop_grace_s`` (called by ``shutdown``)."""
        wait = super()._wait_tasks_to_complete
        try:
            await asyncio.wait_for(wait(), self.stop_grace_s)
            return
        except TimeoutError:
            pass
        state = self.server_state
        log.warning("http_stop_grace_exceeded", connections=len(state.connections), grace_s=self.stop_grace_s)
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        try:
            await asyncio.wait_for(wait(), self.cancel_s)
        except TimeoutError:
            for task in list(state.tasks):
                task.cancel()


def _server(app: object, host: str, port: int, *, stop_grace_s: float = HTTP_STOP_GRACE_S) -> _Server:
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="off")  # type: ignore[arg-type]
    return _Server(config, stop_grace_s)


def _stop_on_signals() -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (handlers on the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def serve(emb: Embedded, drain_timeout_s: float = DRAIN_TIMEOUT_S, *, demo_rate: float | None = None) -> bool:
    """Run every role until SIGTERM/SIGINT, then drain. Returns True when the drain completed.

    With ``demo_rate`` the demo fleet (:mod:`collector.demo.fleet`) also runs, on a thread, sending
    that many runs per second to the OTLP/HTTP receiver; it is stopped and flushed first.
    """
    s = emb.settings
    token = s.admin_token.get_secret_value() if s.admin_token else None
    ingest = s.ingest_token.get_secret_value() if s.ingest_token else None
    # Stored ingest/admin tokens are accepted on OTLP whenever ingest is authenticated.
    token_check = emb.services.access.auth.ingest_allowed if (s.ingest_auth or ingest) else None
    limiter = MemoryLimiter(s.memory_limit_mb * 1024 * 1024)
    publisher = LimitedPublisher(emb.stream, limiter, s.retry_after_s, emb.collector_metrics)
    receivers = _server(
        create_otlp_app(
            publisher,
            emb.collector_metrics,
            max_body_bytes=s.max_body_bytes,
            retry_after_s=s.retry_after_s,
            ingest_token=ingest,
            token_check=token_check,
        ),
        s.otlp_http_host,
        s.otlp_http_port,
    )
    api = _server(
        create_api_app(
            emb.store,
            admin_token=token,
            ready=lambda: emb.worker.healthy,
            judge_agreement=None if emb.agreement is None else emb.agreement.current,
            services=emb.services,
        ),
        s.http_host,
        s.http_port,
    )
    metrics = _server(metrics_app(emb.registry, emb), s.http_host, s.metrics_port, stop_grace_s=PROBE_STOP_GRACE_S)
    grpc_receiver = None
    if s.otlp_grpc_port:  # 0 disables the gRPC receiver
        grpc_receiver = await create_grpc_server(
            publisher,
            emb.collector_metrics,
            host=s.otlp_http_host,
            port=s.otlp_grpc_port,
            max_message_bytes=s.max_body_bytes,
            retry_after_s=s.retry_after_s,
            ingest_token=ingest,
            token_check=token_check,
        )
    maintenance = Maintenance(emb.services.workbench, emb.services.feedback)
    retention = Retention(
        emb.store.engine,
        days=s.retention_days,
        keep_reviewed=s.retention_keep_reviewed,
        on_deleted=deletion_counter(emb.registry),
    )
    stop = _stop_on_signals()
    if s.state_path:  # only now: loading deletes the file, and from here on a SIGTERM saves it again
        load_state(s.state_path, emb.worker.assembler)
    tune_gc()
    young_gc = YoungCollector()
    young_gc.start()
    if emb.judges is not None:
        emb.judges.start()
    emb.worker.start()
    maintenance.start()
    retention.start()
    tasks = [asyncio.create_task(srv.serve()) for srv in (receivers, api, metrics)]
    if grpc_receiver is not None:
        await grpc_receiver.start()
    log.info(
        "vigil_started",
        otlp_http=s.otlp_http_port,
        otlp_grpc=s.otlp_grpc_port or None,
        api=s.http_port,
        metrics=s.metrics_port,
        database=_redact(s.database_url),
    )
    demo = await _start_demo(emb, receivers, tasks[0], demo_rate) if demo_rate else None
    await asyncio.wait([asyncio.create_task(stop.wait()), *tasks], return_when=asyncio.FIRST_COMPLETED)
    log.info("vigil_stopping")
    if demo is not None:  # its last spans must reach the receiver before it stops
        await asyncio.to_thread(demo.stop, DEMO_STOP_S)
    receivers.should_exit = True
    if grpc_receiver is not None:  # while uvicorn stops the HTTP receiver in its task
        await grpc_receiver.stop(GRPC_STOP_GRACE_S)
    await asyncio.gather(tasks[0], return_exceptions=True)
    save = partial(save_state, s.state_path) if s.state_path else None
    drained = await asyncio.to_thread(emb.worker.shutdown, drain_timeout_s, save=save)
    if emb.judges is not None:  # after the worker: its last batches were submitted to the judges
        await asyncio.to_thread(emb.judges.shutdown, JUDGE_DRAIN_S)
    await asyncio.to_thread(maintenance.shutdown, UPKEEP_STOP_S)
    await asyncio.to_thread(retention.shutdown, UPKEEP_STOP_S)
    for srv in (api, metrics):
        srv.should_exit = True
    await asyncio.gather(*tasks, return_exceptions=True)
    emb.store.close()
    young_gc.stop()
    # What this process counted in vigil_runs_total / vigil_flagged_runs_total (gone with it):
    # after a restart, the next process counts only runs new to the index.
    log.info("vigil_stopped", drained=drained, new_runs=emb.worker.new_runs, new_flags=emb.worker.new_flags)
    return drained


DEMO_STOP_S = 10.0
"""Seconds the demo fleet gets to finish its runs and flush when ``vigil run --demo`` stops."""


async def _start_demo(emb: Embedded, receiver: _Server, task: asyncio.Task[None], rate: float) -> DemoFleet:
    """Start the demo fleet on a daemon thread once the OTLP/HTTP receiver listens.

    Its users' thumbs-down go straight to the feedback store (as ``POST /api/v1/feedback`` would).
    """
    from collector.demo.fleet import DemoFleet  # only `vigil run --demo` pays for openai and the helpers

    s = emb.settings

    while not receiver.started and not task.done():
        await asyncio.sleep(0.05)
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
    threading.Thread(target=fleet.run, name="vigil-demo", daemon=True).start()
    return fleet


def _demo_feedback(services: ReviewServices, trace_id: str, feedback: str) -> None:
    score = 0.0 if feedback == "thumbs_down" else 1.0
    services.feedback.record(FeedbackIn(trace_id, "thumbs", score, "demo user", "demo", f"demo-{trace_id}"))


def _redact(url: str) -> str:
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
