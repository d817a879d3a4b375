"""Composition of the scale-out roles: ``vigil collector``, ``vigil scorer``, ``vigil review``.

* **collector**: OTLP/HTTP and OTLP/gRPC receivers → :class:`collector.kafka.KafkaPublisher`.
* **scorer**: :class:`scorers.consumer.KafkaScorer` in the group ``vigil-scorers`` → the store.
* **review**: the REST API over the store (PostgreSQL via ``VIGIL_DATABASE_URL``).

Every role serves ``/healthz``, ``/readyz`` and ``/metrics`` on the metrics port, and stops
on SIGTERM/SIGINT: the collector stops its receivers then flushes the producer; the scorer
commits what is safe and leaves the group (its in-flight runs are re-read by the next
owner of their partitions).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from collector.budget import MemoryMetrics
from collector.errors import SettingsError
from collector.grpc_receiver import create_grpc_server
from collector.kafka import KafkaPublisher, ProducerConfig
from collector.lifecycle import Closing, Component, Components, Hooks, Periodic, Together
from collector.limits import IntakeBudget, LimitedPublisher, MemoryLimiter
from collector.metrics import CollectorMetrics
from collector.receiver import create_otlp_app
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.errors import StoreUnavailableError
from review_queue.feedback import FeedbackStore
from review_queue.maintenance import Maintenance
from review_queue.retention import Retention, deletion_counter
from review_queue.store import SqlStore, upgrade_database_in_child
from scorers.assemble import Assembler
from scorers.consumer import ConsumerConfig, ConsumerMetrics, KafkaScorer, Rekeyer
from scorers.judge import JudgeService
from scorers.registry import build_chain
from scorers.rules import compile_rules
from scorers.sampling import ReviewBudget
from vigil.components import (
    GRPC_STOP_GRACE_S,
    HTTP_STOP_GRACE_S,
    PROBE_STOP_GRACE_S,
    Checks,
    GrpcServer,
    HttpServer,
    StopSignal,
    probe_server,
    serve_until_signal,
)
from vigil.connections import HttpMetrics
from vigil.exposure import refuse_open_api, warn_open_ingest
from vigil.run import (
    BUDGET_REFRESH_S,
    DRAIN_TIMEOUT_S,
    JUDGE_DRAIN_S,
    UPKEEP_STOP_S,
    YoungCollector,
    _redact,
    spool_from_settings,
    tune_gc,
)
from vigil.scoring import (
    Scoring,
    details_writer,
    open_store,
    redactor_from_settings,
    review_services,
    session_closer,
    store_sink,
    then,
)
from vigil.settings import Settings

__all__ = [
    "build_scorer",
    "serve_collector",
    "serve_review",
    "serve_scorer",
    "stop_budget_s",
    "upgrade_with_retry",
]

log = structlog.get_logger(__name__)


def _probes(s: Settings, registry: CollectorRegistry, checks: Checks, metrics: HttpMetrics | None = None) -> HttpServer:
    """The role's ``/healthz``, ``/readyz`` and ``/metrics`` server on the metrics port."""
    metrics = metrics or HttpMetrics(registry)
    return probe_server(
        s.bind_host("metrics"), s.metrics_port, registry, checks, limits=s.connection_limits(), metrics=metrics
    )


# --- collector --------------------------------------------------------------------------


def _producer_config(s: Settings, **extra: Any) -> ProducerConfig:
    """The Kafka producer settings every role shares (bootstrap, topic, compression, idempotence)."""
    return ProducerConfig(
        bootstrap=s.kafka_bootstrap,
        topic=s.kafka_topic,
        compression=s.kafka_compression,
        idempotent=s.kafka_idempotent,
        **extra,
    )


