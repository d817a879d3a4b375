"""``vigil bench``: throughput and latency figures for BENCHMARKS.md.

Three measurements, each repeated and reported as the median:

* **pipeline** — the embedded pipeline on one thread: OTLP protobuf decode → in-process
  stream → assemble → normalise → score → decide → SQLite store → Prometheus metrics.
  Spans per CPU-second of this process (= spans/s per core), the run-details writer's thread
  included (it runs as in ``vigil run`` since 2026-11-25); a second row gives the scoring thread
  alone. The assembler clock is advanced artificially so runs close without waiting out the
  quiet period.
* **ingest** — the OTLP/HTTP receiver under uvicorn in a child process, loaded over
  loopback by client threads in this process; spans per CPU-second of the server process.
* **latency** — the real ``vigil run`` wiring (worker thread, real clock, default quiet
  period) fed at a steady rate with every run sampled; time from a run's root-span end to
  its review item being committed, p50 and p99.
* **judge** — the pipeline measurement with an LLM judge on (every run selected: a flood)
  against the same runs with judging off, alternating. The judge talks to the fake
  OpenAI-compatible server in a child process answering after ``JUDGE_DELAY_S`` like a
  model would. Reported: stream-thread CPU throughput of each (the stream's own cost), and
  wall throughput (which also shows the judge threads competing for the GIL and cores).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from collector.otlp import decode_protobuf
from collector.spool import stamp
from scorers.model import ScoredRun
from vigil.bench.page import bench_item_page
from vigil.bench.synth import bodies
from vigil.process import cpu_seconds, free_port
from vigil.run import build, tune_gc
from vigil.settings import Settings

console = Console(stderr=True)


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _settings(db: Path, **extra: object) -> Settings:
    values = {"database_url": f"sqlite:///{db}", "spool_path": "", **extra}  # the spool only where asked for
    return Settings.load({}, values, config_file=_empty_yaml(db.parent))


def _empty_yaml(folder: Path) -> Path:
    path = folder / "bench.yaml"
    path.write_text("{}\n")
    return path


def bench_pipeline(
    n_runs: int,
    *,
    saturated: bool = True,
    spool: str | None = None,
    wall: list[float] | None = None,
    scoring: list[float] | None = None,
    payload: Sequence[tuple[bytes, int, int]] | None = None,
    extra: Mapping[str, object] | None = None,
) -> tuple[float, int, int]:
    """One pipeline measurement. Returns ``(spans per CPU second, spans, runs written)``.

    With ``spool`` (an fsync policy) every body is first appended to the write-ahead spool (in the
    temporary directory) and waited for as ``vigil run``'s receiver does, and written runs
    acknowledge their bodies (segments deleted as they empty): what the spool adds. The CPU
    figure includes the spool's flusher thread (``process_time``); ``wall``, when given,
    receives the spans per wall second (which also shows the fsync waits: one body at a time
    here, so no group commit shares them). ``scoring``, when given, receives the spans per CPU second
    of the scoring thread alone (this one: decode → … → store → metrics), without the run-details
    writer's and the spool flusher's threads: the figure comparable with rows measured before the
    details writer existed (2026-11-23 and earlier).

    With ``saturated`` (the default) bodies are published until the stream holds a full
    worker tick (``StreamWorker`` pulls up to ``max_records`` = 512 records a tick), then
    the worker ticks: what the worker sees at its throughput limit, where the stream is
    never empty, so each tick scores and writes a few hundred runs in one transaction.
    Without it the worker ticks after every body (~31 runs per transaction), the pattern
    of a lightly loaded worker, which pays the per-transaction cost more often.

    ``payload`` replaces the synthetic bodies of ``n_runs`` runs (``(body, spans, runs)`` as
    :func:`vigil.bench.synth.bodies` yields), ``extra`` adds settings (``vigil bench
    --eval`` passes its runs and ``eval_sets``). The measured region is bracketed by two
    ``time.process_time()`` calls, the markers ``scripts/callgrind_bench.sh`` counts between.
    """
    payload = list(bodies(n_runs)) if payload is None else list(payload)
    with tempfile.TemporaryDirectory() as tmp:
        values: dict[str, object] = dict(extra or {})
        if spool:
            values.update(spool_path=str(Path(tmp) / "spool"), spool_fsync=spool)
        emb = build(_settings(Path(tmp) / "bench.db", **values), CollectorRegistry())
        if emb.spool is not None:
            emb.spool.open()
        if emb.details is not None:  # the run-details writer runs as in vigil run; its CPU time counts
            emb.details.start()
        clock = _Clock()
        emb.worker._assembler._clock = clock  # advance time by hand: no waiting out the quiet period
        tick = emb.worker._max_records if saturated else 1
        written = 0
        spans = 0
        cpu0, wall0, thread0 = time.process_time(), time.perf_counter(), time.thread_time()
        for body, n, _ in payload:
            result = decode_protobuf(body)
            if emb.spool is None:
                emb.stream.publish(result.batches)
            else:
                seq, durable = emb.spool.append(body)
                if durable is not None:
                    durable.result()
                emb.stream.publish(stamp(result.batches, seq))
            spans += n
            clock.t += emb.settings.quiet_period_s + 0.1
            if emb.stream.qsize() >= tick:
                written += emb.worker.run_once(0.0)
        while emb.stream.qsize():
            written += emb.worker.run_once(0.0)
        clock.t += 10
        written += emb.worker.run_once(0.0)
        thread = time.thread_time() - thread0
        if emb.details is not None:
            emb.details.shutdown(60.0)  # the details of every written run are in the store
        cpu, elapsed = time.process_time() - cpu0, time.perf_counter() - wall0
        if emb.spool is not None:
            emb.spool.close()
        emb.store.close()
    if wall is not None:
        wall.append(spans / elapsed)
    if scoring is not None:
        scoring.append(spans / thread)
    return spans / cpu, spans, written


def bench_spool(n_runs: int, repeat: int, policy: str = "batch") -> dict[str, float]:
    """The saturated pipeline without and with the spool (``policy``), alternating ``repeat`` times.

    Returns:
        medians of ``off_cpu``, ``on_cpu`` (spans per CPU second), ``off_wall``, ``on_wall`` (spans
        per wall second) and ``ratio_cpu`` / ``ratio_wall``: the medians of the per-pair on/off ratios.
    """
    off_cpu: list[float] = []
    on_cpu: list[float] = []
    off_wall: list[float] = []
    on_wall: list[float] = []
    for _ in range(repeat):
        off_cpu.append(bench_pipeline(n_runs, wall=off_wall)[0])
        on_cpu.append(bench_pipeline(n_runs, spool=policy, wall=on_wall)[0])
    pairs = list(zip(off_cpu, on_cpu, off_wall, on_wall, strict=True))
    return {
        "off_cpu": statistics.median(off_cpu),
        "on_cpu": statistics.median(on_cpu),
        "off_wall": statistics.median(off_wall),
        "on_wall": statistics.median(on_wall),
        "ratio_cpu": statistics.median(b / a for a, b, _, _ in pairs),
        "ratio_wall": statistics.median(d / c for _, _, c, d in pairs),
    }


JUDGE_DELAY_S = 1.0
"""How long the benchmark's fake judge model takes to answer (hosted models take 0.5–5 s)."""

