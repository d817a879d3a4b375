"""The servers of every role as :class:`collector.lifecycle.Component` s, and the serving loop.

Each role (``vigil run``, ``vigil collector``, ``vigil scorer``, ``vigil review``) lists its
components in a :class:`collector.lifecycle.Components` and hands it to :func:`serve_until_signal`:
the components start in order, the role runs until SIGTERM/SIGINT (or until one of its HTTP
servers ends), and they shut down in reverse within the sum of their stop budgets
(ARCHITECTURE.md, "Lifecycle").

The servers run on the event loop of :func:`serve_until_signal`; the lifecycle runs on a worker
thread, so :class:`HttpServer` and :class:`GrpcServer` hand their work to the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any

import grpc
import structlog
import uvicorn
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from collector.errors import ListenError
from collector.lifecycle import Components
from vigil.connections import (
    DEFAULT_LIMITS,
    SWEEP_TICKS,
    ConnectionGuard,
    ConnectionLimits,
    HttpMetrics,
    guarded_protocol,
)

__all__ = [
    "GRPC_STOP_GRACE_S",
    "HTTP_STOP_GRACE_S",
    "PROBE_STOP_GRACE_S",
    "Checks",
    "GrpcServer",
    "HttpServer",
    "StopSignal",
    "http_server",
    "probe_app",
    "probe_server",
    "serve_until_signal",
]

log = structlog.get_logger(__name__)

HTTP_STOP_GRACE_S = 5.0
"""Seconds in-flight HTTP requests get to finish when a role stops. Connections still open
after it (a client stalled mid-upload) are aborted without a response: the request was not
accepted, and the sender retries it. Without this bound one stalled client kept the process
from ever exiting, until the orchestrator's SIGKILL lost everything not yet drained."""

PROBE_STOP_GRACE_S = 1.0
"""The stop grace of the ``/metrics``, ``/healthz``, ``/readyz`` servers (tiny requests)."""

GRPC_STOP_GRACE_S = 2.0
"""Seconds in-flight OTLP/gRPC calls get to finish when a role stops."""


