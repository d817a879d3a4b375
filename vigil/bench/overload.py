"""``vigil bench --overload``: a real ``vigil run`` / ``vigil collector`` offered far more than it can take.

`wrk <https://github.com/wg/wrk>`_ (Debian package ``wrk``) POSTs pre-encoded OTLP protobuf
bodies of ~512 spans (:mod:`vigil.bench.synth`) round-robin over many connections for the
given duration, through ``overload.lua``, which makes the trace ids of every request unique
(an 8-byte per-request prefix). A Python load generator cannot offer ~500,000 spans/s on two
cores; wrk does, as long as the receiver answers quickly (it is closed-loop: each connection
sends its next request when the previous one is answered, so the offered rate is the answer
rate, reported as such).

What is checked, and reported:

* every answer is 200 or 503, and every 503 carries ``Retry-After``;
* resident memory: peak (``VmHWM``) against the configured ceiling (``VIGIL_MEMORY_LIMIT_MB``);
* ``vigil run``: runs stored == runs in the 200-answered requests, request by request: the
  stored runs grouped by their request prefix form exactly as many groups as there were 200
  answers, each complete (a 503-answered request stored in part, a lost accepted run, or a
  duplicate would break it); ``vigil_spans_received_total`` == 200 answers × spans per body;
* ``vigil collector`` (tansu broker from :mod:`vigil.bench.broker`): records in the
  topic == 200 answers × traces per body == ``vigil_kafka_records_sent_total``, and the record
  keys grouped by request prefix are complete groups, as many as 200 answers.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import httpx
import sqlalchemy as sa
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from vigil.bench.synth import body, make_run
from vigil.process import cpu_seconds, status_mib

__all__ = [
    "MARKER",
    "OverloadResult",
    "WrkMissingError",
    "group_check",
    "parse_wrk",
    "template_bodies",
    "wrk_binary",
]

console = Console(stderr=True)

MARKER = b"VIGILTID"
"""First 8 bytes of every trace id in a template body; ``overload.lua`` replaces them per request."""

PIPELINE_SPANS_PER_S = 50_000
"""The embedded pipeline benchmark (BENCHMARKS.md): 10× of it is the overload target."""

_WRK_LINE = re.compile(r"^VIGIL_OVERLOAD (.*)$", re.MULTILINE)


class WrkMissingError(RuntimeError):
    """``wrk`` is not installed."""


def wrk_binary() -> str:
    """Path of ``wrk``.

    Raises:
        WrkMissingError: with what to install.
    """
    path = shutil.which("wrk")
    if path is None:
        raise WrkMissingError(
            "vigil bench --overload needs wrk (HTTP load generator): apt-get install wrk "
            "(Debian/Ubuntu), brew install wrk (macOS), or build https://github.com/wg/wrk"
        )
    return path


def template_bodies(n_bodies: int, spans_per_body: int = 512, seed: int = 31) -> list[tuple[bytes, int, int]]:
    """``(body, spans, runs)`` of whole synthetic runs whose trace ids all start with :data:`MARKER`."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n_bodies):
        spans: list[Span] = []
        runs = 0
        while len(spans) < spans_per_body:
            run = make_run(rng)
            trace_id = MARKER + rng.randbytes(8)
            for span in run.spans:
                span.trace_id = trace_id
            spans.extend(run.spans)
            runs += 1
        data = body(spans)
        if data.count(MARKER) != len(spans):
            raise RuntimeError("marker found outside trace ids; pick another seed")
        out.append((data, len(spans), runs))
    return out


@dataclass
class WrkSummary:
    """What ``overload.lua`` printed."""

    seconds: float
    requests: int
    c200: int
    c503: int
    c503_retry_after: int
    other: int
    socket_errors: int
    timeouts: int
    p50_ms: float
    p99_ms: float


def parse_wrk(output: str) -> WrkSummary:
    """Parse the ``VIGIL_OVERLOAD`` line of ``overload.lua``.

    Raises:
        RuntimeError: the line is missing (wrk failed).
    """
    match = _WRK_LINE.search(output)
    if match is None:
        raise RuntimeError(f"wrk printed no summary:\n{output[-2000:]}")
    v = {k: int(x) for k, x in (item.split("=", 1) for item in match.group(1).split())}
    return WrkSummary(
        seconds=v["duration_us"] / 1e6,
        requests=v["requests"],
        c200=v["c200"],
        c503=v["c503"],
        c503_retry_after=v["c503_retry_after"],
        other=v["cother"],
        socket_errors=v["connect"] + v["read"] + v["write"],
        timeouts=v["timeout"],
        p50_ms=v["p50_us"] / 1000,
        p99_ms=v["p99_us"] / 1000,
    )


