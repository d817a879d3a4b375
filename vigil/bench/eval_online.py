"""``vigil bench --eval``: what online regression scoring costs the pipeline.

The same synthetic runs (:mod:`vigil.bench.synth`, with captured content: every run has a
user message and a final answer) go through the ``vigil run`` pipeline (normalise → score → decide)
twice, alternating ``repeat`` times: without eval sets, and with one eval set of ``cases`` cases
loaded (``eval_sets``) of which 10 % of the runs match by their first user message (and are scored
against their case with the default criteria: trajectory EXACT and ROUGE-1). The eval set is what
``vigil eval export`` would write from those runs: a matching case expects its run's tool calls,
and one in ten expects one call more (those runs fail and are flagged ``eval_regression``). The figure is the CPU
time per run (``time.process_time``, one thread, with the garbage-collector tuning of ``vigil run``),
medians of the repeats (the order of the two alternates); the overhead is their ratio. CPU time moves
with the machine's load: ``--instructions`` counts instructions under callgrind instead (see
:func:`instructions`).
"""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from collector.model import Span
from collector.otlp import decode_protobuf
from scorers.assemble import ClosedTrace
from scorers.eval.online import OnlineEval
from scorers.normalise import normalise
from scorers.pipeline import Pipeline
from vigil.bench.pipeline import bench_pipeline
from vigil.bench.synth import _kv, body, make_run
from vigil.run import tune_gc
from vigil.scoring import Scoring
from vigil.settings import Settings

__all__ = ["SECTIONS", "bench_eval", "instruction_report", "instructions", "instructions_of", "run_sections"]


_END_NS = 1_764_000_000_000_000_000
"""Every synthetic run ends at this time (a fixed workload: the same bytes on every invocation)."""
_SPANS_PER_BODY = 512


def _question(k: int) -> str:
    return f"Customer question {k}: where is my order {k} and when will it arrive?"


def _answer(k: int) -> str:
    return f"Your order {k} ships today and should arrive within three working days."


def _case(k: int, tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "eval_id": f"case-{k}",
        "conversation": [
            {
                "user_content": {"role": "user", "parts": [{"text": _question(k)}]},
                "final_response": {"role": "model", "parts": [{"text": _answer(k)}]},
                "intermediate_data": {"tool_uses": tools},
            }
        ],
    }


def _workload(
    n_runs: int, cases: int, match_share: float, seed: int = 11
) -> tuple[list[ClosedTrace], list[tuple[bytes, int, int]], dict[str, Any]]:
    """Synthetic runs with a captured user message and answer, and an eval set of ``cases`` cases.

    ``match_share`` of the runs ask a case's question; like an eval set exported from reviewed
    production runs, each such case expects that run's own tool calls, except one case in ten,
    which expects one call more (a regression the run is flagged for).

    Returns:
        ``(traces, payload, eval set document)``: the runs as closed traces (for
        ``Pipeline.process``) and as OTLP bodies of about 512 spans (``(body, spans, runs)``, for
        the embedded pipeline of ``vigil bench``).
    """
    rng = random.Random(seed)
    traces = []
    payload: list[tuple[bytes, int, int]] = []
    batch: list[Any] = []
    batch_runs = 0
    expected: dict[int, list[dict[str, Any]]] = {}
    for i in range(n_runs):
        run = make_run(rng, end_ns=_END_NS)
        k = len(expected) if rng.random() < match_share and len(expected) < cases else cases + i
        messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": _question(k)}]}])
        spans = list(run.spans)
        # the last LLM call's input holds the conversation (what the normaliser reads)
        last_llm = max(j for j, s in enumerate(spans) if s.name.startswith("chat"))
        spans[last_llm].attributes.append(_kv("gen_ai.input.messages", messages))
        spans[-1].attributes.append(_kv("output.value", _answer(k)))  # the root is the last span
        decoded: list[Span] = [s for b in decode_protobuf(body(spans)).batches for s in b.spans]
        traces.append(ClosedTrace(run.trace_id, tuple(decoded), True))
        batch.extend(spans)
        batch_runs += 1
        if len(batch) >= _SPANS_PER_BODY:
            payload.append((body(batch), len(batch), batch_runs))
            batch, batch_runs = [], 0
        if k < cases:
            tools = [
                {
                    "name": s.attributes["gen_ai.tool.name"],
                    "args": json.loads(str(s.attributes["gen_ai.tool.call.arguments"])),
                }
                for s in sorted(decoded, key=lambda s: s.start_ns)
                if s.name.startswith("execute_tool")
            ]
            expected[k] = tools + ([{"name": "refund", "args": {}}] if k % 10 == 9 else [])
    if batch:
        payload.append((body(batch), len(batch), batch_runs))
    doc = {
        "eval_set_id": "bench",
        "eval_cases": [_case(k, expected.get(k, [{"name": "search", "args": {"q": "item 1"}}])) for k in range(cases)],
    }
    return traces, payload, doc


