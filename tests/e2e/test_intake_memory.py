"""Issue 20, finding 5: the memory limit holds under a burst of concurrent gzip bodies.

48 gzip bodies, each inflating to just under the size limit (``VIGIL_MAX_BODY_BYTES``, 20 MiB),
are sent at once to a real ``vigil run`` with ``VIGIL_MEMORY_LIMIT_MB=512``. Before the intake
budget every body was read, inflated (and held twice) and decoded before the memory check refused
it: the peak was 2.8 GiB. Now each body's bytes are reserved before they are held
(:class:`collector.limits.IntakeBudget`, a quarter of the limit), the ones that do not fit are
answered 503 + Retry-After and counted, peak RSS (``VmHWM``) stays under the limit, and a normal
run sent after the burst is stored.

The same burst over OTLP/gRPC (48 calls with ``grpc-encoding: gzip``, all started together): a call
is admitted before its message is read (:mod:`collector.grpc_receiver`, *Admission*), the server
does not probe the bandwidth-delay product (so a call not yet admitted can have only 64 KiB of
its message sent ahead), freed large blocks go back to the system
(:func:`vigil.run.tune_malloc`), and runs due together are scored a chunk at a time
(:func:`scorers.worker.chunks`). Measured before those three: 423-537 MiB at this limit.

Issue 25: the same 48 gzip bodies (20 MiB - 64 KiB inflated) sent slowly over raw sockets: every
request head first, then every body but its last 64 compressed bytes, then all the tails. Each
request inflated its body step by step as it arrived, so all 48 shared the budget and were refused
mid-body; a refused one kept its inflated bytes (referenced from the refusal's traceback) while it
read the rest of its body, waiting for the tail: bodies of random text (which gzip hardly shrinks)
reached a VmHWM of 691-781 MiB over 4 runs, and the one left was then refused by the memory
ceiling: 48 x 503. Now a request is admitted (:mod:`collector.admission`) before its body is read,
in arrival order, and refused at once when the ones waiting ahead of it fill the budget; one refused
on the way drops what it inflated at once.
"""

from __future__ import annotations

import gzip
import random
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from collector.grpc_receiver import EXPORT_METHOD, RETRY_INFO_KEY
from vigil.bench.synth import body, make_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

LIMIT_MB = 512
MAX_BODY = 20 * 1024 * 1024  # the default VIGIL_MAX_BODY_BYTES
BODIES = 48
PROTO = {"Content-Type": "application/x-protobuf"}
GZIP_PROTO = {**PROTO, "Content-Encoding": "gzip"}
ENV = {
    "VIGIL_MEMORY_LIMIT_MB": str(LIMIT_MB),
    "VIGIL_RETRY_AFTER_S": "1",
    "VIGIL_QUIET_PERIOD_S": "0.5",
    "VIGIL_SAMPLE_RATE": "0",
}


def _body_near_limit() -> bytes:
    """One protobuf body of whole synthetic agent runs, 93-100 % of the size limit."""
    rng = random.Random(20)
    spans: list[Span] = []
    for i in range(1, 100_000):
        spans.extend(make_run(rng).spans)
        if i % 500 == 0 and len(encoded := body(spans)) > MAX_BODY * 0.93:
            assert len(encoded) <= MAX_BODY
            return encoded
    raise AssertionError("never reached the size limit")


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _metric(vigil: VigilProcess, line_start: str) -> float:
    for line in httpx.get(vigil.metrics_url, timeout=10).text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {line_start} on /metrics")