def build_publisher(s: Settings, registry: CollectorRegistry, metrics: CollectorMetrics) -> KafkaPublisher:
    """The Kafka publisher of ``vigil collector`` from the settings (not started), with its spool when
    ``kafka_spool`` is on.

    Raises:
        SettingsError: ``kafka_spool`` without a ``spool_path``.
    """
    config = _producer_config(s, buffer_bytes=s.kafka_buffer_bytes)
    spool = None
    if s.kafka_spool:
        if not s.spool_path:
            raise SettingsError("kafka_spool", "VIGIL_KAFKA_SPOOL", "needs a spool directory (VIGIL_SPOOL_PATH)", True)
        spool = spool_from_settings(s, registry)
    return KafkaPublisher(
        config,
        retry_after_s=s.retry_after_s,
        ack_timeout_s=s.kafka_ack_timeout_s,
        metrics=metrics,
        registry=registry,
        spool=spool,
    )


async def serve_collector(s: Settings, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Run ``vigil collector`` until SIGTERM/SIGINT. Returns True when every record was acknowledged.

    Stop order: ``VIGIL_SHUTDOWN_DELAY_S`` still receiving (``/readyz`` 503), the receivers (HTTP
    and gRPC together), the Kafka producer's flush, the probes, the young-generation collector.
    """
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    publisher = build_publisher(s, registry, metrics)
    limiter = MemoryLimiter(s.memory_limit_mb * 1024 * 1024)
    limited = LimitedPublisher(publisher, limiter, s.retry_after_s, metrics)
    intake = IntakeBudget(s.memory_budgets().intake)
    metrics.bind_intake(lambda: intake.reserved, intake.budget_bytes)
    ingest = s.ingest_token.get_secret_value() if s.ingest_token else None
    app = create_otlp_app(
        limited,
        metrics,
        max_body_bytes=s.max_body_bytes,
        retry_after_s=s.retry_after_s,
        ingest_token=ingest,
        intake=intake,
    )
    warn_open_ingest(s, ingest is not None)
    loop = asyncio.get_running_loop()
    http_metrics = HttpMetrics(registry)
    receiver = HttpServer(
        app, s.bind_host("otlp_http"), s.otlp_http_port, loop,
        limits=s.connection_limits(), listener="otlp_http", metrics=http_metrics,
    )  # fmt: skip
    receivers: list[Component] = [receiver]
    stopping = threading.Event()
    checks = lambda: {"kafka": publisher.ready(), "accepting": not stopping.is_set()}  # noqa: E731
    probes = _probes(s, registry, checks, http_metrics)
    if s.otlp_grpc_port:
        grpc_server = await create_grpc_server(
            limited,
            metrics,
            host=s.bind_host("otlp_grpc"),
            port=s.otlp_grpc_port,
            max_message_bytes=s.max_body_bytes,
            retry_after_s=s.retry_after_s,
            ingest_token=ingest,
            handshake_timeout_s=s.http_header_timeout_s,
            intake=intake,
        )
        receivers.append(GrpcServer(grpc_server, loop))

    def delay(timeout: float) -> bool:
        """Still receiving: the agent next to us is flushing its last spans (ends early if a server ends)."""
        stopping.set()
        ended = [srv.future for srv in (receiver, probes) if srv.future is not None]
        if timeout > 0 and ended:
            concurrent.futures.wait(ended, timeout, return_when=concurrent.futures.FIRST_COMPLETED)
        return True

    c = Components()
    # Decoded spans now live until Kafka acknowledges their request (~ms, across an await): with the
    # default gen-0 threshold (700) they were traversed by young collections and promoted, which cost
    # ~30 % of ingest CPU per span (BENCHMARKS.md, issue 20); the same tuning as vigil run and vigil scorer.
    c.add("gc", Hooks(on_start=tune_gc))
    c.add("young_gc", YoungCollector())
    c.add("probes", probes, probes.stop_budget_s)
    c.add("publisher", publisher, drain_timeout_s)
    c.add("receivers", Together(*receivers), max(receiver.stop_budget_s, GRPC_STOP_GRACE_S))
    c.add("shutdown_delay", Hooks(on_shutdown=delay), s.shutdown_delay_s)
    started = {
        "otlp_http": s.otlp_http_port,
        "otlp_grpc": s.otlp_grpc_port or None,
        "metrics": s.metrics_port,
        "kafka": s.kafka_bootstrap,
        "topic": s.kafka_topic,
    }
    await serve_until_signal("collector", c, [receiver, probes], started, stopping={"delay_s": s.shutdown_delay_s})
    flushed = c.clean.get("publisher", False)
    log.info("collector_stopped", flushed=flushed)
    return flushed


# --- scorer -----------------------------------------------------------------------------


def upgrade_with_retry(url: str, stop: threading.Event | None = None, max_wait_s: float = 10.0) -> None:
    """Migrate the database, retrying with backoff while it is unreachable, until ``stop`` is set
    (SIGTERM/SIGINT: the wait is cut short, so Ctrl-C never hangs on an unreachable database).

    Raises:
        StoreUnavailableError: ``stop`` was set while the database was still unreachable.
    """
    backoff = 0.5
    stop = stop or threading.Event()
    while True:
        try:
            upgrade_database_in_child(url)  # a long-lived role never imports Alembic
            return
        except StoreUnavailableError as exc:
            if stop.is_set():
                raise
            log.warning("database_unavailable", retry_in=backoff, error=str(exc))
            if stop.wait(backoff):
                raise StoreUnavailableError(0, f"stopped while the database was unreachable: {exc}") from exc
            backoff = min(backoff * 2, max_wait_s)


@dataclass(frozen=True)
class ScorerRole:
    """``vigil scorer`` wired: the consumer, its store and its LLM judges (``None`` without any)."""

    scorer: KafkaScorer
    store: SqlStore
    judges: JudgeService | None
    details: DetailsWriter | None = None
    budget: ReviewBudget | None = None


def build_scorer(s: Settings, registry: CollectorRegistry, **kwargs: Any) -> tuple[KafkaScorer, SqlStore]:
    """Wire ``vigil scorer`` (not started) and return the consumer and its store (see :func:`build_scorer_role`)."""
    role = build_scorer_role(s, registry, **kwargs)
    return role.scorer, role.store


def build_scorer_role(
    s: Settings, registry: CollectorRegistry, environ: Mapping[str, str] | None = None, **kwargs: Any
) -> ScorerRole:
    """Wire ``vigil scorer`` (not started): the same pipeline, store and LLM judges as ``vigil run``.

    Args:
        s: the settings.
        registry: metrics registry.
        environ: where the judges' ``api_key_env`` variables are read (default ``os.environ``).
        **kwargs: passed to :class:`KafkaScorer` (``on_written``, ``consumer_factory``, ``tick_s``, ``rekey``).
    """
    scoring = Scoring.from_settings(s, environ)
    run_metrics = scoring.run_metrics(registry)
    store = open_store(s)
    judges, _ = scoring.judging(store, registry, run_metrics)
    if judges is not None:  # written runs go to the judges, as in vigil run
        kwargs["on_written"] = then(judges.submit, kwargs.get("on_written"))
    budget = scoring.budget(store)  # the traffic it reads is every replica's: the rate fits the fleet
    pipeline = scoring.pipeline(run_metrics, judges, budget)
    details = details_writer(s, store, registry, scoring.redactor)  # after each commit, on its own thread
    kwargs["on_written"] = then(details.submit, kwargs.get("on_written"))
    sink = store_sink(s, store, registry, scoring.redactor)  # as in vigil run: nothing unredacted is stored
    assemblers: weakref.WeakSet[Assembler] = weakref.WeakSet()

    def assembler() -> Assembler:  # one per assigned partition, each with the whole in-flight and late budgets
        made = scoring.assembler(run_metrics)
        assemblers.add(made)
        return made

    memory = MemoryMetrics(registry)
    memory.budgets(s.memory_budgets())
    memory.held.labels("inflight").set_function(lambda: float(sum(a.inflight_account.held for a in list(assemblers))))
    memory.held.labels("late").set_function(lambda: float(sum(a.closed_account.held for a in list(assemblers))))
    memory.bind("details", details.account)
    if judges is not None:
        memory.bind("judge", judges.account)

    config = ConsumerConfig(
        bootstrap=s.kafka_bootstrap,
        topic=s.kafka_topic,
        group_id=s.kafka_group_id,
        session_timeout_ms=s.kafka_session_timeout_ms,
        max_poll_records=s.kafka_max_poll_records,
        commit_interval_s=s.kafka_commit_interval_s,
    )
    rekey = Rekeyer(_producer_config(s))
    kwargs.setdefault("rekey", rekey)
    # Feedback that arrived (through vigil review) before a run was scored joins its decision.
    feedback = FeedbackStore(store.engine, scoring.rules, s.sample_rate, retry_after_s=store.retry_after_s)
    kwargs.setdefault("feedback", feedback.summaries)
    scorer = KafkaScorer(
        config,
        assembler,
        pipeline,
        sink,
        metrics=run_metrics,
        consumer_metrics=ConsumerMetrics(registry),
        **kwargs,
    )
    return ScorerRole(scorer, store, judges, details, budget)


async def serve_scorer(s: Settings, drain_timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Run ``vigil scorer`` until SIGTERM/SIGINT. Returns True when the final commit went through.

    Stop order: the consumer (writes what is closed, commits, leaves the group), the judges (its
    last written batches were submitted to them), the probes, the store.
    """
    registry = CollectorRegistry()
    stop = StopSignal()
    await asyncio.to_thread(upgrade_with_retry, s.database_url, stop.stopping)
    role = build_scorer_role(s, registry)
    scorer = role.scorer
    probes = _probes(s, registry, lambda: {"consumer": scorer.healthy})
    c = Components()
    c.add("gc", Hooks(on_start=tune_gc))
    c.add("young_gc", YoungCollector())
    c.add("store", Closing(role.store))
    c.add("probes", probes, probes.stop_budget_s)
    if role.details is not None:
        c.add("details", role.details, UPKEEP_STOP_S)
    if role.budget is not None:
        refresh = Periodic("review-budget", role.budget.refresh, BUDGET_REFRESH_S, immediately=True)
        c.add("review_budget", refresh, UPKEEP_STOP_S)
    if role.judges is not None:
        c.add("judges", role.judges, JUDGE_DRAIN_S)
    c.add("consumer", RetryingStart(scorer, stop.stopping), drain_timeout_s)
    started = {
        "metrics": s.metrics_port,
        "kafka": s.kafka_bootstrap,
        "topic": s.kafka_topic,
        "group": s.kafka_group_id,
        "database": _redact(s.database_url),
    }
    await serve_until_signal("scorer", c, [probes], started, stop=stop)
    return c.clean.get("consumer", False)


class RetryingStart:
    """The Kafka consumer as a component whose start retries while Kafka cannot be reached.

    The probes already answer meanwhile (``/readyz`` 503); a stop signal ends the retries.

    Args:
        scorer: the consumer.
        stopping: set when the process is asked to stop.
        retry_s: seconds between attempts.
    """

    def __init__(self, scorer: KafkaScorer, stopping: threading.Event, retry_s: float = 2.0) -> None:
        self._scorer = scorer
        self._stopping = stopping
        self._retry_s = retry_s

    def start(self) -> None:
        """Start the consumer (returns without it when asked to stop first)."""
        from kafka.errors import KafkaError

        while not self._stopping.is_set():
            try:
                self._scorer.start()
                return
            except KafkaError as exc:
                log.warning("kafka_unavailable", error=repr(exc), retry_in=self._retry_s)
                self._stopping.wait(self._retry_s)

    def shutdown(self, timeout: float) -> bool:
        """See :meth:`scorers.consumer.KafkaScorer.shutdown`."""
        return self._scorer.shutdown(timeout)


# --- review -----------------------------------------------------------------------------


async def serve_review(s: Settings) -> bool:
    """Run ``vigil review`` (REST API over the store) until SIGTERM/SIGINT.

    Stop order: the API and probe servers, lease expiry and feedback joins, retention, the store.
    """
    registry = CollectorRegistry()
    stop = StopSignal()
    await asyncio.to_thread(upgrade_with_retry, s.database_url, stop.stopping)
    store = open_store(s)
    chain = build_chain(s.scorers, optimal_steps=s.optimal_steps)
    rules = compile_rules(s.rules, [name for name, _ in chain], repeat_threshold=s.repeat_threshold)
    services = review_services(s, store, registry, rules, redact=redactor_from_settings(s).text)
    token = s.admin_token.get_secret_value() if s.admin_token else None
    app = create_api_app(store, admin_token=token, ready=store.ping, services=services, self_telemetry=s.self_telemetry)
    refuse_open_api(s, services.access.auth.open())
    http_metrics = HttpMetrics(registry)
    api = HttpServer(
        app, s.bind_host("http"), s.http_port, asyncio.get_running_loop(),
        limits=s.connection_limits(), listener="api", metrics=http_metrics,
    )  # fmt: skip
    probes = _probes(s, registry, lambda: {"database": store.ping()}, http_metrics)
    retention = Retention(
        store.engine,
        days=s.retention_days,
        keep_reviewed=s.retention_keep_reviewed,
        on_deleted=deletion_counter(registry),
        details_days=s.details_retention_days,
    )
    c = Components()
    c.add("store", Closing(store))
    c.add("retention", retention, UPKEEP_STOP_S)
    # Lease expiry and late feedback joins (feedback that arrived before its run was scored by a
    # vigil scorer) run beside the API.
    closer = session_closer(s, store, registry)
    if closer.judges is not None:  # started before the closer offers it sessions, stopped after
        c.add("session_judges", closer.judges, UPKEEP_STOP_S)
    c.add("maintenance", Maintenance(services.workbench, services.feedback, sessions=closer), UPKEEP_STOP_S)
    c.add("http", Together(api, probes), max(api.stop_budget_s, probes.stop_budget_s))
    started = {"api": s.http_port, "metrics": s.metrics_port, "database": _redact(s.database_url)}
    await serve_until_signal("review", c, [api, probes], started, stop=stop)
    return True


def stop_budget_s(role: str, shutdown_delay_s: float = 0.0) -> float:
    """Longest ``vigil <role>`` can take from SIGTERM to exit: the sum of its stop sequence's bounds.

    The orchestrator's grace period (Kubernetes ``terminationGracePeriodSeconds``, compose
    ``stop_grace_period``) must exceed it, or its SIGKILL cuts the drain short: the collector's
    unflushed records and ``vigil run``'s undrained runs would be lost (the scorer's would only be
    re-delivered). An HTTP server gets its grace, then as long again for aborted requests.
    ``shutdown_delay_s`` is the collector's ``VIGIL_SHUTDOWN_DELAY_S``.

    Raises:
        KeyError: not a role (``run``, ``collector``, ``scorer``, ``review``).
    """
    http = 2 * HTTP_STOP_GRACE_S
    probes = 2 * PROBE_STOP_GRACE_S
    receivers = max(http, GRPC_STOP_GRACE_S)  # the gRPC receiver stops while the HTTP one does
    return {
        "collector": shutdown_delay_s + receivers + DRAIN_TIMEOUT_S + probes,
        "scorer": DRAIN_TIMEOUT_S + JUDGE_DRAIN_S + UPKEEP_STOP_S + probes,  # + the details writer
        "review": max(http, probes) + 3 * UPKEEP_STOP_S,  # + the session judges, when configured
        "run": receivers + DRAIN_TIMEOUT_S + JUDGE_DRAIN_S + 4 * UPKEEP_STOP_S + max(http, probes),
    }[role]


def run_role(main: Callable[[], Coroutine[Any, Any, bool]]) -> int:
    """Run a role's coroutine; exit status 0 when it stopped cleanly."""
    return 0 if asyncio.run(main()) else 1
