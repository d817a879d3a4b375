# mypy: ignore-errors
"""What sessions cost a heavy-content run, in instructions (issue 26: "≤ 5 % of the heavy-content row").

The heavy workload (``vigil/bench/heavy.py``) is generated with ``--session-turns K`` (0: no
session id; 1: a session per run; K: sessions of K turns; only the id differs), decoded, then every run
goes through what the embedded server does to it: ``Pipeline.process`` (normalise, score, decide),
``SqlStore.write`` in batches of 256 (the run rows, the session rows recomputed from their runs) and
the details row (``details_row``). ``--measure`` counts instructions under valgrind's callgrind, once
with the runs processed and once without (start-up, generation and decoding cancel out), for each
``K``, and prints the instructions a run and each variant's share above ``K = 0``::

    PYTHONPATH=. .venv/bin/python scripts/session_cost.py --measure --runs 400 --session-turns 0 1 5

Instructions do not depend on what else the machine is doing (BENCHMARKS.md quotes them beside the
CPU-second rows). Without ``--measure`` the script runs one pass and prints its CPU time.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vigil.bench.eval_online import instructions_of


def _work(n_runs: int, session_turns: int, process: bool) -> float:
    from prometheus_client import CollectorRegistry

    from review_queue.details import Texts, details_row
    from scorers.assemble import ClosedTrace
    from scorers.redact import Redactor
    from vigil.bench.heavy import heavy_traces
    from vigil.bench.pipeline import _settings
    from vigil.run import build, tune_gc

    tune_gc()
    traces = heavy_traces(n_runs, session_turns=session_turns)
    with tempfile.TemporaryDirectory() as tmp:
        emb = build(_settings(Path(tmp) / "cost.db"), CollectorRegistry())
        redactor = Redactor()
        texts = Texts(redactor)
        gc.collect()
        started = time.process_time()
        if process:
            pipeline = emb.worker._pipeline
            closed = [ClosedTrace(k, tuple(v), True) for k, v in traces.items()]
            for i in range(0, len(closed), 256):
                scored = [pipeline.process(c) for c in closed[i : i + 256]]
                emb.store.write(scored)
                for item in scored:
                    details_row(item, redactor, None, 0.0, texts)
        spent = time.process_time() - started
        emb.store.close()
    return spent


def _instructions(n_runs: int, session_turns: int, process: bool, out_dir: Path) -> int:
    out = out_dir / f"callgrind.{session_turns}.{int(process)}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
    args = ["--runs", str(n_runs), "--session-turns", str(session_turns), *([] if process else ["--setup-only"])]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run([*cmd, *args], env=env, check=True, capture_output=True)
    return instructions_of(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--session-turns", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--setup-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", action="store_true", help="count instructions under callgrind")
    args = parser.parse_args()
    if not args.measure:
        for k in args.session_turns:
            spent = _work(args.runs, k, not args.setup_only)
            print(f"session_turns={k}: {spent / args.runs * 1e6:,.0f} µs a run (CPU, one pass)")
        return 0
    per_run: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for k in args.session_turns:
            full = _instructions(args.runs, k, True, Path(tmp))
            setup = _instructions(args.runs, k, False, Path(tmp))
            per_run[k] = (full - setup) / args.runs
    base = per_run.get(0)
    for k, value in per_run.items():
        share = "" if base is None or k == 0 else f"  {100 * (value - base) / value:+.1f} % of the run for sessions"
        print(f"session_turns={k}: {value:,.0f} instructions a run{share}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
