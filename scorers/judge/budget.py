"""Spend budget per judge: tokens and estimated USD per hour window, and the verdict cache.

A request first *reserves* its estimated cost; if that would pass either limit of the
current window the run is not judged (counted by the caller). When the answer arrives the
reservation is *settled* with the real usage. Reserving up front keeps concurrent requests
from overshooting the budget together. Windows are fixed hours of the injected clock
(``floor(now / 3600)``); a new window starts from zero, so judging resumes by itself.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from scorers.judge.model import JudgeResult

WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class Price:
    """USD per million tokens."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Estimated USD of a request."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reserved share of one window."""

    window: int
    tokens: int
    usd: float


class SpendBudget:
    """Token and USD limits per hour window. Thread-safe.

    Args:
        tokens_per_hour: token limit (None: unlimited).
        usd_per_hour: estimated USD limit (None: unlimited).
        clock: Unix seconds (injected in tests).
    """

    def __init__(
        self,
        tokens_per_hour: int | None = None,
        usd_per_hour: float | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tokens_limit = tokens_per_hour
        self._usd_limit = usd_per_hour
        self._clock = clock
        self._lock = threading.Lock()
        self._window = -1
        self._tokens = 0
        self._usd = 0.0

    @property
    def window(self) -> int:
        """The current window's number (``floor(now / 3600)``)."""
        return int(self._clock() // WINDOW_S)

    @property
    def spent(self) -> tuple[int, float]:
        """Tokens and USD counted in the current window."""
        with self._lock:
            self._roll()
            return self._tokens, self._usd

    def try_reserve(self, tokens: int, usd: float) -> Reservation | None:
        """Reserve an estimate; None when it would pass a limit of the current window."""
        with self._lock:
            self._roll()
            if self._tokens_limit is not None and self._tokens + tokens > self._tokens_limit:
                return None
            if self._usd_limit is not None and self._usd + usd > self._usd_limit:
                return None
            self._tokens += tokens
            self._usd += usd
            return Reservation(self._window, tokens, usd)

    def settle(self, reservation: Reservation, tokens: int, usd: float) -> None:
        """Replace a reservation by the real usage (in the window it was taken from, if still current)."""
        with self._lock:
            self._roll()
            if reservation.window == self._window:
                self._tokens += tokens - reservation.tokens
                self._usd += usd - reservation.usd
            else:
                self._tokens += tokens
                self._usd += usd

    def _roll(self) -> None:
        window = int(self._clock() // WINDOW_S)
        if window != self._window:
            self._window, self._tokens, self._usd = window, 0, 0.0


CacheKey = tuple[str, str, str]
"""``(rubric version label, model, content hash)``."""


class VerdictCache:
    """A bounded LRU of verdicts by :data:`CacheKey`. Thread-safe.

    Only successful verdicts are cached: an error is retried on the next occurrence.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._max = max_entries
        self._items: OrderedDict[CacheKey, JudgeResult] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: CacheKey) -> JudgeResult | None:
        """The cached verdict, refreshed as most recently used, or None."""
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: CacheKey, result: JudgeResult) -> None:
        """Store a verdict, evicting the least recently used beyond the bound."""
        if self._max <= 0:
            return
        with self._lock:
            self._items[key] = result
            self._items.move_to_end(key)
            while len(self._items) > self._max:
                self._items.popitem(last=False)
