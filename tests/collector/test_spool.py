"""The write-ahead spool: append, replay, torn tails, budget, acknowledgement and segment deletion."""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import BackpressureError
from collector.metrics import CollectorMetrics
from collector.receiver import create_otlp_app
from collector.spool import (
    MAGIC,
    Spool,
    SpooledBatch,
    SpoolError,
    SpoolingPublisher,
    SpoolMetrics,
    SpoolRecord,
    iter_records,
)
from collector.stream import InProcessStream
from vigil.bench.synth import body, make_run

PROTO = {"Content-Type": "application/x-protobuf"}


def _spool(path: Path, **kw: object) -> Spool:
    spool = Spool(path, **kw)  # type: ignore[arg-type]
    _replayed(spool)
    return spool


def _replayed(spool: Spool) -> list[SpoolRecord]:
    return [record for segment in spool.open() for record in segment]


def _value(registry: CollectorRegistry, name: str) -> float:
    return registry.get_sample_value(name) or 0.0


@pytest.mark.parametrize("policy", ["batch", "interval", "never"])
def test_appended_bodies_are_replayed_after_a_restart(tmp_path: Path, policy: str) -> None:
    """Unacknowledged bodies come back, in order, with their encoding; acknowledged segments are gone."""
    spool = _spool(tmp_path, fsync=policy, segment_bytes=200)
    seqs = []
    for i in range(10):
        seq, future = spool.append(b"x" * 50 + bytes([i]), "json" if i % 2 else "protobuf")
        if future is not None:
            future.result(5)
        seqs.append(seq)
    spool.ack(seqs[:4])
    spool.close()
    registry = CollectorRegistry()
    again = Spool(tmp_path, fsync=policy, metrics=SpoolMetrics(registry))
    records = _replayed(again)
    assert seqs[4:] == [r.seq for r in records][-6:]  # segments of acknowledged bodies only were deleted
    assert all(r.body.endswith(bytes([r.seq])) for r in records)
    assert ["json" if r.seq % 2 else "protobuf" for r in records] == [r.encoding for r in records]
    assert len(records) == _value(registry, "vigil_spool_replayed_records_total")
    again.ack([r.seq for r in records])
    again.close()
    assert [] == list(tmp_path.glob("*.seg"))


def test_a_torn_tail_is_truncated_and_counted(tmp_path: Path) -> None:
    """A record cut short (a crash mid-write) is dropped; the good records before it are kept."""
    segment = _three_bodies(tmp_path)
    good = segment.stat().st_size
    with segment.open("ab") as f:
        f.write(b"\x00\x00\x10\x00\x12\x34")  # a header promising 4 KiB, then nothing
    registry = CollectorRegistry()
    again = Spool(tmp_path, metrics=SpoolMetrics(registry))
    assert [b"body0", b"body1", b"body2"] == [r.body for r in _replayed(again)]
    assert good == segment.stat().st_size
    assert 1 == _value(registry, "vigil_spool_corrupt_tails_total")
    seq, future = again.append(b"next")
    assert future is not None
    future.result(5)
    assert 3 == seq  # numbering continues; new records go to a new segment
    again.close()
    assert [b"body0", b"body1", b"body2", b"next"] == [r.body for r in iter_records(tmp_path)]


def test_a_corrupt_record_ends_the_segment(tmp_path: Path) -> None:
    """A CRC mismatch truncates the segment there: later records in it cannot be trusted."""
    segment = _three_bodies(tmp_path)
    data = bytearray(segment.read_bytes())
    second = len(MAGIC) + 8 + 6  # header + encoding byte + b"body0"
    data[second + 9] ^= 0xFF  # a bit flip in the second record's body
    segment.write_bytes(bytes(data))
    registry = CollectorRegistry()
    again = Spool(tmp_path, metrics=SpoolMetrics(registry))
    assert [b"body0"] == [r.body for r in _replayed(again)]
    assert 1 == _value(registry, "vigil_spool_corrupt_tails_total")
    again.close()


