"""Prometheus metrics of the LLM judges, and the judge–human agreement gauges.

Every metric takes the registry. Labels are bounded: ``judge`` names come from the
configuration, ``outcome``/``kind``/``reason`` are closed sets. The agreement gauges are
computed at scrape time by :class:`AgreementCollector` from a :class:`VerdictPairSource`
(one query per scrape at most every ``min_interval_s``).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator

import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from collector.errors import BackpressureError
from scorers.judge.agreement import agreements
from scorers.judge.model import Agreement, VerdictPairSource

log = structlog.get_logger(__name__)

OUTCOMES = ("ok", "cached", "malformed", "rate_limited", "timeout", "error")
"""``vigil_judge_requests_total`` outcomes: one per run judged (``cached``: no request sent)."""
DROP_REASONS = ("queue_full", "queue_bytes", "no_content", "superseded", "store_unavailable", "shutdown")
"""``vigil_judge_dropped_total`` reasons (a spent budget is counted by its own metric)."""

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120)
SCORE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class JudgeMetrics:
    """The judge metrics.

    Args:
        registry: where to register.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.requests = Counter(
            "vigil_judge_requests",
            "Runs judged, by final outcome (cached: no request).",
            ["judge", "outcome"],
            registry=r,
        )
        self.attempts = Counter(
            "vigil_judge_http_requests",
            "HTTP requests to judge endpoints, retries included.",
            ["judge", "outcome"],
            registry=r,
        )
        self.latency = Histogram(
            "vigil_judge_latency_seconds", "Judge HTTP request latency.", ["judge"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.tokens = Counter("vigil_judge_tokens", "Tokens used by judges.", ["judge", "kind"], registry=r)
        self.cost = Counter("vigil_judge_cost_usd", "Estimated judge spend, USD.", ["judge"], registry=r)
        self.score = Histogram(
            "vigil_judge_score", "Judge scores (1 = good).", ["judge"], buckets=SCORE_BUCKETS, registry=r
        )
        self.dropped = Counter(
            "vigil_judge_dropped", "Runs selected for a judge but not judged.", ["judge", "reason"], registry=r
        )
        self.budget_exhausted = Counter(
            "vigil_judge_budget_exhausted",
            "Runs not judged because the judge's hourly budget was spent.",
            ["judge"],
            registry=r,
        )

    def init_judge(self, judge: str) -> None:
        """Create every child of ``judge`` at zero, so dashboards and alerts see it from the start."""
        for outcome in OUTCOMES:
            self.requests.labels(judge, outcome)
        for reason in DROP_REASONS:
            self.dropped.labels(judge, reason)
        for kind in ("input", "output"):
            self.tokens.labels(judge, kind)
        self.cost.labels(judge)
        self.budget_exhausted.labels(judge)
        self.latency.labels(judge)
        self.score.labels(judge)


class AgreementCollector(Collector):
    """Scrape-time ``vigil_judge_agreement_rate`` and ``vigil_judge_cohen_kappa``.

    Args:
        source: the (judge verdict, human verdict) pairs.
        min_interval_s: reuse the last figures for this long (the query joins two tables).
        clock: monotonic seconds (injected in tests).

    Register it with ``registry.register(AgreementCollector(source))``. A failing source is
    logged and the last figures are served.
    """

    def __init__(
        self, source: VerdictPairSource, *, min_interval_s: float = 15.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._source = source
        self._interval = min_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._at = -math.inf
        self._last: list[Agreement] = []

    def describe(self) -> list[GaugeMetricFamily]:
        """No samples at registration (the source may not be reachable yet)."""
        return []

    def current(self) -> list[Agreement]:
        """The agreement figures, recomputed when older than ``min_interval_s``."""
        with self._lock:
            now = self._clock()
            if now - self._at >= self._interval:
                try:
                    self._last = agreements(self._source.verdict_pairs())
                    self._at = now
                except BackpressureError as exc:
                    log.warning("judge_agreement_unavailable", error=str(exc))
            return list(self._last)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Yield both gauges, one sample per (judge, rubric version)."""
        rate = GaugeMetricFamily(
            "vigil_judge_agreement_rate",
            "Share of runs where the judge's pass/fail equals the human verdict.",
            labels=["judge", "rubric_version"],
        )
        kappa = GaugeMetricFamily(
            "vigil_judge_cohen_kappa",
            "Cohen's kappa between judge and human verdicts (NaN when undefined).",
            labels=["judge", "rubric_version"],
        )
        for a in self.current():
            rate.add_metric([a.judge, a.rubric_version], a.rate)
            kappa.add_metric([a.judge, a.rubric_version], a.kappa)
        yield rate
        yield kappa
