"""A memory ceiling for the receivers, in the spirit of the OpenTelemetry Collector's
``memory_limiter``: while the process's resident memory is above the limit, publishing
is refused with :class:`~collector.errors.BackpressureError`, so the receivers answer
503 / ``UNAVAILABLE`` with Retry-After and the senders' retries carry the data until
there is room. Nothing already accepted is dropped; refused spans are counted
(``vigil_refused_total{stage="receiver",reason="memory_limit"}``).

Resident memory is read from ``/proc/self/statm`` at most every ``check_interval_s``
(a read costs ~10 µs); where that file does not exist the limiter never refuses.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

from collector.errors import BackpressureError
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch
from collector.stream import BodyPublisher, Publisher, check_room

__all__ = ["LimitedPublisher", "MemoryLimiter", "rss_bytes"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """Resident set size of this process in bytes (0 when it cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


class MemoryLimiter:
    """Says whether resident memory is over ``limit_bytes``, re-reading it at most every interval.

    Args:
        limit_bytes: the ceiling; 0 disables the limiter.
        read_rss: returns the current resident bytes (injected in tests).
        check_interval_s: how long a reading is trusted.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        limit_bytes: int,
        *,
        read_rss: Callable[[], int] = rss_bytes,
        check_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit_bytes = limit_bytes
        self._read = read_rss
        self._interval = check_interval_s
        self._clock = clock
        self._next = float("-inf")
        self._over = False
        self._lock = threading.Lock()

    def over(self) -> bool:
        """True while the last reading (at most ``check_interval_s`` old) exceeds the limit."""
        if self.limit_bytes <= 0:
            return False
        now = self._clock()
        with self._lock:
            if now >= self._next:
                self._over = self._read() > self.limit_bytes
                self._next = now + self._interval
            return self._over


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
        if not isinstance(inner, BodyPublisher):
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
