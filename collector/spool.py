"""A write-ahead spool: every accepted OTLP body is on local disk before it is acknowledged.

The embedded mode (``vigil run``) keeps accepted spans in memory until their run is scored and
written; without a spool a SIGKILL, an OOM kill or a crash loses every run not yet written
(the senders were answered 200 and will not resend). The spool closes that gap the way the
OpenTelemetry Collector's ``file_storage`` queue, Vector's disk buffers and Fluent Bit's
filesystem storage do:

1. the receiver appends the (decompressed) request body to the active **segment** file and,
   depending on the fsync policy, waits for it to be on disk before it answers 200;
2. the records it publishes onto the in-process stream carry the body's sequence number
   (:class:`SpooledBatch`); once every trace of the body has been written to the store (or
   saved in the state file at a clean stop) the body is **acknowledged** (:meth:`Spool.ack`);
3. a segment whose records are all acknowledged is deleted (after ``before_delete``, which makes
   the store's writes durable, e.g. a SQLite WAL checkpoint);
4. at start-up :meth:`Spool.open` returns the records of every remaining segment, which the
   stream worker replays through the normal pipeline (store writes are idempotent on trace id,
   and a re-score from fewer spans never overwrites a fuller stored run). A torn or corrupt
   tail is truncated at the last good record and counted.

Fsync policies (``VIGIL_SPOOL_FSYNC``):

* ``batch`` (default): group commit. A flusher thread writes everything appended since its last
  round with one ``write`` and one ``fsync``; each request is answered once the round holding
  its body returned. Survives a process crash and a power loss.
* ``interval``: the body is written to the OS before the answer; a thread fsyncs every
  ``interval_s``. Survives a process crash; a power loss can lose the last interval.
* ``never``: written to the OS before the answer, never fsynced by Vigil. Survives a process
  crash; a power loss loses what the OS had not written back (tens of seconds on Linux).

Segment format: the 8-byte magic ``VGSPOOL1``, then records of a 4-byte big-endian length
``n``, the 4-byte big-endian CRC32 of the next ``n`` bytes, then those ``n`` bytes: one
encoding byte (``p`` protobuf, ``j`` JSON) and the body. A segment is named after the sequence
number of its first record (``00000000000000000042.seg``); record ``i`` of it has number
``42 + i``. One process uses a directory at a time (``flock`` on ``LOCK``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from collector.budget import ByteAccount
from collector.errors import BackpressureError, CollectorError
from collector.lifecycle import name_os_thread
from collector.model import TraceBatch
from collector.stream import Publisher, check_room

__all__ = [
    "FSYNC_POLICIES",
    "FsyncPolicy",
    "ReadCursor",
    "ReadResult",
    "Spool",
    "SpoolError",
    "SpoolMetrics",
    "SpoolRecord",
    "SpooledBatch",
    "SpoolingPublisher",
]

log = structlog.get_logger(__name__)

FsyncPolicy = Literal["batch", "interval", "never"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("batch", "interval", "never")

MAGIC = b"VGSPOOL1"
_HEADER = struct.Struct(">II")
_SUFFIX = ".seg"
ENCODINGS = {"protobuf": b"p", "json": b"j"}
_ENCODING_NAMES = {v[0]: k for k, v in ENCODINGS.items()}
_IOV_MAX = 1024
DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024
"""Segments are closed and a new one started past this size (the unit of deletion)."""
READ_BYTES = 4 * 1024 * 1024
"""How much :meth:`Spool.read` reads at once by default."""


class SpoolError(CollectorError):
    """The spool directory cannot be used (locked by another process, not writable)."""


@dataclass(frozen=True, slots=True)
class SpooledBatch(TraceBatch):
    """A stream record taken from a spooled body.

    Attributes:
        seq: the body's spool sequence number.
        parts: how many records (traces) the body was split into: the body is acknowledged once
            each of them has been written (or dropped as a duplicate).
    """

    seq: int = 0
    parts: int = 1


@dataclass(frozen=True, slots=True)
class ReadCursor:
    """Where :meth:`Spool.read` stopped: the segment (its first number), the byte offset and the number there."""

    segment: int
    offset: int
    seq: int


@dataclass(frozen=True, slots=True)
class ReadResult:
    """What :meth:`Spool.read` returns: the bodies read and the cursor for the next read."""

    records: list[SpoolRecord]
    cursor: ReadCursor | None


@dataclass(frozen=True, slots=True)
class SpoolRecord:
    """A body read back from the spool at start-up: its sequence number, encoding and bytes."""

    seq: int
    encoding: str
    body: bytes


class SpoolMetrics:
    """Prometheus metrics of the spool.

    Metrics:
        ``vigil_spool_bytes``: bytes held in segment files (read at scrape time).
        ``vigil_spool_records``: bodies not yet acknowledged (read at scrape time).
        ``vigil_spool_capacity_bytes``: the byte budget.
        ``vigil_spool_replayed_records_total``: bodies replayed at start-up.
        ``vigil_spool_corrupt_tails_total``: torn or corrupt segment tails truncated at start-up.
        ``vigil_spool_fsync_seconds``: duration of each fsync (a group commit round).
        ``vigil_spool_full_total``: bodies refused because the budget was reached.
        ``vigil_spool_queue_full_total``: bodies refused because the bodies waiting for the
            flusher reached the spool's memory budget (the disk is slower than the intake).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.bytes = Gauge("vigil_spool_bytes", "Bytes held in spool segment files.", registry=r)
        self.records = Gauge("vigil_spool_records", "Spooled bodies not yet acknowledged.", registry=r)
        self.capacity = Gauge("vigil_spool_capacity_bytes", "Byte budget of the spool.", registry=r)
        self.replayed = Counter("vigil_spool_replayed_records", "Spooled bodies replayed at start-up.", registry=r)
        self.corrupt = Counter(
            "vigil_spool_corrupt_tails", "Torn or corrupt spool segment tails truncated at start-up.", registry=r
        )
        self.fsync = Histogram(
            "vigil_spool_fsync_seconds",
            "Duration of one spool fsync (one group commit round).",
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
            registry=r,
        )
        self.full = Counter("vigil_spool_full", "Bodies refused because the spool budget was reached.", registry=r)
        self.queue_full = Counter(
            "vigil_spool_queue_full",
            "Bodies refused because the bodies waiting to be written reached the spool's memory budget.",
            registry=r,
        )


