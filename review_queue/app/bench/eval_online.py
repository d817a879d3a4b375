"""``vigil bench --eval``: what online regression scoring costs the pipeline.

The same synthetic runs (:mod:`review_queue.app.bench.synth`, with captured content: every run has a
user message and a final answer) go through the ``vigil run`` pipeline (normalise → score → decide)
twice, alternating ``repeat`` times: without eval sets, and with one eval set of ``cases`` cases
loaded (``eval_sets``) of which 10 % of the runs match by their first user message (and are scored
against their case with the default criteria: trajectory EXACT and ROUGE-1). The eval set is what
``vigil eval export`` would write from those runs: a matching case expects its run's tool calls,
and one in ten expects one call more (those runs fail and are flagged ``eval_regression``). The figure is the CPU
time per run (``time.process_time``, one thread, with the garbage-collector tuning of ``vigil run``),
medians of the repeats; the overhead is their ratio.
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from collector.model import Span
from collector.otlp import decode_protobuf
from review_queue.app.bench.synth import _kv, body, make_run
from review_queue.app.run import tune_gc
from review_queue.app.scoring import Scoring
from review_queue.app.settings import Settings
from scorers.assemble import ClosedTrace
from scorers.pipeline import Pipeline

__all__ = ["bench_eval"]


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


def _workload(n_runs: int, cases: int, match_share: float, seed: int = 11) -> tuple[list[ClosedTrace], dict[str, Any]]:
    """Synthetic runs with a captured user message and answer, and an eval set of ``cases`` cases.

    ``match_share`` of the runs ask a case's question; like an eval set exported from reviewed
    production runs, each such case expects that run's own tool calls, except one case in ten,
    which expects one call more (a regression the run is flagged for).
    """
    rng = random.Random(seed)
    traces = []
    expected: dict[int, list[dict[str, Any]]] = {}
    for i in range(n_runs):
        run = make_run(rng)
        k = len(expected) if rng.random() < match_share and len(expected) < cases else cases + i
        messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": _question(k)}]}])
        spans = list(run.spans)
        # the last LLM call's input holds the conversation (what the normaliser reads)
        last_llm = max(j for j, s in enumerate(spans) if s.name.startswith("chat"))
        spans[last_llm].attributes.append(_kv("gen_ai.input.messages", messages))
        spans[-1].attributes.append(_kv("output.value", _answer(k)))  # the root is the last span
        decoded: list[Span] = [s for b in decode_protobuf(body(spans)).batches for s in b.spans]
        traces.append(ClosedTrace(run.trace_id, tuple(decoded), True))
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
    doc = {
        "eval_set_id": "bench",
        "eval_cases": [_case(k, expected.get(k, [{"name": "search", "args": {"q": "item 1"}}])) for k in range(cases)],
    }
    return traces, doc


def _pipeline(folder: Path, eval_sets: tuple[str, ...]) -> tuple[Pipeline, Scoring]:
    settings = Settings.load(
        environ={}, overrides={"database_url": f"sqlite:///{folder / 'bench.db'}", "eval_sets": eval_sets}
    )
    scoring = Scoring.from_settings(settings, environ={})
    registry = CollectorRegistry()
    return scoring.pipeline(scoring.run_metrics(registry), None), scoring


def _cpu_per_run(pipeline: Pipeline, traces: list[ClosedTrace]) -> float:
    t = time.process_time()
    for closed in traces:
        pipeline.process(closed)
    return (time.process_time() - t) / len(traces)


def bench_eval(n_runs: int = 5000, repeat: int = 5, cases: int = 1000, match_share: float = 0.1) -> dict[str, float]:
    """Median CPU µs per run without and with the eval set, the overhead, and how many runs matched."""
    tune_gc()  # as vigil run and vigil scorer do (GC thresholds of the stream worker)
    traces, doc = _workload(n_runs, cases, match_share)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path = folder / "bench.evalset.json"
        path.write_text(json.dumps(doc))
        off, _ = _pipeline(folder, ())
        on, scoring = _pipeline(folder, (str(path),))
        scored = [on.process(c).scores for c in traces]  # also warms the caches
        matched = sum("eval_passed" in sc for sc in scored)
        failed = sum(sc.get("eval_passed") == 0.0 for sc in scored)
        _cpu_per_run(off, traces)
        offs, ons = [], []
        for _ in range(repeat):
            offs.append(_cpu_per_run(off, traces))
            ons.append(_cpu_per_run(on, traces))
        assert scoring.online is not None
        loaded = scoring.online.cases
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
