"""Shared pieces of the scale-out e2e tests: role environments, traffic, ground truth, checks."""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import grpc
import httpx
import sqlalchemy as sa

from collector.otlp import decode_protobuf
from scorers.assemble import ClosedTrace
from scorers.pipeline import Pipeline
from scorers.registry import build_chain
from scorers.rules import compile_rules
from vigil.bench.broker import TansuBroker
from vigil.bench.synth import SynthRun, body, make_run
from vigil.process import RoleProcess, spawn_role
from vigil.settings import Settings

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SAMPLE_RATE = 0.2


@dataclass
class Cluster:
    """A topic, a group and the environment every role of one test shares."""

    broker: TansuBroker
    topic: str
    group: str
    db_url: str
    workdir: Path
    partitions: int
    processes: list[RoleProcess] = field(default_factory=list)
    """Every role :meth:`spawn` started, in order."""

    def env(self, **extra: str) -> dict[str, str]:
        """``VIGIL_*`` variables of a role in this cluster."""
        env = {
            "VIGIL_KAFKA_BOOTSTRAP": self.broker.bootstrap,
            "VIGIL_KAFKA_TOPIC": self.topic,
            "VIGIL_KAFKA_GROUP_ID": self.group,
            "VIGIL_KAFKA_SESSION_TIMEOUT_MS": "6000",
            "VIGIL_DATABASE_URL": self.db_url,
            "VIGIL_QUIET_PERIOD_S": "0.5",
            "VIGIL_SAMPLE_RATE": str(SAMPLE_RATE),
            "VIGIL_LOG_LEVEL": "info",
            "VIGIL_CONFIG": str(self.workdir / "empty.yaml"),
        }
        env.update(extra)
        return env

    def spawn(self, role: str, name: str | None = None, **extra: str) -> RoleProcess:
        """Start a role of this cluster (:meth:`stop_all` stops it)."""
        process = spawn_role(role, self.workdir, self.env(**extra), name=name)
        self.processes.append(process)
        return process

    def pipeline(self, scorer: str = "scorer", **extra: str) -> tuple[RoleProcess, RoleProcess]:
        """Start a collector and a scorer (called ``scorer``, with ``extra`` variables); return them once
        the collector is ready and the scorer consumes every partition."""
        collector = self.spawn("collector")
        consumer = self.spawn("scorer", name=scorer, **extra)
        collector.wait_ready()
        self.consuming(consumer)
        return collector, consumer

    def consuming(self, *scorers: RoleProcess) -> None:
        """Wait until every one of ``scorers`` is ready and the partitions are assigned among them."""
        for scorer in scorers:
            scorer.wait_ready()
        wait_assigned(list(scorers), self.partitions)

    def send(
        self, collector: RoleProcess, n: int, seed: int, seconds: float, sessions: int = 0
    ) -> tuple[dict[str, dict[str, Any]], Sender]:
        """Start sending ``n`` generated runs to ``collector`` over ``seconds``; the expected rows and the sender.
        With ``sessions``, the runs are turns of that many conversations, interleaved (see :func:`generate`)."""
        runs = generate(n, seed=seed, sessions=sessions)
        return expected(runs), Sender(collector.otlp_endpoint, runs, seconds=seconds).start()

    def stop_all(self) -> None:
        """SIGTERM every role still running (each must stop within its timeout)."""
        for process in self.processes:
            if process.alive():
                process.stop()


def make_cluster(broker: TansuBroker, db_url: str, workdir: Path, partitions: int = 4) -> Cluster:
    """Create a fresh topic and group name for one test."""
    suffix = secrets.token_hex(4)
    (workdir / "empty.yaml").write_text("{}\n")
    topic = f"otlp_spans_{suffix}"
    broker.create_topic(topic, partitions)
    return Cluster(broker, topic, f"vigil-scorers-{suffix}", db_url, workdir, partitions)


def generate(n: int, seed: int, sessions: int = 0) -> list[SynthRun]:
    """``n`` synthetic agent runs (10–30 spans each), ending now.

    With ``sessions``, run ``i`` is a turn of conversation ``i % sessions`` (``gen_ai.conversation.id``):
    a session's turns are sent far apart and, keyed by trace id, land on every partition.
    """
    rng = random.Random(seed)
    if not sessions:
        return [make_run(rng) for _ in range(n)]
    return [make_run(rng, conversation=f"conv-{seed}-{i % sessions}") for i in range(n)]