def _all_at_once(send: Callable[[], None]) -> None:
    """Run ``send`` on :data:`BODIES` threads (each waits at a shared barrier) and wait for all."""
    threads = [threading.Thread(target=send) for _ in range(BODIES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _normal_run_after(vigil: VigilProcess, url: str, seed: int) -> tuple[int, bool, float, float]:
    """After a burst: send one ordinary run until it is answered 200 (retrying after each 503, as an
    exporter does) and wait for it to be stored; returns (last status, stored, intake bytes still
    reserved, VmHWM in MiB)."""
    normal = make_run(random.Random(seed))
    plain = body(list(normal.spans))
    deadline = time.monotonic() + 120
    answered = 0
    while time.monotonic() < deadline and answered != 200:
        answered = httpx.post(url, content=plain, headers=PROTO, timeout=30).status_code
        if answered != 200:
            time.sleep(1)  # the Retry-After
    stored = _stored_by(vigil, normal.trace_id, deadline)
    return answered, stored, _metric(vigil, "vigil_intake_reserved_bytes"), _peak_rss_mb(vigil.process.pid)


def _stored_by(vigil: VigilProcess, trace_id: str, deadline: float) -> bool:
    """Whether ``trace_id``'s run is in the store by ``deadline`` (monotonic seconds)."""
    while time.monotonic() < deadline and not _stored(vigil, trace_id):
        time.sleep(0.5)
    return _stored(vigil, trace_id)


def _stored(vigil: VigilProcess, trace_id: str) -> bool:
    with sqlite3.connect(vigil.workdir / "vigil.db") as db:
        return db.execute("SELECT 1 FROM runs WHERE trace_id = ?", (trace_id,)).fetchone() is not None


def test_concurrent_gzip_bodies_keep_peak_rss_under_the_limit(tmp_path: Path) -> None:
    """48 concurrent gzip bodies at the size limit: VmHWM < 512 MiB, the refused ones are 503 +
    Retry-After and counted, and a normal run sent afterwards is stored."""
    payload = gzip.compress(_body_near_limit(), 6)
    statuses: dict[int, int] = {}
    bad_retry_after: list[str | None] = []
    lock = threading.Lock()
    with start_vigil(tmp_path, ENV) as vigil:
        url = f"{vigil.otlp_endpoint}/v1/traces"
        barrier = threading.Barrier(BODIES)

        def send() -> None:
            with httpx.Client(timeout=300) as client:
                barrier.wait()
                r = client.post(url, content=payload, headers=GZIP_PROTO)
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    if r.status_code == 503 and r.headers.get("Retry-After") != "1":
                        bad_retry_after.append(r.headers.get("Retry-After"))

        _all_at_once(send)
        peak = _peak_rss_mb(vigil.process.pid)
        by_budget = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="intake_budget"}')
        by_backpressure = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="backpressure"}')

        answered, stored, reserved_after, final_peak = _normal_run_after(vigil, url, 7)
    print(f"intake burst: statuses={statuses} peak_rss_mib={peak:.0f} after_normal_run={final_peak:.0f}")
    assert set(statuses) <= {200, 503}, statuses
    assert BODIES == sum(statuses.values())
    assert statuses.get(503, 0) > 0, statuses
    assert [] == bad_retry_after
    assert by_budget > 0
    assert statuses.get(503, 0) == by_budget + by_backpressure  # every refusal counted, by reason
    assert peak < LIMIT_MB, f"peak RSS {peak:.0f} MiB over the {LIMIT_MB} MiB limit ({statuses})"
    assert 200 == answered
    assert stored, "the run sent after the burst was not stored"
    assert 0 == reserved_after


