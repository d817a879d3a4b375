"""Live progress of the demo fleet: runs sent by kind, in flight, and the achieved rate.

:class:`FleetStats` is the thread-safe tally the fleet updates; :class:`LiveProgress` draws
it with ``rich`` a few times a second while the fleet runs, only on a terminal.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from collector.demo.plan import Kind

__all__ = ["FleetStats", "LiveProgress"]


class FleetStats:
    """Counts of runs started and finished, by kind. Every method is thread-safe.

    Args:
        rate_per_s: the target rate (shown next to the achieved one).
        now: clock, injected for tests.
    """

    def __init__(self, rate_per_s: float, now: Callable[[], float] = time.monotonic) -> None:
        self.rate_per_s = rate_per_s
        self._now = now
        self._lock = threading.Lock()
        self._started_at = now()
        self._last_sent_at = self._started_at
        self._sent: Counter[Kind] = Counter()
        self._done: Counter[Kind] = Counter()
        self._raised = 0
        self.spans_exported = 0
        self.spans_failed = 0

    def restart(self) -> None:
        """Restart the clock the rate is measured from (counts are kept)."""
        with self._lock:
            self._started_at = self._last_sent_at = self._now()

    def sent(self, kind: Kind) -> None:
        """Count one run handed to a worker."""
        with self._lock:
            self._sent[kind] += 1
            self._last_sent_at = self._now()

    def done(self, kind: Kind, *, raised: bool) -> None:
        """Count one finished run (``raised``: an exception reached the caller)."""
        with self._lock:
            self._done[kind] += 1
            self._raised += raised

    def exports(self, exported: int, failed: int) -> None:
        """Record the spans the exporter delivered and the spans it failed to (at the end)."""
        with self._lock:
            self.spans_exported, self.spans_failed = exported, failed

    def snapshot(self) -> tuple[dict[Kind, int], dict[Kind, int], int, float]:
        """``(sent by kind, done by kind, runs that raised, seconds since start)``."""
        with self._lock:
            return dict(self._sent), dict(self._done), self._raised, self._now() - self._started_at

    def rate(self) -> float:
        """Runs sent per second, from the start to the last run sent."""
        with self._lock:
            total, span = sum(self._sent.values()), self._last_sent_at - self._started_at
        return (total - 1) / span if total > 1 and span > 0 else 0.0

    def summary(self) -> str:
        """One line: totals, the achieved rate and the runs of each kind."""
        sent, done, raised, elapsed = self.snapshot()
        kinds = ", ".join(f"{k.value} {n}" for k, n in sorted(sent.items(), key=lambda kv: -kv[1]))
        return (
            f"{sum(sent.values())} runs sent at {self.rate():.2f}/s, {sum(done.values())} finished "
            f"({raised} raised) in {elapsed:.1f} s: {kinds}; spans exported {self.spans_exported}, "
            f"failed {self.spans_failed}"
        )

    def table(self) -> Group:
        """The live display: one row per kind, then totals and rates."""
        sent, done, raised, elapsed = self.snapshot()
        total = sum(sent.values())
        table = Table(title="vigil demo", title_justify="left", expand=False)
        table.add_column("kind")
        table.add_column("sent", justify="right")
        table.add_column("done", justify="right")
        table.add_column("share", justify="right")
        for kind in Kind:
            n = sent.get(kind, 0)
            table.add_row(kind.value, str(n), str(done.get(kind, 0)), f"{100 * n / total:.0f} %" if total else "-")
        footer = Text(
            f"{total} sent, {total - sum(done.values())} in flight, {raised} raised to the caller · "
            f"{self.rate():.2f} runs/s (target {self.rate_per_s:g}) · {elapsed:.0f} s"
        )
        return Group(table, footer)


class LiveProgress:
    """A ``rich`` live view of :class:`FleetStats` on stderr; does nothing off a terminal.

    Use as a context manager around the fleet's run.
    """

    def __init__(self, stats: FleetStats, enabled: bool | None = None, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._enabled = self._console.is_terminal if enabled is None else enabled
        self._live = (
            Live(get_renderable=stats.table, console=self._console, refresh_per_second=4, transient=False)
            if self._enabled
            else None
        )

    def __enter__(self) -> LiveProgress:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            self._live.stop()