def group_check(trace_ids: Iterable[str], runs_per_request: int) -> tuple[int, int]:
    """``(complete groups, incomplete groups)`` of trace ids grouped by their 16-hex request prefix."""
    sizes = Counter(t[:16] for t in trace_ids)
    complete = sum(1 for n in sizes.values() if n == runs_per_request)
    return complete, len(sizes) - complete


@dataclass
class OverloadResult:
    """One overload measurement."""

    role: str
    wrk: WrkSummary
    spans_per_body: int
    runs_per_body: int
    ceiling_mib: int
    connections: int = 0
    peak_rss_mib: float = 0.0
    rss_samples: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    stored: int = 0
    complete_groups: int = 0
    incomplete_groups: int = 0

    @property
    def offered_spans_per_s(self) -> float:
        """Spans in every answered or failed request per second (closed loop: the answer rate)."""
        return (self.wrk.requests + self.wrk.socket_errors) * self.spans_per_body / self.wrk.seconds

    @property
    def accepted_spans_per_s(self) -> float:
        """Spans in 200-answered requests per second."""
        return self.server_200 * self.spans_per_body / self.wrk.seconds

    @property
    def server_200(self) -> int:
        """Requests the server answered 200 (wrk stops without reading the answers in flight)."""
        return int(self.metrics.get("requests_200", 0))

    def failures(self) -> list[str]:
        """Broken invariants (empty when the measurement passed)."""
        w, bad, accepted = self.wrk, [], self.server_200
        if w.other or w.socket_errors:
            bad.append(f"{w.other} answers other than 200/503, {w.socket_errors} socket errors")
        if w.c503 != w.c503_retry_after:
            bad.append(f"{w.c503 - w.c503_retry_after} 503 answers without Retry-After")
        if not w.c200 <= accepted <= w.c200 + self.connections:
            bad.append(f"server answered 200 {accepted} times, wrk read {w.c200} (± {self.connections} in flight)")
        if self.peak_rss_mib > self.ceiling_mib:
            bad.append(f"peak RSS {self.peak_rss_mib:.0f} MiB over the {self.ceiling_mib} MiB ceiling")
        if self.stored != accepted * self.runs_per_body:
            bad.append(f"{self.stored} stored, {accepted * self.runs_per_body} accepted")
        if self.incomplete_groups or self.complete_groups != accepted:
            bad.append(f"{self.complete_groups} complete / {self.incomplete_groups} partial requests, {accepted} × 200")
        received = self.metrics.get("spans_received", -1)
        if received != accepted * self.spans_per_body:
            bad.append(f"vigil_spans_received_total {received:.0f} != {accepted * self.spans_per_body}")
        return bad


def _write_bodies(workdir: Path, n: int) -> tuple[list[Path], int, int]:
    """Write ``n`` template bodies of the same span and run counts (so that counts multiply)."""
    made = template_bodies(n)
    spans, runs = made[0][1], made[0][2]
    alike = [data for data, n_spans, n_runs in made if (n_spans, n_runs) == (spans, runs)]
    paths = []
    for i, data in enumerate(alike):
        path = workdir / f"body-{i}.bin"
        path.write_bytes(data)
        paths.append(path)
    return paths, spans, runs


def _run_wrk(url: str, bodies: list[Path], seconds: float, connections: int, threads: int) -> WrkSummary:
    script = resources.files("vigil.bench").joinpath("overload.lua")
    with resources.as_file(script) as lua:
        cmd = [
            wrk_binary(),
            f"-t{threads}",
            f"-c{connections}",
            f"-d{int(seconds)}s",
            "--timeout",
            "30s",
            "-s",
            str(lua),
            url,
            "--",
            *map(str, bodies),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120, check=False)
    return parse_wrk(done.stdout + done.stderr)


def _metrics(url: str) -> dict[str, float]:
    """Totals of the counters the check needs, from a Prometheus scrape."""
    wanted = {
        "vigil_spans_received_total": "spans_received",
        "vigil_kafka_records_sent_total": "kafka_records_sent",
        "vigil_kafka_buffer_bytes": "kafka_buffer_bytes",
    }
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=10).text):
        for sample in family.samples:
            if sample.name in wanted:
                out[wanted[sample.name]] = out.get(wanted[sample.name], 0.0) + sample.value
            if sample.name == "vigil_otlp_rejected_requests_total" and sample.labels.get("reason") == "backpressure":
                out["rejected_backpressure"] = sample.value
            if sample.name == "vigil_otlp_requests_total":
                key = f"requests_{sample.labels['code']}"
                out[key] = out.get(key, 0.0) + sample.value
            if sample.name in ("vigil_dropped_total", "vigil_refused_total"):
                kind = "dropped" if sample.name == "vigil_dropped_total" else "refused"
                key = f"{kind}_{sample.labels['stage']}_{sample.labels['reason']}"
                out[key] = out.get(key, 0.0) + sample.value
    return out


