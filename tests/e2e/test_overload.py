"""Overload of a real ``vigil run`` and ``vigil collector``: senders faster than they take, no retry.

The receivers must shed with 503 + Retry-After (never 500, never a hang), take each
request whole or not at all, and every span of every accepted request must end up scored
and stored (``vigil run``) or in Kafka (``vigil collector``) — exactly the accepted runs,
nothing more, nothing less — while resident memory stays under the configured ceiling.
The 10× measurement with wrk is ``vigil bench --overload`` (BENCHMARKS.md).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from vigil.bench.broker import TansuBroker, topic_keys
from vigil.bench.synth import body, make_run
from vigil.process import VigilProcess, spawn_role, start_vigil

pytestmark = pytest.mark.integration

PROTO = {"Content-Type": "application/x-protobuf"}
RUNS_PER_BODY = 10
BODIES_PER_SENDER = 60
SENDERS = 6
CEILING_MB = 512


def _bodies(seed: int) -> Iterator[tuple[list[str], bytes]]:
    rng = random.Random(seed)
    for _ in range(BODIES_PER_SENDER):
        runs = [make_run(rng) for _ in range(RUNS_PER_BODY)]
        yield [r.trace_id for r in runs], body([s for r in runs for s in r.spans])


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _stored(vigil: VigilProcess) -> set[str]:
    with sqlite3.connect(vigil.workdir / "vigil.db") as db:
        return {row[0] for row in db.execute("SELECT trace_id FROM runs")}


def test_sheds_with_503_and_scores_every_accepted_run(tmp_path: Path) -> None:
    """Accepted runs == stored runs exactly; refusals are 503 with Retry-After; memory under the ceiling."""
    env = {
        "VIGIL_QUEUE_MAX_BATCHES": "12",  # barely more than one 10-run body: senders must wait for the worker
        "VIGIL_QUIET_PERIOD_S": "0.5",
        "VIGIL_SAMPLE_RATE": "0",
        "VIGIL_MEMORY_LIMIT_MB": str(CEILING_MB),
        "VIGIL_RETRY_AFTER_S": "1",
    }
    accepted: set[str] = set()
    refused: set[str] = set()
    statuses: dict[int, int] = {}
    bad_retry_after: list[str | None] = []
    lock = threading.Lock()
    with start_vigil(tmp_path, env) as vigil:
        url = f"{vigil.otlp_endpoint}/v1/traces"

        def send(seed: int) -> None:
            with httpx.Client(timeout=30) as client:
                for trace_ids, payload in _bodies(seed):
                    r = client.post(url, content=payload, headers=PROTO)
                    with lock:
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                        if r.status_code == 200:
                            accepted.update(trace_ids)
                        else:
                            refused.update(trace_ids)
                            if r.status_code == 503 and r.headers.get("Retry-After") != "1":
                                bad_retry_after.append(r.headers.get("Retry-After"))

        threads = [threading.Thread(target=send, args=(seed,)) for seed in range(SENDERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert set(statuses) <= {200, 503}, statuses
        assert statuses.get(503, 0) > 0, f"the pipeline was never overloaded: {statuses}"
        assert statuses.get(200, 0) > 0, statuses
        assert [] == bad_retry_after
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_stored(vigil)) < len(accepted):
            time.sleep(0.5)
        time.sleep(1.5)  # anything beyond the accepted set would show up by now
        stored = _stored(vigil)
        peak = _peak_rss_mb(vigil.process.pid)
    print(f"overload: statuses={statuses} accepted_runs={len(accepted)} stored={len(stored)} peak_rss_mib={peak:.0f}")
    assert accepted == stored, (len(accepted), len(stored), len(accepted - stored), len(stored - accepted))
    assert not refused & stored
    assert peak < CEILING_MB, f"peak RSS {peak:.0f} MiB over the {CEILING_MB} MiB ceiling"


def _send_all(url: str, seed: int) -> tuple[dict[int, int], set[str], set[str], list[str]]:
    """``SENDERS`` threads POST their bodies once each; returns statuses, accepted and refused
    trace ids, and the Retry-After of every 503 that did not carry one of at least 1 s."""
    accepted: set[str] = set()
    refused: set[str] = set()
    statuses: dict[int, int] = {}
    bad_retry_after: list[str] = []
    lock = threading.Lock()

    def send(sender: int) -> None:
        with httpx.Client(timeout=30) as client:
            for trace_ids, payload in _bodies(seed + sender):
                r = client.post(url, content=payload, headers=PROTO)
                with lock:
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                    (accepted if r.status_code == 200 else refused).update(trace_ids)
                    retry_after = r.headers.get("Retry-After", "")
                    if r.status_code == 503 and not (retry_after.isdigit() and int(retry_after) >= 1):
                        bad_retry_after.append(retry_after)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(SENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses, accepted, refused, bad_retry_after


def test_collector_sheds_and_every_accepted_trace_is_in_kafka(tmp_path: Path, tansu: TansuBroker) -> None:
    """``vigil collector`` with the smallest producer budget: concurrent senders overflow it, the
    overflow is 503 + Retry-After (refused before decoding while the budget is spent), and the
    topic holds exactly one record per accepted trace and none of a refused request."""
    topic = f"overload_{tmp_path.name[-12:]}"
    tansu.create_topic(topic, 2)
    (tmp_path / "empty.yaml").write_text("{}\n")
    env = {
        "VIGIL_KAFKA_BOOTSTRAP": tansu.bootstrap,
        "VIGIL_KAFKA_TOPIC": topic,
        "VIGIL_KAFKA_BUFFER_BYTES": "65536",  # about one 10-run body: concurrent bodies overflow it
        "VIGIL_CONFIG": str(tmp_path / "empty.yaml"),
        "VIGIL_MEMORY_LIMIT_MB": str(CEILING_MB),
        "VIGIL_RETRY_AFTER_S": "1",
    }
    collector = spawn_role("collector", tmp_path, env)
    try:
        collector.wait_ready()
        statuses, accepted, refused, bad_retry_after = _send_all(f"{collector.otlp_endpoint}/v1/traces", 100)
        early = collector.metric("vigil_otlp_rejected_requests_total", {"reason": "backpressure"})
        peak = _peak_rss_mb(collector.process.pid)
        assert 0 == collector.stop(), collector.log_tail()  # SIGTERM flushes every accepted record
    finally:
        if collector.alive():
            collector.kill()
    keys = topic_keys(tansu.bootstrap, topic, timeout_s=60)
    print(f"collector overload: statuses={statuses} accepted={len(accepted)} records={len(keys)} peak={peak:.0f}")
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.get(503, 0) > 0, statuses
    assert statuses.get(200, 0) > 0, statuses
    assert [] == bad_retry_after
    assert statuses[503] == early  # every refusal counted as backpressure
    assert len(keys) == len(set(keys)), "a trace was produced twice"
    assert accepted == set(keys), (len(accepted), len(keys), len(accepted - set(keys)), len(set(keys) - accepted))
    assert not refused & set(keys)
    assert peak < CEILING_MB