def send_http(endpoint: str, runs: Iterable[SynthRun], runs_per_body: int = 5) -> None:
    """POST the runs as OTLP protobuf bodies of ``runs_per_body`` runs, retrying on 503."""
    chunk: list[Any] = []
    with httpx.Client(timeout=30) as client:
        for i, run in enumerate(runs, 1):
            chunk.extend(run.spans)
            if i % runs_per_body == 0:
                _post(client, endpoint, body(chunk))
                chunk = []
        if chunk:
            _post(client, endpoint, body(chunk))


def _post(client: httpx.Client, endpoint: str, data: bytes) -> None:
    headers = {"Content-Type": "application/x-protobuf"}
    for _ in range(100):
        response = client.post(f"{endpoint}/v1/traces", content=data, headers=headers)
        if response.status_code == 200:
            return
        assert 503 == response.status_code, response.text
        time.sleep(float(response.headers.get("Retry-After", "1")))
    raise AssertionError("collector kept answering 503")


def send_grpc(target: str, runs: Iterable[SynthRun]) -> None:
    """Export each run over OTLP/gRPC (raw ``ExportTraceServiceRequest`` bytes)."""
    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary(EXPORT_METHOD)
        for run in runs:
            export(body(list(run.spans)), timeout=30)


def expected(runs: Iterable[SynthRun]) -> dict[str, dict[str, Any]]:
    """Ground truth of each run: what the pipeline (same settings as the roles) decides."""
    settings = Settings.load({}, {"sample_rate": SAMPLE_RATE}, config_file=_empty())
    chain = build_chain(settings.scorers, optimal_steps=settings.optimal_steps)
    rules = compile_rules(settings.rules, [n for n, _ in chain], repeat_threshold=settings.repeat_threshold)
    pipeline = Pipeline(chain, rules, settings.sample_rate)
    out = {}
    for run in runs:
        spans = decode_protobuf(body(list(run.spans))).batches[0].spans
        scored = pipeline.process(ClosedTrace(run.trace_id, spans, complete=True))
        out[run.trace_id] = {
            "session_id": scored.run.session_id,
            "input_tokens": scored.run.input_tokens,
            "output_tokens": scored.run.output_tokens,
            "errored": scored.run.errored,
            "safety_blocked": scored.run.safety_blocked,
            "hit_max_iterations": scored.run.hit_max_iterations,
            "agent": scored.run.agent,
            "llm_calls": scored.run.llm_calls,
            "tool_calls": scored.run.tool_calls,
            "tool_errors": scored.run.tool_errors,
            "complete": True,
            "flagged": scored.flag is not None,
        }
    return out


def _empty() -> Path:
    import tempfile

    path = Path(tempfile.gettempdir()) / "vigil-empty.yaml"
    path.write_text("{}\n")
    return path


def db_rows(db_url: str) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every run row by trace id, and the trace ids of every review item (duplicates kept)."""
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            runs = {
                row["trace_id"]: dict(row)
                for row in conn.execute(
                    sa.text(
                        "SELECT trace_id, agent, llm_calls, tool_calls, tool_errors, complete, flagged, version, "
                        "created_at FROM runs"
                    )
                ).mappings()
            }
            items = [r[0] for r in conn.execute(sa.text("SELECT trace_id FROM review_items"))]
    except sa.exc.ProgrammingError:
        return {}, []
    finally:
        engine.dispose()
    return runs, items


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str, logs: Callable[[], str] = str) -> None:
    """Poll ``predicate`` every 0.5 s until true or fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}\n{logs()}")


def wait_runs(db_url: str, truth: dict[str, Any], timeout_s: float, logs: Callable[[], str] = str) -> None:
    """Wait until the store holds at least as many runs as the ground truth; say which are missing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(db_rows(db_url)[0]) >= len(truth):
            return
        time.sleep(0.5)
    missing = sorted(set(truth) - set(db_rows(db_url)[0]))
    raise AssertionError(f"{len(missing)} of {len(truth)} runs missing after {timeout_s} s: {missing[:5]}\n{logs()}")


def wait_assigned(scorers: list[RoleProcess], partitions: int, timeout_s: float = 60.0) -> None:
    """Wait until the live scorers together own every partition, each at least one."""

    def settled() -> bool:
        try:
            counts = [s.metric("vigil_consumer_assigned_partitions") for s in scorers]
        except httpx.HTTPError:
            return False
        return sum(counts) == partitions and all(c >= 1 for c in counts)

    wait_for(settled, timeout_s, "partition assignment", lambda: "\n".join(s.log_tail(1500) for s in scorers))


def check_exact(db_url: str, truth: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Assert the store holds exactly the ground-truth runs and review items; return the rows."""
    runs, items = db_rows(db_url)
    assert set(truth) == set(runs), f"missing {len(set(truth) - set(runs))}, extra {len(set(runs) - set(truth))}"
    assert len(items) == len(set(items)), "a review item was duplicated"
    flagged = {tid for tid, t in truth.items() if t["flagged"]}
    assert flagged == set(items)
    for tid, want in truth.items():
        row = runs[tid]
        got = {k: row[k] for k in ("agent", "llm_calls", "tool_calls", "tool_errors", "complete", "flagged")}
        assert {k: want[k] for k in got} == got, tid
    return runs, items


