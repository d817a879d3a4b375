"""Small helpers for tests of threaded components and of resources built per test.

- :func:`wait_until`: poll a condition a background thread makes true, within a bound.
- :func:`closing_factory`: the body of a factory fixture that closes everything it built.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


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
