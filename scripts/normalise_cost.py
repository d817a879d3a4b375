"""The normalise stage's cost per run, in instructions, on the synthetic runs of ``vigil bench``.

Works against this tree and against older ones (the synth moved from ``review_queue/synth.py`` to
``vigil/bench/synth.py``), so a figure in BENCHMARKS.md can be re-measured on any commit.
The runs are generated and decoded once; then every run is normalised ``--loops`` times with the
garbage collector off (``vigil run`` tunes it; a full collection landing or not moves the figure).
Run it twice under callgrind, once with ``--loops 1`` and once with ``--loops 3``: the difference
is the normalise loop alone (start-up, imports, synth and decode cancel out)::

    PYTHONPATH=<tree> valgrind --tool=callgrind --callgrind-out-file=/tmp/n1.out \\
        python scripts/normalise_cost.py --runs 600 --loops 1
    PYTHONPATH=<tree> valgrind --tool=callgrind --callgrind-out-file=/tmp/n3.out \\
        python scripts/normalise_cost.py --runs 600 --loops 3
    # per run = (Ir of n3 - Ir of n1) / (2 * 600)

``--measure`` does both runs and prints the figure (needs ``valgrind`` on PATH); ``--tree`` points
``PYTHONPATH`` of those runs at another checkout (default: the one ``PYTHONPATH`` already names, else
this script's). Without valgrind the script still runs the loop and prints wall time, which is not a
comparable figure on a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

SEED = 7


def _synth() -> Any:
    for name in ("vigil.bench.synth", "review_queue.synth"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise SystemExit("normalise_cost: no synth module in this tree (review_queue[.app.bench].synth)")


def traces(n_runs: int) -> list[list[Any]]:
    """The spans of ``n_runs`` synthetic runs, decoded as the collector decodes them, one list per trace."""
    from collector.otlp import decode_protobuf

    by_trace: dict[str, list[Any]] = defaultdict(list)
    for body, _spans, _runs in _synth().bodies(n_runs, seed=SEED):
        for batch in decode_protobuf(body).batches:
            by_trace[batch.trace_id].extend(batch.spans)
    return list(by_trace.values())


def loop(runs: list[list[Any]], loops: int) -> float:
    """Normalise every run ``loops`` times with gc off; the wall seconds it took."""
    from scorers.normalise import normalise

    gc.collect()
    gc.disable()
    started = time.perf_counter()
    for _ in range(loops):
        for spans in runs:
            normalise(spans)
    return time.perf_counter() - started


_TOTAL = re.compile(rb"^summary:\s*(\d+)", re.MULTILINE)


def _instructions(tree: Path, n_runs: int, loops: int, out_dir: Path) -> int:
    out = out_dir / f"callgrind.{loops}.out"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__]
    subprocess.run([*cmd, "--runs", str(n_runs), "--loops", str(loops)], env=env, check=True, capture_output=True)
    found = _TOTAL.search(out.read_bytes())
    if found is None:
        raise SystemExit(f"normalise_cost: no summary line in {out}")
    return int(found[1])


def measure(tree: Path, n_runs: int) -> int:
    """Instructions per run of the normalise loop in ``tree`` (two callgrind runs)."""
    with tempfile.TemporaryDirectory() as tmp:
        one = _instructions(tree, n_runs, 1, Path(tmp))
        three = _instructions(tree, n_runs, 3, Path(tmp))
    per_run = round((three - one) / (2 * n_runs))
    print(f"{tree}: loops=1 {one:,} Ir, loops=3 {three:,} Ir -> {per_run:,} instructions per run")
    return per_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--loops", type=int, default=1)
    parser.add_argument("--measure", action="store_true", help="run itself under callgrind with 1 and 3 loops")
    parser.add_argument("--tree", type=Path, help="checkout to measure (with --measure)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.loops < 1:
        parser.error("--runs and --loops must be at least 1")
    if args.measure:
        default = os.environ.get("PYTHONPATH", "").split(os.pathsep)[0] or Path(__file__).resolve().parents[1]
        measure(Path(args.tree or default).resolve(), args.runs)
        return 0
    runs = traces(args.runs)
    seconds = loop(runs, args.loops)
    spans = sum(len(r) for r in runs)
    print(f"{len(runs)} runs, {spans} spans, {args.loops} loop(s): {seconds:.3f} s wall", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
