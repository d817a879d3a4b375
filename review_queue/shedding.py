"""Load shedding in front of the review queue: random-sample work goes first.

When more review items are pending than ``VIGIL_REVIEW_QUEUE_CAPACITY``, a run flagged *only*
by the random sample is written without its flag — no review item — and counted in
``vigil_review_shed_total{reason="random_sample"}``. Runs any rule flagged keep their flag
(random_sample among their reasons included), so what reviewers must see still arrives while
the backlog is drained. The pending count is read from the database at most every
``refresh_s`` seconds.

While shedding, the random stratum is suspended for *every* run written, not only the shed ones:
each carries ``SampleDesign(rate=0, shed=True)`` (``runs.sample_p = 0``, ``runs.sample_shed``), so
the stratum stays a Bernoulli sample independent of the rules — keeping the rule-flagged members of
the sample while dropping the others would fill it with failures. The quality estimates
(:mod:`review_queue.quality`) count these runs as not covered by the sample and say how many.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

import sqlalchemy as sa
from prometheus_client import CollectorRegistry, Counter
from sqlalchemy.engine import Engine

from collector.limits import CachedCheck
from review_queue.tables import review_items
from scorers.model import RunSink, SampleDesign, ScoredRun, WriteOutcome
from scorers.rules import RANDOM_SAMPLE

__all__ = ["SampleShedder", "pending_items"]


def pending_items(engine: Engine) -> int:
    """Review items waiting for a reviewer."""
    query = sa.select(sa.func.count()).select_from(review_items).where(review_items.c.state == "pending")
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


class SampleShedder:
    """A :class:`~scorers.model.RunSink` that drops sample-only flags while the queue is over capacity.

    Args:
        inner: the sink that persists.
        pending: returns the number of pending review items.
        capacity: pending items above which sample-only flags are shed; 0 never sheds.
        registry: where ``vigil_review_shed_total`` is registered.
        refresh_s: how long a pending count is trusted.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        inner: RunSink,
        pending: Callable[[], int],
        capacity: int,
        registry: CollectorRegistry,
        *,
        refresh_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inner = inner
        self._capacity = CachedCheck(capacity, pending, refresh_s, clock)
        self._shed = Counter(
            "vigil_review_shed", "Flags not turned into review items because the queue was over capacity.",
            ["reason"], registry=registry,
        )  # fmt: skip
        self._shed.labels(RANDOM_SAMPLE)

    def over_capacity(self) -> bool:
        """Whether the last pending count (at most ``refresh_s`` old) exceeds the capacity."""
        return self._capacity.over()

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Shed sample-only flags and suspend the random stratum when over capacity, then write through."""
        if any(s.design is not None or _sample_only(s) for s in runs) and self.over_capacity():
            self._shed.labels(RANDOM_SAMPLE).inc(sum(1 for s in runs if _sample_only(s)))
            return self._inner.write([_shed(s) for s in runs])
        return self._inner.write(runs)


_SUSPENDED = {False: SampleDesign(0.0, False, False, True), True: SampleDesign(0.0, False, True, True)}


def _shed(scored: ScoredRun) -> ScoredRun:
    """``scored`` as written while shedding: no sample-only flag, the random stratum suspended."""
    flag = None if _sample_only(scored) else scored.flag
    if scored.design is None:
        return scored if flag is scored.flag else dataclasses.replace(scored, flag=flag)
    return dataclasses.replace(scored, flag=flag, design=_SUSPENDED[scored.design.rule_flagged])


def _sample_only(scored: ScoredRun) -> bool:
    return scored.flag is not None and scored.flag.reasons == (RANDOM_SAMPLE,)
