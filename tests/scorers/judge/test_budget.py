"""Tests for scorers.judge.budget: the hourly spend budget and the verdict cache."""

from __future__ import annotations

import pytest

from scorers.judge.budget import Price, SpendBudget, VerdictCache
from scorers.judge.model import JudgeResult


def _result(trace_id: str = "a" * 32) -> JudgeResult:
    return JudgeResult(trace_id, "j", "r@1", "m", 0.5, True, "because")


class TestSpendBudget:
    """Reservations against token and USD limits per hour window."""

    def test_token_limit(self) -> None:
        """A reservation that would pass the token limit is refused; within it, accepted."""
        budget = SpendBudget(tokens_per_hour=1000, clock=lambda: 0.0)
        assert budget.try_reserve(600, 0.0) is not None
        assert budget.try_reserve(600, 0.0) is None
        assert budget.try_reserve(400, 0.0) is not None

    def test_usd_limit(self) -> None:
        """The USD limit applies independently of tokens."""
        budget = SpendBudget(usd_per_hour=1.0, clock=lambda: 0.0)
        assert budget.try_reserve(10, 0.9) is not None
        assert budget.try_reserve(10, 0.2) is None

    def test_settle_replaces_the_estimate(self) -> None:
        """Settling a reservation counts the real usage instead of the estimate."""
        budget = SpendBudget(tokens_per_hour=1000, clock=lambda: 0.0)
        reservation = budget.try_reserve(900, 0.09)
        assert reservation is not None
        budget.settle(reservation, 100, 0.01)
        assert (100, pytest.approx(0.01)) == budget.spent
        assert budget.try_reserve(850, 0.0) is not None

    def test_new_window_resumes(self) -> None:
        """An exhausted budget resumes when the next hour window starts."""
        now = [3599.0]
        budget = SpendBudget(tokens_per_hour=100, clock=lambda: now[0])
        assert budget.try_reserve(100, 0.0) is not None
        assert budget.try_reserve(1, 0.0) is None
        now[0] = 3600.0
        assert budget.try_reserve(100, 0.0) is not None

    def test_unlimited(self) -> None:
        """Without limits everything is accepted."""
        budget = SpendBudget()
        assert all(budget.try_reserve(10**9, 1e6) is not None for _ in range(3))

    def test_price(self) -> None:
        """USD per million tokens, input and output priced separately."""
        assert 0.15 + 0.6 == pytest.approx(Price(0.15, 0.6).cost(1_000_000, 1_000_000))


class TestVerdictCache:
    """The bounded LRU of verdicts."""

    def test_hit_and_miss(self) -> None:
        """A stored key is found; another key is not."""
        cache = VerdictCache(2)
        cache.put(("r@1", "m", "h1"), _result())
        assert _result() == cache.get(("r@1", "m", "h1"))
        assert cache.get(("r@2", "m", "h1")) is None

    def test_bounded_lru(self) -> None:
        """Beyond the bound the least recently used entry goes."""
        cache = VerdictCache(2)
        cache.put(("r", "m", "1"), _result())
        cache.put(("r", "m", "2"), _result())
        assert cache.get(("r", "m", "1")) is not None  # 1 is now the most recent
        cache.put(("r", "m", "3"), _result())
        assert 2 == len(cache)
        assert cache.get(("r", "m", "2")) is None
        assert cache.get(("r", "m", "1")) is not None

    def test_disabled(self) -> None:
        """Size 0 caches nothing."""
        cache = VerdictCache(0)
        cache.put(("r", "m", "1"), _result())
        assert cache.get(("r", "m", "1")) is None
