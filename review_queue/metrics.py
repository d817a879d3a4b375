"""Prometheus metrics of the review queue: event counters plus queue state computed at scrape time.

Counters (updated by the workbench and the feedback store in this process):
``vigil_review_verdicts_total{agent,verdict}`` (every verdict: mostly rule-flagged runs),
``vigil_review_sample_verdicts_total{agent,verdict}`` (a run's first verdict, on runs of the random
review sample only), ``vigil_review_sample_weight_total{agent,verdict}`` (the same verdicts, each adding
the runs it stands for, 1 / its inclusion probability: the review pass rate's SLI, unbiased when the
sample's rate changes or follows the prediction), ``vigil_review_claims_total``,
``vigil_review_lease_expiries_total``, ``vigil_feedback_received_total{source,kind}``,
``vigil_task_completions_revoked_total{agent,source}`` (a failing verdict on a completed run).
``vigil_feedback_refused_total{reason}``, ``vigil_feedback_dropped_total{reason}``.

Scrape-time gauges (one ``GROUP BY`` each per scrape, never stale, shared by every replica):
``vigil_review_items{state,priority}``, ``vigil_review_oldest_pending_age_seconds{priority}``,
``vigil_review_pass_rate{agent}`` (passed / all verdicts, over all time: the rules' hit rate more
than the agent's quality; kept for old dashboards).

Quality gauges (:class:`QualityCollector`, the 7-day estimates of :mod:`review_queue.quality`, computed
at most once a minute): ``vigil_quality_estimate{agent,target,bound}`` (``bound`` = ``value``, ``low``,
``high``; ``agent="*"`` the fleet) and ``vigil_quality_verdicts{agent,target}`` (the n behind it).
Agent and source labels are capped with an ``other`` overflow.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
import structlog
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine

from review_queue import queries
from review_queue.model import ItemState
from review_queue.quality import FLEET, quality_report
from review_queue.tables import review_verdicts
from review_queue.workbench import ReviewObserver
from scorers.metrics import DEFAULT_MAX_AGENTS, OVERFLOW, LabelCap
from scorers.model import Priority
from scorers.slo import SloConfig

__all__ = ["QualityCollector", "QueueCollector", "ReviewMetrics"]

log = structlog.get_logger(__name__)


class ReviewMetrics(ReviewObserver):
    """The review counters; pass it to the workbench and the feedback store as their observer.

    Args:
        registry: where to register.
        max_agents: distinct ``agent`` label values before ``other``.
        max_sources: distinct feedback ``source`` values before ``other``.
        revoked: the process's ``vigil_task_completions_revoked_total`` when its run metrics
            already registered it (``vigil run``).
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_sources: int = 20,
        revoked: Counter | None = None,
    ) -> None:
        self._agent = LabelCap(max_agents)
        self._source = LabelCap(max_sources)
        self.verdicts = Counter(
            "vigil_review_verdicts", "Review verdicts recorded, by agent and verdict.", ["agent", "verdict"],
            registry=registry,
        )  # fmt: skip
        self.sample_verdicts = Counter(
            "vigil_review_sample_verdicts",
            "First verdicts on runs of the random review sample, by agent and verdict (an unbiased pass rate).",
            ["agent", "verdict"],
            registry=registry,
        )
        self.sample_weight = Counter(
            "vigil_review_sample_weight",
            "Runs the random review sample's first verdicts stand for (each adds 1 / its inclusion probability), "
            "by agent and verdict: the review pass rate's SLI.",
            ["agent", "verdict"],
            registry=registry,
        )
        self.revoked = revoked or Counter(
            "vigil_task_completions_revoked",
            "Runs counted in vigil_task_completions_total whose first failing verdict came later.",
            ["agent", "source"],
            registry=registry,
        )
        self.claims = Counter("vigil_review_claims", "Review items claimed.", registry=registry)
        self.lease_expiries = Counter(
            "vigil_review_lease_expiries", "Claims whose lease lapsed back to pending.", registry=registry
        )
        self.feedback = Counter(
            "vigil_feedback_received", "User feedback received (duplicates excluded).", ["source", "kind"],
            registry=registry,
        )  # fmt: skip
        self.feedback_refused = Counter(
            "vigil_feedback_refused", "User feedback refused (HTTP 429), by reason.", ["reason"], registry=registry
        )
        self.feedback_dropped = Counter(
            "vigil_feedback_dropped", "Held user feedback deleted unjoined, by reason.", ["reason"], registry=registry
        )
        for reason in ("pending_full",):
            self.feedback_refused.labels(reason)
        self.feedback_dropped.labels("expired")

    def claimed(self) -> None:
        """Count a claim."""
        self.claims.inc()

    def leases_expired(self, count: int) -> None:
        """Count lapsed leases."""
        self.lease_expiries.inc(count)

    def verdict(self, agent: str, verdict: str) -> None:
        """Count a verdict."""
        self.verdicts.labels(self._agent(agent), verdict).inc()

    def sample_verdict(self, agent: str, verdict: str, weight: float) -> None:
        """Count a first verdict on a run of the random sample, and the runs it stands for."""
        self.sample_verdicts.labels(self._agent(agent), verdict).inc()
        self.sample_weight.labels(self._agent(agent), verdict).inc(weight)

    def completion_revoked(self, agent: str) -> None:
        """Count a completion revoked by a failing review verdict."""
        self.revoked.labels(self._agent(agent), "review").inc()

    def feedback_received(self, source: str, kind: str) -> None:
        """Count a new feedback."""
        self.feedback.labels(self._source(source), kind).inc()

    def feedback_refused_once(self, reason: str) -> None:
        """Count a refused feedback."""
        self.feedback_refused.labels(reason).inc()

    def feedback_dropped_rows(self, reason: str, count: int) -> None:
        """Count held feedback dropped."""
        self.feedback_dropped.labels(reason).inc(count)


