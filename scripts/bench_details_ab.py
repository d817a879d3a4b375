# mypy: ignore-errors
"""A/B of the run-details writer in one process: the embedded pipeline bench with details off and on,
interleaved, per process CPU and per scoring-thread CPU (BENCHMARKS.md, 2026-11-25).

    PYTHONPATH=. .venv/bin/python scripts/bench_details_ab.py
"""

import statistics
import time

from review_queue import details
from review_queue.app.bench import pipeline
from review_queue.app.run import tune_gc

tune_gc()
orig_submit = details.DetailsWriter.submit
res = {}
for _rep in range(3):
    for mode in ("off", "on"):
        details.DetailsWriter.submit = (lambda self, b: None) if mode == "off" else orig_submit
        for clock in ("process", "thread"):
            real = time.process_time
            if clock == "thread":
                time.process_time = time.thread_time
            try:
                rate, spans, written = pipeline.bench_pipeline(5000)
            finally:
                time.process_time = real
            res.setdefault((mode, clock), []).append(rate)
            print(mode, clock, round(rate), flush=True)
for clock in ("process", "thread"):
    off, on = statistics.median(res[("off", clock)]), statistics.median(res[("on", clock)])
    print(f"{clock} CPU: median off {off:,.0f} on {on:,.0f} spans/s, ratio {on / off:.3f}")
