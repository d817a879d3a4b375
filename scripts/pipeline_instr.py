# mypy: ignore-errors
"""Instructions a heavy-content run costs in normalise (``Pipeline.process``) and in ``details_row`` (issue 25).

The heavy workload (``vigil/bench/heavy.py``) is generated and decoded, then each run goes through
``Pipeline.process`` (normalise, score, decide) and, for the ``details`` stage, ``details_row``. Under
valgrind's callgrind the script runs three passes (``setup``: generation and decoding only; ``process``;
``details``) and subtracts them, so each figure is that stage's instructions a run::

    PYTHONPATH=. .venv/bin/python scripts/pipeline_instr.py --runs 200

Instructions do not depend on the machine's load (see ``scripts/session_cost.py`` for the same method).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from vigil.bench.eval_online import instructions_of

_STAGES = ("setup", "process", "details")


def _work(n_runs: int, stage: str) -> None:
    from prometheus_client import CollectorRegistry

    from review_queue.details import Texts, details_row
    from scorers.assemble import ClosedTrace
    from scorers.redact import Redactor
    from vigil.bench.heavy import heavy_traces
    from vigil.bench.pipeline import _settings
    from vigil.run import build, tune_gc

    tune_gc()
    traces = heavy_traces(n_runs)
    with tempfile.TemporaryDirectory() as tmp:
        emb = build(_settings(Path(tmp) / "instr.db"), CollectorRegistry())
        redactor = Redactor()
        texts = Texts(redactor)
        closed = [ClosedTrace(k, tuple(v), True) for k, v in traces.items()]
        gc.collect()
        if stage != "setup":
            pipeline = emb.worker._pipeline
            for c in closed:
                item = pipeline.process(c)
                if stage == "details":
                    details_row(item, redactor, None, 0.0, texts)
        emb.store.close()


def _instructions(n_runs: int, stage: str, out_dir: Path) -> int:
    out = out_dir / f"callgrind.{stage}.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    subprocess.run([*cmd, "--runs", str(n_runs), "--stage", stage], env=env, check=True, capture_output=True)
    return instructions_of(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--stage", choices=_STAGES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stage:
        _work(args.runs, args.stage)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        total = {s: _instructions(args.runs, s, Path(tmp)) for s in _STAGES}
    normalise = (total["process"] - total["setup"]) / args.runs
    details = (total["details"] - total["process"]) / args.runs
    print(f"normalise (Pipeline.process): {normalise:,.0f} instructions a run")
    print(f"details_row: {details:,.0f} instructions a run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
