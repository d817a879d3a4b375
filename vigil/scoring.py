"""How closed traces become scored runs and where they go, for every role that scores or reviews.

:class:`Scoring` compiles the scoring configuration (scorers, rules, judges, redaction) once and
builds the parts that need a registry or a store; ``vigil run`` (:mod:`vigil.run`) and
``vigil scorer`` (:mod:`vigil.roles`) both wire from it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from prometheus_client import CollectorRegistry, Counter

from collector.budget import ByteAccount, Pressure
from collector.owed import OwedSpans
from review_queue.details import DetailsWriter
from review_queue.details_status import DetailsPolicy
from review_queue.judges import SqlJudgeSink, SqlVerdictPairSource
from review_queue.metrics import QualityCollector, QueueCollector, ReviewMetrics
from review_queue.model import DEFAULT_CATEGORIES
from review_queue.privacy import RedactingSink
from review_queue.quality import allocation_inputs, runs_per_day
from review_queue.services import ReviewServices, build_services
from review_queue.session_close import SessionCloser, SessionMetrics
from review_queue.session_judges import ConversationLoader, SqlSessionJudgeSink
from review_queue.shedding import SampleShedder, pending_items
from review_queue.store import SqlStore
from scorers.assemble import Assembler
from scorers.detect import DetectionConfig, Detector
from scorers.eval.model import load_eval_config
from scorers.eval.online import EVAL_RULE, OnlineEval
from scorers.judge import (
    AgreementCollector,
    JudgeMetrics,
    JudgeService,
    JudgeSpec,
    SessionJudgeService,
    judge_rules,
    parse_judges,
)
from scorers.metrics import RunMetrics
from scorers.model import RunSink, ScoredRun, Scorer
from scorers.pipeline import Pipeline
from scorers.pricing import PriceTable
from scorers.redact import Redactor
from scorers.registry import build_chain
from scorers.rules import Rule, compile_rules
from scorers.sampling import ReviewBudget
from scorers.session_ids import DEFAULT_SESSION_KEYS, SessionKeys
from vigil.settings import Settings

HUMAN_VERDICTS: Mapping[str, str] = {
    "table": "review_verdicts",
    "trace_column": "target_trace_id",
    "verdict_column": "verdict",
    "latest_column": "created_at",
}
"""Where the review workbench stores human pass/fail verdicts (judge–human agreement gauges): with
several reviewers on one run, the latest verdict is the human answer. The run is the one a verdict
applies to (:data:`review_queue.tables.verdict_run`): a verdict on a whole session pairs with no judge."""


def redactor_from_settings(settings: Settings) -> Redactor:
    """The :class:`Redactor` the settings describe (``redact``, ``redact_patterns``,
    ``attributes_deny``, ``attributes_allow``).

    Raises:
        scorers.redact.RedactionConfigError: an unknown pattern name or a bad regex.
    """
    return Redactor(
        settings.redact,
        settings.redact_patterns,
        deny=settings.attributes_deny,
        allow=settings.attributes_allow,
    )


@dataclass(frozen=True)
class Scoring:
    """How closed traces become scored runs, built the same way by ``vigil run`` and ``vigil scorer``.

    :meth:`from_settings` validates the configuration (scorers, rules, judges, redaction) without
    any I/O; the other methods build the parts that need a registry or a store.

    Attributes:
        settings: the process settings.
        chain: the scorers, by name.
        specs: the LLM judges configured.
        rules: the flag rules: the configured ones plus one per judge with ``flag_below``.
        redactor: what is applied before anything is stored or judged.
        detector: the limit/block detection rules with the user's own markers.
        sessions: the attribute keys of session and user ids, with the user's own (``sessions``).
        online: the eval sets production runs are scored against (``eval_sets``), or None.
    """

    settings: Settings
    chain: tuple[tuple[str, Scorer], ...]
    specs: tuple[JudgeSpec, ...]
    rules: tuple[Rule, ...]
    redactor: Redactor
    detector: Detector
    online: OnlineEval | None = None
    sessions: SessionKeys = DEFAULT_SESSION_KEYS

    @classmethod
    def from_settings(cls, settings: Settings, environ: Mapping[str, str] | None = None) -> Scoring:
        """Compile the scoring configuration; ``environ`` holds the judges' ``api_key_env`` variables."""
        chain = build_chain(settings.scorers, optimal_steps=settings.optimal_steps)
        env = os.environ if environ is None else environ
        specs = tuple(parse_judges(settings.judges, env))
        settings.session_judge_specs(env)  # refuse a bad session judge at start-up (session_closer builds them)
        configured = judge_rules(specs, settings.rules)
        online = None
        if settings.eval_sets:
            config = load_eval_config(settings.eval_config) if settings.eval_config else None
            online = OnlineEval(settings.eval_sets, config)
            chain = (*chain, *online.scorers())
            configured = {**EVAL_RULE, **configured}
        rules = compile_rules(
            configured,
            [name for name, _ in chain] + list(online.score_names if online is not None else ()),
            repeat_threshold=settings.repeat_threshold,
            judge_names=[spec.name for spec in specs],
        )
        detector = Detector(DetectionConfig.from_mapping(settings.detection))
        sessions = SessionKeys.from_mapping(settings.sessions)
        return cls(settings, chain, specs, rules, redactor_from_settings(settings), detector, online, sessions)

    def run_metrics(self, registry: CollectorRegistry) -> RunMetrics:
        """The run metrics, with the configured label caps and model prices."""
        s = self.settings
        if self.online is not None:
            self.online.register(registry)
        return RunMetrics(registry, max_agents=s.max_agent_labels, max_tools=s.max_tool_labels, prices=s.model_prices)

    def assembler(
        self, run_metrics: RunMetrics, pressure: Pressure | None = None, owed: OwedSpans | None = None
    ) -> Assembler:
        """A fresh run assembler (one per process, or one per Kafka partition), bounded by the
        ``inflight`` and ``late`` byte budgets of :meth:`Settings.memory_budgets`; ``owed``: the ledger
        of spans the intake refused after decoding (``vigil run``); ``pressure``: the
        flag the intake refuses on when the runs in flight stay over their caps (``vigil run``; None:
        such runs are force-closed, :mod:`scorers.assemble`)."""
        s = self.settings
        budgets = s.memory_budgets()
        return Assembler(
            quiet_period_s=s.quiet_period_s,
            max_idle_s=s.max_idle_s,
            max_inflight=s.max_inflight_runs,
            max_spans_per_run=s.max_spans_per_run,
            closed_cache_size=s.closed_run_cache,
            observer=run_metrics,
            inflight_bytes=ByteAccount(budgets.inflight),
            closed_cache_bytes=ByteAccount(budgets.late),
            evict_idle_s=s.evict_idle_s,
            pressure=pressure,
            owed=owed,
        )

    def judging(
        self, store: SqlStore, registry: CollectorRegistry, run_metrics: RunMetrics
    ) -> tuple[JudgeService | None, AgreementCollector | None]:
        """The LLM judges (not started) and their judge–human agreement gauges, or ``(None, None)``.

        Written batches go to :meth:`JudgeService.submit`; the judges see redacted runs; verdicts,
        late flags and costs go to the store.
        """
        if not self.specs:
            return None, None
        judges = JudgeService(
            self.specs,
            SqlJudgeSink(store.engine, on_completion_revoked=run_metrics.completion_revoked),
            rules=self.rules,
            sample_rate=self.settings.sample_rate,
            metrics=JudgeMetrics(registry),
            on_new_flag=run_metrics.observe_flag,
            max_tracked_runs=self.settings.closed_run_cache,
            prepare=self.redactor.run,
            max_queue_bytes=self.settings.memory_budgets().judge,
        )
        agreement = AgreementCollector(SqlVerdictPairSource(store.engine, **HUMAN_VERDICTS))
        registry.register(agreement)
        return judges, agreement

    def pipeline(
        self, run_metrics: RunMetrics | None, judges: JudgeService | None, budget: ReviewBudget | None = None
    ) -> Pipeline:
        """Normalise → score → decide, with the judges' known scores in the decision (``vigil explain``: no metrics)
        and the random sample's rate from ``budget`` when there is one."""
        return Pipeline(
            self.chain,
            self.rules,
            self.settings.sample_rate,
            on_error=None if run_metrics is None else run_metrics.error,
            judge_scores=None if judges is None else judges.judge_scores,
            detector=self.detector,
            sessions=self.sessions,
            rate_for=None if budget is None else budget.rate_of,
        )

    def budget(self, store: SqlStore) -> ReviewBudget | None:
        """The review budget of the settings and their sample allocation (``None`` without either: one
        fixed rate), its traffic and the verdicts so far read from ``store``."""
        s = self.settings
        uncertain = s.review_sample_allocation == "uncertainty"
        if s.review_budget_per_day is None and not s.review_budget_agents and not uncertain:
            return None
        return ReviewBudget(
            s.review_budget_per_day,
            s.review_budget_agents,
            s.sample_rate,
            lambda: runs_per_day(store.engine, time.time()),
            (lambda: allocation_inputs(store.engine, time.time())) if uncertain else None,
        )


