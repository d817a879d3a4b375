"""Which Kafka offset of a partition is safe to commit, given the runs still in flight.

:class:`PartitionRuns` owns the :class:`~scorers.assemble.Assembler` of one partition and
remembers, for every run not yet durably written, the offset of the first record that
carried one of its spans. The safe offset is the smallest of those, or the offset after
the last record consumed when no run is pending: committing it never skips a span of a
run that is not in the store yet. Pure bookkeeping, no I/O; one thread per instance.
"""

from __future__ import annotations

from collections.abc import Iterable

from collector.model import TraceBatch
from scorers.assemble import Assembler, ClosedTrace

__all__ = ["PartitionRuns"]


class PartitionRuns:
    """Run assembly and commit bookkeeping of one partition.

    Offsets normally arrive in increasing order, but a partition lost and re-assigned may
    re-deliver older records into kept state, so the safe offset is the true minimum of
    the first offsets (a scan of the pending runs, done at most once per commit).

    Args:
        assembler: the partition's own assembler.
    """

    def __init__(self, assembler: Assembler) -> None:
        self.assembler = assembler
        self._first: dict[str, int] = {}
        self._unwritten: dict[str, int] = {}
        self.next_offset: int | None = None
        self.committed: int | None = None

    @property
    def pending_runs(self) -> int:
        """Runs not yet durably written: in flight or closed and waiting for the store."""
        return len(self._first)

    def add(self, offset: int, batches: Iterable[TraceBatch]) -> list[ClosedTrace]:
        """Add the traces of the record at ``offset``.

        Returns:
            Runs the assembler force-closed to respect its in-flight cap; they wait for
            :meth:`written` like those from :meth:`close_due`.
        """
        forced: list[ClosedTrace] = []
        assembler = self.assembler
        for batch in batches:
            trace_id = batch.trace_id
            if trace_id not in self._first:
                self._first[trace_id] = offset
            closed = assembler.add(batch)
            self._hold(closed)
            forced.extend(closed)
            if not assembler.is_open(trace_id) and trace_id not in self._unwritten:
                self._first.pop(trace_id, None)  # only duplicate spans of a written run: nothing pending
        self.next_offset = offset + 1
        return forced

    def skip(self, offset: int) -> None:
        """Note a record that holds no usable span (undecodable): it does not hold the offset back."""
        self.next_offset = offset + 1

    def close_due(self) -> list[ClosedTrace]:
        """Runs whose quiet period or idle time has passed; they wait for :meth:`written`."""
        closed = self.assembler.due()
        self._hold(closed)
        return closed

    def written(self, trace_ids: Iterable[str]) -> None:
        """Record that the closed runs ``trace_ids`` are durably in the store."""
        for trace_id in trace_ids:
            left = self._unwritten.get(trace_id, 0) - 1
            if left > 0:
                self._unwritten[trace_id] = left
                continue
            self._unwritten.pop(trace_id, None)
            if not self.assembler.is_open(trace_id):
                self._first.pop(trace_id, None)

    def safe_offset(self) -> int | None:
        """The highest offset that may be committed now, or ``None`` before the first record."""
        if self.next_offset is None:
            return None
        if self._first:
            return min(self.next_offset, *self._first.values())
        return self.next_offset

    def offset_to_commit(self) -> int | None:
        """:meth:`safe_offset` when it is ahead of the last commit, else ``None``."""
        safe = self.safe_offset()
        if safe is None or (self.committed is not None and safe <= self.committed):
            return None
        return safe

    def _hold(self, closed: list[ClosedTrace]) -> None:
        for trace in closed:
            self._unwritten[trace.trace_id] = self._unwritten.get(trace.trace_id, 0) + 1