class QueueCollector(Collector):
    """Scrape-time queue gauges read from the database.

    Args:
        engine: the store's engine.
        clock: Unix epoch seconds (for ages).
        max_agents: distinct agents in ``vigil_review_pass_rate`` before ``other``.
    """

    def __init__(
        self, engine: Engine, *, clock: Callable[[], float] = time.time, max_agents: int = DEFAULT_MAX_AGENTS
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._max_agents = max_agents

    def collect(self) -> Iterator[Metric]:
        """Yield the gauges; nothing (and a log line) when the database cannot be read."""
        items = GaugeMetricFamily(
            "vigil_review_items", "Review items by state and priority.", labels=["state", "priority"]
        )
        oldest = GaugeMetricFamily(
            "vigil_review_oldest_pending_age_seconds", "Age of the oldest pending item.", labels=["priority"]
        )
        rate = GaugeMetricFamily("vigil_review_pass_rate", "Share of verdicts that passed, by agent.", labels=["agent"])
        try:
            with self._engine.connect() as conn:
                stats = queries.queue_stats(conn)
                verdicts = conn.execute(
                    sa.select(review_verdicts.c.agent, review_verdicts.c.verdict, sa.func.count()).group_by(
                        review_verdicts.c.agent, review_verdicts.c.verdict
                    )
                ).all()
        except sa_exc.SQLAlchemyError as exc:
            log.warning("review_metrics_unavailable", error=str(exc).splitlines()[0])
            return
        now = self._clock()
        counts = {(s.state.value, s.priority.value): s.count for s in stats}
        ages = {s.priority.value: now - s.oldest_created_at for s in stats if s.state is ItemState.PENDING}
        for state in ItemState:
            for priority in Priority:
                items.add_metric([state.value, priority.value], counts.get((state.value, priority.value), 0))
        for priority in Priority:
            oldest.add_metric([priority.value], max(0.0, ages.get(priority.value, 0.0)))
        for agent, (passed, total) in _pass_rates(verdicts, self._max_agents).items():
            rate.add_metric([agent], passed / total)
        yield items
        yield oldest
        yield rate


def _pass_rates(rows: Sequence[Any], max_agents: int) -> dict[str, tuple[int, int]]:
    """(passed, total) per agent; the agents with most verdicts keep their label, the rest are ``other``."""
    per_agent: dict[str, list[int]] = {}
    for agent, verdict, count in rows:
        entry = per_agent.setdefault(agent, [0, 0])
        entry[1] += count
        if verdict == "pass":
            entry[0] += count
    ranked = sorted(per_agent, key=lambda a: -per_agent[a][1])
    out: dict[str, tuple[int, int]] = {}
    for index, agent in enumerate(ranked):
        label = agent if index < max_agents else OVERFLOW
        passed, total = out.get(label, (0, 0))
        out[label] = (passed + per_agent[agent][0], total + per_agent[agent][1])
    return out


class QualityCollector(Collector):
    """The 7-day quality estimates as gauges, recomputed at most every ``refresh_s`` seconds.

    The estimate reads a week of runs; a scrape every 15 s must not do that each time, and the
    figures move slowly. The agents with most runs keep their label (up to ``max_agents``); the
    others are left out (their figures mix nothing into ``other``: an estimate is not a sum).

    Args:
        engine: the store's engine.
        slo: the quality targets.
        clock: Unix epoch seconds.
        max_agents: agents with a label of their own.
        refresh_s: how long a computed set of estimates is served.
        monotonic: monotonic seconds (for the refresh).
        reviewer_error: the reviewers' known error rates the pass rates are corrected for.
    """

    def __init__(
        self,
        engine: Engine,
        slo: SloConfig,
        *,
        clock: Callable[[], float] = time.time,
        max_agents: int = DEFAULT_MAX_AGENTS,
        refresh_s: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
        reviewer_error: tuple[float, float] | None = None,
    ) -> None:
        self._reviewer_error = reviewer_error
        self._engine = engine
        self._slo = slo
        self._clock = clock
        self._max_agents = max_agents
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._next = float("-inf")
        self._rows: list[tuple[str, str, float | None, float | None, float | None, int]] = []

    def describe(self) -> Iterator[Metric]:
        """Nothing: registering must not read the database."""
        return iter(())

    def collect(self) -> Iterator[Metric]:
        """Yield the gauges (the last computed ones when the database cannot be read)."""
        if self._monotonic() >= self._next:
            try:
                with self._engine.connect() as conn:
                    report = quality_report(
                        conn, self._slo, self._clock(), compare=False, reviewer_error=self._reviewer_error
                    )
                self._rows = self._flatten(report)
            except sa_exc.SQLAlchemyError as exc:
                log.warning("quality_metrics_unavailable", error=str(exc).splitlines()[0])
            self._next = self._monotonic() + self._refresh_s
        estimate = GaugeMetricFamily(
            "vigil_quality_estimate",
            "7-day production quality estimated from the review sample (bound: value, low, high of the 95 % interval).",
            labels=["agent", "target", "bound"],
        )
        verdicts = GaugeMetricFamily(
            "vigil_quality_verdicts", "Verdicts behind vigil_quality_estimate.", labels=["agent", "target"]
        )
        for agent, target, value, low, high, n in self._rows:
            for bound, number in (("value", value), ("low", low), ("high", high)):
                if number is not None:
                    estimate.add_metric([agent, target, bound], number)
            verdicts.add_metric([agent, target], n)
        yield estimate
        yield verdicts

    def _flatten(self, report: dict[str, Any]) -> list[tuple[str, str, float | None, float | None, float | None, int]]:
        entries = report["agents"]
        agents = [e for e in entries if e["agent"] != FLEET]
        kept = {e["agent"] for e in sorted(agents, key=lambda e: -e["design"]["runs"])[: self._max_agents]}
        rows = []
        for entry in entries:
            if entry["agent"] != FLEET and entry["agent"] not in kept:
                continue
            for row in entry["estimates"]:
                e = row["estimate"]
                rows.append((entry["agent"], row["target"], e["value"], e["low"], e["high"], int(e["n"])))
        return rows
