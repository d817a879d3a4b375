"""Tests for collector.budget: the split of the memory limit, byte accounts, estimates, gauges (issue 15)."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry

from collector.budget import (
    SHARES,
    SPAN_OVERHEAD_BYTES,
    STRUCTURES,
    ByteAccount,
    MemoryBudgets,
    MemoryMetrics,
    batch_bytes,
    span_bytes,
)
from collector.model import Span, TraceBatch
from collector.otlp import decode_json, decode_protobuf
from vigil.bench.synth import body, make_run

MIB = 1024 * 1024


class TestMemoryBudgets:
    def test_default_limit_splits_into_the_documented_shares(self) -> None:
        """1,024 MiB: intake 256 MiB (25 %, reserved for intake), the others as the docstring says."""
        budgets = MemoryBudgets.from_limit(1024 * MIB)
        assert 256 * MIB == budgets.intake
        assert (25, 61, 40, 20, 30) == tuple(
            budgets.of(s) // MIB for s in ("stream", "inflight", "late", "judge", "spool")
        )

    def test_shares_leave_headroom_for_the_process_itself(self) -> None:
        """Every structure has a share, and together they take less than half the limit."""
        assert set(STRUCTURES) == set(SHARES)
        assert sum(SHARES.values()) < 0.5
        assert 0.25 == SHARES["intake"]

    def test_no_limit_means_no_budgets(self) -> None:
        """A limit of 0 (disabled) leaves every structure unbounded."""
        assert all(0 == value for _, value in MemoryBudgets.from_limit(0).items())

    def test_items_follow_the_structures(self) -> None:
        assert list(STRUCTURES) == [name for name, _ in MemoryBudgets.from_limit(100 * MIB).items()]


class TestByteAccount:
    def test_fits_and_over(self) -> None:
        """``fits`` says whether more bytes stay within the budget, ``over`` whether they are past it."""
        account = ByteAccount(100)
        assert account.fits(100)
        account.add(60)
        assert not account.fits(41)
        assert not account.over()
        account.add(41)
        assert account.over()
        account.sub(101)
        assert (0, False) == (account.held, account.over())

    def test_unbounded(self) -> None:
        account = ByteAccount(0)
        account.add(10**12)
        assert account.fits(10**12)
        assert not account.over()

    def test_negative_budget_refused(self) -> None:
        with pytest.raises(ValueError, match="negative"):
            ByteAccount(-1)


class TestEstimates:
    def test_span_bytes_is_the_body_share_plus_a_fixed_cost(self) -> None:
        assert SPAN_OVERHEAD_BYTES + 250 == span_bytes(1000, 4)
        assert SPAN_OVERHEAD_BYTES == span_bytes(1000, 0)

    def test_batch_without_size_is_estimated_per_span(self) -> None:
        spans = tuple(Span("a" * 32, f"{i + 1:016x}", None, "op") for i in range(3))
        assert 3 * SPAN_OVERHEAD_BYTES == batch_bytes(TraceBatch("a" * 32, spans))
        assert 7 == batch_bytes(TraceBatch("a" * 32, spans, 0, 7))

    def test_decoders_count_the_body_once_over_its_batches(self) -> None:
        """The protobuf decoder's batches add up to the body plus the per-span cost (within rounding)."""
        rng = random.Random(3)
        runs = [make_run(rng, content_bytes=1024) for _ in range(5)]
        payload = body([s for r in runs for s in r.spans])
        result = decode_protobuf(payload)
        spans = result.accepted
        total = sum(b.size for b in result.batches)
        assert 5 == len(result.batches)
        assert len(payload) - spans <= total - spans * SPAN_OVERHEAD_BYTES <= len(payload)

    def test_content_makes_batches_bigger(self) -> None:
        """A run carrying 1–2 KB of messages per LLM span is estimated larger than the same run without."""
        plain = decode_protobuf(body(list(make_run(random.Random(5)).spans))).batches[0]
        rich = decode_protobuf(body(list(make_run(random.Random(5), content_bytes=1024).spans))).batches[0]
        assert rich.size > plain.size + 5 * 1024

    def test_json_batches_carry_a_size(self) -> None:
        payload = (
            b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"' + b"a" * 32 + b'","spanId":"'
            + b"b" * 16 + b'","name":"x"}]}]}]}'
        )  # fmt: skip
        (batch,) = decode_json(payload).batches
        assert span_bytes(len(payload), 1) == batch.size


class TestMemoryMetrics:
    def test_gauges_read_the_accounts_at_scrape_time(self) -> None:
        registry = CollectorRegistry()
        metrics = MemoryMetrics(registry)
        metrics.budgets(MemoryBudgets.from_limit(100 * MIB))
        account = ByteAccount(5 * MIB)
        metrics.bind("stream", account)
        account.add(1234)
        assert 1234 == registry.get_sample_value("vigil_memory_held_bytes", {"structure": "stream"})
        assert 5 * MIB == registry.get_sample_value("vigil_memory_budget_bytes", {"structure": "stream"})
        assert 25 * MIB == registry.get_sample_value("vigil_memory_budget_bytes", {"structure": "intake"})
        assert 0 == registry.get_sample_value("vigil_memory_held_bytes", {"structure": "intake"})