def _sampling(pid: int, into: list[float], stop: threading.Event) -> threading.Thread:
    def sample() -> None:
        while not stop.wait(1.0):
            into.append(status_mib(pid, "VmRSS"))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    return thread


@dataclass(frozen=True)
class _Load:
    """How wrk loads the server."""

    seconds: float
    connections: int
    threads: int


def _load(pid: int, url: str, bodies: list[Path], load: _Load) -> tuple[WrkSummary, list[float], float]:
    samples: list[float] = []
    stop = threading.Event()
    sampler = _sampling(pid, samples, stop)
    cpu0 = cpu_seconds(pid)
    try:
        summary = _run_wrk(url, bodies, load.seconds, load.connections, load.threads)
    finally:
        stop.set()
        sampler.join()
    return summary, samples, cpu_seconds(pid) - cpu0


def _wait_stable(count: Callable[[], int], target: int, timeout_s: float) -> int:
    """Poll ``count`` until it reaches ``target`` and then stops changing (or times out)."""
    deadline = time.monotonic() + timeout_s
    last = -1
    while time.monotonic() < deadline:
        n = count()
        if n >= target and n == last:
            return n
        last = n
        time.sleep(2.0)
    return count()


def overload_run(
    seconds: float, connections: int, threads: int, ceiling_mib: int, extra_env: Mapping[str, str] | None = None
) -> OverloadResult:
    """Overload a ``vigil run`` subprocess (SQLite) and check what it accepted was stored."""
    from vigil.process import start_vigil

    with tempfile.TemporaryDirectory(prefix="vigil-overload-") as tmp:
        workdir = Path(tmp)
        bodies, spans, runs = _write_bodies(workdir, 16)
        env = {
            "VIGIL_MEMORY_LIMIT_MB": str(ceiling_mib),
            "VIGIL_QUIET_PERIOD_S": "1",
            "VIGIL_RETRY_AFTER_S": "1",
            "VIGIL_LOG_LEVEL": "warning",
            **(extra_env or {}),
        }
        with start_vigil(workdir, env) as vigil:
            pid = vigil.process.pid
            summary, samples, cpu = _load(pid, vigil.otlp_endpoint, bodies, _Load(seconds, connections, threads))
            result = OverloadResult(
                "vigil run", summary, spans, runs, ceiling_mib, connections, rss_samples=samples, cpu_s=cpu
            )
            engine = sa.create_engine(f"sqlite:///{workdir / 'vigil.db'}", poolclass=sa.pool.NullPool)

            def stored() -> int:
                with engine.connect() as conn:
                    return int(conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() or 0)

            accepted = int(_metrics(vigil.metrics_url).get("requests_200", 0)) * runs
            console.print(f"waiting for {accepted:,} accepted runs to be stored…")
            _wait_stable(stored, accepted, 600)
            with engine.connect() as conn:
                ids = [row[0] for row in conn.execute(sa.text("SELECT trace_id FROM runs"))]
            engine.dispose()
            result.metrics = _metrics(vigil.metrics_url)
            result.peak_rss_mib = status_mib(pid, "VmHWM")
    result.stored = len(ids)
    result.complete_groups, result.incomplete_groups = group_check(ids, runs)
    return result


def overload_collector(
    seconds: float, connections: int, threads: int, ceiling_mib: int, extra_env: Mapping[str, str] | None = None
) -> OverloadResult:
    """Overload a ``vigil collector`` subprocess on a tansu broker and check what it accepted is in Kafka."""
    from vigil.bench.broker import start_tansu, topic_keys
    from vigil.process import spawn_role

    with tempfile.TemporaryDirectory(prefix="vigil-overload-") as tmp, start_tansu(Path(tmp)) as broker:
        workdir = Path(tmp)
        bodies, spans, runs = _write_bodies(workdir, 16)
        topic = f"overload_{int(time.time())}"
        broker.create_topic(topic, 4)
        (workdir / "empty.yaml").write_text("{}\n")
        env = {
            "VIGIL_KAFKA_BOOTSTRAP": broker.bootstrap,
            "VIGIL_KAFKA_TOPIC": topic,
            "VIGIL_CONFIG": str(workdir / "empty.yaml"),
            "VIGIL_MEMORY_LIMIT_MB": str(ceiling_mib),
            "VIGIL_RETRY_AFTER_S": "1",
            "VIGIL_LOG_LEVEL": "warning",
            **(extra_env or {}),
        }
        collector = spawn_role("collector", workdir, env, name="overload-collector")
        try:
            collector.wait_ready()
            pid = collector.process.pid
            summary, samples, cpu = _load(pid, collector.otlp_endpoint, bodies, _Load(seconds, connections, threads))
            result = OverloadResult(
                "vigil collector", summary, spans, runs, ceiling_mib, connections, rss_samples=samples
            )
            result.cpu_s = cpu
            deadline = time.monotonic() + 120
            while collector.metric("vigil_kafka_buffer_bytes") > 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            result.metrics = _metrics(f"http://127.0.0.1:{collector.metrics_port}/metrics")
            result.peak_rss_mib = status_mib(pid, "VmHWM")
        finally:
            collector.stop()
        keys = topic_keys(broker.bootstrap, topic)
    result.stored = len(keys)
    result.complete_groups, result.incomplete_groups = group_check(keys, runs)
    return result


