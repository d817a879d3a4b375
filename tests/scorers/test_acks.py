"""AckTracker: a spooled body is released once every record of it is accounted for (issue 15)."""

from __future__ import annotations

from collector.model import Span
from collector.spool import SpooledBatch
from scorers.acks import AckTracker
from scorers.assemble import ClosedTrace


def _record(trace: str, seq: int, parts: int) -> SpooledBatch:
    return SpooledBatch(trace, (Span(trace, "a" * 16, None, "root"),), 0, seq=seq, parts=parts)


def _closed(*traces: str) -> list[ClosedTrace]:
    return [ClosedTrace(t, (), True) for t in traces]


class TestAckTracker:
    def _tracker(self) -> tuple[AckTracker, list[int]]:
        acked: list[int] = []
        return AckTracker(acked.extend), acked

    def test_a_body_waits_for_every_run_it_fed(self) -> None:
        """Body 1 holds traces a and b: it is released once both runs are written, not before."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 2), kept=True)
        tracker.received(_record("b", 1, 2), kept=True)
        _close_and_write(tracker, "a")
        assert [] == acked
        _close_and_write(tracker, "b")
        assert [1] == acked
        assert 0 == tracker.outstanding

    def test_a_run_fed_by_two_bodies_releases_both(self) -> None:
        """Children in body 1, root in body 2: the run's write releases both."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 1), kept=True)
        tracker.received(_record("a", 2, 1), kept=True)
        _close_and_write(tracker, "a")
        assert [1, 2] == sorted(acked)

    def test_spans_arriving_after_the_close_wait_for_the_next_write(self) -> None:
        """Late spans reopen the run after it closed: written with the re-score, not with the first write."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 1), kept=True)
        tracker.closing(_closed("a"))
        tracker.received(_record("a", 2, 1), kept=True)  # before the first write finished
        tracker.written(_closed("a"))
        assert [1] == acked
        _close_and_write(tracker, "a")
        assert [1, 2] == acked

    def test_records_the_assembler_did_not_keep_are_released_at_once(self) -> None:
        """Duplicates of a closed run (or late spans of an evicted one) depend on nothing."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 1), kept=False)
        assert [1] == acked

    def test_a_failed_write_releases_nothing(self) -> None:
        """Closed but not written (store down): the body stays in the spool."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 1), kept=True)
        tracker.closing(_closed("a"))
        assert [] == acked
        assert 1 == tracker.outstanding

    def test_saved_releases_everything_seen(self) -> None:
        """A clean stop saved the in-flight runs in the state file: every body is released."""
        tracker, acked = self._tracker()
        tracker.received(_record("a", 1, 2), kept=True)
        tracker.received(_record("b", 1, 2), kept=True)
        tracker.received(_record("c", 2, 1), kept=True)
        tracker.closing(_closed("c"))
        tracker.saved()
        assert [1, 2] == sorted(acked)


def _close_and_write(tracker: AckTracker, trace: str) -> None:
    """The worker closes run ``trace`` and writes it."""
    tracker.closing(_closed(trace))
    tracker.written(_closed(trace))