class _Server(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its role and bounds its graceful stop.

    Stopping closes the listening socket (new connections are refused) and idle keep-alive
    connections, lets requests in flight finish for ``stop_grace_s``, then aborts the
    connections still open (no response is written: no 500 for a request that was never
    accepted) and gives their handlers ``cancel_s`` to notice before cancelling them.
    """

    def __init__(
        self, config: uvicorn.Config, stop_grace_s: float = HTTP_STOP_GRACE_S, guard: ConnectionGuard | None = None
    ) -> None:
        super().__init__(config)
        self.stop_grace_s = stop_grace_s
        self.cancel_s = stop_grace_s
        self.guard = guard

    async def on_tick(self, counter: int) -> bool:
        """uvicorn's tick (every 0.1 s), plus the connection limits' sweep."""
        if self.guard is not None and counter % SWEEP_TICKS == 0:
            self.guard.sweep(self.server_state.connections)
        return await super().on_tick(counter)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def _wait_tasks_to_complete(self) -> None:
        """uvicorn's wait for in-flight requests, bounded by ``stop_grace_s`` (called by ``shutdown``)."""
        wait = super()._wait_tasks_to_complete
        try:
            await asyncio.wait_for(wait(), self.stop_grace_s)
            return
        except TimeoutError:
            pass
        state = self.server_state
        log.warning("http_stop_grace_exceeded", connections=len(state.connections), grace_s=self.stop_grace_s)
        for connection in list(state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.abort()
        try:
            await asyncio.wait_for(wait(), self.cancel_s)
        except TimeoutError:
            for task in list(state.tasks):
                task.cancel()


def http_server(
    app: object,
    host: str,
    port: int,
    *,
    stop_grace_s: float = HTTP_STOP_GRACE_S,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    listener: str = "http",
    metrics: HttpMetrics | None = None,
) -> _Server:
    """A uvicorn server for ``app`` with a bounded graceful stop (see :class:`_Server`) and the connection
    limits of :mod:`vigil.connections` (counted on ``metrics`` under ``listener``)."""
    on_closed, on_open = metrics.listener(listener) if metrics is not None else (None, None)
    guard = ConnectionGuard(limits, on_closed, on_open)
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="off",
        http=guarded_protocol(guard),
        timeout_keep_alive=limits.keep_alive_s,
        h11_max_incomplete_event_size=limits.max_header_bytes,
    )
    return _Server(config, stop_grace_s, guard)


def bind_socket(host: str, port: int, backlog: int = 2048, what: str = "HTTP") -> socket.socket:
    """A listening TCP socket on ``host:port`` (``SO_REUSEADDR``, like uvicorn's own).

    Raises:
        ListenError: naming the listener ``what``, the address and the operating system's reason.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ListenError(what, host, port, str(exc.strerror)) from exc
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise ListenError(what, host, port, str(exc.strerror or exc)) from exc
    sock.set_inheritable(True)
    return sock


class HttpServer:
    """An HTTP server (uvicorn) as a component: served as a task of ``loop``.

    Args:
        app: the ASGI app.
        host: bind address.
        port: TCP port.
        loop: the event loop that serves it (start and shutdown are called from another thread).
        stop_grace_s: see :class:`_Server`.
        limits: header/body timeouts, keep-alive and the connection cap (:mod:`vigil.connections`).
        listener: the ``listener`` label of its connection metrics (``api``, ``otlp_http``, ``probes``).
        metrics: where its closed/open connections are counted.
    """

    def __init__(
        self,
        app: object,
        host: str,
        port: int,
        loop: asyncio.AbstractEventLoop,
        *,
        stop_grace_s: float = HTTP_STOP_GRACE_S,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        listener: str = "http",
        metrics: HttpMetrics | None = None,
    ) -> None:
        self.listener = listener
        self.server = http_server(
            app, host, port, stop_grace_s=stop_grace_s, limits=limits, listener=listener, metrics=metrics
        )
        self._loop = loop
        self.future: concurrent.futures.Future[None] | None = None

    @property
    def stop_budget_s(self) -> float:
        """The longest its stop takes: the grace, then as long again for aborted requests."""
        return self.server.stop_grace_s + self.server.cancel_s

    def start(self) -> None:
        """Bind the listening socket now, serve it on the loop, and wait until it listens (call it from
        another thread than the loop's).

        Raises:
            ListenError: the address cannot be bound (in use, not local, no permission), or the server
                stopped before it listened: the role stops before it logs that it started.
        """
        config = self.server.config
        sock = bind_socket(config.host, config.port, config.backlog, f"HTTP {self.listener}")
        self.future = asyncio.run_coroutine_threadsafe(self._serve(sock), self._loop)
        if not self.wait_listening():
            raise self._listen_error()

    async def _serve(self, sock: socket.socket) -> None:
        try:
            await self.server.serve(sockets=[sock])
        except SystemExit:  # uvicorn exits when it cannot serve; inside a task that would end the loop
            raise self._listen_error() from None

    def _listen_error(self) -> ListenError:
        config = self.server.config
        return ListenError(f"HTTP {self.listener}", config.host, config.port, "the server stopped")

    def wait_listening(self, poll_s: float = 0.05) -> bool:
        """Block until the server listens; False when it ended first."""
        while not self.server.started:
            if self.future is None or self.future.done():
                return False
            time.sleep(poll_s)
        return True

    def shutdown(self, timeout: float) -> bool:
        """Stop accepting, let requests finish (bounded by the grace), and wait at most ``timeout``."""
        self.server.should_exit = True
        if self.future is None:
            return True
        try:
            self.future.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        except ListenError:  # start() raised it already
            return True
        except (Exception, concurrent.futures.CancelledError):
            log.exception("http_server_failed", port=self.server.config.port)
            return False
        return True


Checks = Callable[[], dict[str, bool]]


def probe_app(registry: CollectorRegistry, checks: Checks) -> Starlette:
    """``/metrics`` (Prometheus or OpenMetrics), ``/healthz`` and ``/readyz`` (200 when every check passes)."""

    async def healthz(_: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> JSONResponse:
        results = checks()
        ok = all(results.values())
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "checks": results}, status_code=200 if ok else 503
        )

    async def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return Starlette(routes=[Route("/healthz", healthz), Route("/readyz", readyz), Route("/metrics", metrics)])


def probe_server(
    host: str,
    port: int,
    registry: CollectorRegistry,
    checks: Checks,
    *,
    limits: ConnectionLimits = DEFAULT_LIMITS,
    metrics: HttpMetrics | None = None,
) -> HttpServer:
    """The :func:`probe_app` server of a role, on the running loop, with the probes' short stop grace."""
    loop = asyncio.get_running_loop()
    app = probe_app(registry, checks)
    return HttpServer(
        app, host, port, loop, stop_grace_s=PROBE_STOP_GRACE_S, limits=limits, listener="probes", metrics=metrics
    )


class GrpcServer:
    """A bound ``grpc.aio`` server (:func:`collector.grpc_receiver.create_grpc_server`) as a component.

    Args:
        server: the bound, not yet started server (made on ``loop``).
        loop: the event loop it belongs to.
        grace_s: seconds in-flight calls get to finish at shutdown.
    """

    def __init__(self, server: grpc.aio.Server, loop: asyncio.AbstractEventLoop, grace_s: float = GRPC_STOP_GRACE_S):
        self._server = server
        self._loop = loop
        self._grace = grace_s

    def start(self) -> None:
        """Start serving."""
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result()

    def shutdown(self, timeout: float) -> bool:
        """Refuse new calls, let in-flight calls finish for the grace, then cancel them."""
        stopped = asyncio.run_coroutine_threadsafe(self._server.stop(min(self._grace, timeout)), self._loop)
        try:
            stopped.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        return True


class StopSignal:
    """SIGTERM/SIGINT on the running loop: sets :attr:`event` (the loop) and :attr:`stopping` (threads)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.stopping = threading.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._set)

    def _set(self) -> None:
        self.stopping.set()
        self.event.set()


async def serve_until_signal(
    name: str,
    components: Components,
    watch: Sequence[HttpServer],
    started: dict[str, Any],
    *,
    stop: StopSignal | None = None,
    stopping: dict[str, Any] | None = None,
    on_started: Callable[[], None] | None = None,
) -> bool:
    """Start ``components``, run until SIGTERM/SIGINT or until a ``watch`` ed server ends, shut them down.

    Logs ``<name>_started`` (with ``started``) and ``<name>_stopping`` (with ``stopping``); calls
    ``on_started`` once everything has started (``vigil run`` prints its addresses for a person).

    Args:
        name: the role's name in the log.
        components: the role's components in start order.
        watch: the servers whose end also stops the role.
        started: fields of the ``<name>_started`` line.
        stop: the signal handlers, when the caller installed them earlier (default: installed now,
            before anything starts, so that a signal during the start stops what was started).
        stopping: fields of the ``<name>_stopping`` line.

    Returns:
        True when every component stopped cleanly (``components.clean`` says which did not).
    """
    stop = stop or StopSignal()
    await asyncio.to_thread(components.start)
    log.info(f"{name}_started", **started)
    if on_started is not None:
        on_started()
    waits: list[asyncio.Future[Any]] = [asyncio.create_task(stop.event.wait())]
    waits += [asyncio.wrap_future(s.future) for s in watch if s.future is not None]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    log.info(f"{name}_stopping", **(stopping or {}))
    return await asyncio.to_thread(components.shutdown, components.budget_s)
