"""Scale-out end to end: OTLP → ``vigil collector`` → Kafka (tansu) → ``vigil scorer`` ×2 → PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from vigil.bench.broker import TansuBroker

from .scaleout import (
    check_exact,
    db_rows,
    expected,
    generate,
    make_cluster,
    send_grpc,
    send_http,
    wait_for,
)

pytestmark = pytest.mark.integration


class TestEndToEnd:
    """Traces over OTLP/HTTP and OTLP/gRPC reach PostgreSQL through Kafka, each run exactly once."""

    def test_http_and_grpc_through_two_scorers(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Every run appears once with the right fields; counters across both scorers match the store."""
        cluster = make_cluster(tansu, pg_url, workdir)
        collector = cluster.spawn("collector")
        scorers = [cluster.spawn("scorer", name=f"scorer{i}") for i in range(2)]
        try:
            collector.wait_ready()
            cluster.consuming(*scorers)
            over_http, over_grpc = generate(150, seed=1), generate(50, seed=2)
            send_http(collector.otlp_endpoint, over_http)
            send_grpc(f"127.0.0.1:{collector.otlp_grpc_port}", over_grpc)
            truth = expected(over_http + over_grpc)
            wait_for(lambda: len(db_rows(pg_url)[0]) >= len(truth), 60, "runs in PostgreSQL", scorers[0].log_tail)
            runs, items = check_exact(pg_url, truth)
            assert {1} == {row["version"] for row in runs.values()}  # nothing was written twice
            assert len(truth) == sum(s.metric("vigil_runs_total") for s in scorers)
            assert len(items) == sum(s.metric("vigil_flagged_runs_total") for s in scorers)
            assert all(s.metric("vigil_consumer_records_total") > 0 for s in scorers)  # both did work
            assert len(truth) == sum(s.metric("vigil_consumer_records_total") for s in scorers)
            assert 0 < len(items) < len(truth)
            assert 0 == collector.metric("vigil_kafka_delivery_failures_total")
            review = cluster.spawn("review")
            review.wait_ready()
            flagged = httpx.get(f"{review.api}/api/v1/runs", params={"flagged": "true", "limit": 500}, timeout=10)
            assert set(items) == {run["trace_id"] for run in flagged.json()["items"]}
            queue = httpx.get(f"{review.api}/api/v1/queue", params={"limit": 500}, timeout=10).json()["items"]
            assert len(items) == len(queue)
            assert 200 == httpx.get(f"{review.api}/readyz", timeout=10).status_code
        finally:
            cluster.stop_all()
        assert [0, 0, 0, 0] == [p.process.returncode for p in cluster.processes]


class TestStockExporterRecords:
    """Records as the OpenTelemetry Collector's kafka exporter writes them are consumed correctly."""

    def test_one_trace_per_record_and_many_per_record(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Keyed one-trace records (partition_traces_by_id) and unkeyed many-trace records — each run's
        spans split over two partitions — both land exactly: the mixed records are re-keyed."""
        from kafka import KafkaProducer

        from vigil.bench.synth import body

        cluster = make_cluster(tansu, pg_url, workdir)
        scorer = cluster.spawn("scorer")
        try:
            cluster.consuming(scorer)
            keyed, batched = generate(60, seed=11), generate(90, seed=12)
            producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
            for run in keyed:  # partition_traces_by_id: true — key = lowercase hex trace id
                producer.send(cluster.topic, key=run.trace_id.encode(), value=body(list(run.spans)))
            for i in range(0, len(batched), 10):  # the default: one record per batch, no key, many traces
                chunk = batched[i : i + 10]  # and each run's spans split over two partitions
                first = [s for run in chunk for s in run.spans[: len(run.spans) // 2]]
                second = [s for run in chunk for s in run.spans[len(run.spans) // 2 :]]
                producer.send(cluster.topic, value=body(first), partition=0)
                producer.send(cluster.topic, value=body(second), partition=1)
            producer.flush()
            producer.close()
            truth = expected(keyed + batched)
            wait_for(lambda: len(db_rows(pg_url)[0]) >= len(truth), 60, "runs in PostgreSQL", scorer.log_tail)
            runs, _ = check_exact(pg_url, truth)
            assert {1} == {row["version"] for row in runs.values()}
            mixed = 2 * len(batched) // 10
            assert mixed == scorer.metric("vigil_consumer_rekeyed_records_total")
            # the keyed records, the mixed ones, and one keyed record per trace of each mixed record
            assert len(keyed) + mixed + 2 * len(batched) == scorer.metric("vigil_consumer_records_total")
            assert len(truth) == scorer.metric("vigil_runs_total")
        finally:
            cluster.stop_all()

    def test_undecodable_record_is_skipped(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """A record that is not OTLP is counted and passed; the records around it are scored."""
        from kafka import KafkaProducer

        from vigil.bench.synth import body

        cluster = make_cluster(tansu, pg_url, workdir, partitions=1)
        scorer = cluster.spawn("scorer")
        try:
            cluster.consuming(scorer)
            runs = generate(4, seed=13)
            producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
            producer.send(cluster.topic, value=body(list(runs[0].spans)))
            producer.send(cluster.topic, value=b"\xff\xfe not protobuf")
            for run in runs[1:]:
                producer.send(cluster.topic, value=body(list(run.spans)))
            producer.flush()
            producer.close()
            truth = expected(runs)
            wait_for(lambda: len(db_rows(pg_url)[0]) >= len(truth), 60, "runs in PostgreSQL", scorer.log_tail)
            check_exact(pg_url, truth)
            assert 1 == scorer.metric("vigil_consumer_bad_records_total")
        finally:
            cluster.stop_all()
