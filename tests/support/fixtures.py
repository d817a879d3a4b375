"""Small helpers for tests of threaded components and of resources built per test.

- :func:`wait_until`: poll a condition a background thread makes true, within a bound.
- :class:`Clock`: a clock the test sets by hand (wall or monotonic), starting at :data:`T0`.
- :func:`closing_factory`: the body of a factory fixture that closes everything it built.
- :func:`served`: an ASGI app under a real uvicorn server on a free loopback port.
- :func:`runs_until_shutdown`: a periodic component works after ``start`` and stops at ``shutdown``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import uvicorn

T = TypeVar("T")

T0 = 1_700_000_000.0
"""Where :class:`Clock` starts by default (2023-11-14, Unix epoch seconds)."""


class Clock:
    """A clock the test moves by hand (``now``): pass it where code takes ``clock=time.time`` or
    ``time.monotonic``."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def wait_until(condition: Callable[[], object], timeout_s: float = 10.0, poll_s: float = 0.01) -> bool:
    """Poll ``condition`` until it is true or ``timeout_s`` passed; returns its last truth.

    A bound on waiting for another thread, not a measurement: the test asserts on the state
    afterwards (or on the returned value).
    """
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return bool(condition())
        time.sleep(poll_s)
    return True


@contextmanager
def closing_factory(build: Callable[..., T], close: Callable[[T], object]) -> Iterator[Callable[..., T]]:
    """Yield ``build`` (called with keyword arguments) and ``close`` everything it built on exit::

    @pytest.fixture
    def harness_factory() -> Iterator[Callable[..., Harness]]:
        with closing_factory(Harness, Harness.close) as make:
            yield make
    """
    made: list[T] = []

    def make(**kwargs: Any) -> T:
        made.append(build(**kwargs))
        return made[-1]

    try:
        yield make
    finally:
        for one in made:
            close(one)


@contextmanager
def served(app: Any, **config: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn (``config``: more ``uvicorn.Config`` options) on a free loopback
    port in a thread; yield its base URL, stop it on exit.

    Raises:
        AssertionError: the server did not start within 30 s.
    """
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_config=None, access_log=False, **config))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: server.started, timeout_s=30, poll_s=0.02), "the server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class _Periodic(Protocol):
    def start(self) -> None: ...

    def shutdown(self, timeout: float) -> bool: ...


def runs_until_shutdown(component: _Periodic, count: Callable[[], int], at_least: int) -> int:
    """Start ``component``, wait until ``count()`` reaches ``at_least``, shut it down, and check that
    it stopped cleanly and counts no more; returns the count at shutdown."""
    component.start()
    assert wait_until(lambda: count() >= at_least), f"fewer than {at_least} passes"
    assert component.shutdown(5.0)
    stopped_at = count()
    time.sleep(0.05)
    assert stopped_at == count(), "it went on after shutdown"
    return stopped_at
