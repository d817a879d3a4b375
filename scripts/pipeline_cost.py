"""Instructions per run of ``vigil bench``'s saturated embedded pipeline, per thread, with callgrind.

CPU-time figures move by ±15 % on the shared development machine; instruction counts do not. This
runs :func:`vigil.bench.pipeline.bench_pipeline` (or ``review_queue.bench`` in trees
older than 2026-11-25's layout move) under ``valgrind --tool=callgrind --separate-threads=yes``
with instrumentation switched on only between the bench's two ``process_time()`` reads, i.e. for
exactly what its headline row measures (decode → stream → assemble → normalise → score → decide
→ store → metrics on the scoring thread, plus the run-details writer's thread where it exists)::

    PYTHONPATH=<tree> python scripts/pipeline_cost.py --runs 1500 [--out /tmp/pc]

prints one line per thread and the total, in instructions per run. Comparable between trees on
the same synthetic runs (``synth.bodies``, fixed seed). With ``--stages`` it measures
``bench_stages`` instead (the bench's stage rows), one callgrind dump per ``process_time()`` read,
and prints instructions per run of each stage. Needs ``valgrind`` and ``callgrind_control``.
With ``--inner`` (used by the outer call) it is the measured process itself.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import time
from typing import Any


class _ToggleClock:
    """``time`` for the bench module: the first ``process_time()`` switches callgrind on, the second off
    (``dumps``: every later read dumps the counts since the previous one instead)."""

    def __init__(self, *, dumps: bool = False) -> None:
        self.calls = 0
        self.dumps = dumps

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def process_time(self) -> float:
        self.calls += 1
        if self.dumps and self.calls > 1:
            subprocess.run(["callgrind_control", "-d", str(os.getpid())], check=True, capture_output=True)
        elif self.calls in (1, 2):
            state = "on" if self.calls == 1 else "off"
            subprocess.run(["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True)
        return time.process_time()


def _inner(runs: int, *, stages: bool = False) -> None:
    import logging

    import structlog

    try:
        import vigil.bench.pipeline as bench
        from vigil.run import tune_gc
    except ImportError:  # trees before the layout move (20f04d5)
        from review_queue import bench  # type: ignore[attr-defined,no-redef]
        from review_queue.embedded import tune_gc  # type: ignore[import-not-found,no-redef]
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    setattr(bench, "time", _ToggleClock(dumps=stages))  # noqa: B010 - replaces the module global the bench reads
    tune_gc()  # as vigil bench does
    if stages:
        print("stages:" + "|".join(bench.bench_stages(runs)))  # the stage names, in measurement order
    else:
        bench.bench_pipeline(runs)


def _totals(path: str) -> int:
    with open(path) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def main() -> int:
    """Run the measurement (outer) or be the measured process (``--inner``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1500)
    parser.add_argument("--out", default=None, help="folder for the callgrind files (default: a temporary one)")
    parser.add_argument("--stages", action="store_true", help="measure bench_stages: instructions per run per stage")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        _inner(args.runs, stages=args.stages)
        return 0
    out = args.out or tempfile.mkdtemp(prefix="pipeline_cost.")
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, "callgrind.out")
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--separate-threads=yes",
        "--instr-atstart=no",
        f"--callgrind-out-file={stem}",
        sys.executable,
        os.path.abspath(__file__),
        "--inner",
        "--runs",
        str(args.runs),
    ]
    if args.stages:
        cmd[2] = "--separate-threads=no"
        out_text = subprocess.run([*cmd, "--stages"], check=True, capture_output=True, text=True).stdout
        names = next(line for line in out_text.splitlines() if line.startswith("stages:"))[7:].split("|")
        # dump k holds the counts between process_time() reads k and k+1: the stages are dumps 1, 3, 5…
        for k, name in enumerate(names):
            print(f"{name}: {_totals(f'{stem}.{2 * k + 1}') / args.runs:,.0f} instructions per run")
        return 0
    subprocess.run(cmd, check=True, capture_output=True)
    total = 0
    for path in sorted(glob.glob(stem + "-*")):
        count = _totals(path)
        total += count
        if count:
            print(f"thread {path.rsplit('-', 1)[1]}: {count / args.runs:,.0f} instructions per run")
    print(f"total: {total / args.runs:,.0f} instructions per run ({args.runs} runs, files in {out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