JUDGE_ANSWER = "[[scenario:verdict]] Your refund was issued."
"""The final answer of every benchmark run: its marker picks the fake server's verdict script."""


def _serve_fake_judge(ports: multiprocessing.queues.Queue[int], stop: multiprocessing.synchronize.Event) -> None:
    import json

    from collector.demo.fakeopenai import FakeOpenAI, TextTurn

    verdict = TextTurn(json.dumps({"reasoning": "Supported.", "score": 0.8}), delay_s=JUDGE_DELAY_S)
    with FakeOpenAI({"verdict": [verdict]}) as fake:
        ports.put(fake.port)
        stop.wait()


def _judge_settings(db: Path, port: int | None) -> Settings:
    if port is None:
        return _settings(db)
    judge = {
        "rubric": "groundedness",
        "model": "bench-judge",
        "base_url": f"http://127.0.0.1:{port}/v1",
        "select": "true",
        "queue_size": 100,  # the defaults: concurrency 2, queue 100
        "flag_below": 0.5,
    }
    return _settings(db, judges={"ground": judge})


def bench_judge_once(n_runs: int, port: int | None) -> dict[str, float]:
    """One pipeline measurement with the judge on (``port`` of the fake judge) or off (None).

    Returns:
        ``thread``: spans per stream-thread CPU second; ``process``: per process CPU second;
        ``wall``: per wall second; ``judged`` / ``dropped``: runs judged, and runs dropped (queue
        full during the flood, or still queued when the measurement ended).
    """
    payload = list(bodies(n_runs, answer=JUDGE_ANSWER))
    with tempfile.TemporaryDirectory() as tmp:
        registry = CollectorRegistry()
        emb = build(_judge_settings(Path(tmp) / "judge.db", port), registry)
        if emb.judges is not None:
            emb.judges.start()
        clock = _Clock()
        emb.worker._assembler._clock = clock
        spans = 0
        thread0, cpu0, wall0 = time.thread_time(), time.process_time(), time.perf_counter()
        for body, n, _ in payload:
            emb.stream.publish(decode_protobuf(body).batches)
            spans += n
            clock.t += emb.settings.quiet_period_s + 0.1
            emb.worker.run_once(0.0)
        clock.t += 10
        emb.worker.run_once(0.0)
        thread, cpu, wall = time.thread_time() - thread0, time.process_time() - cpu0, time.perf_counter() - wall0
        if emb.judges is not None:
            emb.judges.shutdown(0.0)

        def total(name: str, **labels: str) -> float:
            return sum(
                s.value
                for m in registry.collect()
                for s in m.samples
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            )

        judged = total("vigil_judge_requests_total", outcome="ok")
        dropped = total("vigil_judge_dropped_total")
        emb.store.close()
    rates = {"thread": spans / thread, "process": spans / cpu, "wall": spans / wall}
    return {**rates, "judged": judged, "dropped": dropped}