def then(
    first: Callable[[Sequence[ScoredRun]], None], second: Callable[[Sequence[ScoredRun]], None] | None
) -> Callable[[Sequence[ScoredRun]], None]:
    """Call ``first`` then ``second`` (if any) with each written batch."""
    if second is None:
        return first

    def both(batch: Sequence[ScoredRun]) -> None:
        first(batch)
        second(batch)

    return both


def store_sink(settings: Settings, store: SqlStore, registry: CollectorRegistry, redactor: Redactor) -> RunSink:
    """What scored runs are written through, in every role that scores: redaction, then
    random-sample shedding when the review queue is over capacity, then the store."""
    shedder = SampleShedder(store, partial(pending_items, store.engine), settings.review_queue_capacity, registry)
    return RedactingSink(shedder, redactor)


def details_writer(
    settings: Settings, store: SqlStore, registry: CollectorRegistry, redactor: Redactor
) -> DetailsWriter:
    """The run-details writer of a role that scores (:mod:`review_queue.details`): fed by ``on_written``."""
    dropped = Counter(
        "vigil_run_details_dropped",
        "Runs whose details were not written (writer behind or store down).",
        registry=registry,
    )
    return DetailsWriter(
        store.write_details,
        redactor,
        prices=PriceTable(settings.model_prices),
        keep_unflagged=settings.details_retention_days > 0,
        sample_rate=settings.details_sample_rate,
        max_bytes=settings.memory_budgets().details,
        on_dropped=dropped.inc,
    )