class _Segment:
    __slots__ = ("closed", "first", "path", "size", "unacked")

    def __init__(self, first: int, path: Path, size: int, unacked: int, closed: bool) -> None:
        self.first = first
        self.path = path
        self.size = size  # bytes assigned to it (written or queued)
        self.unacked = unacked
        self.closed = closed  # no more records will be assigned to it


class Spool:
    """The segment files of one directory: append, acknowledge, replay.

    Thread-safe: the receivers append on the event loop, the stream worker acknowledges from its
    thread, the flusher fsyncs on its own.

    Args:
        directory: where segments live (created when missing).
        fsync: ``batch``, ``interval`` or ``never`` (see the module doc).
        max_bytes: the byte budget; an append that would exceed it raises
            :class:`BackpressureError` (503 + Retry-After), except into an empty spool.
        interval_s: the fsync period of the ``interval`` policy.
        segment_bytes: size past which a new segment is started.
        retry_after_s: the ``retry_after`` of the backpressure error.
        metrics: where the spool is measured.
        before_delete: called before fully acknowledged segments are deleted (e.g. a SQLite WAL
            checkpoint, so the runs they held survive a power loss); an exception keeps them.
        delete_interval_s: shortest time between two deletion rounds (each runs ``before_delete``),
            except when the budget is within a segment of full.
        memory_bytes: budget of the bodies held in memory while they wait for the flusher
            (``batch`` policy; the ``spool`` share of :class:`collector.budget.MemoryBudgets`);
            past it appends are refused (503 + Retry-After) unless nothing waits; 0: unbounded.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        fsync: FsyncPolicy = "batch",
        max_bytes: int = 512 * 1024 * 1024,
        interval_s: float = 0.2,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        retry_after_s: float = 2.0,
        metrics: SpoolMetrics | None = None,
        before_delete: Callable[[], object] | None = None,
        delete_interval_s: float = 1.0,
        memory_bytes: int = 0,
    ) -> None:
        if fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync policy must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        self.directory = Path(directory)
        self.policy: FsyncPolicy = fsync
        self.max_bytes = max_bytes
        self._interval = interval_s
        self._segment_bytes = segment_bytes
        self._retry_after = retry_after_s
        self._metrics = metrics
        self._before_delete = before_delete
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._segments: dict[int, _Segment] = {}
        self._delete_interval = delete_interval_s
        self._last_delete = float("-inf")
        self._deleting: set[int] = set()
        self._seq_segment: dict[int, int] = {}
        self._active: _Segment | None = None
        self._next_seq = 0
        self._bytes = 0
        # batch policy: (segment first seq, record bytes, future) waiting for the flusher
        self._queue: list[tuple[int, tuple[bytes, bytes | bytearray], concurrent.futures.Future[None] | None]] = []
        self._fd: int | None = None
        self._fd_segment = -1
        self._dirty = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._lock_fd: int | None = None
        self.account = ByteAccount(memory_bytes)
        """Bytes of the bodies waiting for the flusher (``batch`` policy)."""
        if metrics is not None:
            metrics.capacity.set(max_bytes)
            metrics.bytes.set_function(lambda: float(self._bytes))
            metrics.records.set_function(lambda: float(len(self._seq_segment)))

    # --- start-up ---------------------------------------------------------------------------

    def open(self) -> Iterator[list[SpoolRecord]]:
        """Index every segment left by a previous process, truncating torn or corrupt tails.

        Every record found stays unacknowledged until :meth:`ack`; new appends go to a new
        segment. Call once, before the first :meth:`append`: it creates and locks the directory
        (nothing touches the disk before) and starts the flusher thread.

        Returns:
            The records to replay, one list per segment, oldest first: read lazily, so a large
            spool is never in memory at once.

        Raises:
            SpoolError: another process holds the directory, or it cannot be created.
        """
        self._lock_directory()
        found_segments: list[tuple[Path, int]] = []
        total = 0
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            try:
                first = int(path.stem)
            except ValueError:
                continue
            count, size = self._check_segment(path, first)
            if not count:
                path.unlink()
                continue
            self._segments[first] = _Segment(first, path, size, count, closed=True)
            self._bytes += size
            self._seq_segment.update((seq, first) for seq in range(first, first + count))
            self._next_seq = first + count
            total += count
            found_segments.append((path, first))
        if total and self._metrics is not None:
            self._metrics.replayed.inc(total)
        if total:
            log.info("spool_replay", records=total, bytes=self._bytes, segments=len(found_segments))
        self._start_thread()
        return (_parse(path.read_bytes(), first)[0] for path, first in found_segments)

    def _lock_directory(self) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise SpoolError(f"cannot use spool directory {self.directory} (VIGIL_SPOOL_PATH): {exc}") from exc
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise SpoolError(
                f"spool directory {self.directory} is in use by another process (set VIGIL_SPOOL_PATH per process)"
            ) from exc

    def _check_segment(self, path: Path, first: int) -> tuple[int, int]:
        """``(records, good bytes)`` of a segment, truncated after its last good record."""
        data = path.read_bytes()
        records, good = _parse(data, first)
        if good != len(data):
            if self._metrics is not None:
                self._metrics.corrupt.inc()
            log.warning("spool_corrupt_tail", segment=str(path), kept_bytes=good, dropped_bytes=len(data) - good)
            with path.open("r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        return len(records), good

    def _start_thread(self) -> None:
        if self._thread is None and self.policy != "never":
            target = self._flush_loop if self.policy == "batch" else self._interval_loop
            self._thread = threading.Thread(target=target, name="vigil-spool", daemon=True)
            self._thread.start()

    # --- append -----------------------------------------------------------------------------

    def check_room(self, size_hint: int = 0) -> None:
        """Raise when an append of about ``size_hint`` bytes would be refused now.

        Raises:
            BackpressureError: the spool is at its budget (or closed).
        """
        if self._closed or (self._bytes and self._bytes + size_hint > self.max_bytes):
            raise BackpressureError(self._retry_after, f"spool full ({self._bytes} of {self.max_bytes} bytes)")

    def append(
        self, body: bytes | bytearray, encoding: str = "protobuf"
    ) -> tuple[int, concurrent.futures.Future[None] | None]:
        """Append one body.

        Returns:
            ``(seq, future)``: with the ``batch`` policy the future completes once the body is
            fsynced (or fails with the ``OSError``); with the others ``future`` is None and the
            body is already written to the OS.

        Raises:
            BackpressureError: over the byte budget (nothing appended; counted).
            OSError: (``interval``/``never``) the write failed; nothing is held.
            SpoolError: :meth:`open` was not called.
        """
        if self._lock_fd is None and not self._closed:
            raise SpoolError(f"spool {self.directory} appended to before open()")
        tag = ENCODINGS[encoding]
        head = _HEADER.pack(len(body) + 1, zlib.crc32(body, zlib.crc32(tag))) + tag
        record = (head, body)  # written with writev: the body is never copied
        size = len(head) + len(body)
        future: concurrent.futures.Future[None] | None = None
        with self._lock:
            if self._closed or (self._bytes and self._bytes + size > self.max_bytes):
                if self._metrics is not None:
                    self._metrics.full.inc()
                raise BackpressureError(self._retry_after, f"spool full ({self._bytes} of {self.max_bytes} bytes)")
            if self.policy == "batch" and self._queue and not self.account.fits(size):
                if self._metrics is not None:
                    self._metrics.queue_full.inc()
                raise BackpressureError(
                    self._retry_after, f"spool write queue full ({self.account.held} of {self.account.budget} bytes)"
                )
            seq = self._next_seq
            self._next_seq += 1
            segment = self._active
            new_segment = segment is None or (segment.size + size > self._segment_bytes and segment.size > len(MAGIC))
            if new_segment:
                if segment is not None:
                    segment.closed = True  # deleted by the next acknowledgement if nothing in it is pending
                segment = self._active = _Segment(seq, self.directory / f"{seq:020d}{_SUFFIX}", len(MAGIC), 0, False)
                self._segments[seq] = segment
                self._bytes += len(MAGIC)
            assert segment is not None
            segment.size += size
            segment.unacked += 1
            self._seq_segment[seq] = segment.first
            self._bytes += size
            if self.policy == "batch":
                future = concurrent.futures.Future()
                self.account.add(size)
                self._queue.append((segment.first, record, future))
                self._wake.notify()
                return seq, future
            try:
                self._write(segment.first, [record])
                self._dirty = True
            except OSError:
                self._ack_locked(seq)
                raise
        return seq, None

    async def append_async(self, body: bytes | bytearray, encoding: str = "protobuf") -> int:
        """:meth:`append`, then wait (without blocking the event loop) until the policy is met.

        Raises:
            BackpressureError: over the byte budget, or the write/fsync failed (nothing held).
        """
        seq, future = self.append(body, encoding)
        await self.committed(seq, future)
        return seq

    async def committed(self, seq: int, future: concurrent.futures.Future[None] | None) -> None:
        """Wait (without blocking the event loop) until the body :meth:`append` returned ``(seq, future)`` for
        is as durable as the policy says; a body that could not be written is acknowledged (dropped) at once.

        Raises:
            BackpressureError: the write/fsync failed (nothing held).
        """
        if future is None:
            return
        try:
            await asyncio.wrap_future(future)
        except OSError as exc:
            self.ack(seq)
            raise BackpressureError(self._retry_after, f"spool write failed: {exc}") from exc
        except asyncio.CancelledError:  # the request was dropped unanswered: the sender resends it
            future.add_done_callback(lambda _: self.ack(seq))
            raise

    def first_unacked(self) -> int | None:
        """The number of the oldest body not yet acknowledged, or None when every body was."""
        with self._lock:
            return min(self._seq_segment) if self._seq_segment else None

    def read(self, seq: int, cursor: ReadCursor | None = None, max_bytes: int = READ_BYTES) -> ReadResult:
        """Bodies from number ``seq`` on, as far as they are written to the OS yet (a reader that follows
        the spool: ``vigil collector`` draining it to Kafka).

        Args:
            seq: the first body wanted (unacknowledged; otherwise nothing is returned).
            cursor: the :attr:`ReadResult.cursor` of the previous read, so the segment is not parsed
                from its start again.
            max_bytes: about how much to read at once (at least one whole body).

        Returns:
            The bodies (possibly none: not written yet) and the cursor to pass next time.
        """
        with self._lock:
            first = self._seq_segment.get(seq)
            segment = self._segments.get(first) if first is not None else None
        if first is None or segment is None:
            return ReadResult([], cursor)
        if cursor is None or cursor.segment != first or cursor.seq > seq:
            cursor = ReadCursor(first, len(MAGIC), first)
        try:
            with segment.path.open("rb") as f:
                f.seek(cursor.offset)
                data = f.read(max_bytes)
                if len(data) >= _HEADER.size and _HEADER.unpack_from(data)[0] + _HEADER.size > len(data):
                    data += f.read(_HEADER.unpack_from(data)[0] + _HEADER.size - len(data))  # one large body
        except FileNotFoundError:  # not created yet (the flusher writes it), or just deleted
            return ReadResult([], cursor)
        records, used = _parse_records(data, 0, cursor.seq)
        cursor = ReadCursor(first, cursor.offset + used, cursor.seq + len(records))
        return ReadResult([r for r in records if r.seq >= seq], cursor)

    def _write(self, first: int, records: Sequence[tuple[bytes, bytes | bytearray]]) -> None:
        """Write records of segment ``first`` (lock held, or flusher thread owning the fd)."""
        if self._fd_segment != first:
            if self._fd is not None:
                if self.policy != "never":
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
            segment = self._segments.get(first)
            path = segment.path if segment is not None else self.directory / f"{first:020d}{_SUFFIX}"
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._fd_segment = first
            os.write(self._fd, MAGIC)
            if self.policy != "never":
                self._fsync_dir()
        fd = self._fd
        assert fd is not None
        buffers = [part for record in records for part in record]
        for i in range(0, len(buffers), _IOV_MAX):
            chunk = buffers[i : i + _IOV_MAX]
            written = os.writev(fd, chunk)
            total = sum(len(b) for b in chunk)
            if written < total:  # a short write (rare on a regular file): write the rest plainly
                rest = memoryview(b"".join(chunk))[written:]
                while rest:
                    rest = rest[os.write(fd, rest) :]

    def _fsync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _fsync(self) -> None:
        if self._fd is None:
            return
        started = time.perf_counter()
        _datasync(self._fd)
        if self._metrics is not None:
            self._metrics.fsync.observe(time.perf_counter() - started)

    def _flush_loop(self) -> None:
        """Group commit: write everything queued, fsync once, complete the round's futures."""
        name_os_thread()
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if not self._queue and self._closed:
                    return
                batch, self._queue = self._queue, []
            error: OSError | None = None
            try:
                start = 0
                for i in range(1, len(batch) + 1):  # one write per run of records of one segment
                    if i == len(batch) or batch[i][0] != batch[start][0]:
                        self._write(batch[start][0], [r for _, r, _ in batch[start:i]])
                        start = i
                self._fsync()
            except OSError as exc:
                error = exc
                log.error("spool_write_failed", error=str(exc))
            with self._lock:
                self.account.sub(sum(len(head) + len(body) for _, (head, body), _ in batch))
            for _, _, future in batch:
                if future is not None:
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)

    def _interval_loop(self) -> None:
        name_os_thread()
        while True:
            with self._lock:
                if self._closed:
                    return
                self._wake.wait(self._interval)
                dirty, self._dirty = self._dirty, False
                fd = os.dup(self._fd) if dirty and self._fd is not None else None
            if fd is None:
                continue
            try:  # outside the lock: appends go on while the disk syncs (a rotation fsyncs the old fd itself)
                started = time.perf_counter()
                _datasync(fd)
                if self._metrics is not None:
                    self._metrics.fsync.observe(time.perf_counter() - started)
            except OSError as exc:
                log.error("spool_fsync_failed", error=str(exc))
            finally:
                os.close(fd)

    # --- acknowledge ------------------------------------------------------------------------

    def ack(self, seqs: int | Sequence[int]) -> None:
        """Acknowledge bodies: their runs are durably written (or saved). Unknown numbers are ignored.

        Segments left with nothing unacknowledged are deleted, after ``before_delete``, outside
        the lock (appends never wait for a store checkpoint); at most every ``delete_interval_s``
        unless the budget is within a segment of full (a store checkpoint per deletion round).
        """
        with self._lock:
            for seq in (seqs,) if isinstance(seqs, int) else seqs:
                self._ack_locked(seq)
            pressed = self._bytes + self._segment_bytes > self.max_bytes
            if not pressed and time.monotonic() - self._last_delete < self._delete_interval:
                return
            ready = self._take_deletable()
        self._delete(ready)

    def _ack_locked(self, seq: int) -> None:
        first = self._seq_segment.pop(seq, None)
        if first is not None:
            self._segments[first].unacked -= 1

    def _take_deletable(self) -> list[_Segment]:
        """Segments (lock held) that are closed, fully acknowledged and not already being deleted.

        A fully acknowledged active segment is closed too (the next append starts a new one) once
        it is half full, or when the budget is within a segment of full, so that its bytes leave
        the budget without a new file (and a store checkpoint) after every acknowledgement.
        """
        active = self._active
        roomy = active is None or (
            active.size < self._segment_bytes // 2 and self._bytes + self._segment_bytes <= self.max_bytes
        )
        queued = {first for first, _, _ in self._queue}
        if active is not None and not roomy and not active.unacked and active.first not in queued:
            active.closed = True
            self._active = None
        ready = [s for s in self._segments.values() if s.closed and not s.unacked and s.first not in self._deleting]
        ready = [s for s in ready if s.first not in queued]  # the flusher still writes these: a later ack deletes
        self._deleting.update(s.first for s in ready)
        return ready

    def _delete(self, ready: list[_Segment]) -> None:
        if not ready:
            return
        self._last_delete = time.monotonic()
        if self._before_delete is not None:
            try:
                self._before_delete()
            except Exception:
                log.exception("spool_before_delete_failed")
                with self._lock:
                    self._deleting.difference_update(s.first for s in ready)
                return
        with self._lock:
            for segment in ready:
                del self._segments[segment.first]
                self._deleting.discard(segment.first)
                self._bytes -= segment.size
                if self.policy != "batch" and self._fd_segment == segment.first and self._fd is not None:
                    os.close(self._fd)  # (with ``batch`` the flusher owns the fd and closes it when it moves on)
                    self._fd = None
                    self._fd_segment = -1
                with contextlib.suppress(FileNotFoundError):
                    segment.path.unlink()

    @property
    def bytes_held(self) -> int:
        """Bytes in segment files (written or queued)."""
        return self._bytes

    @property
    def unacked(self) -> int:
        """Bodies not yet acknowledged."""
        return len(self._seq_segment)

    def segment_paths(self) -> list[Path]:
        """The segment files, oldest first (tests, diagnostics)."""
        return sorted(self.directory.glob(f"*{_SUFFIX}"))

    # --- stop -------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush what is queued, stop the flusher, release the directory; idempotent.

        Segments still holding unacknowledged bodies stay for the next start; when everything
        was acknowledged the active segment is deleted too.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            try:
                if self._fd is not None and self.policy != "never":
                    os.fsync(self._fd)
            except OSError as exc:
                log.error("spool_fsync_failed", error=str(exc))
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self._fd_segment = -1
            if self._active is not None:
                self._active.closed = True
            ready = self._take_deletable()
        self._delete(ready)
        with self._lock:
            if self._lock_fd is not None:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                os.close(self._lock_fd)
                self._lock_fd = None
        log.info("spool_closed", unacked=len(self._seq_segment), bytes=self._bytes)


