"""Memory bounded in bytes (issue 15 item 3) and the rootless flood (issue 20 finding 4), against a real
``vigil run`` on real sockets with default settings.

Before: traces whose root span never arrives were held for the idle timeout (300 s), bounded by count
only; a flood of them filled memory, every body (complete runs included) got 503 while they were
held, and the state file saved at SIGTERM held all of them (796 MB) and was reloaded whole.

Since issue 25 (item 3) a run still receiving spans is never cut: past the in-flight budget the
intake refuses (503 + Retry-After) until the flood's runs have been idle for ``VIGIL_EVICT_IDLE_S``
(10 s), then those are cut, least recently fed first (``evicted_idle``). A complete run sent during
the flood is delayed by that much at most, within its sender's retries.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client.parser import text_string_to_metric_families

from collector.budget import SHARES
from vigil.bench.synth import _kv, body, make_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

PROTO = {"Content-Type": "application/x-protobuf"}
MIB = 1024 * 1024
LIMIT_MIB = 1024  # the default VIGIL_MEMORY_LIMIT_MB
FLOOD_TRACES = 2_400
SPANS_PER_TRACE = 20
CONTENT = 3_000  # bytes of captured content per span: 144 MB of span content in all


def _metric(vigil: VigilProcess, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(httpx.get(vigil.metrics_url).text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def _rootless_bodies(rng: random.Random) -> Iterator[bytes]:
    """Bodies of 40 traces each, whose spans all have a parent that never comes."""
    filler = "lorem ipsum dolor sit amet " * (CONTENT // 27 + 1)
    for start in range(0, FLOOD_TRACES, 40):
        spans = []
        for _ in range(start, start + 40):
            trace_id, parent = rng.randbytes(16), rng.randbytes(8)
            for j in range(SPANS_PER_TRACE):
                spans.append(
                    Span(
                        trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=parent, name="chat gpt-4o",
                        kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=time.time_ns(),
                        end_time_unix_nano=time.time_ns() + 1000,
                        attributes=[_kv("gen_ai.operation.name", "chat"),
                                    _kv("gen_ai.input.messages", f"{j} {rng.getrandbits(64):x} {filler}"[:CONTENT])],
                    )
                )  # fmt: skip
        yield body(spans)


def _post(client: httpx.Client, url: str, payload: bytes, attempts: int) -> tuple[int, int]:
    """Post as an OTLP exporter does: on 503, wait Retry-After and retry. Returns (final status, 503s)."""
    refused = 0
    for _ in range(attempts):
        response = client.post(url, content=payload, headers=PROTO)
        if response.status_code != 503:
            return response.status_code, refused
        refused += 1
        time.sleep(float(response.headers.get("Retry-After", "1")))
    return 503, refused


def _stored(vigil: VigilProcess, trace_id: str, timeout_s: float) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}")
        if response.status_code == 200:
            found: dict[str, object] = response.json()
            return found
        time.sleep(0.25)
    raise AssertionError(f"run {trace_id} was not stored within {timeout_s} s\n{vigil.log_tail()}")


def test_rootless_flood_cannot_block_complete_runs_and_the_state_file_stays_bounded(tmp_path: Path) -> None:
    """2,400 traces whose root never comes (144 MB of span content): with default settings a complete run
    sent during the flood and after it is accepted and scored, the runs in flight stay within their byte
    budget, the state file saved at SIGTERM stays within it too (tens of MB), and the restart on that file
    peaks well under the memory limit."""
    rng = random.Random(20)
    with start_vigil(tmp_path) as vigil, httpx.Client(timeout=60) as client:
        url = f"{vigil.otlp_endpoint}/v1/traces"
        budget = _metric(vigil, "vigil_memory_budget_bytes", structure="inflight")
        assert LIMIT_MIB * MIB * SHARES["inflight"] // 1 == budget
        complete_ids = []
        flood_refusals = 0
        for i, payload in enumerate(_rootless_bodies(rng)):
            status, refused = _post(client, url, payload, attempts=30)
            assert 200 == status, f"flood body {i} never accepted\n{vigil.log_tail()}"
            flood_refusals += refused
            if i % 20 == 10:  # a complete run in the middle of the flood
                run = make_run(rng)
                status, refused = _post(client, url, body(list(run.spans)), attempts=10)
                assert 200 == status, f"complete run refused during the flood\n{vigil.log_tail()}"
                complete_ids.append(run.trace_id)
        run = make_run(rng)
        status, _ = _post(client, url, body(list(run.spans)), attempts=10)
        assert 200 == status
        complete_ids.append(run.trace_id)
        for trace_id in complete_ids:
            stored = _stored(vigil, trace_id, timeout_s=120)
            assert stored["complete"] is True, stored
            assert stored.get("scores"), stored
        # the last bodies may pass the budget (their runs are not cut while they are fed); idle, they go
        deadline = time.monotonic() + 30
        while (held := _metric(vigil, "vigil_memory_held_bytes", structure="inflight")) > budget:
            assert time.monotonic() < deadline, f"in flight {held:.0f} > {budget:.0f} bytes after the flood"
            time.sleep(0.5)
        assert 0 < held <= budget
        assert _metric(vigil, "vigil_assembler_events_total", event="evicted_idle") > 0
        assert 0 == _metric(vigil, "vigil_assembler_events_total", event="evicted_inflight_bytes")
        assert _metric(vigil, "vigil_runs_in_flight") < FLOOD_TRACES / 2
        assert 0 == vigil.stop()
    state = tmp_path / "vigil.state"
    size = state.stat().st_size
    assert 10 * MIB < size <= budget, f"state file of {size / MIB:.1f} MiB"
    with start_vigil(tmp_path) as again:
        assert not state.exists()  # loaded
        peak_mib = _status_kib(again.process.pid, "VmHWM") / 1024
        assert peak_mib < LIMIT_MIB / 2, f"restart peaked at {peak_mib:.0f} MiB"
        assert _metric(again, "vigil_memory_held_bytes", structure="inflight") <= budget
    print(
        f"flood refusals {flood_refusals}, state file {size / MIB:.1f} MiB (budget {budget / MIB:.0f} MiB), "
        f"restart VmHWM {peak_mib:.0f} MiB"
    )
