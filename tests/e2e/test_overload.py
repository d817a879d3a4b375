"""Overload of a real ``vigil run``: senders faster than the pipeline, no sender-side retry.

The receivers must shed with 503 + Retry-After (never 500, never a hang), take each
request whole or not at all, and every span of every accepted request must end up scored
and stored — exactly the accepted runs, nothing more, nothing less — while resident memory
stays under the configured ceiling.
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

from review_queue.process import VigilProcess, start_vigil
from review_queue.synth import body, make_run

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
