"""Connection limits of Vigil's HTTP listeners (API/UI, OTLP/HTTP, probes): slowloris and idle floods.

uvicorn closes idle keep-alive connections (``timeout_keep_alive``) but sets no deadline on a
connection that has not finished sending its request line and headers, nor on a request body that
trickles in, and has no cap on open connections but ``limit_concurrency`` (which answers 503 to
*new* requests once the cap is reached — exactly what an attacker holding idle connections wants).
So a client opening connections and sending a few header bytes held a file descriptor for ever.

:class:`ConnectionGuard` closes them instead, from the server's tick (every
:data:`SWEEP_TICKS` × 0.1 s):

* **header timeout** — a connection waiting for (the rest of) a request line and headers for
  longer than ``header_timeout_s`` is closed (``header_timeout``); the time counts from the
  connection, or from the end of the previous response;
* **body timeout** — a request whose body is still arriving ``body_timeout_s`` after its headers
  is closed (``body_timeout``; the app sees a disconnect);
* **connection cap** — above ``max_connections`` open connections on one listener, the ones that
  have waited longest without sending a request are closed first (``over_limit``), so an idle flood
  never locks out a client that sends its request. Only a connection already seen waiting by an
  earlier sweep is closed: one accepted since may hold its request unread in the socket buffer (the
  loop has not handed it to the parser yet), and closing a socket with unread data resets it, so a
  well-behaved client that connected in the same sweep as a flood would lose its request. The cap is
  therefore reached one sweep after a flood, never at the cost of a request;
* **header size** — more than ``max_header_bytes`` before the headers end is answered 431 and
  closed (``header_too_large``; :func:`guarded_protocol`).

Every close is counted in ``vigil_http_connections_closed_total{listener,reason}``; open connections
are ``vigil_http_connections{listener}``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

__all__ = [
    "DEFAULT_LIMITS",
    "REASONS",
    "ConnectionGuard",
    "ConnectionLimits",
    "HttpMetrics",
    "guarded_protocol",
]

log = structlog.get_logger(__name__)

SWEEP_TICKS = 2
"""Server ticks (0.1 s each) between sweeps: timeouts are enforced within 0.2 s."""

REASONS = ("header_timeout", "body_timeout", "over_limit", "header_too_large")
"""Values of the ``reason`` label of ``vigil_http_connections_closed_total``."""


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The limits of one HTTP listener (settings ``VIGIL_HTTP_*``).

    Attributes:
        header_timeout_s: seconds to send a request line and headers.
        body_timeout_s: seconds to send a request body after its headers.
        keep_alive_s: seconds an idle keep-alive connection is kept (uvicorn's ``timeout_keep_alive``).
        max_connections: open connections per listener before the longest-waiting idle ones are closed.
        max_header_bytes: bytes of request line and headers before a 431.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    keep_alive_s: int = 5
    max_connections: int = 1000
    max_header_bytes: int = 64 * 1024


DEFAULT_LIMITS = ConnectionLimits()


class HttpMetrics:
    """``vigil_http_connections_closed_total{listener,reason}`` and ``vigil_http_connections{listener}``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.closed = Counter(
            "vigil_http_connections_closed",
            "HTTP connections Vigil closed: header_timeout, body_timeout, over_limit, header_too_large.",
            ["listener", "reason"],
            registry=registry,
        )
        self.open = Gauge(
            "vigil_http_connections", "Open HTTP connections by listener.", ["listener"], registry=registry
        )

    def listener(self, name: str) -> tuple[Callable[[str], None], Callable[[int], None]]:
        """``(count a close by reason, set the open count)`` for one listener; pre-creates its series."""
        for reason in REASONS:
            self.closed.labels(name, reason)
        gauge = self.open.labels(name)
        return (lambda reason: self.closed.labels(name, reason).inc()), gauge.set


def _state(connection: Any) -> tuple[str, int]:
    """``(state, cycle id)``: ``wait`` (no request in progress: headers awaited), ``body`` (the request
    body is still arriving) or ``app`` (the request is read; the app has it)."""
    cycle = getattr(connection, "cycle", None)
    if cycle is None or getattr(cycle, "response_complete", False):
        return "wait", id(cycle)
    if getattr(cycle, "more_body", False):
        return "body", id(cycle)
    return "app", id(cycle)