def _pipeline(folder: Path, eval_sets: tuple[str, ...]) -> tuple[Pipeline, Scoring]:
    settings = Settings.load(
        environ={}, overrides={"database_url": f"sqlite:///{folder / 'bench.db'}", "eval_sets": eval_sets}
    )
    scoring = Scoring.from_settings(settings, environ={})
    registry = CollectorRegistry()
    return scoring.pipeline(scoring.run_metrics(registry), None), scoring


@contextmanager
def _without_and_with(doc: dict[str, Any]) -> Iterator[tuple[Pipeline, Pipeline, OnlineEval, str]]:
    """The pipeline without and with the eval set ``doc``, the online eval of the second, and the path
    of the eval set file (in a temporary folder, with the SQLite store, removed on exit)."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "bench.evalset.json"
        path.write_text(json.dumps(doc))
        off, _ = _pipeline(folder, ())
        on, scoring = _pipeline(folder, (str(path),))
        assert scoring.online is not None
        yield off, on, scoring.online, str(path)


def _cpu_per_run(pipeline: Pipeline, traces: list[ClosedTrace]) -> float:
    t = time.process_time()
    for closed in traces:
        pipeline.process(closed)
    return (time.process_time() - t) / len(traces)


def bench_eval(n_runs: int = 5000, repeat: int = 5, cases: int = 1000, match_share: float = 0.1) -> dict[str, float]:
    """Median CPU µs per run without and with the eval set, the overhead, and how many runs matched."""
    tune_gc()  # as vigil run and vigil scorer do (GC thresholds of the stream worker)
    traces, _, doc = _workload(n_runs, cases, match_share)
    with _without_and_with(doc) as (off, on, online, _):
        scored = [on.process(c).scores for c in traces]  # also warms the caches
        matched = sum("eval_passed" in sc for sc in scored)
        failed = sum(sc.get("eval_passed") == 0.0 for sc in scored)
        _cpu_per_run(off, traces)
        offs: list[float] = []
        ons: list[float] = []
        for i in range(repeat):  # the order alternates too: the second pass of a pair tends to cost more
            first, second = ((off, offs), (on, ons)) if i % 2 == 0 else ((on, ons), (off, offs))
            for pipeline, out in (first, second):
                out.append(_cpu_per_run(pipeline, traces))
        loaded = online.cases
    base, with_eval = statistics.median(offs), statistics.median(ons)
    return {
        "off_us": base * 1e6,
        "on_us": with_eval * 1e6,
        "overhead": with_eval / base - 1.0,
        "matched": matched / len(traces),
        "failed": failed / max(matched, 1),
        "cases": float(loaded),
        "runs": float(len(traces)),
    }


SECTIONS = ("process_off", "process_on", "eval_alone", "embedded_off", "embedded_on")
"""The sections of the instruction-count mode, in the order they run:

* ``process_off`` / ``process_on``: ``Pipeline.process`` (normalise → score → decide) over every run,
  without and with the eval set;
* ``eval_alone``: the online eval's chain entry (:meth:`scorers.eval.online.OnlineEval.score`)
  alone over the same runs, already normalised (what the stage costs measured apart);
* ``embedded_off`` / ``embedded_on``: the whole embedded pipeline of ``vigil bench`` (decode →
  stream → assemble → normalise → score → decide → SQLite store → metrics, with the run-details
  writer) over the same runs as OTLP bodies, without and with the eval set.
