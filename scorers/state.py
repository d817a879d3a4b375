"""The assembler's state across a clean restart of the embedded mode (``vigil run``).

On SIGTERM, ``vigil run`` scores and writes every run whose root span has ended, then
saves here (a) the spans of runs still in flight — their root has not ended, so scoring
them now would store a truncated run that the rest of its spans, arriving after the
restart, would then overwrite with an even more truncated one — and (b) the late-span
cache of recently scored runs, so a late span after the restart re-scores the whole run
instead of replacing it. At start-up the file is loaded into the assembler and removed.

What this does not cover: a SIGKILL or a crash, which never reaches the save. That is the
write-ahead spool's job (:mod:`collector.spool`): every accepted body stays on disk until its
runs are written (or saved here by a clean stop) and is replayed at the next start.

Size: the file holds what the assembler holds, and the assembler is bounded in bytes
(:class:`collector.budget.MemoryBudgets`; its estimates count more than the wire bytes written
here): the runs in flight stay within the ``inflight`` budget (a flood of traces whose root
never arrives is force-closed, not accumulated), and ``vigil run`` bounds the whole file by that
same budget (``max_bytes``: the late-span cache fills what the runs in flight leave, newest
first) — tens of MiB at the default memory limit, whatever the traffic. Loading reads one
record at a time and the assembler enforces its budgets as it takes them back, so a restart
never holds more than the budgets either. With the spool on, the state file is still what lets
a clean stop release the spool (the runs in flight are kept here, not in ever-growing
segments) and keeps the late-span cache across a restart; both are bounded.

File format: ``VIGILST1`` then records of ``kind`` (1 byte: ``P`` in flight, ``C``
closed), a 4-byte big-endian length and an OTLP ``ExportTraceServiceRequest`` holding
one trace (the stream record format of :func:`collector.otlp.encode_batch`). Written to a
temporary file, fsynced and renamed, so a crash while saving leaves the previous state.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import structlog

from collector.errors import DecodeError
from collector.otlp import decode_protobuf, encode_batch
from scorers.assemble import Assembler, ClosedTrace
from scorers.errors import ScorersError

__all__ = ["StateFileError", "load_state", "save_state"]

log = structlog.get_logger(__name__)

_MAGIC = b"VIGILST1"
_HEADER = struct.Struct(">cI")


class StateFileError(ScorersError):
    """The state file exists but cannot be read; it is left in place for inspection."""


def save_state(path: str | Path, assembler: Assembler, max_bytes: int = 0) -> tuple[int, int]:
    """Write the assembler's in-flight runs and late-span cache to ``path`` atomically.

    Args:
        path: the state file.
        assembler: what to save.
        max_bytes: bound of the file (0: none). Runs in flight are always written (the assembler
            keeps them within its in-flight budget; they are unfinished work); the late-span cache
            fills what is left, newest runs first, and the older ones are left out (a late span
            for them after the restart is counted as ``late_evicted``, as after any eviction).

    Returns:
        ``(in_flight, closed)`` run counts written.
    """
    in_flight, closed = assembler.export_state()
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    written = len(_MAGIC)
    with tmp.open("wb") as f:
        f.write(_MAGIC)
        for batch in in_flight:
            written += _write(f, b"P", encode_batch(batch))
        kept: list[bytes] = []
        for batch in reversed(closed):  # newest first, while there is room
            data = encode_batch(batch)
            if max_bytes and written + _HEADER.size + len(data) > max_bytes:
                break
            kept.append(data)
            written += _HEADER.size + len(data)
        for data in reversed(kept):  # oldest first, the cache's order
            _write(f, b"C", data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(target)
    log.info(
        "assembler_state_saved",
        path=str(target),
        in_flight=len(in_flight),
        closed=len(kept),
        closed_left_out=len(closed) - len(kept),
        bytes=written,
    )
    return len(in_flight), len(kept)


def _write(f: BinaryIO, kind: bytes, data: bytes) -> int:
    f.write(_HEADER.pack(kind, len(data)))
    f.write(data)
    return _HEADER.size + len(data)


def load_state(
    path: str | Path, assembler: Assembler, on_forced: Callable[[list[ClosedTrace]], object] | None = None
) -> tuple[int, int]:
    """Load a state file written by :func:`save_state` into ``assembler``, then delete it.

    A missing file is an empty state. Records are read and handed to the assembler one at a time (the file is
    never in memory whole);
    runs it force-closes to stay within its budgets go to ``on_forced`` (to be scored and
    written), or are dropped with a warning when there is none.

    Returns:
        ``(in_flight, closed)`` run counts restored.

    Raises:
        StateFileError: the file is not a state file or is truncated.
    """
    source = Path(path)
    if not source.exists():
        return 0, 0
    counts = {b"P": 0, b"C": 0}
    forced: list[ClosedTrace] = []
    with source.open("rb") as f:
        if f.read(len(_MAGIC)) != _MAGIC:
            raise StateFileError(f"{source} is not a Vigil state file (remove it or set VIGIL_STATE_PATH)")
        pos = len(_MAGIC)
        while header := f.read(_HEADER.size):
            if len(header) != _HEADER.size:
                raise StateFileError(f"{source} is truncated at byte {pos}")
            kind, size = _HEADER.unpack(header)
            pos += _HEADER.size
            body = f.read(size)
            if len(body) != size or kind not in counts:
                raise StateFileError(f"{source} is corrupt at byte {pos}")
            try:
                result = decode_protobuf(body)
            except DecodeError as exc:
                raise StateFileError(f"{source} holds an undecodable record at byte {pos}: {exc}") from exc
            pos += size
            counts[kind] += len(result.batches)
            if kind == b"P":
                forced.extend(assembler.import_state(result.batches, []))
            else:
                assembler.import_state([], result.batches)
    if forced:
        if on_forced is not None:
            on_forced(forced)
        else:
            log.warning("assembler_state_over_budget", runs=len(forced))
    source.unlink()
    log.info(
        "assembler_state_loaded", path=str(source), in_flight=counts[b"P"], closed=counts[b"C"], forced=len(forced)
    )
    return counts[b"P"], counts[b"C"]
