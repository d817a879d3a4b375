# mypy: ignore-errors
"""Where a heavy-content run's CPU goes, stage by stage, in one thread (BENCHMARKS.md, "issue 25").

The bench's stage rows (``vigil.bench.pipeline.bench_stages``, the run-details writer's two
stages included) over the heavy workload's bodies (``vigil/bench/heavy.py``); prints
microseconds a run, the minimum of REPEAT passes.

    PYTHONPATH=. .venv/bin/python scripts/heavy_stages.py [runs] [repeat]
"""

import sys

from vigil.bench.heavy import heavy_bodies, heavy_runs
from vigil.bench.pipeline import bench_stages
from vigil.run import tune_gc

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
REPEAT = int(sys.argv[2]) if len(sys.argv) > 2 else 3

tune_gc()
runs = heavy_runs(N)
payload = list(heavy_bodies(runs))
spans_per_run = sum(len(r.spans) for r in runs) / N
passes = [bench_stages(N, payload, details=True) for _ in range(REPEAT)]
best = {stage: min(p[stage] for p in passes) for stage in passes[0]}
total = sum(best.values())
for stage, micros in best.items():
    print(f"{stage:20s} {micros:8.0f} µs a run  {100 * micros / total:5.1f} %")
print(f"total {total:,.0f} µs a run: {spans_per_run / total * 1e6:,.0f} spans per CPU-second (one thread)")
