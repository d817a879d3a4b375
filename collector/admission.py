"""Admission of OTLP/HTTP requests to the intake budget, in arrival order, before their bodies are read.

A request reserves what its body may hold (:func:`admission_bytes`, at
:func:`~collector.limits.intake_cost`) in the :class:`~collector.limits.IntakeBudget` *before* the
receiver reads a byte of it. While it is not admitted nothing reads its body, so the server holds at
most what uvicorn reads ahead of an application that does not ask (its 64 KiB high-water mark plus
one socket read); the rest waits in the kernel's socket buffers and the client's.

Requests that do not fit at once wait in a first-in-first-out queue: only the oldest one may take
room, so a large body is not overtaken for ever by small ones and partly admitted requests never
block each other. A request is refused at once (503 + Retry-After) when the queue is full
(:data:`MAX_WAITING`) or when the requests waiting ahead of it would already fill the budget: it
could not be admitted before they are done, and waiting longer than :data:`ADMISSION_WAIT_S` only
holds the client's connection. A waiting request is refused after :data:`ADMISSION_WAIT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field

from collector.limits import IntakeBudget, Reservation

__all__ = [
    "ADMISSION_WAIT_S",
    "COMPRESSION_ESTIMATE",
    "MAX_WAITING",
    "RECHECK_S",
    "Admission",
    "admission_bytes",
    "refuse_at_once",
]

ADMISSION_WAIT_S = 1.0
"""How long a request (an OTLP/HTTP request, an OTLP/gRPC call: ``collector.grpc_receiver`` waits the
same) may wait for room in the intake budget before it is refused (503 / ``UNAVAILABLE``)."""

MAX_WAITING = 64
"""Requests that may wait for room at once, per receiver; one more is refused at once."""

COMPRESSION_ESTIMATE = 10
"""Inflated bytes reserved per compressed byte of a gzip/deflate body before it is read (OTLP
protobuf of agent spans inflates 1.3-8 times; a body inflating further reserves the rest step by
step as it inflates, and is refused if the budget is spent by then)."""

RECHECK_S = 0.05
"""A waiting request re-tries at least this often (the other receiver releases bytes from its own loop)."""


def admission_bytes(declared: int, compressed: bool, limit: int) -> int:
    """The body bytes a request reserves before its body is read.

    Args:
        declared: its ``Content-Length`` (-1 when it has none: chunked).
        compressed: whether the body is gzip/deflate.
        limit: the body size limit (raw and inflated).

    Returns:
        The ``Content-Length`` of a plain body, :data:`COMPRESSION_ESTIMATE` times that of a
        compressed one, ``limit`` without one; never more than ``limit``.
    """
    if declared < 0:
        return limit
    return min(limit, declared * COMPRESSION_ESTIMATE if compressed else declared)


def refuse_at_once(size: int, ahead: int, waiting: int, budget: int, max_waiting: int) -> bool:
    """Whether a request that did not fit at once is refused without waiting.

    Args:
        size: the bytes it would reserve.
        ahead: the bytes the requests waiting before it would reserve.
        waiting: how many requests are waiting.
        budget: the intake budget in bytes (0 or less: unlimited, never refused).
        max_waiting: how many may wait at once.

    Returns:
        True when the queue is full, or when the requests ahead plus this one (counted at most as the
        whole budget: one larger passes alone) exceed the budget.
    """
    if budget <= 0:
        return False
    return waiting >= max_waiting or ahead + min(size, budget) > budget


@dataclass(eq=False, slots=True)
class _Waiter:
    size: int
    woken: asyncio.Event = field(default_factory=asyncio.Event)


class Admission:
    """The first-in-first-out admission queue of one receiver in front of a shared intake budget.

    Used from one event loop; the budget itself is thread-safe and may be shared with other receivers.

    Args:
        intake: the budget reservations draw on.
        wait_s: how long a request may wait for room.
        max_waiting: how many requests may wait at once.
    """

    def __init__(
        self, intake: IntakeBudget, *, wait_s: float = ADMISSION_WAIT_S, max_waiting: int = MAX_WAITING
    ) -> None:
        self._intake = intake
        self._wait_s = wait_s
        self._max_waiting = max_waiting
        self._queue: deque[_Waiter] = deque()

    @property
    def waiting(self) -> int:
        """Requests waiting for room now."""
        return len(self._queue)

    async def admit(self, reservation: Reservation, size: int) -> bool | None:
        """Reserve ``size`` bytes in ``reservation``, waiting in arrival order for room.

        Args:
            reservation: the request's (empty) reservation.
            size: the bytes to reserve.

        Returns:
            False when reserved at once, True when reserved after a wait, None when refused (nothing
            reserved): at once (:func:`refuse_at_once`) or after ``wait_s``.
        """
        if not self._queue and reservation.grow(size):
            return False
        ahead = sum(w.size for w in self._queue)
        if refuse_at_once(size, ahead, len(self._queue), self._intake.budget_bytes, self._max_waiting):
            return None
        waiter = _Waiter(size)
        self._queue.append(waiter)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        try:
            while True:
                if self._queue[0] is waiter and reservation.grow(size):
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.woken.wait(), min(remaining, RECHECK_S))
                waiter.woken.clear()
        finally:
            self._queue.remove(waiter)
            self.wake()

    def wake(self) -> None:
        """Let the oldest waiting request try again (bytes were given back, or the queue moved)."""
        if self._queue:
            self._queue[0].woken.set()
