"""Test doubles of the judge: an in-memory :class:`~scorers.judge.model.JudgeSink` and pair source."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from collector.errors import BackpressureError
from scorers.judge.model import JudgeResult, VerdictPair
from scorers.model import Flag, Priority, ScoredRun

__all__ = ["InMemoryJudgeSink", "InMemorySessionJudgeSink", "ListPairSource", "merge_flags"]


def merge_flags(old: Flag | None, new: Flag) -> Flag:
    """Union of reasons (highest priority first, then first seen), highest priority, earlier sample rate."""
    if old is None:
        return new
    reasons = list(dict.fromkeys((*old.reasons, *new.reasons)))
    priority = max(old.priority, new.priority, key=lambda p: p.rank)
    return Flag(tuple(reasons), Priority(priority), old.sample_rate)


class InMemoryJudgeSink:
    """A thread-safe in-memory judge sink with the SQL store's semantics, plus failure injection.

    Attributes:
        results: the latest result per (trace id, judge).
        flags: the merged flag per trace id (only runs flagged through this sink or seeded).
        writes: every successful write, in order.
    """

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], JudgeResult] = {}
        self.flags: dict[str, Flag] = {}
        self.writes: list[JudgeResult] = []
        self._failures = 0
        self._lock = threading.Lock()

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` writes raise :class:`BackpressureError` (nothing written)."""
        with self._lock:
            self._failures = count

    def seed_flag(self, trace_id: str, flag: Flag) -> None:
        """Mark a run as already flagged by the stream."""
        with self._lock:
            self.flags[trace_id] = flag

    def write_judgement(self, result: JudgeResult, scored: ScoredRun, flag: Flag | None) -> bool:
        """Store ``result``; merge ``flag``. True when the run was not flagged before."""
        with self._lock:
            if self._failures > 0:
                self._failures -= 1
                raise BackpressureError(0.01)
            self.results[(result.trace_id, result.judge)] = result
            self.writes.append(result)
            if flag is None:
                return False
            old = self.flags.get(result.trace_id, scored.flag)
            self.flags[result.trace_id] = merge_flags(old, flag)
            return old is None


class ListPairSource:
    """A :class:`~scorers.judge.model.VerdictPairSource` over a fixed list."""

    def __init__(self, pairs: Iterable[VerdictPair]) -> None:
        self.pairs = list(pairs)
        self.calls = 0

    def verdict_pairs(self) -> list[VerdictPair]:
        """The pairs (counts the calls)."""
        self.calls += 1
        return list(self.pairs)


class InMemorySessionJudgeSink:
    """A thread-safe in-memory :class:`~scorers.judge.model.SessionJudgeSink`, plus failure injection.

    Attributes:
        results: the latest result per (session id, judge).
        reasons: the flag reasons added per session id, with their priority, in order.
    """

    def __init__(self) -> None:
        self.results: dict[tuple[str, str], JudgeResult] = {}
        self.reasons: dict[str, list[tuple[str, Priority]]] = {}
        self._failures = 0
        self._lock = threading.Lock()

    def fail_next(self, count: int = 1) -> None:
        """Make the next ``count`` writes raise :class:`BackpressureError` (nothing written)."""
        with self._lock:
            self._failures = count

    def write_session_judgement(
        self, session_id: str, result: JudgeResult, reason: str | None, priority: Priority
    ) -> None:
        """Store ``result``; remember ``reason``."""
        with self._lock:
            if self._failures > 0:
                self._failures -= 1
                raise BackpressureError(0.01)
            self.results[(session_id, result.judge)] = result
            if reason is not None:
                self.reasons.setdefault(session_id, []).append((reason, priority))
