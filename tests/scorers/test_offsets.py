"""Tests of scorers.offsets: the committed offset never passes a run that is not written."""

from __future__ import annotations

from collector.model import TraceBatch
from scorers.assemble import Assembler
from scorers.offsets import PartitionRuns
from tests.support.fixtures import Clock
from tests.support.spans import span


def _batch(trace: str, span_id: str, *, root: bool = False) -> TraceBatch:
    parent = None if root else "0" * 15 + "1"
    s = span(trace_id=trace, span_id=span_id, parent_span_id=parent, end_ns=10, start_ns=1)
    return TraceBatch(trace, (s,))


T1, T2 = "a" * 32, "b" * 32


def _runs() -> tuple[PartitionRuns, Clock]:
    clock = Clock(0.0)
    return PartitionRuns(Assembler(quiet_period_s=1.0, max_idle_s=100.0, clock=clock)), clock


class TestSafeOffset:
    """The safe offset is the first record of the oldest run not yet written."""

    def test_nothing_before_first_record(self) -> None:
        """No record consumed: nothing to commit."""
        runs, _ = _runs()
        assert runs.safe_offset() is None
        assert runs.offset_to_commit() is None

    def test_held_by_open_run(self) -> None:
        """A run still assembling holds the offset at its first record."""
        runs, _ = _runs()
        runs.add(10, [_batch(T1, "0" * 15 + "2")])
        runs.add(11, [_batch(T2, "0" * 15 + "3", root=True)])
        assert 10 == runs.safe_offset()

    def test_closed_but_unwritten_still_holds(self) -> None:
        """A closed run holds the offset until written() — and only then releases it."""
        runs, clock = _runs()
        runs.add(10, [_batch(T1, "0" * 15 + "1", root=True)])
        runs.add(11, [_batch(T2, "0" * 15 + "1", root=True)])
        clock.now = 5
        closed = runs.close_due()
        assert [T1, T2] == [c.trace_id for c in closed]
        assert 10 == runs.safe_offset()
        runs.written([T1])
        assert 11 == runs.safe_offset()
        runs.written([T2])
        assert 12 == runs.safe_offset()

    def test_duplicate_record_of_written_run_does_not_hold(self) -> None:
        """A re-delivered record of a run already written and closed holds nothing."""
        runs, clock = _runs()
        runs.add(10, [_batch(T1, "0" * 15 + "1", root=True)])
        clock.now = 5
        runs.written([c.trace_id for c in runs.close_due()])
        runs.add(11, [_batch(T1, "0" * 15 + "1", root=True)])  # same span again
        assert 12 == runs.safe_offset()
        assert 0 == runs.pending_runs

    def test_commit_only_forward(self) -> None:
        """offset_to_commit is None unless ahead of the last commit."""
        runs, _ = _runs()
        runs.add(3, [_batch(T1, "0" * 15 + "2")])
        assert 3 == runs.offset_to_commit()
        runs.committed = 3
        assert runs.offset_to_commit() is None

    def test_out_of_order_redelivery_uses_true_minimum(self) -> None:
        """Older records re-delivered into kept state still hold the offset at the true minimum."""
        runs, _ = _runs()
        runs.add(20, [_batch(T1, "0" * 15 + "2")])
        runs.add(5, [_batch(T2, "0" * 15 + "2")])
        assert 5 == runs.safe_offset()

    def test_undecodable_record_passes(self) -> None:
        """A skipped record moves the offset on when nothing is pending."""
        runs, _ = _runs()
        runs.skip(7)
        assert 8 == runs.safe_offset()