def stamp(batches: Sequence[TraceBatch], seq: int) -> list[SpooledBatch]:
    """The records of one spooled body, each carrying its sequence number and the body's record count."""
    parts = len(batches)
    return [SpooledBatch(b.trace_id, b.spans, b.received_ns, b.size, seq, parts) for b in batches]


class SpoolingPublisher:
    """A :class:`~collector.stream.Publisher` that spools each body before publishing its records.

    Receivers that know the body call :meth:`publish_body` (awaited: the answer waits for the
    fsync policy); :meth:`publish` passes records through unspooled.

    Args:
        inner: the publisher behind (memory limiter + in-process stream).
        spool: the spool (opened).
    """

    def __init__(self, inner: Publisher, spool: Spool) -> None:
        self._inner = inner
        self._spool = spool

    @property
    def spool(self) -> Spool:
        """The spool."""
        return self._spool

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        """Publish without spooling (callers that do not have the body).

        Raises:
            BackpressureError: the inner publisher refused.
        """
        self._inner.publish(batches)

    async def publish_body(self, batches: Sequence[TraceBatch], body: bytes | bytearray, encoding: str) -> None:
        """Spool ``body`` (waiting for the fsync policy), then publish its records, all or none.

        Raises:
            BackpressureError: the spool is full or failed, or the inner publisher refused; in
                every case nothing of the body is held (the spooled copy is acknowledged at once).
        """
        if not batches:
            return
        check_room(self._inner, 0)
        seq = await self._spool.append_async(body, encoding)
        try:
            self._inner.publish(stamp(batches, seq))
        except BackpressureError:
            self._spool.ack(seq)
            raise

    def check_room(self, size_hint: int = 0) -> None:
        """Refuse early when the spool is at its budget or the inner publisher would refuse.

        Raises:
            BackpressureError: a publish would be refused now.
        """
        self._spool.check_room(size_hint)
        check_room(self._inner, size_hint)

    def ready(self) -> bool:
        """Ready when the inner publisher is."""
        probe = getattr(self._inner, "ready", None)
        return bool(probe()) if callable(probe) else True