def open_store(settings: Settings) -> SqlStore:
    """The run store of a process: prices each run (``model_prices``) and applies the session settings."""
    return SqlStore(settings.database_url, prices=PriceTable(settings.model_prices), sessions=settings.session_config())


def session_closer(
    settings: Settings,
    store: SqlStore,
    registry: CollectorRegistry,
    *,
    judge_metrics: JudgeMetrics | None = None,
    environ: Mapping[str, str] | None = None,
) -> SessionCloser:
    """The idle-session closer of a process running the review upkeep, with its metrics on ``registry``,
    and its session judges (not started: :attr:`SessionCloser.judges`) when ``session_judges`` are
    configured; they count into ``judge_metrics`` when the process has run judges (one registry).

    Raises:
        scorers.errors.JudgeConfigError: a bad session judge.
    """
    rate = settings.session_sample_rate()
    specs = settings.session_judge_specs(os.environ if environ is None else environ)
    judges = None
    if specs:
        judges = SessionJudgeService(
            specs,
            SqlSessionJudgeSink(store.engine, sample_rate=rate, retry_after_s=store.retry_after_s),
            ConversationLoader(store.engine, retry_after_s=store.retry_after_s),
            metrics=judge_metrics if judge_metrics is not None else JudgeMetrics(registry),
        )
    return SessionCloser(
        store,
        settings.session_rules(),
        sample_rate=rate,
        metrics=SessionMetrics(registry, max_agents=settings.max_agent_labels),
        judges=judges,
    )


def review_services(
    settings: Settings,
    store: SqlStore,
    registry: CollectorRegistry,
    rules: tuple[Rule, ...],
    *,
    redact: Callable[[str], str] | None = None,
    run_metrics: RunMetrics | None = None,
) -> ReviewServices:
    """The review services of a process serving the API/UI, with their metrics on ``registry``
    (sharing ``run_metrics``' revocation counter when the process also scores)."""
    metrics = ReviewMetrics(
        registry, max_agents=settings.max_agent_labels, revoked=run_metrics.revoked if run_metrics else None
    )
    registry.register(QueueCollector(store.engine, max_agents=settings.max_agent_labels))
    quality = QualityCollector(
        store.engine,
        settings.slo_config(),
        max_agents=settings.max_agent_labels,
        reviewer_error=settings.reviewer_error(),
    )
    registry.register(quality)
    return build_services(
        store,
        admin_token=settings.admin_token.get_secret_value() if settings.admin_token else None,
        rules=rules,
        sample_rate=settings.sample_rate,
        lease_s=settings.review_lease_s,
        categories=settings.review_categories or DEFAULT_CATEGORIES,
        session_secret=settings.session_secret.get_secret_value().encode() if settings.session_secret else None,
        secure_cookies=settings.secure_cookies,
        metrics=metrics,
        redact=redact,
        slo=settings.slo_config(),
        feedback_pending_max=settings.feedback_pending_max,
        feedback_pending_s=settings.feedback_pending_s,
        details=DetailsPolicy(settings.details_sample_rate, settings.details_retention_days),
        reviewer_error=settings.reviewer_error(),
    )