def test_a_torn_segment_header_is_removed(tmp_path: Path) -> None:
    """A segment cut inside its magic holds nothing: it is removed and counted."""
    (tmp_path / f"{7:020d}.seg").write_bytes(MAGIC[:3])
    registry = CollectorRegistry()
    spool = Spool(tmp_path, metrics=SpoolMetrics(registry))
    assert [] == _replayed(spool)
    assert [] == list(tmp_path.glob("*.seg"))
    assert 1 == _value(registry, "vigil_spool_corrupt_tails_total")
    spool.close()


def test_the_budget_refuses_with_retry_after(tmp_path: Path) -> None:
    """Past the byte budget appends are refused (503 + Retry-After upstream) until acknowledgements free room."""
    registry = CollectorRegistry()
    spool = Spool(tmp_path, max_bytes=1000, segment_bytes=300, retry_after_s=3, metrics=SpoolMetrics(registry))
    _replayed(spool)
    held = []

    def fill() -> None:
        for _ in range(100):
            seq, future = spool.append(b"y" * 90)
            assert future is not None
            future.result(5)
            held.append(seq)

    with pytest.raises(BackpressureError) as refused:
        fill()
    assert 3 == refused.value.retry_after
    assert spool.bytes_held <= 1000
    assert 1 == _value(registry, "vigil_spool_full_total")
    with pytest.raises(BackpressureError):
        spool.check_room(100)
    spool.ack(held)
    spool.check_room(100)
    assert spool.bytes_held < 400  # only the active segment is left
    spool.close()


def test_one_process_per_directory(tmp_path: Path) -> None:
    """A second spool on the same directory is refused with a message naming it."""
    spool = _spool(tmp_path)
    with pytest.raises(SpoolError, match="in use by another process"):
        Spool(tmp_path).open()
    spool.close()
    _spool(tmp_path).close()


def test_append_async_waits_for_the_group_commit(tmp_path: Path) -> None:
    """Concurrent appends share fsync rounds; every one returns once on disk."""
    registry = CollectorRegistry()
    spool = Spool(tmp_path, metrics=SpoolMetrics(registry))
    _replayed(spool)

    async def main() -> list[int]:
        return list(await asyncio.gather(*(spool.append_async(b"z" * 1000) for _ in range(200))))

    seqs = asyncio.run(main())
    assert list(range(200)) == sorted(seqs)
    rounds = _value(registry, "vigil_spool_fsync_seconds_count")
    assert 1 <= rounds < 200
    assert 200 == len(list(iter_records(tmp_path)))
    spool.close()


def _receiver(tmp_path: Path, max_bytes: int) -> tuple[TestClient, Spool, InProcessStream]:
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    stream = InProcessStream(1000, 2, metrics)
    spool = Spool(tmp_path, max_bytes=max_bytes, retry_after_s=7)
    _replayed(spool)
    app = create_otlp_app(SpoolingPublisher(stream, spool), metrics, max_body_bytes=2**20, retry_after_s=2)
    return TestClient(app), spool, stream


def test_the_receiver_answers_200_once_spooled_and_503_when_full(tmp_path: Path) -> None:
    """A 200 means the body is in the spool and its records (stamped) are on the stream; a full spool is a 503."""
    rng = random.Random(3)
    client, spool, stream = _receiver(tmp_path, max_bytes=60_000)
    bodies = [body(list(make_run(rng).spans)) for _ in range(40)]
    answers = [client.post("/v1/traces", content=b, headers=PROTO) for b in bodies]
    codes = [a.status_code for a in answers]
    assert 200 == codes[0]
    assert 503 in codes, codes
    assert all(c in (200, 503) for c in codes)
    refused = next(a for a in answers if a.status_code == 503)
    assert "7" == refused.headers["Retry-After"]
    taken = stream.get_many(1000, 0)
    assert codes.count(200) == len({r.seq for r in taken if isinstance(r, SpooledBatch)}) == spool.unacked
    assert codes.count(200) == len(list(iter_records(tmp_path)))
    spool.ack([r.seq for r in taken if isinstance(r, SpooledBatch)])
    assert 200 == client.post("/v1/traces", content=bodies[-1], headers=PROTO).status_code
    spool.close()


