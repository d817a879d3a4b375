"""Issue 25, item 3: memory that holds without mangling runs.

The heavy-content workload (:mod:`vigil.bench.heavy`: agent runs of ~20 spans carrying
1-2 KB of captured messages per model span, 16 runs interleaved per sender, children before the
root, 250 spans a body) is sent as fast as one connection, then four, go to a real ``vigil run``
whose memory limit (``VIGIL_MEMORY_LIMIT_MB=512``: 30 MiB for the runs in flight) is passed by
the runs waiting for their quiet period at this size. 503s are retried after their
``Retry-After``, as OTel exporters do.

Before, the assembler force-closed runs still receiving spans when its byte budget was spent:
about 600 of 1,500 runs were stored incomplete, and iteration-cap hits were computed on fragments.
Now runs whose root has ended are closed early (complete), a run still receiving spans is never
cut, and the intake refuses instead when that is not enough: every run is stored complete, once,
and the signals match the driver's truth exactly.
"""

from __future__ import annotations

import pytest

from vigil.bench.heavy import HeavyRun, bench_heavy, heavy_bodies, heavy_runs

pytestmark = pytest.mark.integration

RUNS = 1500
ENV = {"VIGIL_MEMORY_LIMIT_MB": "512", "VIGIL_RETRY_AFTER_S": "1", "VIGIL_SAMPLE_RATE": "0"}
CUTS = ("evicted_inflight", "evicted_inflight_bytes", "evicted_idle")
"""Assembler events that store a run incomplete."""


@pytest.fixture(scope="module")
def workload() -> tuple[list[HeavyRun], list[bytes]]:
    """The runs (with the driver's truth) and the bodies that carry them."""
    runs = heavy_runs(RUNS)
    return runs, list(heavy_bodies(runs))


@pytest.mark.parametrize("connections", [1, 4])
def test_every_run_is_stored_complete_with_its_signals_under_memory_pressure(
    workload: tuple[list[HeavyRun], list[bytes]], connections: int
) -> None:
    runs, payload = workload
    result = bench_heavy(runs, payload, connections=connections, env=ENV, settle_s=1.0, timeout_s=120)
    print(f"heavy flood over {connections} connection(s): {result}")
    assert RUNS == result.stored
    assert RUNS == result.complete
    assert result.capped_truth == result.capped_stored
    assert result.blocked_truth == result.blocked_stored
    assert result.events.get("closed_early", 0) > 0, "the in-flight budget was never passed: no pressure tested"
    assert dict.fromkeys(CUTS, 0.0) == {cut: result.events.get(cut) for cut in CUTS}
    # Spans answered 200 are never dropped: a run whose spans were refused (and will be retried) is
    # kept until they come back (collector.owed), even when its root came first on another connection.
    assert 0.0 == result.events.get("late_evicted"), "spans answered 200 were dropped as late_evicted"
    assert 0.0 == result.events.get("pinned_evicted")