SESSION_SUMS = {
    "turns": lambda t: 1,
    "input_tokens": lambda t: t["input_tokens"],
    "output_tokens": lambda t: t["output_tokens"],
    "turns_flagged": lambda t: int(t["flagged"]),
    "errors": lambda t: int(t["errored"]),
    "blocks": lambda t: int(t["safety_blocked"]),
    "limit_hits": lambda t: int(t["hit_max_iterations"]),
}
"""Each session aggregate as a sum over its turns' ground truth."""


def check_sessions(db_url: str, truth: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Assert every session row equals the sums over its turns' ground truth (no turn lost or counted
    twice) and that no other session exists; return the rows."""
    want: dict[str, dict[str, int]] = {}
    for t in truth.values():
        sums = want.setdefault(t["session_id"], dict.fromkeys(SESSION_SUMS, 0))
        for name, term in SESSION_SUMS.items():
            sums[name] += term(t)
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            rows = {r["session_id"]: dict(r) for r in conn.execute(sa.text("SELECT * FROM sessions")).mappings()}
    finally:
        engine.dispose()
    assert set(want) == set(rows), (
        f"missing {sorted(set(want) - set(rows))[:5]}, extra {sorted(set(rows) - set(want))[:5]}"
    )
    for session_id, sums in want.items():
        assert sums == {k: rows[session_id][k] for k in sums}, session_id
    return rows


def created_since(db_url: str, since: float) -> tuple[int, int]:
    """Runs and review items first written at or after ``since`` (Unix seconds)."""
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            runs = conn.execute(sa.text("SELECT count(*) FROM runs WHERE created_at >= :t"), {"t": since}).scalar()
            items = conn.execute(
                sa.text("SELECT count(*) FROM review_items WHERE created_at >= :t"), {"t": since}
            ).scalar()
    finally:
        engine.dispose()
    return int(runs or 0), int(items or 0)


def stopped_counts(process: RoleProcess) -> tuple[int, int]:
    """``(new_runs, new_flags)`` from the ``scorer_stopped`` line of a scorer stopped with SIGTERM."""
    import json

    for line in reversed(process.log_path.read_text().splitlines()):
        if '"scorer_stopped"' in line:
            event = json.loads(line)
            return int(event["new_runs"]), int(event["new_flags"])
    raise AssertionError(f"no scorer_stopped line\n{process.log_tail()}")


class Background:
    """Work done on a daemon thread (:meth:`_work`): :meth:`start` starts it, :meth:`join` waits for it
    and re-raises what it raised, in the test's thread."""

    error: BaseException | None = None
    _thread: threading.Thread | None = None

    def start(self) -> Self:
        """Start the work."""
        self._thread = threading.Thread(target=self._guarded, daemon=True)
        self._thread.start()
        return self

    def join(self, timeout_s: float = 120.0) -> None:
        """Wait until the work is done; re-raise its failure."""
        assert self._thread is not None, "never started"
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not finish"
        if self.error is not None:
            raise self.error

    def _guarded(self) -> None:
        try:
            self._work()
        except Exception as exc:  # noqa: BLE001 - reported by join() in the test thread
            self.error = exc

    def _work(self) -> None:
        raise NotImplementedError


class Sender(Background):
    """Sends runs to the collector from a thread at a steady pace (the stream the tests disturb)."""

    def __init__(self, endpoint: str, runs: list[SynthRun], seconds: float, runs_per_body: int = 5) -> None:
        self.endpoint = endpoint
        self.runs = runs
        self.seconds = seconds
        self.per_body = runs_per_body
        self.sent = 0

    def _work(self) -> None:
        chunks = [self.runs[i : i + self.per_body] for i in range(0, len(self.runs), self.per_body)]
        interval = self.seconds / max(1, len(chunks))
        start = time.monotonic()
        with httpx.Client(timeout=30) as client:
            for i, chunk in enumerate(chunks):
                _post(client, self.endpoint, body([s for run in chunk for s in run.spans]))
                self.sent += len(chunk)
                time.sleep(max(0.0, start + (i + 1) * interval - time.monotonic()))
