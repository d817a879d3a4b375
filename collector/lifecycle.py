"""One lifecycle for every long-lived component: ``start()``, then ``shutdown(timeout) -> bool``.

The shape is the OpenTelemetry SDK's for span processors and exporters (``shutdown`` bounded by
a timeout, reporting success; https://opentelemetry.io/docs/specs/otel/trace/sdk/#shutdown-1):

* ``start()`` starts the component's threads, servers or connections and returns;
* ``shutdown(timeout)`` stops it, finishing or handing over what it holds, waits at most
  ``timeout`` seconds and returns True when it stopped cleanly within them.

A process (the composition root, ``vigil/``) lists its components in :class:`Components`
in start order; it starts them in that order and shuts them down in reverse within one overall
deadline, so a component added to the list cannot be forgotten at shutdown (ARCHITECTURE.md,
"Lifecycle").
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar, runtime_checkable

import structlog

__all__ = ["Closing", "Component", "Components", "Hooks", "Periodic", "Together", "name_os_thread"]

log = structlog.get_logger(__name__)

OS_THREAD_NAME_CHARS = 15
"""The longest name Linux keeps for a thread (``TASK_COMM_LEN`` less its NUL)."""

_PR_SET_NAME = 15  # <linux/prctl.h>


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


_PRCTL = _prctl()


def os_thread_name(name: str) -> str:
    """The name the system shows for a thread named ``name``: without the ``vigil-`` prefix (the
    process is Vigil already), cut to :data:`OS_THREAD_NAME_CHARS` characters of ASCII."""
    short = name.removeprefix("vigil-").encode("ascii", "replace")[:OS_THREAD_NAME_CHARS]
    return short.decode("ascii")


def name_os_thread(name: str | None = None) -> bool:
    """Give the calling thread its Python name (or ``name``) in the system too, so that ``top -H``,
    ``ps -L`` and ``/proc/<pid>/task/<tid>/comm`` tell Vigil's threads apart (``prctl(2)``,
    ``PR_SET_NAME``; CPython does not). Call it first thing on the thread. False where the system
    has no such call (not Linux) or refused it; nothing else changes then."""
    if _PRCTL is None:
        return False
    given = os_thread_name(name if name is not None else threading.current_thread().name)
    return _PRCTL(_PR_SET_NAME, given.encode("ascii"), 0, 0, 0) == 0


@runtime_checkable
class Component(Protocol):
    """A long-lived part of a process: started once, shut down once within a timeout."""

    def start(self) -> None:
        """Start working (threads, servers, connections) and return."""

    def shutdown(self, timeout: float, /) -> bool:
        """Stop within ``timeout`` seconds; True when everything held was finished or handed over.

        The parameter is positional: components name it ``timeout`` or ``timeout_s``.
        """


C = TypeVar("C", bound=Component)


@dataclass(frozen=True)
class _Entry:
    name: str
    component: Component
    budget_s: float | None


class Components:
    """Components started in the order they were added and shut down in reverse.

    Each component is shut down with its own budget, never more than what is left of the overall
    timeout (a component added without a budget gets what is left). A component that fails to
    stop cleanly, or raises, is logged (``component_stop_unclean``) and the others still stop.
    If a start raises, the components already started are shut down and the error re-raised.
    """

    def __init__(self) -> None:
        self._entries: list[_Entry] = []
        self._started: list[_Entry] = []
        self.clean: dict[str, bool] = {}
        """After :meth:`shutdown`: component name → whether it stopped cleanly."""

    def add(self, name: str, component: C, budget_s: float | None = None) -> C:
        """Append ``component`` (started after, stopped before, those already added); returns it."""
        if any(e.name == name for e in self._entries):
            raise ValueError(f"component {name!r} added twice")
        self._entries.append(_Entry(name, component, budget_s))
        return component

    @property
    def names(self) -> list[str]:
        """The component names in start order."""
        return [e.name for e in self._entries]

    @property
    def budget_s(self) -> float:
        """The sum of the components' stop budgets (the longest :meth:`shutdown` needs)."""
        return sum(e.budget_s or 0.0 for e in self._entries)

    def start(self) -> None:
        """Start every component in order."""
        for entry in self._entries:
            try:
                entry.component.start()
            except BaseException:
                log.error("component_start_failed", component=entry.name)
                self.shutdown(self.budget_s)
                raise
            self._started.append(entry)

    def shutdown(self, timeout: float) -> bool:
        """Shut the started components down in reverse order within ``timeout`` seconds in all.

        Returns:
            True when every one of them stopped cleanly (see :attr:`clean` for which did not).
        """
        deadline = time.monotonic() + timeout
        while self._started:
            entry = self._started.pop()
            left = max(0.0, deadline - time.monotonic())
            budget = left if entry.budget_s is None else min(entry.budget_s, left)
            try:
                ok = entry.component.shutdown(budget)
            except Exception:
                log.exception("component_stop_failed", component=entry.name)
                ok = False
            self.clean[entry.name] = ok
            if not ok:
                log.warning("component_stop_unclean", component=entry.name, budget_s=round(budget, 3))
        return all(self.clean.values())


