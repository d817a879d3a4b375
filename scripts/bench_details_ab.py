# mypy: ignore-errors
"""A/B of the run-details writer in one process: the embedded pipeline bench with details off, for
flagged runs only, the default (flagged + 10 % of the others) and every run, interleaved; spans/s per
process CPU s and per scoring-thread CPU s (BENCHMARKS.md, "run details").

    PYTHONPATH=. .venv/bin/python scripts/bench_details_ab.py [runs] [repeat]
"""

import statistics
import sys
import time

from review_queue import details
from vigil.bench import pipeline
from vigil.run import tune_gc

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
REPEAT = int(sys.argv[2]) if len(sys.argv) > 2 else 3
# (VIGIL_DETAILS_RETENTION_DAYS, VIGIL_DETAILS_SAMPLE_RATE) of each mode; None: no details at all
MODES = {"off": None, "flagged": (0.0, 0.0), "default": (7.0, 0.1), "every": (7.0, 1.0)}

tune_gc()
orig_submit = details.DetailsWriter.submit
orig_settings = pipeline._settings
res = {}
for _rep in range(REPEAT):
    for mode, keep in MODES.items():
        details.DetailsWriter.submit = (lambda self, b: None) if keep is None else orig_submit
        days, rate = keep or (0.0, 0.0)
        pipeline._settings = lambda db, _d=days, _r=rate, **extra: orig_settings(
            db, details_retention_days=_d, details_sample_rate=_r, **extra
        )
        for clock in ("process", "thread"):
            real = time.process_time
            if clock == "thread":
                time.process_time = time.thread_time
            try:
                rate, spans, written = pipeline.bench_pipeline(N)
            finally:
                time.process_time = real
            res.setdefault((mode, clock), []).append(rate)
            print(mode, clock, round(rate), flush=True)
for clock in ("process", "thread"):
    off = statistics.median(res[("off", clock)])
    line = ", ".join(
        f"{m} {statistics.median(res[(m, clock)]):,.0f} ({statistics.median(res[(m, clock)]) / off:.3f})" for m in MODES
    )
    print(f"{clock} CPU, spans/s (ratio to off): {line}")
