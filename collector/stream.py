"""The bounded in-process stream: the embedded stand-in for the Kafka topic.

Receivers publish :class:`~collector.model.TraceBatch` records (one trace each); one
worker thread drains them with :meth:`InProcessStream.get_many`. A publish takes all of
its records or none, so an HTTP 503 means nothing of the request was kept.

The stream also refuses while the structure its worker feeds asks it to (a raised
:class:`~collector.budget.Pressure`: the assembler's runs in flight are over their caps and
cannot be shed without mangling runs still receiving spans), so that a body is refused at the
intake, and retried by its sender, rather than accepted and its runs stored incomplete.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Protocol, TypeGuard, cast, runtime_checkable

from collector.budget import ByteAccount, Pressure, batch_bytes
from collector.errors import StreamFullError
from collector.metrics import CollectorMetrics
from collector.model import TraceBatch

__all__ = ["BodyPublisher", "InProcessStream", "Publisher", "RoomCheck", "check_room", "keeps_bodies"]


class Publisher(Protocol):
    """Where receivers hand decoded records: the in-process stream or a Kafka producer."""

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Take all of ``batches`` or none of them.

        Must not block for long: it is called on the receiver's event loop.

        Raises:
            BackpressureError: there is no room for all of them; nothing was taken.
        """
        ...


@runtime_checkable
class BodyPublisher(Protocol):
    """A publisher that keeps the request body too (the write-ahead spool of ``vigil run``).

    Receivers that have the decoded body's bytes await :meth:`publish_body` instead of calling
    ``publish``: it returns once the body is held as durably as configured, and the receiver
    answers 200 only then.
    """

    async def publish_body(self, batches: Sequence[TraceBatch], body: bytes | bytearray, encoding: str) -> None:
        """Keep ``body`` (``encoding``: ``protobuf`` or ``json``), then publish ``batches``, all or none.

        Raises:
            BackpressureError: nothing was taken.
        """
        ...


@runtime_checkable
class RoomCheck(Protocol):
    """A publisher that can say, before a request is read or decoded, that it would refuse it.

    Under overload most requests are refused; decoding a body (milliseconds for a few hundred
    spans) only to be refused makes shedding as expensive as accepting. Receivers call
    :meth:`check_room` first and answer 503 / ``UNAVAILABLE`` at once when it raises. It is an
    early answer, never a promise: a request that passes is still published all-or-nothing.
    """

    def check_room(self, size_hint: int) -> None:
        """Raise when a publish of about ``size_hint`` bytes would be refused right now.

        ``size_hint`` is the raw request size when known (0 when not); it must only make the
        check stricter when it is accurate. Counting of refused spans is the caller's (their
        number is unknown before decoding).

        Raises:
            BackpressureError: nothing would be taken now.
        """
        ...


def check_room(publisher: Publisher, size_hint: int = 0) -> None:
    """:meth:`RoomCheck.check_room` of ``publisher`` when it has one; otherwise never refuses.

    Raises:
        BackpressureError: the publisher would refuse a publish now.
    """
    if _implements(publisher, RoomCheck):
        cast(RoomCheck, publisher).check_room(size_hint)


def keeps_bodies(publisher: object) -> TypeGuard[BodyPublisher]:
    """Whether ``publisher`` is a :class:`BodyPublisher` (receivers then await its ``publish_body``)."""
    return _implements(publisher, BodyPublisher)


_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def _implements(publisher: object, protocol: type) -> bool:
    """``isinstance(publisher, protocol)`` by the publisher's class, remembered per class: the per-request
    question of the receivers and the publisher wrappers (an ``isinstance`` against a runtime-checkable
    protocol walks the protocol's members every time, ~20-40 µs, several times a body). Publishers
    define their methods on the class, which is what ``issubclass`` looks at; the classes asked about
    are the few publisher types, so the memory stays a handful of entries."""
    key = (publisher.__class__, protocol)
    found = _IMPLEMENTS.get(key)
    if found is None:
        found = _IMPLEMENTS[key] = issubclass(key[0], protocol)
    return found


