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

File format: ``VIGILST1`` then records of ``kind`` (1 byte: ``P`` in flight, ``C``
closed), a 4-byte big-endian length and an OTLP ``ExportTraceServiceRequest`` holding
one trace (the stream record format of :func:`collector.otlp.encode_batch`). Written to a
temporary file, fsynced and renamed, so a crash while saving leaves the previous state.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import structlog

from collector.errors import DecodeError
from collector.model import Span, TraceBatch
from collector.otlp import decode_protobuf, encode_batch
from scorers.assemble import Assembler
from scorers.errors import ScorersError

__all__ = ["StateFileError", "load_state", "save_state"]

log = structlog.get_logger(__name__)

_MAGIC = b"VIGILST1"
_HEADER = struct.Struct(">cI")


class StateFileError(ScorersError):
    """The state file exists but cannot be read; it is left in place for inspection."""


def save_state(path: str | Path, assembler: Assembler) -> tuple[int, int]:
    """Write the assembler's in-flight runs and late-span cache to ``path`` atomically.

    Returns:
        ``(in_flight, closed)`` run counts written.
    """
    in_flight, closed = assembler.export_state()
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    with tmp.open("wb") as f:
        f.write(_MAGIC)
        for kind, entries in ((b"C", closed), (b"P", in_flight)):
            for trace_id, spans in entries:
                data = encode_batch(TraceBatch(trace_id, tuple(spans), 0))
                f.write(_HEADER.pack(kind, len(data)))
                f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(target)
    log.info("assembler_state_saved", path=str(target), in_flight=len(in_flight), closed=len(closed))
    return len(in_flight), len(closed)


def load_state(path: str | Path, assembler: Assembler) -> tuple[int, int]:
    """Load a state file written by :func:`save_state` into ``assembler``, then delete it.

    A missing file is an empty state.

    Returns:
        ``(in_flight, closed)`` run counts restored.

    Raises:
        StateFileError: the file is not a state file or is truncated.
    """
    source = Path(path)
    if not source.exists():
        return 0, 0
    data = source.read_bytes()
    if not data.startswith(_MAGIC):
        raise StateFileError(f"{source} is not a Vigil state file (remove it or set VIGIL_STATE_PATH)")
    in_flight: list[tuple[str, tuple[Span, ...]]] = []
    closed: list[tuple[str, tuple[Span, ...]]] = []
    pos = len(_MAGIC)
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            raise StateFileError(f"{source} is truncated at byte {pos}")
        kind, size = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        body = data[pos : pos + size]
        if len(body) != size or kind not in (b"P", b"C"):
            raise StateFileError(f"{source} is corrupt at byte {pos}")
        pos += size
        try:
            result = decode_protobuf(body)
        except DecodeError as exc:
            raise StateFileError(f"{source} holds an undecodable record at byte {pos - size}: {exc}") from exc
        target = in_flight if kind == b"P" else closed
        target.extend((batch.trace_id, batch.spans) for batch in result.batches)
    assembler.import_state(in_flight, closed)
    source.unlink()
    log.info("assembler_state_loaded", path=str(source), in_flight=len(in_flight), closed=len(closed))
    return len(in_flight), len(closed)