def _report(results: list[OverloadResult]) -> Table:
    table = Table(title="vigil bench --overload (wrk, OTLP/HTTP protobuf)")
    table.add_column("")
    for r in results:
        table.add_column(r.role, justify="right")

    def row(name: str, value: Callable[[OverloadResult], str]) -> None:
        table.add_row(name, *(value(r) for r in results))

    row("duration s / connections", lambda r: f"{r.wrk.seconds:.0f} / {r.connections}")
    row("spans, runs per request", lambda r: f"{r.spans_per_body}, {r.runs_per_body}")
    row("offered spans/s (answers/s × spans)", lambda r: f"{r.offered_spans_per_s:,.0f}")
    row("× pipeline benchmark (50k spans/s)", lambda r: f"{r.offered_spans_per_s / PIPELINE_SPANS_PER_S:.1f}×")
    row("accepted spans/s (server's 200 answers)", lambda r: f"{r.accepted_spans_per_s:,.0f}")
    row("requests answered", lambda r: f"{r.wrk.requests:,}")
    row("200 / 503 read by wrk", lambda r: f"{r.wrk.c200:,} / {r.wrk.c503:,}")
    row("200 / 503 answered by the server", lambda r: f"{r.server_200:,} / {r.metrics.get('requests_503', 0):,.0f}")
    row("% answered 503", lambda r: f"{100 * r.wrk.c503 / max(1, r.wrk.requests):.1f} %")
    row("503 with Retry-After", lambda r: f"{r.wrk.c503_retry_after:,}")
    row("other statuses / socket errors", lambda r: f"{r.wrk.other} / {r.wrk.socket_errors}")
    row("latency p50 / p99 ms", lambda r: f"{r.wrk.p50_ms:.1f} / {r.wrk.p99_ms:.1f}")
    row("server CPU s / wall s", lambda r: f"{r.cpu_s:.0f} / {r.wrk.seconds:.0f}")
    row("peak RSS (VmHWM) / ceiling MiB", lambda r: f"{r.peak_rss_mib:.0f} / {r.ceiling_mib}")
    row("median RSS under load MiB", lambda r: f"{_median(r.rss_samples):.0f}")
    row("accepted runs (server 200 × runs)", lambda r: f"{r.server_200 * r.runs_per_body:,}")
    row("stored runs / Kafka records", lambda r: f"{r.stored:,}")
    row("complete / partial request groups", lambda r: f"{r.complete_groups:,} / {r.incomplete_groups}")
    row("vigil_spans_received_total", lambda r: f"{r.metrics.get('spans_received', 0):,.0f}")
    row("Kafka records acknowledged", lambda r: f"{r.metrics.get('kafka_records_sent', 0):,.0f}")
    row("verdict", lambda r: "ok" if not r.failures() else "; ".join(r.failures()))
    return table


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values) if values else 0.0


def main(args: argparse.Namespace) -> int:
    """Run the overload measurements and print a table; exit 1 when an invariant broke."""
    try:
        wrk_binary()
    except WrkMissingError as exc:
        console.print(f"[red]{exc}[/red]")
        return 2
    seconds = 10.0 if args.quick else args.seconds
    kwargs = {"connections": args.connections, "threads": args.threads, "ceiling_mib": args.memory_limit_mb}
    results = []
    if args.role in ("run", "both"):
        console.print(f"overloading vigil run for {seconds:g} s…")
        queue = {"VIGIL_QUEUE_MAX_BATCHES": str(args.queue_max_batches)} if args.queue_max_batches else {}
        results.append(overload_run(seconds, **kwargs, extra_env=queue))
    if args.role in ("collector", "both"):
        console.print(f"overloading vigil collector for {seconds:g} s…")
        buffer = {"VIGIL_KAFKA_BUFFER_BYTES": str(int(args.kafka_buffer_mb * 1024 * 1024))}
        results.append(overload_collector(seconds, **kwargs, extra_env=buffer))
    Console().print(_report(results))
    return 1 if any(r.failures() for r in results) else 0
