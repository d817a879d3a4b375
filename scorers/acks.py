"""Acknowledging spooled bodies once the runs they fed are durably written.

One OTLP body holds spans of several traces, and one run is fed by several bodies. A body read
from the write-ahead spool (:mod:`collector.spool`) is split into records that each carry its
sequence number and its record count (:class:`~collector.spool.SpooledBatch`). The body may
leave the spool once **each** of its records is accounted for:

* the record's spans went into a run that was then written to the store — the references are
  taken when the run closes (so spans arriving later for the same trace, which reopen it, are
  not acknowledged with it) and released when the write succeeded;
* or the assembler did not keep the record (duplicate spans of a closed run, late spans of an
  evicted one): nothing depends on it;
* or, at a clean stop, the runs still in flight were saved in the state file
  (:meth:`AckTracker.saved`).

Single-threaded: the stream worker calls every method from its thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from collector.model import TraceBatch
from collector.spool import SpooledBatch
from scorers.assemble import ClosedTrace

__all__ = ["AckTracker"]


class AckTracker:
    """Counts, per spooled body, the records whose runs are not written yet.

    Args:
        ack: called with the sequence numbers of bodies that are fully accounted for
            (:meth:`collector.spool.Spool.ack`).
    """

    def __init__(self, ack: Callable[[Sequence[int]], None]) -> None:
        self._ack = ack
        self._open: dict[str, list[int]] = {}  # trace id -> bodies feeding its in-flight run
        self._closing: dict[str, list[int]] = {}  # trace id -> bodies of a closed run being written
        self._left: dict[int, int] = {}  # body -> records not yet accounted for

    @property
    def outstanding(self) -> int:
        """Bodies with records not yet accounted for."""
        return len(self._left)

    def received(self, record: TraceBatch, kept: bool) -> None:
        """Note one record the assembler was given; ``kept`` when its spans joined an open run."""
        if not isinstance(record, SpooledBatch):
            return
        seq = record.seq
        if seq not in self._left:
            self._left[seq] = record.parts
        if kept:
            refs = self._open.get(record.trace_id)
            if refs is None:
                self._open[record.trace_id] = [seq]
            else:
                refs.append(seq)
        else:
            self._release((seq,))

    def closing(self, closed: Iterable[ClosedTrace]) -> None:
        """Runs just closed by the assembler: their bodies now wait for these runs' write."""
        if not self._open:
            return
        for trace in closed:
            refs = self._open.pop(trace.trace_id, None)
            if refs is not None:
                self._closing.setdefault(trace.trace_id, []).extend(refs)

    def written(self, closed: Iterable[ClosedTrace]) -> None:
        """Runs durably written: release their bodies."""
        if not self._closing:
            return
        done: list[int] = []
        for trace in closed:
            refs = self._closing.pop(trace.trace_id, None)
            if refs is not None:
                done.extend(refs)
        self._release(done)

    def saved(self) -> None:
        """Everything the assembler holds was saved (state file): release every body seen."""
        done = [seq for refs in (*self._open.values(), *self._closing.values()) for seq in refs]
        self._open.clear()
        self._closing.clear()
        self._release(done)

    def _release(self, seqs: Iterable[int]) -> None:
        finished = []
        left = self._left
        for seq in seqs:
            count = left.get(seq)
            if count is None:
                continue
            if count <= 1:
                del left[seq]
                finished.append(seq)
            else:
                left[seq] = count - 1
        if finished:
            self._ack(finished)