def test_concurrent_gzip_grpc_messages_keep_peak_rss_under_the_limit(tmp_path: Path) -> None:
    """48 concurrent gzip OTLP/gRPC messages at the size limit: VmHWM < 512 MiB, the refused calls are
    UNAVAILABLE + RetryInfo and counted, and a normal run exported afterwards is stored."""
    message = _body_near_limit()
    codes: dict[str, int] = {}
    bad_retry_info: list[int | None] = []
    lock = threading.Lock()
    with start_vigil(tmp_path, ENV) as vigil:
        target = vigil.otlp_grpc_target
        barrier = threading.Barrier(BODIES)

        def send() -> None:
            with grpc.insecure_channel(target) as channel:
                export = channel.unary_unary(EXPORT_METHOD)
                grpc.channel_ready_future(channel).result(timeout=60)
                barrier.wait()
                try:
                    export(message, timeout=300, compression=grpc.Compression.Gzip)
                    code, delay = grpc.StatusCode.OK, None
                except grpc.RpcError as error:
                    code = error.code()
                    raw = dict(error.trailing_metadata() or ()).get(RETRY_INFO_KEY)
                    delay = RetryInfo.FromString(raw).retry_delay.seconds if raw else None
            with lock:
                codes[code.name] = codes.get(code.name, 0) + 1
                if code == grpc.StatusCode.UNAVAILABLE and delay != 1:
                    bad_retry_info.append(delay)

        _all_at_once(send)
        peak = _peak_rss_mb(vigil.process.pid)
        by_budget = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="intake_budget"}')
        by_backpressure = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="backpressure"}')
        answered_503 = vigil.metric("vigil_otlp_requests_total", {"encoding": "grpc", "code": "503"})

        normal = make_run(random.Random(8))
        deadline = time.monotonic() + 120
        answered = grpc.StatusCode.UNKNOWN
        with grpc.insecure_channel(target) as channel:
            export = channel.unary_unary(EXPORT_METHOD)
            while time.monotonic() < deadline and answered != grpc.StatusCode.OK:
                try:
                    export(body(list(normal.spans)), timeout=30)
                    answered = grpc.StatusCode.OK
                except grpc.RpcError as error:
                    answered = error.code()
                    time.sleep(1)  # the RetryInfo delay
        stored = _stored_by(vigil, normal.trace_id, deadline)
        reserved_after = _metric(vigil, "vigil_intake_reserved_bytes")
        final_peak = _peak_rss_mb(vigil.process.pid)
    print(
        f"grpc intake burst: codes={codes} intake_budget={by_budget:.0f} backpressure={by_backpressure:.0f}"
        f" peak_rss_mib={peak:.0f} after_normal_run={final_peak:.0f}"
    )
    assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
    assert BODIES == sum(codes.values())
    assert codes.get("UNAVAILABLE", 0) > 0, codes
    assert [] == bad_retry_info
    assert codes.get("UNAVAILABLE", 0) == by_budget + by_backpressure == answered_503  # every refusal counted
    # VmHWM read last covers the burst and the scoring of what it let in
    assert final_peak < LIMIT_MB, f"peak RSS {final_peak:.0f} MiB over the {LIMIT_MB} MiB limit ({codes})"
    assert grpc.StatusCode.OK == answered
    assert stored, "the run exported after the burst was not stored"
    assert 0 == reserved_after


SLOW_BODY = MAX_BODY - 64 * 1024
"""The inflated size of each slowly sent body: just under the size limit."""

