"""A memory ceiling for the receivers, in the spirit of the OpenTelemetry Collector's
``memory_limiter``: while the process's resident memory is above the limit, publishing
is refused with :class:`~collector.errors.BackpressureError`, so the receivers answer
503 / ``UNAVAILABLE`` with Retry-After and the senders' retries carry the data until
there is room. Nothing already accepted is dropped; refused spans are counted
(``vigil_refused_total{stage="receiver",reason="memory_limit"}``).

Resident memory is read from ``/proc/self/statm`` at most every ``check_interval_s``
(a read costs ~10 µs); where that file does not exist the limiter never refuses.

The RSS reading is late by nature: a burst of large bodies read, inflated and decoded at once
is all in memory before any reading shows it. The bytes of request bodies in flight are
therefore reserved in advance against an :class:`IntakeBudget`, a share
(:data:`INTAKE_SHARE`) of the same ceiling: a receiver reserves a body's bytes before it holds
them (on admission, before the body is read: :mod:`collector.admission` for OTLP/HTTP, the
worst case of a message for OTLP/gRPC; then chunk by chunk past that, as the body arrives and as
gzip/deflate inflates it), times :data:`INTAKE_COST_FACTOR` for what decoding it will hold, and
releases them once the decoded spans are handed on. A request that does not fit is refused with 503 /
``UNAVAILABLE`` + Retry-After (``vigil_otlp_rejected_requests_total{reason="intake_budget"}``);
``vigil_intake_reserved_bytes`` shows the bytes reserved.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from collector.budget import SHARES, MemoryBudgets
from collector.errors import BackpressureError
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.stream import Publisher, check_room, keeps_bodies

__all__ = [
    "INTAKE_COST_FACTOR",
    "INTAKE_SHARE",
    "CachedCheck",
    "IntakeBudget",
    "LimitedPublisher",
    "MemoryLimiter",
    "Reservation",
    "intake_budget_bytes",
    "intake_cost",
    "rss_bytes",
]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process in bytes (0 when it cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


@dataclass(eq=False, slots=True)
class CachedCheck:
    """Whether ``read()`` exceeds ``limit``, re-read at most every ``interval_s`` seconds; thread-safe.

    A limit of 0 (or less) is never exceeded (``read`` is not called). The memory ceiling below and the
    review queue's load shedding (``review_queue.shedding``) are both such a check.

    Attributes:
        limit: the threshold.
        read: returns the current value (resident bytes, pending review items …).
        interval_s: how long a reading is trusted.
        clock: monotonic seconds.
    """

    limit: float
    read: Callable[[], float]
    interval_s: float
    clock: Callable[[], float] = time.monotonic
    _next: float = field(default=float("-inf"), init=False, repr=False)
    _over: bool = field(default=False, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def over(self) -> bool:
        """True while the last reading (at most ``interval_s`` old) exceeds the limit."""
        if self.limit <= 0:
            return False
        now = self.clock()
        with self._lock:
            if now >= self._next:
                self._over = self.read() > self.limit
                self._next = now + self.interval_s
            return self._over


class MemoryLimiter(CachedCheck):
    """Says whether resident memory is over ``limit_bytes``, re-reading it at most every interval.

    Args:
        limit_bytes: the ceiling; 0 disables the limiter.
        read_rss: returns the current resident bytes (injected in tests).
        check_interval_s: how long a reading is trusted.
        clock: monotonic seconds.
    """

    __slots__ = ()

    def __init__(
        self,
        limit_bytes: int,
        *,
        read_rss: Callable[[], int] = rss_bytes,
        check_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(limit_bytes, read_rss, check_interval_s, clock)

    @property
    def limit_bytes(self) -> int:
        """The ceiling in bytes (0: disabled)."""
        return int(self.limit)


class LimitedPublisher:
    """A :class:`~collector.stream.Publisher` that refuses while memory is over the ceiling.

    Args:
        inner: the real publisher (in-process stream or Kafka producer).
        limiter: the memory ceiling.
        retry_after_s: the Retry-After suggested while refusing.
        metrics: counts refused spans.
    """

    def __init__(
        self, inner: Publisher, limiter: MemoryLimiter, retry_after_s: float, metrics: CollectorMetrics
    ) -> None:
        self._inner = inner
        self._limiter = limiter
        self._retry_after = retry_after_s
        self._metrics = metrics

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Publish through the inner publisher unless memory is over the ceiling.

        Raises:
            BackpressureError: memory is over the ceiling (nothing taken), or the inner one is full.
        """
        self._refuse_over_limit(batches)
        self._inner.publish(batches)

    async def publish_body(self, batches: Sequence[TraceBatch], body: bytes, encoding: str) -> None:
        """:meth:`publish`, awaiting the inner publisher's ``publish_body`` when it has one
        (the Kafka publisher of ``vigil collector``: the answer waits for Kafka's acknowledgement).

        Raises:
            BackpressureError: memory is over the ceiling (nothing taken), or the inner one refused.
        """
        inner = self._inner
        if not keeps_bodies(inner):
            self.publish(batches)
            return
        self._refuse_over_limit(batches)
        await inner.publish_body(batches, body, encoding)

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse early while memory is over the ceiling or the inner publisher is full.

        Raises:
            BackpressureError: a publish would be refused now (nothing counted: spans unknown).
        """
        if self._limiter.over():
            raise BackpressureError(self._retry_after, f"memory limit of {self._limiter.limit_bytes} bytes reached")
        check_room(self._inner, size_hint)

    def _refuse_over_limit(self, batches: Sequence[TraceBatch]) -> None:
        if self._limiter.over():
            self._metrics.refused.labels("receiver", "memory_limit").inc(sum(len(b.spans) for b in batches))
            raise BackpressureError(self._retry_after, f"memory limit of {self._limiter.limit_bytes} bytes reached")

    def ready(self) -> bool:
        """Ready when the inner publisher is (memory pressure is transient, not unreadiness)."""
        probe = getattr(self._inner, "ready", None)
        return bool(probe()) if callable(probe) else True


INTAKE_SHARE = SHARES["intake"]
"""Share of ``VIGIL_MEMORY_LIMIT_MB`` that request bodies in flight (being read, inflated and
decoded) may reserve at once (0.25): the ``intake`` share of :data:`collector.budget.SHARES`.
The rest is for the structures downstream of the receivers (stream, in-flight runs, caches,
spool: :mod:`collector.budget`) and the process itself (~150 MiB for ``vigil run``)."""

INTAKE_COST_FACTOR = 3.5
"""Bytes reserved per byte of (decompressed) body: the body itself plus the spans decoded from
it, held together until they are handed on. Decoded spans take about 2.4 times the size of a
protobuf body of LLM-agent spans (``tracemalloc`` over a 20 MiB body, 66,243 spans); JSON
bodies decode to less than their size."""


def intake_budget_bytes(limit_bytes: int) -> int:
    """The intake budget for a memory ceiling of ``limit_bytes``: :data:`INTAKE_SHARE` of it.

    Args:
        limit_bytes: the resident memory ceiling; 0 (no ceiling) gives 0 (no intake budget).

    Returns:
        The bytes request bodies in flight may reserve at once; 0 means unlimited.
    """
    return MemoryBudgets.from_limit(limit_bytes).intake


def intake_cost(body_bytes: int) -> int:
    """Bytes reserved for a (decompressed) body of ``body_bytes``: :data:`INTAKE_COST_FACTOR` times it."""
    return math.ceil(body_bytes * INTAKE_COST_FACTOR)


class IntakeBudget:
    """A semaphore of bytes shared by the receivers of one process: bodies in flight reserve
    their bytes here before they are held, and are refused when it is spent (the budget never
    waits; the receivers' admission queues do: :mod:`collector.admission`, ``collector.grpc_receiver``).

    A reservation larger than the whole budget is granted only while no other one holds
    anything, so that a body at the size limit cannot be refused for ever by a small budget
    (the same rule as the in-process stream's capacity). Thread-safe: the gRPC and HTTP
    receivers and their decode threads share one.

    Args:
        budget_bytes: the bytes all reservations may hold together; 0 or less never refuses.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._reserved = 0
        self._lock = threading.Lock()

    @property
    def reserved(self) -> int:
        """Bytes reserved now (read at scrape time by ``vigil_intake_reserved_bytes``)."""
        return self._reserved

    def reservation(self) -> Reservation:
        """A new, empty reservation against this budget (release it with :meth:`Reservation.release`)."""
        return Reservation(self)

    def _take(self, held: int, size: int) -> bool:
        with self._lock:
            if self.budget_bytes > 0 and self._reserved + size > self.budget_bytes and self._reserved > held:
                return False
            self._reserved += size
            return True

    def _give(self, size: int) -> None:
        with self._lock:
            self._reserved -= size


class Reservation:
    """The bytes one request holds against an :class:`IntakeBudget`; grows as the body is read.

    Args:
        budget: the budget it draws on.
    """

    __slots__ = ("_budget", "held")

    def __init__(self, budget: IntakeBudget) -> None:
        self._budget = budget
        self.held = 0

    def grow(self, size: int) -> bool:
        """Reserve ``size`` more bytes; False (nothing taken) when the budget is spent."""
        if size <= 0:
            return True
        if not self._budget._take(self.held, size):
            return False
        self.held += size
        return True

    def shrink(self, size: int) -> None:
        """Give back ``size`` bytes reserved but not needed (at most what is held)."""
        size = min(size, self.held)
        if size > 0:
            self.held -= size
            self._budget._give(size)

    def release(self) -> None:
        """Give back everything; the reservation may be reused (idempotent)."""
        self.shrink(self.held)
