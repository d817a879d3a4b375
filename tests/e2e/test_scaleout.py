"""Scale-out end to end: OTLP → ``vigil collector`` → Kafka (tansu) → ``vigil scorer`` ×2 → PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.kafka_testing import TansuBroker
from review_queue.role_process import RoleProcess

from .scaleout import (
    check_exact,
    db_rows,
    expected,
    generate,
    make_cluster,
    send_grpc,
    send_http,
    wait_assigned,
    wait_for,
)

pytestmark = pytest.mark.integration


def _stop_all(processes: list[RoleProcess]) -> None:
    for process in processes:
        if process.alive():
            process.stop()


class TestEndToEnd:
    """Traces over OTLP/HTTP and OTLP/gRPC reach PostgreSQL through Kafka, each run exactly once."""

    def test_http_and_grpc_through_two_scorers(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Every run appears once with the right fields; counters across both scorers match the store."""
        cluster = make_cluster(tansu, pg_url, workdir)
        collector = cluster.spawn("collector")
        scorers = [cluster.spawn("scorer", name=f"scorer{i}") for i in range(2)]
        processes = [collector, *scorers]
        try:
            collector.wait_ready()
            for scorer in scorers:
                scorer.wait_ready()
            wait_assigned(scorers, cluster.partitions)
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
        finally:
            _stop_all(processes)
        assert 0 == scorers[0].process.returncode