TAIL = 64
"""Compressed bytes of each body held back until every other body has been sent (the slow-send pattern)."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _padded(encoded: bytes, size: int, filler: Callable[[int], bytes]) -> bytes:
    """``encoded`` (an ``ExportTraceServiceRequest``) made exactly ``size`` bytes long by one more
    ``ResourceSpans`` that holds only a ``schema_url`` of the missing length (``filler(n)`` bytes)."""
    for fill in range(size - len(encoded), -1, -1):
        inner = b"\x1a" + _varint(fill) + filler(fill)
        extra = b"\x0a" + _varint(len(inner)) + inner
        if len(encoded) + len(extra) == size:
            return encoded + extra
    raise AssertionError(f"cannot pad {len(encoded)} bytes to {size}")


def _spans_body() -> bytes:
    """Synthetic agent runs padded to :data:`SLOW_BODY` bytes: gzip makes them about 8 times smaller."""
    return _padded(_body_near_limit(), SLOW_BODY, lambda n: b"x" * n)


def _text_body() -> bytes:
    """One synthetic agent run padded to :data:`SLOW_BODY` bytes with random letters and digits (long
    prompts and completions): gzip makes it only about 1.3 times smaller."""
    rng = random.Random(25)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
    return _padded(body(list(make_run(rng).spans)), SLOW_BODY, lambda n: bytes(rng.choices(alphabet, k=n)))


def _head(host: str, length: int) -> bytes:
    """The request line and headers of one gzip protobuf export of ``length`` compressed bytes."""
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Encoding: gzip\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _on_each(sockets: list[socket.socket], send: Callable[[socket.socket], None]) -> list[str]:
    """Run ``send`` on every socket, each on its own thread, and wait for all; returns the errors."""
    errors: list[str] = []

    def run(sock: socket.socket) -> None:
        try:
            send(sock)
        except OSError as error:  # a refused body may be cut short; its answer is still read below
            errors.append(repr(error))

    threads = [threading.Thread(target=run, args=(sock,)) for sock in sockets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _one_by_one(sockets: list[socket.socket], send: Callable[[socket.socket], None]) -> list[str]:
    """Run ``send`` on every socket in turn; returns the errors."""
    errors: list[str] = []
    for sock in sockets:
        try:
            send(sock)
        except OSError as error:  # a refused body may be cut short; its answer is still read below
            errors.append(repr(error))
    return errors


def _answer(sock: socket.socket) -> tuple[int, str | None]:
    """The status and ``Retry-After`` of the response read from ``sock`` (0 when none came)."""
    head = b""
    while b"\r\n\r\n" not in head:
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 "):
        return 0, None
    lines = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    retry = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    return int(lines[0].split()[1]), retry


@pytest.mark.parametrize("make_body", [_spans_body, _text_body], ids=["spans", "random-text"])
def test_slowly_sent_gzip_bodies_keep_peak_rss_under_the_limit_and_admit_what_fits(
    tmp_path: Path, make_body: Callable[[], bytes]
) -> None:
    """Issue 25: 48 gzip bodies just under the size limit sent slowly over raw sockets (all 48 request
    heads, then every body but its last 64 bytes, then all the tails): VmHWM ≤ 512 MiB, the bodies that
    fit are admitted (200), the others are 503 + Retry-After and counted, and a normal run sent
    afterwards is stored."""
    payload = gzip.compress(make_body(), 6)
    inflated = len(gzip.decompress(payload))
    statuses: dict[int, int] = {}
    bad_retry_after: list[str | None] = []
    with start_vigil(tmp_path, ENV) as vigil:
        host, port = "127.0.0.1", vigil.otlp_http_port
        sockets = [socket.create_connection((host, port), timeout=300) for _ in range(BODIES)]
        try:
            head_errors = _on_each(sockets, lambda s: s.sendall(_head(f"{host}:{port}", len(payload))))
            time.sleep(0.5)  # every head is in before any body
            body_errors = _one_by_one(sockets, lambda s: s.sendall(payload[:-TAIL]))
            time.sleep(0.5)
            tail_errors = _on_each(sockets, lambda s: s.sendall(payload[-TAIL:]))
            for sock in sockets:
                status, retry_after = _answer(sock)
                statuses[status] = statuses.get(status, 0) + 1
                if status == 503 and retry_after != "1":
                    bad_retry_after.append(retry_after)
        finally:
            for sock in sockets:
                sock.close()
        peak = _peak_rss_mb(vigil.process.pid)
        by_budget = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="intake_budget"}')
        by_backpressure = _metric(vigil, 'vigil_otlp_rejected_requests_total{reason="backpressure"}')

        url = f"{vigil.otlp_endpoint}/v1/traces"
        answered, stored, reserved_after, final_peak = _normal_run_after(vigil, url, 9)
    print(
        f"slow gzip burst: inflated={inflated} compressed={len(payload)} statuses={statuses}"
        f" intake_budget={by_budget:.0f} backpressure={by_backpressure:.0f} peak_rss_mib={peak:.0f}"
        f" after_normal_run={final_peak:.0f} send_errors={len(head_errors + body_errors + tail_errors)}"
    )
    assert set(statuses) <= {200, 503}, statuses
    assert BODIES == sum(statuses.values())
    assert statuses.get(200, 0) >= 1, statuses
    assert statuses.get(503, 0) > 0, statuses
    assert [] == bad_retry_after
    assert statuses.get(503, 0) == by_budget + by_backpressure  # every refusal counted, by reason
    assert final_peak <= LIMIT_MB, f"peak RSS {final_peak:.0f} MiB over the {LIMIT_MB} MiB limit ({statuses})"
    assert 200 == answered
    assert stored, "the run sent after the burst was not stored"
    assert 0 == reserved_after