class ConnectionGuard:
    """Enforces :class:`ConnectionLimits` on a uvicorn server's connections (see the module docstring).

    Args:
        limits: the limits.
        on_closed: called with the reason of every connection it closes.
        on_open: called with the number of open connections after each sweep.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        limits: ConnectionLimits,
        on_closed: Callable[[str], None] | None = None,
        on_open: Callable[[int], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits = limits
        self._on_closed = on_closed or (lambda _reason: None)
        self._on_open = on_open or (lambda _count: None)
        self._clock = clock
        self._seen: dict[Any, tuple[tuple[str, int], float]] = {}

    def closed(self, reason: str) -> None:
        """Count a connection closed for ``reason`` elsewhere (the protocol's header-size check)."""
        self._on_closed(reason)

    def sweep(self, connections: Iterable[Any]) -> int:
        """Close the connections past a limit; returns how many it closed."""
        now = self._clock()
        seen: dict[Any, tuple[tuple[str, int], float]] = {}
        waiting: list[tuple[float, Any]] = []
        closed = 0
        for conn in list(connections):
            transport = getattr(conn, "transport", None)
            if transport is None or transport.is_closing():
                continue
            state = _state(conn)
            previous = self._seen.get(conn)
            since = previous[1] if previous is not None and previous[0] == state else now
            kind = state[0]
            if kind == "wait" and now - since > self.limits.header_timeout_s:
                closed += self._close(transport, "header_timeout")
                continue
            if kind == "body" and now - since > self.limits.body_timeout_s:
                closed += self._close(transport, "body_timeout")
                continue
            seen[conn] = (state, since)
            if kind == "wait" and previous is not None and previous[0] == state:  # waiting since an earlier sweep
                waiting.append((since, conn))
        excess = len(seen) - self.limits.max_connections
        if excess > 0:
            waiting.sort(key=lambda pair: pair[0])
            for _, conn in waiting[:excess]:
                closed += self._close(conn.transport, "over_limit")
                seen.pop(conn, None)
        self._seen = seen
        self._on_open(len(seen))
        return closed

    def _close(self, transport: asyncio.BaseTransport, reason: str) -> int:
        transport.close()
        self._on_closed(reason)
        return 1


_HEADER_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 31\r\nconnection: close\r\n\r\nrequest headers are too large\r\n"
)


def guarded_protocol(guard: ConnectionGuard) -> type[asyncio.Protocol] | str:
    """uvicorn's httptools HTTP/1.1 protocol with the header-size limit of ``guard`` (``"h11"``, whose
    own ``h11_max_incomplete_event_size`` then applies, when httptools is not installed)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency of uvicorn[standard]
        return "h11"
    limit = guard.limits.max_header_bytes

    class GuardedProtocol(HttpToolsProtocol):
        """Counts the bytes of each request's URL and headers, past the limit: 431 and close.

        Two counts, either may trip: the URL and header bytes the parser hands over, and the raw
        bytes of chunks received entirely inside a request head (a header value that never ends is
        buffered by the parser without being handed over). Body bytes never count, also not those of
        a request answered before its body was read (an early 503)."""

        _head_bytes = 0
        _raw_head_bytes = 0
        _in_head = False
        _messages = 0

        def on_message_begin(self) -> None:
            self._head_bytes = self._raw_head_bytes = 0
            self._in_head = True
            self._messages += 1
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._head_bytes += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_bytes += len(name) + len(value) + 4
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            in_head, messages = self._in_head, self._messages
            super().data_received(data)
            if in_head and self._in_head and messages == self._messages:  # the whole chunk is head bytes
                self._raw_head_bytes += len(data)
            transport = self.transport
            too_large = self._head_bytes > limit or self._raw_head_bytes > limit
            if too_large and self._in_head and not transport.is_closing():
                transport.write(_HEADER_TOO_LARGE)
                transport.close()
                guard.closed("header_too_large")

    return GuardedProtocol
