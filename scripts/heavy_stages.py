# mypy: ignore-errors
"""Where a heavy-content run's CPU goes, stage by stage, in one thread (BENCHMARKS.md, "issue 25").

Decodes the heavy workload's bodies (review_queue/app/bench/heavy.py), then times over the same runs
`Pipeline.process` (normalise, score, decide), the run metrics, `SqlStore.write`, `details_row` and
`write_details`; prints microseconds a run, the minimum of REPEAT passes.

    PYTHONPATH=. .venv/bin/python scripts/heavy_stages.py [runs] [repeat]
"""

import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from collector.otlp import decode_protobuf
from review_queue import details
from review_queue.app.bench.heavy import heavy_bodies, heavy_runs
from review_queue.app.bench.pipeline import _settings
from review_queue.app.run import build, tune_gc
from scorers.assemble import ClosedTrace
from scorers.redact import Redactor

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
REPEAT = int(sys.argv[2]) if len(sys.argv) > 2 else 3

tune_gc()
runs = heavy_runs(N)
payload = list(heavy_bodies(runs))
spans = sum(len(r.spans) for r in runs)
best: dict[str, float] = {}
for _ in range(REPEAT):
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        emb = build(_settings(Path(tmp) / "stages.db"), CollectorRegistry())
        pipeline = emb.worker._pipeline
        t = time.process_time()
        decoded = [decode_protobuf(b) for b in payload]
        out["decode"] = time.process_time() - t
        traces = {}
        for result in decoded:
            for batch in result.batches:
                traces.setdefault(batch.trace_id, []).extend(batch.spans)
        t = time.process_time()
        scored = [pipeline.process(ClosedTrace(k, tuple(v), True)) for k, v in traces.items()]
        out["process (normalise, score, decide)"] = time.process_time() - t
        t = time.process_time()
        for item in scored:
            emb.run_metrics.observe_run(item)
        out["metrics"] = time.process_time() - t
        t = time.process_time()
        for i in range(0, len(scored), 256):
            emb.store.write(scored[i : i + 256])
        out["store.write"] = time.process_time() - t
        redactor = Redactor()
        texts = details.Texts(redactor)
        t = time.process_time()
        rows = [details.details_row(s, redactor, None, 0.0, texts) for s in scored]
        out["details_row"] = time.process_time() - t
        t = time.process_time()
        for i in range(0, len(rows), 500):
            emb.store.write_details(rows[i : i + 500])
        out["write_details"] = time.process_time() - t
        emb.store.close()
    for stage, seconds in out.items():
        best[stage] = min(best.get(stage, float("inf")), seconds)
total = sum(best.values())
for stage, seconds in best.items():
    print(f"{stage:38s} {seconds / len(traces) * 1e6:8.0f} µs a run  {100 * seconds / total:5.1f} %")
print(f"total {total / len(traces) * 1e6:,.0f} µs a run: {spans / total:,.0f} spans per CPU-second (one thread)")
