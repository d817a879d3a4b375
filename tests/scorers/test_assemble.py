"""Tests for scorers.assemble: run completion, late spans, caps — with an injected clock."""

from __future__ import annotations

from typing import Any

import pytest
import zstandard

from collector.budget import ByteAccount, Pressure
from collector.model import AttrValue, Span, SpanEvent, SpanKind, StatusCode, TraceBatch
from collector.owed import OwedSpans
from scorers.assemble import Assembler, ClosedTrace, freeze_spans, thaw_spans
from tests.support.fixtures import Clock

TRACE = "a" * 32
OTHER = "b" * 32


class Events:
    """Collects assembler events."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def assembler_event(self, event: str, count: int = 1) -> None:
        self.counts[event] = self.counts.get(event, 0) + count


def span(sid: str, parent: str | None = "0" * 15 + "1", *, trace: str = TRACE, end: int = 2) -> Span:
    return Span(trace_id=trace, span_id=sid.rjust(16, "0"), parent_span_id=parent, name="s", start_ns=1, end_ns=end)


def batch(*spans: Span) -> TraceBatch:
    return TraceBatch(spans[0].trace_id, tuple(spans))


def make(clock: Clock, events: Events | None = None, **kw: Any) -> Assembler:
    return Assembler(quiet_period_s=2.0, max_idle_s=300.0, clock=clock, observer=events, **kw)


class TestCompletion:
    """When a run is released."""

    def test_children_first_then_root_closes_after_quiet_period(self) -> None:
        """A run closes quiet_period after its last span once the root has ended."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("2"), span("3")))
        clock.now += 1
        assert [] == asm.due()
        asm.add(batch(span("1", None)))
        clock.now += 1.9
        assert [] == asm.due()
        clock.now += 0.2
        (closed,) = asm.due()
        assert (TRACE, 3, True, False) == (closed.trace_id, len(closed.spans), closed.complete, closed.rescore)
        assert 0 == asm.inflight

    def test_new_span_after_root_extends_quiet_period(self) -> None:
        """Spans arriving after the root push the deadline back."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None)))
        clock.now += 1.5
        asm.add(batch(span("2")))
        clock.now += 1.5
        assert [] == asm.due()
        clock.now += 0.6
        assert 1 == len(asm.due())

    def test_no_root_closes_incomplete_after_max_idle(self) -> None:
        """A trace without an ended root is closed as incomplete after the idle timeout."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("2")))
        clock.now += 299
        assert [] == asm.due()
        clock.now += 2
        (closed,) = asm.due()
        assert closed.complete is False

    def test_unended_root_does_not_count(self) -> None:
        """A root without an end time has not ended."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None, end=0)))
        clock.now += 10
        assert [] == asm.due()

    def test_duplicates_are_merged(self) -> None:
        """The same span id twice (an OTLP retry) is one span."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None), span("2")))
        asm.add(batch(span("2")))
        clock.now += 3
        (closed,) = asm.due()
        assert 2 == len(closed.spans)

    def test_traces_are_independent_and_released_in_deadline_order(self) -> None:
        """Two traces close at their own deadlines."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None)))
        clock.now += 1
        asm.add(batch(span("1", None, trace=OTHER)))
        clock.now += 1.5
        assert [TRACE] == [c.trace_id for c in asm.due()]
        clock.now += 1
        assert [OTHER] == [c.trace_id for c in asm.due()]

    def test_drain_closes_everything(self) -> None:
        """drain() releases in-flight runs; complete only where the root ended."""
        asm = make(Clock(1000.0))
        asm.add(batch(span("1", None)))
        asm.add(batch(span("2", trace=OTHER)))
        closed = {c.trace_id: c.complete for c in asm.drain()}
        assert {TRACE: True, OTHER: False} == closed
        assert 0 == asm.inflight


class TestLateSpans:
    """Spans arriving after a run was released."""

    def test_late_span_reopens_with_all_spans_and_rescore(self) -> None:
        """A late span is counted and the run is re-released with every span."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events)
        asm.add(batch(span("1", None), span("2")))
        clock.now += 3
        assert 1 == len(asm.due())
        asm.add(batch(span("3")))
        clock.now += 3
        (closed,) = asm.due()
        assert (3, True, True) == (len(closed.spans), closed.rescore, closed.complete)
        assert 1 == events.counts["late_spans"]

    def test_a_run_reopened_again_waits_longer_from_its_first_late_span(self) -> None:
        """The first reopening is re-scored a quiet period after its last span, as before; the second waits
        2 × quiet from its first late span, the third 4 ×, never less than quiet after its last span."""
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None)))
        clock.now += 3
        assert 1 == len(asm.due())
        for n, hold in ((2, 2.0), (3, 4.0), (4, 8.0), (5, 16.0)):
            asm.add(batch(span(str(n))))  # reopening n - 1
            clock.now += hold - 0.1
            assert [] == asm.due()
            clock.now += 0.2
            (closed,) = asm.due()
            assert (n, True, True) == (len(closed.spans), closed.rescore, closed.complete)
            clock.now += 3

    def test_late_spans_coming_while_a_reopened_run_waits_share_its_rescore(self) -> None:
        """Spans of a run held for its re-score merge into it: one re-score carries them all; one coming
        just before the hold ends still gets its quiet period."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events)
        asm.add(batch(span("1", None)))
        clock.now += 3
        asm.due()
        asm.add(batch(span("2")))
        clock.now += 3
        asm.due()  # first reopening: re-scored after the quiet period
        asm.add(batch(span("3")))  # second: held 4 s from now
        clock.now += 3.5
        assert [] == asm.due()
        asm.add(batch(span("4")))  # in flight: merged, and quiet for 2 s more (until +5.5)
        clock.now += 1.0
        assert [] == asm.due()  # the hold has passed, the quiet period has not
        clock.now += 1.1
        (closed,) = asm.due()
        assert (4, True) == (len(closed.spans), closed.rescore)
        assert 2 == events.counts["late_spans"]  # span 4 came to a run in flight: not late

    def test_a_trickle_of_late_spans_costs_about_log2_rescores(self) -> None:
        """40 late spans, each 3 s after the last (longer than the quiet period): 40 re-scores before, now
        one per doubling hold; the last re-score carries every span."""
        clock = Clock(1000.0)
        asm = make(clock, rescore_hold_max_s=60.0)
        asm.add(batch(span("1", None)))
        clock.now += 3
        released = asm.due()
        for n in range(2, 42):
            asm.add(batch(span(str(n))))
            clock.now += 3
            released += asm.due()
        clock.now += 61
        released += asm.due()
        rescores = [c for c in released if c.rescore]
        assert 6 == len(rescores)  # holds of 2, 4, 8, 16, 32 and 60 s (the cap) cover the 120 s trickle
        assert 41 == len(rescores[-1].spans)
        assert sorted(len(c.spans) for c in rescores) == [len(c.spans) for c in rescores]

    def test_the_hold_is_capped(self) -> None:
        """No reopening waits longer than ``rescore_hold_max_s`` from its first late span."""
        clock = Clock(1000.0)
        asm = make(clock, rescore_hold_max_s=5.0)
        asm.add(batch(span("1", None)))
        clock.now += 3
        asm.due()
        for n in range(2, 9):
            asm.add(batch(span(str(n))))
            clock.now += 5.1
            (closed,) = asm.due()
            assert n == len(closed.spans)

    def test_duplicate_after_close_is_ignored(self) -> None:
        """A retry of spans already scored is not a late span and reopens nothing."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events)
        asm.add(batch(span("1", None)))
        clock.now += 3
        asm.due()
        asm.add(batch(span("1", None)))
        assert 0 == asm.inflight
        assert 1 == events.counts["duplicate_spans"]
        assert "late_spans" not in events.counts

    def test_late_after_eviction_is_counted_and_dropped(self) -> None:
        """Late spans for a run evicted from the closed cache are dropped, never a partial duplicate."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_size=1)
        asm.add(batch(span("1", None)))
        asm.add(batch(span("1", None, trace=OTHER)))
        clock.now += 3
        assert 2 == len(asm.due())
        asm.add(batch(span("9")))
        assert 0 == asm.inflight
        assert 1 == events.counts["late_evicted"]


class TestLateWindow:
    """``late_window``: how long ago the run the closed-run cache forgets next was scored."""

    def test_the_age_of_the_run_forgotten_next(self) -> None:
        clock = Clock(1000.0)
        asm = make(clock, closed_cache_size=2)
        assert 0.0 == asm.late_window()  # nothing kept
        asm.add(batch(span("1", None)))
        clock.now += 3
        assert 1 == len(asm.due())  # scored at 1003
        clock.now += 4
        asm.add(batch(span("1", None, trace=OTHER)))
        clock.now += 3
        assert 1 == len(asm.due())  # scored at 1010
        assert 7.0 == asm.late_window()
        third = "c" * 32
        asm.add(batch(span("1", None, trace=third)))
        clock.now += 3
        assert 1 == len(asm.due())  # scored at 1013: the first one is forgotten
        assert 3.0 == asm.late_window()
        clock.now += 10
        assert 13.0 == asm.late_window()  # the cache turns over only as runs are scored

    def test_a_run_reopened_by_a_late_span_leaves_the_window(self) -> None:
        clock = Clock(1000.0)
        asm = make(clock)
        asm.add(batch(span("1", None)))
        clock.now += 3
        asm.due()
        clock.now += 1
        asm.add(batch(span("2")))  # late: in flight again
        assert 0.0 == asm.late_window()
        clock.now += 3
        assert 1 == len(asm.due())
        assert 0.0 == asm.late_window()  # just scored again

    def test_runs_owed_spans_are_kept_apart_and_not_counted(self) -> None:
        clock = Clock(1000.0)
        owed = OwedSpans(horizon_s=60.0, max_spans=1000, clock=clock)
        asm = make(clock, owed=owed)
        owed.record([batch(span("2"))])  # the intake refused a span of TRACE: its retry is coming
        asm.add(batch(span("1", None)))
        assert 1 == len(asm.drain())  # scored while owed: pinned apart
        assert 0.0 == asm.late_window()
        clock.now += 5
        asm.add(batch(span("1", None, trace=OTHER)))
        clock.now += 3
        assert 1 == len(asm.due())  # OTHER scored at 1008, owed nothing
        clock.now += 2
        assert 2.0 == asm.late_window()  # not TRACE's 10 s


class TestCaps:
    """Bounded memory."""

    def test_span_cap_drops_and_counts(self) -> None:
        """Spans beyond the per-run cap are dropped and counted."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, max_spans_per_run=3)
        asm.add(batch(*(span(str(i)) for i in range(2, 7))))
        assert 2 == events.counts["spans_dropped_cap"]
        (closed,) = asm.drain()
        assert 3 == len(closed.spans)

    def test_inflight_cap_closes_a_complete_run_early_before_cutting_a_rootless_one(self) -> None:
        """At the in-flight cap the run whose root ended is closed now, complete, rather than a run
        still waiting for its root being cut."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, max_inflight=2)
        asm.add(batch(span("1", None)))
        asm.add(batch(span("2", trace=OTHER)))
        forced = asm.add(batch(span("3", trace="c" * 32)))
        assert [(TRACE, True)] == [(c.trace_id, c.complete) for c in forced]
        assert 2 == asm.inflight
        assert {"closed_early": 1} == events.counts

    def test_inflight_cap_closes_soonest_due_first_when_every_root_ended(self) -> None:
        """With every root ended the run due soonest is closed early, complete, to admit the new one."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, max_inflight=2)
        asm.add(batch(span("1", None)))
        clock.now += 1
        asm.add(batch(span("2", None, trace=OTHER)))
        forced = asm.add(batch(span("3", None, trace="c" * 32)))
        assert [(TRACE, True)] == [(c.trace_id, c.complete) for c in forced]
        assert {"closed_early": 1} == events.counts

    def test_without_pressure_the_run_cap_cuts_the_least_recently_fed_rootless_run(self) -> None:
        """No intake to refuse (the Kafka consumer): past the run cap with only rootless runs, the least
        recently fed one is force-closed as incomplete, as before."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, max_inflight=2)
        asm.add(batch(span("2")))
        asm.add(batch(span("2", trace=OTHER)))
        asm.add(batch(span("3")))  # TRACE fed again: OTHER is the least recently fed
        forced = asm.add(batch(span("3", trace="c" * 32)))
        assert [(OTHER, False)] == [(c.trace_id, c.complete) for c in forced]
        assert {"evicted_inflight": 1} == events.counts


def sized(size: int, *spans: Span) -> TraceBatch:
    return TraceBatch(spans[0].trace_id, tuple(spans), 0, size)


def trace(i: int) -> str:
    return f"{i + 1:032x}"


class TestByteBudgets:
    """Runs in flight and the late-span cache bounded in bytes (issue 15 item 3, issue 20 finding 4)."""

    def test_inflight_bytes_are_counted_per_new_span(self) -> None:
        """A run's bytes grow by the share of each record's estimate its new spans carry; duplicates add nothing."""
        asm = make(Clock(1000.0))
        asm.add(sized(300, span("2"), span("3"), span("4")))
        asm.add(sized(200, span("4"), span("5")))  # span 4 again: half of this record is new
        assert 400 == asm.inflight_account.held
        (closed,) = asm.drain()
        assert (400, 0) == (closed.size, asm.inflight_account.held)
        assert 400 == asm.closed_account.held

    def test_without_pressure_a_rootless_flood_is_cut_and_the_complete_run_is_stored_complete(self) -> None:
        """No intake to refuse (the Kafka consumer): past the in-flight byte budget the complete run is
        closed early (complete), then runs whose root never came are cut (incomplete, oldest fed
        first, counted)."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, inflight_bytes=1000)
        asm.add(sized(100, span("1", None, trace=TRACE), span("2", trace=TRACE)))
        forced = []
        for i in range(50):
            forced += asm.add(sized(300, span("2", trace=trace(i))))
        assert asm.inflight_account.held <= 1000
        assert (TRACE, True) == (forced[0].trace_id, forced[0].complete)
        rest = forced[1:]
        assert all(not c.complete for c in rest)
        assert [trace(i) for i in range(len(rest))] == [c.trace_id for c in rest]  # oldest first
        assert {"closed_early": 1, "evicted_inflight_bytes": 47} == events.counts
        assert 47 == len(rest)

    def test_without_rootless_runs_the_run_due_soonest_is_closed_early_and_complete(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, inflight_bytes=500)
        asm.add(sized(300, span("1", None, trace=trace(0))))
        clock.now += 1
        forced = asm.add(sized(300, span("1", None, trace=trace(1))))
        assert [(trace(0), True)] == [(c.trace_id, c.complete) for c in forced]
        assert {"closed_early": 1} == events.counts

    def test_a_run_closed_early_is_rescored_by_a_late_span_not_duplicated(self) -> None:
        """A span arriving after its run was closed early reopens it with all its spans, as a re-score."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, inflight_bytes=500)
        asm.add(sized(300, span("1", None, trace=trace(0))))
        (early,) = asm.add(sized(300, span("1", None, trace=trace(1))))
        assert (trace(0), True, False) == (early.trace_id, early.complete, early.rescore)
        asm.add(sized(10, span("2", trace=trace(0))))
        clock.now += 2.1
        (rescored,) = [c for c in asm.due() if c.trace_id == trace(0)]
        assert (2, True, True) == (len(rescored.spans), rescored.complete, rescored.rescore)

    def test_a_single_run_over_the_budget_is_kept(self) -> None:
        """The run being fed is never the one closed for it (it would reopen at its next span)."""
        asm = make(Clock(1000.0), inflight_bytes=100)
        assert [] == asm.add(sized(500, span("2")))
        assert [] == asm.add(sized(500, span("3")))
        assert 1000 == asm.inflight_account.held

    def test_late_cache_evicts_oldest_past_its_byte_budget_and_counts(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=1000)
        for i in range(5):
            asm.add(sized(400, span("1", None, trace=trace(i))))
        clock.now += 3
        assert 5 == len(asm.due())
        assert 800 == asm.closed_account.held
        assert 3 == events.counts["closed_cache_evicted"]
        asm.add(sized(10, span("9", trace=trace(0))))  # late span for an evicted run: dropped
        assert 1 == events.counts["late_evicted"]
        asm.add(sized(10, span("9", trace=trace(4))))  # late span for a cached run: reopened
        assert 1 == events.counts["late_spans"]
        assert (400, 410) == (asm.closed_account.held, asm.inflight_account.held)

    def test_import_state_enforces_the_budgets(self) -> None:
        """A state saved under larger budgets is loaded within the current ones; the excess is returned."""
        big = make(Clock(1000.0))
        for i in range(10):
            big.add(sized(300, span("2", trace=trace(i))))
        in_flight, closed = big.export_state()
        small = make(Clock(1000.0), inflight_bytes=1000)
        forced = small.import_state(in_flight, closed)
        assert 7 == len(forced)
        assert (3, 900) == (small.inflight, small.inflight_account.held)

    def test_shared_account_bounds_several_assemblers(self) -> None:
        """One account given to two assemblers (Kafka partitions) is their common budget."""
        account = ByteAccount(1000)
        one, two = make(Clock(1000.0), inflight_bytes=account), make(Clock(1000.0), inflight_bytes=account)
        one.add(sized(600, span("2", trace=trace(0))))
        one.add(sized(100, span("2", trace=trace(1))))
        forced = two.add(sized(600, span("2", trace=trace(2))))
        assert [] == forced  # two holds one run only: it never closes the run it is fed
        forced = one.add(sized(10, span("3", trace=trace(1))))
        assert [trace(0)] == [c.trace_id for c in forced]
        assert 710 == account.held


class TestPressure:
    """Over the in-flight caps with an intake to refuse (``vigil run``): runs still receiving spans are
    never cut; complete runs close early, idle rootless runs go, then the intake is asked to refuse
    (issue 25, item 3)."""

    def flood(self, asm: Assembler, clock: Clock, runs: int) -> list[ClosedTrace]:
        """TRACE complete (root ended), then ``runs`` rootless runs of 300 bytes, one a second."""
        forced = asm.add(sized(100, span("1", None, trace=TRACE), span("2", trace=TRACE)))
        for i in range(runs):
            clock.now += 1
            forced += asm.add(sized(300, span("2", trace=trace(i))))
        return forced

    def test_complete_runs_close_early_and_active_rootless_runs_are_kept(self) -> None:
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, inflight_bytes=1000, pressure=pressure)
        forced = self.flood(asm, clock, 10)
        assert [(TRACE, True)] == [(c.trace_id, c.complete) for c in forced]
        assert 10 == asm.inflight
        assert 3000 == asm.inflight_account.held
        assert pressure.raised
        assert {"closed_early": 1, "pressure_raised": 1} == events.counts  # raised once, not per record

    def test_the_run_cap_raises_the_pressure_instead_of_cutting_a_run(self) -> None:
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, max_inflight=2, pressure=pressure)
        for i in range(3):
            assert [] == asm.add(batch(span("2", trace=trace(i))))
        assert (3, True) == (asm.inflight, pressure.raised)
        assert {"pressure_raised": 1} == events.counts

    def test_the_pressure_is_lowered_once_runs_close(self) -> None:
        """The roots arrive: those runs close early, the runs in flight fit again, the pressure comes down."""
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, inflight_bytes=1000, pressure=pressure)
        self.flood(asm, clock, 5)
        closed = []
        for i in range(3):
            closed += asm.add(sized(10, span("1", None, trace=trace(i))))
        closed += asm.due()
        assert [trace(0), trace(1)] == [c.trace_id for c in closed]
        assert all(c.complete for c in closed)
        assert asm.inflight_account.held <= 1000
        assert pressure.raised is False

    def test_active_rootless_runs_are_not_cut_by_the_tick(self) -> None:
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, inflight_bytes=1000, pressure=pressure, evict_idle_s=30.0)
        self.flood(asm, clock, 5)
        clock.now += 20  # the oldest was fed 24 s ago
        assert [] == asm.due()
        assert pressure.raised

    def test_rootless_runs_whose_spans_stopped_are_cut_by_the_tick_oldest_first(self) -> None:
        """The rootless-flood defence: runs idle for evict_idle_s go (incomplete, counted) until the
        rest fit; then the pressure comes down."""
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, inflight_bytes=1000, pressure=pressure, evict_idle_s=30.0)
        self.flood(asm, clock, 5)
        clock.now += 27  # trace(0) idle 31 s, trace(1) 30 s, trace(2) 29 s
        cut = asm.due()
        assert [(trace(0), False), (trace(1), False)] == [(c.trace_id, c.complete) for c in cut]
        assert (3, 900) == (asm.inflight, asm.inflight_account.held)
        assert pressure.raised is False
        assert 2 == events.counts["evicted_idle"]

    def test_idle_rootless_runs_are_cut_on_add_before_the_pressure_is_raised(self) -> None:
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        asm = make(clock, events, inflight_bytes=1000, pressure=pressure, evict_idle_s=30.0)
        asm.add(sized(600, span("2", trace=trace(0))))
        clock.now += 31
        forced = asm.add(sized(600, span("2", trace=trace(1))))
        assert [(trace(0), False)] == [(c.trace_id, c.complete) for c in forced]
        assert pressure.raised is False
        assert {"evicted_idle": 1} == events.counts

    def test_a_run_fed_under_pressure_is_never_cut_and_closes_whole(self) -> None:
        """Every span of a run still receiving spans is kept through the pressure; it closes complete."""
        clock, pressure = Clock(1000.0), Pressure()
        asm = make(clock, inflight_bytes=500, pressure=pressure)
        for sid in ("2", "3", "4"):
            clock.now += 1
            assert [] == asm.add(sized(300, span(sid)))
        assert pressure.raised
        assert [] == asm.add(sized(10, span("1", None)))
        clock.now += 2.1
        (closed,) = asm.due()
        assert (4, True) == (len(closed.spans), closed.complete)
        assert pressure.raised is False

    def test_import_state_cuts_the_excess_even_with_a_pressure(self) -> None:
        """Runs loaded at start-up are not being fed: past the caps they are cut, the intake is not held back."""
        big = make(Clock(1000.0))
        for i in range(10):
            big.add(sized(300, span("2", trace=trace(i))))
        in_flight, closed = big.export_state()
        pressure = Pressure()
        small = make(Clock(1000.0), inflight_bytes=1000, pressure=pressure)
        assert 7 == len(small.import_state(in_flight, closed))
        assert (3, 900, False) == (small.inflight, small.inflight_account.held, pressure.raised)


class TestOwedRuns:
    """Runs whose spans the intake refused after decoding (:class:`collector.owed.OwedSpans`): their
    retry comes back, maybe after the root arrived on another connection, and must not find the run
    forgotten (issue 25: spans answered 200 dropped as ``late_evicted`` on the 4-connection flood)."""

    def ledger(self, clock: Clock) -> OwedSpans:
        return OwedSpans(horizon_s=60.0, max_spans=1000, clock=clock)

    def test_an_owed_run_waits_past_its_deadline_and_closes_once_whole(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed)
        owed.record([batch(span("2"))])  # the child's body was refused: its retry is coming
        asm.add(batch(span("1", None), span("3")))  # the root's body, on another connection
        clock.now += 5
        assert [] == asm.due()
        assert 1 <= events.counts["held_owed"]
        asm.add(batch(span("2")))  # the retry
        assert TRACE not in owed
        clock.now += 2.1
        (closed,) = asm.due()
        assert (3, True, False) == (len(closed.spans), closed.complete, closed.rescore)
        assert "late_spans" not in events.counts

    def test_an_owed_run_closes_at_its_deadline_when_over_the_caps(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, inflight_bytes=100, pressure=Pressure())
        owed.record([batch(span("2"))])
        asm.add(sized(150, span("1", None), span("3")))  # over the budget on its own
        clock.now += 2.1
        (closed,) = asm.due()
        assert TRACE == closed.trace_id

    def test_closed_early_only_after_every_run_not_owed(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, inflight_bytes=1000, pressure=Pressure())
        owed.record([batch(span("9", trace=trace(0)))])
        for i in range(3):  # trace(0) is due soonest, but owed
            asm.add(sized(300, span("1", None, trace=trace(i))))
            clock.now += 0.1
        forced = asm.add(sized(300, span("1", None, trace=trace(3))))
        assert [trace(1)] == [c.trace_id for c in forced]
        forced = asm.add(sized(300, span("1", None, trace=trace(4))))
        assert [trace(2)] == [c.trace_id for c in forced]
        owed.arrived(trace(0), [span("9", trace=trace(0))])
        forced = asm.add(sized(300, span("1", None, trace=trace(5))))
        assert [trace(0)] == [c.trace_id for c in forced]  # no longer owed: due soonest again

    def test_owed_runs_close_early_when_nothing_else_is_left(self) -> None:
        clock, events, pressure = Clock(1000.0), Events(), Pressure()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, inflight_bytes=500, pressure=pressure)
        owed.record([batch(span("9", trace=trace(i))) for i in range(2)])
        asm.add(sized(300, span("1", None, trace=trace(0))))
        forced = asm.add(sized(300, span("1", None, trace=trace(1))))
        assert [trace(0)] == [c.trace_id for c in forced]
        assert not pressure.raised

    def test_a_closed_owed_run_is_pinned_and_its_retry_rescores_it(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, closed_cache_bytes=1000, inflight_bytes=100, pressure=Pressure())
        owed.record([sized(10, span("9", trace=trace(0)))])
        asm.add(sized(400, span("1", None, trace=trace(0))))
        clock.now += 2.1
        assert [trace(0)] == [c.trace_id for c in asm.due()]  # over the caps: not held
        for i in range(1, 6):  # runs not owed fill the late cache past its budget
            asm.add(sized(400, span("1", None, trace=trace(i))))
            clock.now += 2.1
            asm.due()
        assert 4 == events.counts["closed_cache_evicted"]
        assert "pinned_evicted" not in events.counts
        asm.add(sized(10, span("9", trace=trace(0))))  # the retry
        assert ("late_evicted" not in events.counts, 1) == (True, events.counts["late_spans"])
        clock.now += 2.1
        (closed,) = asm.due()
        assert (trace(0), 2, True, True) == (closed.trace_id, len(closed.spans), closed.complete, closed.rescore)

    def test_a_run_refused_after_it_closed_is_pinned_when_its_turn_to_go_comes(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, closed_cache_bytes=1000)
        asm.add(sized(400, span("1", None, trace=trace(0))))
        clock.now += 2.1
        asm.due()
        owed.record([sized(10, span("9", trace=trace(0)))])  # refused after the run closed
        for i in range(1, 4):
            asm.add(sized(400, span("1", None, trace=trace(i))))
            clock.now += 2.1
            asm.due()
        asm.add(sized(10, span("9", trace=trace(0))))
        assert 1 == events.counts["late_spans"]
        assert "late_evicted" not in events.counts

    def test_pinned_runs_stay_within_the_budget(self) -> None:
        """Only pinned runs left and still over: the oldest pinned goes, counted."""
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, closed_cache_bytes=1000, inflight_bytes=100, pressure=Pressure())
        owed.record([sized(10, span("9", trace=trace(i))) for i in range(4)])
        for i in range(4):  # each over the in-flight caps: closed at its deadline though owed
            asm.add(sized(400, span("1", None, trace=trace(i))))
            clock.now += 2.1
            asm.due()
        assert 2 == events.counts["pinned_evicted"]
        assert 800 == asm.closed_account.held

    def test_a_run_given_up_on_is_unpinned_and_forgotten_first(self) -> None:
        clock, events = Clock(1000.0), Events()
        owed = self.ledger(clock)
        asm = make(clock, events, owed=owed, closed_cache_bytes=1000)
        owed.record([sized(10, span("9", trace=trace(0)))])
        asm.add(sized(400, span("1", None, trace=trace(0))))
        clock.now += 61  # the ledger's horizon passes: the retry is not coming
        asm.due()
        assert trace(0) not in owed
        for i in range(1, 3):
            asm.add(sized(400, span("1", None, trace=trace(i))))
            clock.now += 2.1
            asm.due()
        assert 1 == events.counts["closed_cache_evicted"]
        asm.add(sized(10, span("9", trace=trace(0))))
        assert 1 == events.counts["late_evicted"]

    def test_pinned_runs_are_saved_with_the_state(self) -> None:
        clock = Clock(1000.0)
        owed = self.ledger(clock)
        asm = make(clock, owed=owed, inflight_bytes=10, pressure=Pressure())
        owed.record([batch(span("9"))])
        asm.add(sized(100, span("1", None)))
        clock.now += 2.1
        asm.due()
        assert ([], [TRACE]) == tuple([b.trace_id for b in part] for part in asm.export_state())


RESOURCE: dict[str, AttrValue] = {"service.name": "agent", "host.cores": 2}


def rich_span(sid: str, parent: str | None, *, trace: str = TRACE) -> Span:
    """A span with every field set, nested attribute values, events, a status and the shared resource."""
    return Span(
        trace_id=trace,
        span_id=sid.rjust(16, "0"),
        parent_span_id=parent,
        name="chat gpt-4o",
        kind=SpanKind.CLIENT,
        start_ns=10**18,
        end_ns=10**18 + 5,
        status_code=StatusCode.ERROR,
        status_message="content_filter",
        attributes={
            "gen_ai.input.messages": "x" * 3000,
            "n": 2**70,
            "f": 0.5,
            "b": True,
            "raw": b"\x00\x01",
            "list": ["a", 1, [2.5, None]],
            "map": {"k": {"deep": "v"}},
        },
        events=(SpanEvent("exception", 7, {"exception.type": "ValueError"}), SpanEvent("e2")),
        resource=RESOURCE,
        scope="opentelemetry.instrumentation.openai",
    )


def cached(asm: Assembler) -> list[str]:
    """The trace ids of the closed-run cache, packed or not, oldest first (white box: what a stop would not unpack)."""
    return [*asm._frozen, *asm._closed, *asm._pinned]


class TestFrozenLateCache:
    """The late-span cache packs its oldest runs rather than forgetting them while spans come late."""

    def test_freeze_and_thaw_give_back_equal_spans(self) -> None:
        spans = (rich_span("1", None), rich_span("2", "0" * 15 + "1"), span("3"))
        blob = freeze_spans(spans, zstandard.ZstdCompressor(level=1))
        back = thaw_spans(blob)
        assert spans == back
        assert [SpanKind.CLIENT, SpanKind.CLIENT, SpanKind.INTERNAL] == [s.kind for s in back]
        assert all(type(s.kind) is SpanKind and type(s.status_code) is StatusCode for s in back)
        assert back[0].resource is back[1].resource  # shared objects stay shared
        assert len(blob) < 1000  # the repeated content compresses

    def test_unpackable_values_raise_value_error(self) -> None:
        odd_value: Any = object()
        odd = Span(
            trace_id=TRACE, span_id="1".rjust(16, "0"), parent_span_id=None, name="s", attributes={"o": odd_value}
        )
        with pytest.raises(ValueError, match="unmarshallable"):
            freeze_spans((odd,), zstandard.ZstdCompressor())

    @staticmethod
    def fill(asm: Assembler, clock: Clock, count: int, *, first: int = 0) -> None:
        for i in range(first, first + count):
            asm.add(sized(5000, rich_span("1", None, trace=trace(i)), rich_span("2", "0" * 15 + "1", trace=trace(i))))
        clock.now += 3
        asm.due()

    def test_without_late_spans_the_oldest_run_is_forgotten_as_before(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000)
        self.fill(asm, clock, 5)
        assert 3 == events.counts["closed_cache_evicted"]
        assert "closed_frozen" not in events.counts
        assert 10_000 == asm.closed_account.held

    @staticmethod
    def late_by(asm: Assembler, clock: Clock, seconds: float, *, run: int = 99) -> None:
        """A small run scored, then a span of it ``seconds`` later, and the run scored again."""
        asm.add(sized(10, span("1", None, trace=trace(run))))
        clock.now += 3
        asm.due()
        clock.now += seconds
        asm.add(sized(10, span("9", trace=trace(run))))
        clock.now += 3
        asm.due()

    def test_after_a_late_span_runs_are_frozen_and_a_late_span_for_one_still_merges(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000)
        self.late_by(asm, clock, 4.0)
        self.fill(asm, clock, 5)
        assert "closed_cache_evicted" not in events.counts
        assert events.counts["closed_frozen"] >= 4
        assert asm.closed_account.held <= 12_000
        held = asm.closed_account.held
        clock.now += 2
        asm.add(sized(10, span("8", trace=trace(1))))  # a late span for a frozen run
        assert 2 == events.counts["late_spans"]
        assert 5010 == asm.inflight_account.held  # back in flight at its unpacked size
        assert held > asm.closed_account.held
        clock.now += 3
        (rescored,) = asm.due()
        assert (trace(1), 3, True, True) == (
            rescored.trace_id,
            len(rescored.spans),
            rescored.complete,
            rescored.rescore,
        )
        assert rescored.spans[0] == rich_span("1", None, trace=trace(1))
        assert asm.late_window() > 0

    def test_runs_scored_longer_ago_than_twice_the_lateness_are_forgotten_not_frozen(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000)
        self.late_by(asm, clock, 1.0)  # lateness 1 s: runs scored within 2 s are worth keeping
        self.fill(asm, clock, 2)
        clock.now += 5  # the two runs are now 5 s old
        self.fill(asm, clock, 2, first=2)
        assert events.counts["closed_cache_evicted"] >= 2  # the old ones, forgotten
        kept = [b.trace_id for b in asm.export_state()[1]]
        assert [trace(2), trace(3)] == kept[-2:]
        assert trace(0) not in kept

    def test_freezing_stops_a_hold_after_the_last_late_span(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000, freeze_hold_s=30)
        self.late_by(asm, clock, 10.0)
        self.fill(asm, clock, 3)
        assert events.counts["closed_frozen"] >= 1
        assert "closed_cache_evicted" not in events.counts
        clock.now += 31
        self.fill(asm, clock, 3, first=3)
        assert events.counts["closed_cache_evicted"] >= 1

    def test_a_span_dropped_for_a_forgotten_run_starts_the_freezing(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000)
        self.fill(asm, clock, 4)
        assert 2 == events.counts["closed_cache_evicted"]
        asm.add(sized(10, span("9", trace=trace(0))))  # later than the cache reached: dropped
        assert 1 == events.counts["late_evicted"]
        self.fill(asm, clock, 3, first=4)
        assert events.counts["closed_frozen"] >= 1

    def test_packed_runs_are_bounded_by_the_bytes_not_the_run_count(self) -> None:
        """The run count caps the runs kept unpacked; packed ones stay while the bytes hold them (a fast
        stream turned the count over faster than the lateness, and dropped late spans the bytes had room for)."""
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000, closed_cache_size=4)
        self.late_by(asm, clock, 5.0)
        self.fill(asm, clock, 6)
        assert [trace(i) for i in (99, 0, 1, 2, 3, 4, 5)] == cached(asm)  # 7 runs: more than 4, packed
        assert len(asm._closed) + len(asm._pinned) <= 4
        assert asm.closed_account.held <= 12_000
        asm.add(sized(10, span("7", trace=trace(0))))  # packed, not forgotten: merged
        assert (2, "late_evicted" not in events.counts) == (events.counts["late_spans"], True)

    def test_packed_runs_are_forgotten_first_past_the_bytes(self) -> None:
        clock, events = Clock(1000.0), Events()
        asm = make(clock, events, closed_cache_bytes=12_000, closed_cache_size=4)
        self.late_by(asm, clock, 60.0)  # runs scored within 120 s are packed rather than forgotten
        self.fill(asm, clock, 60)
        kept = cached(asm)
        assert asm.closed_account.held <= 12_000
        assert len(asm._closed) + len(asm._pinned) <= 4
        assert 4 < len(kept) < 61
        assert [trace(i) for i in range(60 - len(kept), 60)] == kept  # the oldest went first
        assert events.counts["closed_cache_evicted"] == 61 - len(kept)
        asm.add(sized(10, span("7", trace=trace(59 - len(kept)))))  # forgotten for the bytes: dropped, counted
        assert 1 == events.counts["late_evicted"]

    def test_export_state_thaws_frozen_runs_oldest_first(self) -> None:
        clock = Clock(1000.0)
        asm = make(clock, closed_cache_bytes=12_000)
        self.late_by(asm, clock, 3.0, run=49)
        self.fill(asm, clock, 4)
        assert [trace(i) for i in (49, 0, 1, 2, 3)] == cached(asm)
        _, closed = asm.export_state()  # the newest that fit the budget unpacked, oldest first
        assert [trace(2), trace(3)] == [b.trace_id for b in closed]
        assert closed[0].spans == (rich_span("1", None, trace=trace(2)), rich_span("2", "0" * 15 + "1", trace=trace(2)))
        fresh = make(clock, closed_cache_bytes=100_000)
        fresh.import_state([], closed)
        assert 2 == len(fresh.export_state()[1])


def test_a_frozen_blob_holds_its_own_length_not_the_compression_bound() -> None:
    """python-zstandard allocates the compression bound and only shortens the visible size: the blob is copied."""
    import tracemalloc

    spans = tuple(rich_span(str(i), None, trace=trace(i)) for i in range(1, 4))
    compressor = zstandard.ZstdCompressor(level=1)
    tracemalloc.start()
    try:
        blobs = [freeze_spans(spans, compressor) for _ in range(50)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 50 * (len(blobs[0]) + 1024)


def test_export_state_unpacks_frozen_runs_only_as_far_as_the_budget_holds_them() -> None:
    """A stop must not unpack a cache of packed runs whole (several times its budget): newest first, within it."""
    clock, events = Clock(1000.0), Events()
    asm = make(clock, events, closed_cache_bytes=12_000)
    TestFrozenLateCache.late_by(asm, clock, 3.0)
    TestFrozenLateCache.fill(asm, clock, 6)
    assert events.counts["closed_frozen"] >= 5
    _, closed = asm.export_state()
    assert sum(b.size for b in closed) <= 12_000
    assert [trace(4), trace(5)] == [b.trace_id for b in closed]