def _datasync(fd: int) -> None:
    """``fdatasync`` where it exists (the data and the file size, not the timestamps), else ``fsync``."""
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # pragma: no cover - macOS
        os.fsync(fd)


def _parse(data: bytes, first: int) -> tuple[list[SpoolRecord], int]:
    """The good records of a segment's bytes, and where they end (0 without a valid magic)."""
    if not data.startswith(MAGIC):
        return [], 0
    return _parse_records(data, len(MAGIC), first)


def _parse_records(data: bytes, pos: int, first: int) -> tuple[list[SpoolRecord], int]:
    """The good records in ``data`` from ``pos`` (numbered from ``first``), and where they end."""
    out: list[SpoolRecord] = []
    while pos + _HEADER.size <= len(data):
        size, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        payload = data[start : start + size]
        if size < 1 or len(payload) != size or zlib.crc32(payload) != crc or payload[0] not in _ENCODING_NAMES:
            break
        out.append(SpoolRecord(first + len(out), _ENCODING_NAMES[payload[0]], payload[1:]))
        pos = start + size
    return out, pos


def iter_records(directory: str | Path) -> Iterator[SpoolRecord]:
    """Read the good records of a spool directory without changing it (diagnostics, tests)."""
    for path in sorted(Path(directory).glob(f"*{_SUFFIX}")):
        yield from _parse(path.read_bytes(), int(path.stem))[0]