def bench_judge(n_runs: int, repeat: int) -> dict[str, float]:
    """Judge-off and judge-on pipeline runs, alternating ``repeat`` times; medians of each figure."""
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.queues.Queue[int] = ctx.Queue()
    stop = ctx.Event()
    proc = ctx.Process(target=_serve_fake_judge, args=(ports, stop), daemon=True)
    proc.start()
    try:
        port = ports.get(timeout=60)
        off: list[dict[str, float]] = []
        on: list[dict[str, float]] = []
        for _ in range(repeat):
            off.append(bench_judge_once(n_runs, None))
            on.append(bench_judge_once(n_runs, port))
    finally:
        stop.set()
        proc.join(10)
    out = {f"off_{k}": statistics.median(r[k] for r in off) for k in off[0]}
    out.update({f"on_{k}": statistics.median(r[k] for r in on) for k in on[0]})
    out["ratio_thread"] = statistics.median(b["thread"] / a["thread"] for a, b in zip(off, on, strict=True))
    out["ratio_wall"] = statistics.median(b["wall"] / a["wall"] for a, b in zip(off, on, strict=True))
    return out


def bench_stages(n_runs: int, payload: Sequence[bytes] | None = None, *, details: bool = False) -> dict[str, float]:
    """CPU microseconds per run for each pipeline stage in isolation (where the time goes).

    Args:
        n_runs: synthetic runs (:func:`vigil.bench.synth.bodies`) when no ``payload`` is given.
        payload: OTLP/protobuf bodies to measure instead (``scripts/heavy_stages.py``: the heavy workload).
        details: also the run-details writer's two stages (building the rows, writing them).
    """
    from collector.model import Span
    from review_queue.details import Texts, details_row
    from scorers.assemble import ClosedTrace
    from scorers.normalise import normalise
    from scorers.pipeline import score_run
    from scorers.redact import Redactor
    from scorers.rules import decide

    payload = [b for b, _, _ in bodies(n_runs)] if payload is None else payload
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        emb = build(_settings(Path(tmp) / "stages.db"), CollectorRegistry())
        pipeline = emb.worker._pipeline
        t = time.process_time()
        decoded = [decode_protobuf(b) for b in payload]
        out["decode"] = time.process_time() - t
        traces: dict[str, list[Span]] = {}
        for result in decoded:
            for batch in result.batches:
                traces.setdefault(batch.trace_id, []).extend(batch.spans)
        t = time.process_time()
        runs = [normalise(spans) for spans in traces.values()]
        out["normalise"] = time.process_time() - t
        t = time.process_time()
        scores = [score_run(run, pipeline.chain)[0] for run in runs]
        out["score"] = time.process_time() - t
        t = time.process_time()
        for run, sc in zip(runs, scores, strict=True):
            decide(run, sc, pipeline.rules, pipeline.sample_rate)
        out["decide"] = time.process_time() - t
        scored = [pipeline.process(ClosedTrace(k, tuple(v), True)) for k, v in traces.items()]
        t = time.process_time()
        for item in scored:
            emb.run_metrics.observe_run(item)
        out["metrics"] = time.process_time() - t
        t = time.process_time()
        for i in range(0, len(scored), 256):
            emb.store.write(scored[i : i + 256])
        out["store (SQLite)"] = time.process_time() - t
        if details:
            redactor = Redactor()
            texts = Texts(redactor)
            t = time.process_time()
            rows = [details_row(item, redactor, None, 0.0, texts) for item in scored]
            out["details (build)"] = time.process_time() - t
            t = time.process_time()
            for i in range(0, len(rows), 500):
                emb.store.write_details(rows[i : i + 500])
            out["details (write)"] = time.process_time() - t
        emb.store.close()
    return {stage: seconds / len(traces) * 1e6 for stage, seconds in out.items()}