class InProcessStream:
    """A bounded, thread-safe FIFO of trace batches implementing :class:`Publisher`.

    Producers (the receivers, on the event-loop thread) call :meth:`publish`; one or more
    consumer threads call :meth:`get_many`. The stream is bounded twice: in records and in
    bytes (the records' :func:`~collector.budget.batch_bytes` estimates, counted in
    :attr:`account`). A single publish larger than the whole capacity is accepted only into an
    empty stream, so that it cannot be refused forever. While ``pressure`` is raised every publish
    is refused, empty stream or not (the worker lowers it as runs close, see :mod:`scorers.assemble`).

    Args:
        max_batches: capacity in records (traces).
        retry_after_s: the ``retry_after`` of :class:`BackpressureError` when full.
        metrics: counts refused spans and exposes the depth at scrape time, when given.
        max_bytes: capacity in estimated bytes (the ``stream`` share of the memory limit); 0: unbounded.
        pressure: raised by the worker's assembler while its runs in flight are over their caps.

    Raises:
        ValueError: ``max_batches`` is not positive, or ``max_bytes`` is negative.
    """

    def __init__(
        self,
        max_batches: int,
        retry_after_s: float,
        metrics: CollectorMetrics | None = None,
        *,
        max_bytes: int = 0,
        pressure: Pressure | None = None,
    ) -> None:
        if max_batches <= 0:
            raise ValueError(f"max_batches must be positive, got {max_batches}")
        self._max = max_batches
        self._retry_after = retry_after_s
        self._metrics = metrics
        self._items: deque[tuple[TraceBatch, int]] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closed = False
        self.account = ByteAccount(max_bytes)
        """Estimated bytes of the records waiting, against the byte capacity."""
        self.pressure = pressure or Pressure()
        """Raised downstream (the assembler) while the stream must refuse (reason ``inflight``)."""
        if metrics is not None:
            metrics.bind_stream(self.qsize, max_batches)

    @property
    def max_batches(self) -> int:
        """The capacity in records."""
        return self._max

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Append all of ``batches`` or none of them. Never blocks on a full stream.

        Raises:
            BackpressureError: the stream is full in records or bytes (or closed), or the runs in
                flight downstream are over their caps; nothing was appended and the refused spans
                were counted (``vigil_refused_total{stage="stream"}``, ``reason`` ``full``,
                ``bytes`` or ``inflight``).
        """
        if not batches:
            return
        sized = [(b, b.size or batch_bytes(b)) for b in batches]
        size = sum(n for _, n in sized)
        account = self.account
        pressed = self.pressure.raised
        with self._cond:
            items = self._items
            fits_count = len(batches) <= self._max - len(items)
            fits_bytes = not account.budget or account.held + size <= account.budget  # (ByteAccount.fits)
            if not self._closed and not pressed and ((fits_count and fits_bytes) or not items):
                items.extend(sized)
                account.held += size
                self._cond.notify()
                return
        if self._metrics is not None:
            reason = "inflight" if pressed else "full" if not fits_count else "bytes"
            self._metrics.stream_full(sum(len(b.spans) for b in batches), reason)
        raise StreamFullError(self._retry_after)

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse early when the stream is at capacity (or closed): any publish would be refused.

        Raises:
            BackpressureError: the stream is full (records or bytes: ``size_hint`` more would not
                fit), closed, or its pressure is raised (nothing counted: spans unknown).
        """
        if (
            self._closed
            or self.pressure.raised
            or len(self._items) >= self._max
            or (self._items and not self.account.fits(size_hint))
        ):
            raise StreamFullError(self._retry_after)

    def get_many(self, max_items: int, timeout_s: float) -> list[TraceBatch]:
        """Remove and return up to ``max_items`` records, oldest first.

        Blocks up to ``timeout_s`` for the first record, then takes what is there without
        waiting. Returns an empty list on timeout, or at once when closed and empty;
        records already in a closed stream are still handed out (drain on shutdown).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._items and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return []
                self._cond.wait(remaining)
            count = min(max_items, len(self._items))
            popleft = self._items.popleft
            taken = [popleft() for _ in range(count)]
            self.account.held -= sum(n for _, n in taken)
            return [b for b, _ in taken]

    def qsize(self) -> int:
        """Number of records waiting."""
        return len(self._items)

    def ready(self) -> bool:
        """Whether the stream accepts records (it is not closed)."""
        return not self._closed

    def close(self) -> None:
        """Refuse further publishes and wake every waiting consumer. Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