def test_refused_by_the_stream_leaves_nothing_held(tmp_path: Path) -> None:
    """When the stream refuses after the body was spooled, the spooled copy is released at once."""
    rng = random.Random(4)
    client, spool, stream = _receiver(tmp_path, max_bytes=10**8)
    stream.close()  # every publish is refused
    answer = client.post("/v1/traces", content=body(list(make_run(rng).spans)), headers=PROTO)
    assert 503 == answer.status_code
    assert 0 == spool.unacked
    spool.close()


@pytest.mark.parametrize("policy", ["batch", "never"])
def test_read_follows_the_spool_across_segments(tmp_path: Path, policy: str) -> None:
    """read() returns what is written, from a given body on, resuming at its cursor and moving to the next
    segment; an acknowledged body is not read again (what vigil collector's drain to Kafka relies on)."""
    spool = _spool(tmp_path, fsync=policy, segment_bytes=200)
    bodies = [bytes([i]) * 60 for i in range(8)]
    seqs = []
    for i, data in enumerate(bodies):
        seq, future = spool.append(data, "json" if i == 3 else "protobuf")
        if future is not None:
            future.result(5)
        seqs.append(seq)
    assert len(spool.segment_paths()) > 2  # the reads below cross segments
    got: list[SpoolRecord] = []
    seq, cursor = seqs[0], None
    while seq <= seqs[-1]:
        read = spool.read(seq, cursor, max_bytes=70)  # about one body per read
        assert read.records, f"nothing read at {seq}"
        got.extend(read.records)
        seq, cursor = read.records[-1].seq + 1, read.cursor
    assert (seqs, bodies) == ([r.seq for r in got], [r.body for r in got])
    assert "json" == got[3].encoding
    assert [] == spool.read(seqs[-1] + 1).records  # not written yet
    middle = spool.read(seqs[5])  # no cursor: parsed from its segment's start
    assert seqs[5] == middle.records[0].seq
    spool.ack(seqs[:2])
    assert spool.read(seqs[0]).cursor is None  # acknowledged: gone for the reader
    assert seqs[2] == spool.first_unacked()
    spool.close()


def test_bodies_waiting_for_the_disk_are_bounded_in_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 15 item 3: with the disk stalled, bodies waiting for the flusher stop at the spool's memory
    budget; the next one is refused (503 + Retry-After) and counted; written bodies give their bytes back."""
    registry = CollectorRegistry()
    spool = Spool(tmp_path / "spool", fsync="batch", metrics=SpoolMetrics(registry), memory_bytes=3000)
    stalled, writing = threading.Event(), threading.Event()
    real_write = spool._write

    def slow_write(first: int, records: object) -> None:
        writing.set()
        assert stalled.wait(10)
        real_write(first, records)  # type: ignore[arg-type]

    monkeypatch.setattr(spool, "_write", slow_write)
    list(spool.open())
    _, first = spool.append(b"a" * 1000)  # taken by the flusher, which stalls on the disk
    assert writing.wait(10)
    futures = [spool.append(b"b" * 1000)[1], spool.append(b"c" * 900)[1]]
    with pytest.raises(BackpressureError, match="write queue full"):
        spool.append(b"d" * 1000)
    assert 1 == _value(registry, "vigil_spool_queue_full_total")
    assert spool.account.held <= 3000
    stalled.set()
    for future in [first, *futures]:
        assert future is not None
        future.result(10)
    assert 0 == spool.account.held
    spool.close()


def _three_bodies(tmp_path: Path) -> Path:
    """A closed spool in ``tmp_path`` holding ``body0``..``body2`` in one segment; that segment."""
    spool = _spool(tmp_path)
    for i in range(3):
        spool.append(b"body%d" % i)[1].result(5)  # type: ignore[union-attr]
    spool.close()
    (segment,) = tmp_path.glob("*.seg")
    return segment