def _serve_ingest(port: int, ready: multiprocessing.synchronize.Event) -> None:
    import uvicorn

    from collector.limits import IntakeBudget, intake_budget_bytes
    from collector.metrics import CollectorMetrics
    from collector.receiver import create_otlp_app
    from collector.stream import InProcessStream

    metrics = CollectorMetrics(CollectorRegistry())
    stream = InProcessStream(100_000, 1, metrics)

    def drain() -> None:
        while True:
            stream.get_many(10_000, 0.1)

    threading.Thread(target=drain, daemon=True).start()
    intake = IntakeBudget(intake_budget_bytes(1024 * 2**20))  # vigil run's default memory limit
    app = create_otlp_app(stream, metrics, max_body_bytes=20 * 2**20, retry_after_s=1, intake=intake)
    ready.set()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", access_log=False)


def bench_ingest(n_runs: int, clients: int = 4) -> tuple[float, float]:
    """One ingest measurement. Returns ``(spans per server CPU second, spans per wall second)``."""
    payload = list(bodies(n_runs))
    port = free_port()
    ready = multiprocessing.get_context("spawn").Event()
    proc = multiprocessing.get_context("spawn").Process(target=_serve_ingest, args=(port, ready), daemon=True)
    proc.start()
    ready.wait(30)
    url = f"http://127.0.0.1:{port}/v1/traces"
    _wait_up(url)
    assert proc.pid is not None
    sent = [0]
    lock = threading.Lock()

    def client(part: Sequence[tuple[bytes, int, int]]) -> None:
        with httpx.Client(headers={"Content-Type": "application/x-protobuf"}) as http:
            for body, n, _ in part:
                if http.post(url, content=body).status_code == 200:
                    with lock:
                        sent[0] += n

    cpu0, wall0 = cpu_seconds(proc.pid), time.perf_counter()
    threads = [threading.Thread(target=client, args=(payload[i::clients],)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu, wall = cpu_seconds(proc.pid) - cpu0, time.perf_counter() - wall0
    proc.terminate()
    proc.join(10)
    return sent[0] / cpu, sent[0] / wall


def _wait_up(url: str) -> None:
    for _ in range(100):
        try:
            httpx.get(url.replace("/v1/traces", "/healthz"), timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)


def bench_latency(runs_per_s: int, seconds: float) -> list[float]:
    """Feed the live pipeline at a steady rate; return flag latencies in seconds."""
    import random

    from vigil.bench.synth import body, make_run

    latencies: list[float] = []

    def on_written(batch: Sequence[ScoredRun]) -> None:
        now = time.time_ns()
        latencies.extend((now - s.run.end_ns) / 1e9 for s in batch if s.flag is not None and s.run.end_ns)

    with tempfile.TemporaryDirectory() as tmp:
        emb = build(_settings(Path(tmp) / "lat.db", sample_rate=1.0), CollectorRegistry(), on_written=on_written)
        emb.worker.start()
        rng = random.Random(11)
        interval = 1.0 / runs_per_s
        start = time.perf_counter()
        sent = 0
        while time.perf_counter() - start < seconds:
            run = make_run(rng)
            emb.stream.publish(decode_protobuf(body(list(run.spans))).batches)
            sent += 1
            time.sleep(max(0.0, start + sent * interval - time.perf_counter()))
        emb.worker.shutdown(30)
        emb.store.close()
    return latencies


def bench_helpers(n_runs: int, repeat: int) -> tuple[float, float, float]:
    """CPU cost per span of the instrumentation helpers against bare SDK spans.

    One helper run is ``with agent_run(...)`` holding one ``run.tick()`` and one
    ``with tool_call(...)``; the bare twin is two nested ``tracer.start_as_current_span``
    with the same attributes (a fixed conversation id, ``vigil.iterations`` set at the end).
    Both go through a ``SimpleSpanProcessor`` to an exporter that discards, content capture
    off. After a warm-up the two alternate in blocks of 500 runs; ``repeat`` times
    ``n_runs`` runs each.

    Returns:
        ``(median ratio helper/bare, helper µs per span, bare µs per span)``.
    """
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.util.types import AttributeValue

    from collector.instrument import agent_run, tool_call

    class Discard(SpanExporter):
        def export(self, spans: object) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Discard()))
    tracer = provider.get_tracer("vigil.bench")
    run_attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "bench",
        "gen_ai.conversation.id": "0" * 32,
        "vigil.max_iterations": 8,
        "vigil.optimal_steps": 2,
    }
    tool_attrs: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": "call_1",
    }

    def helpers(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            with agent_run("bench", max_iterations=8, optimal_steps=2, tracer_provider=provider) as run:
                run.tick()
                with tool_call("lookup", call_id="call_1"):
                    pass
        return time.process_time() - t

    def bare(n: int) -> float:
        t = time.process_time()
        for _ in range(n):
            with tracer.start_as_current_span("invoke_agent bench", attributes=run_attrs) as root:
                with tracer.start_as_current_span("execute_tool lookup", attributes=tool_attrs):
                    pass
                root.set_attribute("vigil.iterations", 1)
        return time.process_time() - t

    helpers(n_runs // 10 + 1)  # warm-up: caches, tracers, allocator
    bare(n_runs // 10 + 1)
    block = min(n_runs, 500)  # alternate in small blocks so both sides see the same machine noise
    pairs: list[tuple[float, float]] = []
    for _ in range(repeat):
        blocks = [(helpers(block), bare(block)) for _ in range(n_runs // block)]
        pairs.append((sum(h for h, _ in blocks), sum(b for _, b in blocks)))
    n_runs = n_runs // block * block
    provider.shutdown()
    per_span = 1e6 / (2 * n_runs)
    return (
        statistics.median(h / b for h, b in pairs),
        statistics.median(h for h, _ in pairs) * per_span,
        statistics.median(b for _, b in pairs) * per_span,
    )


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _median_of(label: str, repeat: int, fn: Callable[[], float]) -> float:
    values: list[float] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(label, total=repeat)
        for _ in range(repeat):
            values.append(fn())
            progress.advance(task)
    return statistics.median(values)


def _spool_rows(table: Table, n_runs: int, repeat: int, policy: str = "batch") -> None:
    with Progress(console=console, transient=True) as progress:
        progress.add_task(f"spool off vs on ({repeat}×2 runs)", total=None)
        sp = bench_spool(n_runs, repeat, policy)
    table.add_row(f"spool off / on ({policy}): spans/s per core", f"{sp['off_cpu']:,.0f} / {sp['on_cpu']:,.0f}")
    table.add_row("  spool on / off, CPU (target ≥ 0.90)", f"{sp['ratio_cpu']:.3f}")
    table.add_row(f"spool off / on ({policy}): spans/s wall", f"{sp['off_wall']:,.0f} / {sp['on_wall']:,.0f}")
    table.add_row("  spool on / off, wall", f"{sp['ratio_wall']:.3f}")


def _judge_rows(table: Table, n_runs: int, repeat: int) -> None:
    with Progress(console=console, transient=True) as progress:
        progress.add_task(f"judge on vs off ({repeat}×2 runs)", total=None)
        j = bench_judge(n_runs, repeat)
    table.add_row("judge off: pipeline spans/s per stream-thread CPU s", f"{j['off_thread']:,.0f}")
    table.add_row("judge on (every run selected): spans/s per stream-thread CPU s", f"{j['on_thread']:,.0f}")
    table.add_row("  judge on / off, stream-thread CPU (target ≥ 0.90)", f"{j['ratio_thread']:.3f}")
    table.add_row("judge off / on: pipeline spans/s wall", f"{j['off_wall']:,.0f} / {j['on_wall']:,.0f}")
    table.add_row("  judge on / off, wall", f"{j['ratio_wall']:.3f}")
    table.add_row("judge off / on: spans/s per process CPU s", f"{j['off_process']:,.0f} / {j['on_process']:,.0f}")
    table.add_row("  runs judged / dropped (flood), judge on", f"{j['on_judged']:,.0f} / {j['on_dropped']:,.0f}")


def _heavy_rows(table: Table, n_runs: int, repeat: int) -> None:
    """The headline: the heavy-content row (:mod:`vigil.bench.heavy`), ``repeat`` rounds."""
    from vigil.bench.heavy import bench_heavy, heavy_bodies, heavy_runs

    runs = heavy_runs(n_runs)
    payload = list(heavy_bodies(runs))
    rounds = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"heavy-content row ({n_runs:,} runs × {repeat})", total=repeat)
        for _ in range(repeat):
            rounds.append(bench_heavy(runs, payload))
            progress.advance(task)
    middle = sorted(rounds, key=lambda r: r.spans_per_cpu_s)[len(rounds) // 2]
    table.add_row(
        "HEAVY-CONTENT ROW: vigil run at its defaults, spans per server CPU-second (details for every run)",
        f"{middle.spans_per_cpu_s:,.0f}",
    )
    table.add_row("  bodies answered in (s), peak RSS (MB)", f"{middle.send_wall_s:.2f}, {middle.peak_rss_mb:.0f}")
    table.add_row(
        "  runs stored complete / with details / sent",
        f"{middle.complete:,} / {middle.with_details:,} / {middle.runs:,}",
    )


def main(args: argparse.Namespace) -> int:
    """Run every measurement and print a table (the figures for BENCHMARKS.md)."""
    tune_gc()  # as vigil run does
    n_runs = 2_000 if args.quick else args.runs
    repeat = 1 if args.quick else args.repeat
    table = Table(title=f"vigil bench ({os.cpu_count()} cores, {n_runs} runs × {repeat}, medians)")
    table.add_column("measurement")
    table.add_column("result", justify="right")
    if getattr(args, "judge", False):  # only the judge comparison
        _judge_rows(table, n_runs, repeat)
        Console().print(table)
        return 0
    if getattr(args, "spool", None):  # only the spool comparison
        _spool_rows(table, n_runs, repeat, args.spool)
        Console().print(table)
        return 0
    _heavy_rows(table, 500 if args.quick else min(n_runs, 5000), repeat)
    scoring: list[float] = []
    pipe = _median_of("pipeline", repeat, lambda: bench_pipeline(n_runs, scoring=scoring)[0])
    table.add_row("embedded pipeline, spans/s per core (saturated worker)", f"{pipe:,.0f}")
    table.add_row("  same, scoring thread only (details writer not counted)", f"{statistics.median(scoring):,.0f}")
    light = _median_of("pipeline", repeat, lambda: bench_pipeline(n_runs, saturated=False)[0])
    table.add_row("  same, one worker tick per OTLP body", f"{light:,.0f}")
    _spool_rows(table, n_runs, repeat)
    for stage, micros in bench_stages(n_runs).items():
        table.add_row(f"  stage {stage}, CPU µs per run", f"{micros:,.0f}")
    ingest = [bench_ingest(n_runs) for _ in range(repeat)]
    table.add_row("OTLP/HTTP ingest, spans/s per core (server CPU)", f"{statistics.median(i[0] for i in ingest):,.0f}")
    table.add_row("OTLP/HTTP ingest, spans/s wall (4 clients)", f"{statistics.median(i[1] for i in ingest):,.0f}")
    seconds = 5.0 if args.quick else 20.0
    lat = bench_latency(200, seconds)
    table.add_row("flag latency p50 (200 runs/s, quiet 2 s)", f"{_pct(lat, 0.5):.3f} s")
    table.add_row("flag latency p99", f"{_pct(lat, 0.99):.3f} s")
    table.add_row("runs measured for latency", f"{len(lat)}")
    ratio, helper_us, bare_us = bench_helpers(5_000 if args.quick else 50_000, max(repeat, 5))
    table.add_row(
        "helper span cost vs bare SDK span (target ≤ 1.2×)", f"{ratio:.2f}× ({helper_us:.1f} vs {bare_us:.1f} µs)"
    )
    _judge_rows(table, n_runs, repeat)
    page = bench_item_page(500, 7)
    table.add_row(
        "item page, 500-span run: server median (target < 300 ms)",
        f"{page.median_s * 1000:.0f} ms (max {page.max_s * 1000:.0f}, {page.page_bytes / 2**20:.2f} MiB)",
    )
    Console().print(table)
    return 0