"""

CALLGRIND_MARKER = "time_process_time"
"""The C function of ``time.process_time``: callgrind dumps its counters before each call
(``--dump-before``), and every section runs between two such calls (and nothing else calls it)."""


def run_sections(
    out: Path, n_runs: int = 2000, cases: int = 1000, match_share: float = 0.1, *, instrument: bool = False
) -> list[str]:
    """Run each of :data:`SECTIONS` once between two ``time.process_time()`` calls; write ``out/sections.json``.

    Meant to run under ``valgrind --tool=callgrind --dump-before=time_process_time`` (see
    :func:`instructions`): the dump taken at a section's closing call holds exactly its instructions.
    Each section is preceded by a warm-up pass (caches, the one-turn copies of matched cases) and a
    full garbage collection, outside the markers, so every section starts from the same state.
    With ``instrument`` (callgrind started with ``--instr-atstart=no``) instrumentation is switched on
    (``callgrind_control --instr=on``, which waits for it) only once the workload is built: the
    imports and the synthetic traces run at valgrind's uninstrumented speed.
    """
    traces, payload, doc = _workload(n_runs, cases, match_share)
    runs = [normalise(c.spans, complete=c.complete) for c in traces]
    labels: list[str] = []
    with _without_and_with(doc) as (off, on, online, path):
        tune_gc()  # as vigil run: after the pipeline (and the eval set) are built
        if instrument:
            subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
        matched = sum("eval_passed" in on.process(c).scores for c in traces)
        for label, pipeline in (("process_off", off), ("process_on", on)):
            for closed in traces:
                pipeline.process(closed)
            gc.collect()
            _cpu_per_run(pipeline, traces)
            labels.append(label)
        gc.collect()
        time.process_time()  # the opening marker
        for run in runs:
            online.score(run)
        time.process_time()  # the closing marker
        labels.append("eval_alone")
        for label, extra in (("embedded_off", {}), ("embedded_on", {"eval_sets": (path,)})):
            gc.collect()
            bench_pipeline(len(traces), payload=payload, extra=extra)
            labels.append(label)
    meta = {"sections": labels, "runs": len(traces), "matched": matched, "cases": online.cases}
    (out / "sections.json").write_text(json.dumps(meta))
    return labels


def _dumps(out: Path) -> list[Path]:
    numbered = [p for p in out.glob("callgrind.out.*") if p.suffix[1:].isdigit()]
    return sorted(numbered, key=lambda p: int(p.suffix[1:]))


def instructions_of(dump: Path) -> int:
    """The ``summary:`` (instructions executed, Ir) of one callgrind dump."""
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no summary line (not a callgrind dump?)")


def instruction_report(out: Path) -> dict[str, float]:
    """Instructions per run of each section, from ``out/sections.json`` and the callgrind dumps in ``out``.

    Returns:
        ``<section>`` → instructions per run, plus ``process_overhead`` and ``embedded_overhead``
        (with / without − 1), ``runs``, ``matched`` and ``cases``.

    Raises:
        ValueError: the dumps do not pair with the sections (something else called the marker).
    """
    meta = json.loads((out / "sections.json").read_text())
    labels: list[str] = meta["sections"]
    dumps = _dumps(out)
    if len(dumps) != 2 * len(labels):
        raise ValueError(f"{out}: {len(dumps)} callgrind dumps for {len(labels)} sections (expected two each)")
    runs = int(meta["runs"])
    result: dict[str, float] = {label: instructions_of(dumps[2 * i + 1]) / runs for i, label in enumerate(labels)}
    result["process_overhead"] = result["process_on"] / result["process_off"] - 1.0
    result["embedded_overhead"] = result["embedded_on"] / result["embedded_off"] - 1.0
    result.update(runs=float(runs), matched=float(meta["matched"]), cases=float(meta["cases"]))
    return result


def instructions(n_runs: int, out: Path | None = None, python: str = sys.executable) -> dict[str, float]:
    """Run :func:`run_sections` under callgrind (``valgrind`` on the PATH) and read the counts.

    Instruction counts do not depend on the machine's load, so the with/without figures are
    deterministic (``PYTHONHASHSEED=0``; the run-details writer thread adds a little scheduling
    jitter to the embedded sections). ``out`` keeps the dumps (a temporary folder otherwise).

    Raises:
        RuntimeError: valgrind is missing or the run failed.
    """
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise RuntimeError("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("callgrind.out*"):
            old.unlink()
        cmd = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--dump-before={CALLGRIND_MARKER}",
            f"--callgrind-out-file={folder / 'callgrind.out'}",
            python, "-m", "vigil.bench.eval_online", str(folder), str(n_runs), "instrument",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"callgrind run failed ({done.returncode}): {' | '.join(tail)}")
        return instruction_report(folder)


def main_instructions(n_runs: int, out: Path | None = None) -> int:
    """``vigil bench --eval --instructions``: print the instruction counts; exit 1 above 5 % (embedded pipeline)."""
    r = instructions(n_runs, out)
    print(
        f"online eval, instructions (callgrind): {r['cases']:.0f} cases loaded, "
        f"{r['matched'] / r['runs']:.1%} of {r['runs']:.0f} runs matched\n"
        f"whole embedded pipeline per run: {r['embedded_off']:,.0f} without eval sets, {r['embedded_on']:,.0f} with "
        f"({r['embedded_overhead']:+.2%}; budget 5 %)\n"
        f"Pipeline.process per run: {r['process_off']:,.0f} without, {r['process_on']:,.0f} with "
        f"({r['process_overhead']:+.2%})\n"
        f"the eval chain entry alone, per run: {r['eval_alone']:,.0f}"
    )
    return 0 if r["embedded_overhead"] <= 0.05 else 1


def main(n_runs: int, repeat: int) -> int:
    """Print the figures; exit 1 when the overhead is above 5 %."""
    r = bench_eval(n_runs, repeat)
    print(
        f"online eval: {r['cases']:.0f} cases loaded, {r['matched']:.1%} of {r['runs']:.0f} runs matched "
        f"({r['failed']:.0%} of those failed their case)\n"
        f"pipeline CPU per run: {r['off_us']:.1f} µs without eval sets, {r['on_us']:.1f} µs with "
        f"(+{r['overhead']:.1%}; budget 5 %)"
    )
    return 0 if r["overhead"] <= 0.05 else 1


if __name__ == "__main__":  # the process valgrind runs: python -m vigil.bench.eval_online OUT RUNS
    run_sections(Path(sys.argv[1]), int(sys.argv[2]), instrument=sys.argv[3:] == ["instrument"])