class Together:
    """Components started in order and shut down at the same time, each with the whole timeout.

    For parts that must stop side by side, e.g. the OTLP/HTTP and OTLP/gRPC receivers (both
    stop accepting at once), or the API and the probe servers.
    """

    def __init__(self, *components: Component) -> None:
        self._components = components

    def start(self) -> None:
        """Start each member in order."""
        for component in self._components:
            component.start()

    def shutdown(self, timeout: float) -> bool:
        """Shut every member down on its own thread; True when all stopped cleanly within ``timeout``."""
        results = [False] * len(self._components)

        def stop(i: int, component: Component) -> None:
            try:
                results[i] = component.shutdown(timeout)
            except Exception:
                log.exception("component_stop_failed", component=type(component).__name__)

        threads = [
            threading.Thread(target=stop, args=(i, c), name="vigil-stop", daemon=True)
            for i, c in enumerate(self._components)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        return all(results) and not any(t.is_alive() for t in threads)


class Hooks:
    """A component made of two callables, for one-off steps of a lifecycle.

    Args:
        on_start: called by :meth:`start` (nothing when omitted).
        on_shutdown: called by :meth:`shutdown` with the timeout; its result is returned
            (True when omitted).
    """

    def __init__(
        self, on_start: Callable[[], object] | None = None, on_shutdown: Callable[[float], bool] | None = None
    ) -> None:
        self._on_start = on_start
        self._on_shutdown = on_shutdown

    def start(self) -> None:
        """Call ``on_start``."""
        if self._on_start is not None:
            self._on_start()

    def shutdown(self, timeout: float) -> bool:
        """Call ``on_shutdown``."""
        return True if self._on_shutdown is None else self._on_shutdown(timeout)


class Periodic:
    """Calls ``tick`` every ``interval_s`` on a daemon thread until shut down.

    A tick that raises is logged (``<event>``) and the next one runs: background upkeep never dies.

    Args:
        name: the thread's name.
        tick: the work of one pass.
        interval_s: seconds between passes.
        immediately: run the first pass at start rather than one interval later.
        event: the log event of a failed pass (default ``<name>_failed``).
    """

    def __init__(
        self,
        name: str,
        tick: Callable[[], object],
        interval_s: float,
        *,
        immediately: bool = False,
        event: str | None = None,
    ) -> None:
        self._name = name
        self._tick = tick
        self._interval = interval_s
        self._immediately = immediately
        self._event = event or f"{name}_failed"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def shutdown(self, timeout: float) -> bool:
        """Stop after the pass under way; True when the thread ended within ``timeout``."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _loop(self) -> None:
        name_os_thread()
        if not self._immediately and self._stop.wait(self._interval):
            return
        while True:
            try:
                self._tick()
            except Exception:
                log.exception(self._event)
            if self._stop.wait(self._interval):
                return


class _Closeable(Protocol):
    def close(self) -> None: ...


class Closing:
    """A resource opened before the lifecycle (a store, a client) closed at shutdown."""

    def __init__(self, resource: _Closeable) -> None:
        self._resource = resource

    def start(self) -> None:
        """Nothing: the resource is already open."""

    def shutdown(self, timeout: float) -> bool:
        """Close the resource."""
        self._resource.close()
        return True
