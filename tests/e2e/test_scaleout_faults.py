"""Scale-out under faults: scorer crashes, rebalances, a database outage, Kafka unreachable.

After each disturbance the store must equal the ground truth exactly (nothing lost, nothing
duplicated) and the run/flag counters must count every run exactly once.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import grpc
import httpx
import pytest
import sqlalchemy as sa

from vigil.bench.broker import TansuBroker
from vigil.bench.synth import body

from .scaleout import (
    EXPORT_METHOD,
    Cluster,
    check_exact,
    check_sessions,
    created_since,
    db_rows,
    generate,
    make_cluster,
    stopped_counts,
    wait_assigned,
    wait_for,
    wait_runs,
)
from .tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _group_at_end(cluster: Cluster) -> bool:
    """The group's committed offset of every partition is the log end: everything is written."""
    from kafka import KafkaConsumer, TopicPartition

    # A consumer of the group that never subscribes only reads the group's committed offsets.
    reader = KafkaConsumer(bootstrap_servers=cluster.broker.bootstrap, group_id=cluster.group)
    try:
        tps = [TopicPartition(cluster.topic, p) for p in range(cluster.partitions)]
        ends = reader.end_offsets(tps)
        committed = {tp: reader.committed(tp) for tp in tps}
    finally:
        reader.close(autocommit=False)
    print("committed", committed, "ends", ends)  # shown when the wait times out
    # >=: tansu's ListOffsets sometimes answers one less than the offset after the last record.
    return all(committed[tp] is not None and committed[tp] >= ends[tp] for tp in tps)


class TestCrash:
    """kill -9 of the scorer at random moments loses and duplicates nothing."""

    def test_kill_nine_and_restart(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Three SIGKILLs during 2,000 runs, turns of 250 conversations spread over every partition: runs,
        review items, counters and every session's aggregates equal the ground truth."""
        cluster = make_cluster(tansu, pg_url, workdir)
        # Commit every 3 s so that every kill leaves written-but-uncommitted runs to re-deliver.
        slow_commits = {"VIGIL_KAFKA_COMMIT_INTERVAL_S": "3"}
        try:
            collector, scorer = cluster.pipeline(**slow_commits)
            truth, sender = cluster.send(collector, 2000, seed=3, seconds=24, sessions=250)
            rng = random.Random(5)
            for kill in range(3):
                if kill:  # kill only a scorer that is consuming, at a random moment after it started
                    cluster.consuming(scorer)
                time.sleep(rng.uniform(1.0, 3.0))
                scorer.kill()
                final_start = time.time()
                scorer = cluster.spawn("scorer", name="scorer", **slow_commits)
            sender.join()
            wait_runs(pg_url, truth, 120, scorer.log_tail)
            stored, _items = check_exact(pg_url, truth)
            assert any(row["version"] > 1 for row in stored.values()), "no run was re-delivered: test too weak"
            sessions = check_sessions(pg_url, truth)  # each session's turns were written by several scorers
            assert 250 == len(sessions)
            assert all(8 == row["turns"] for row in sessions.values())
            cluster.consuming(scorer)  # the last scorer may have started after every run was written
            wait_for(lambda: _group_at_end(cluster), 60, "the last scorer to commit the log end", scorer.log_tail)
            new_runs, new_items = created_since(pg_url, final_start)
            # The last scorer re-read records other scorers had already written: it counts only new runs.
            assert new_runs == scorer.metric("vigil_runs_total")
            assert new_items == scorer.metric("vigil_flagged_runs_total")
        finally:
            cluster.stop_all()


class TestRebalance:
    """A second scorer joins mid-stream and later leaves."""

    def test_join_and_leave(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Partitions move twice; the store is exact and both scorers' counts add up to the truth."""
        cluster = make_cluster(tansu, pg_url, workdir)
        try:
            collector, first = cluster.pipeline("scorer-a")
            truth, sender = cluster.send(collector, 1500, seed=4, seconds=12)
            time.sleep(2)
            second = cluster.spawn("scorer", name="scorer-b")
            second.wait_ready()
            wait_assigned([first, second], cluster.partitions)
            time.sleep(2)
            assert second.metric("vigil_consumer_records_total") > 0
            assert 0 == second.stop()
            sender.join()
            wait_runs(pg_url, truth, 90, first.log_tail)
            _, items = check_exact(pg_url, truth)
            second_runs, second_flags = stopped_counts(second)
            assert second_runs > 0
            assert len(truth) == first.metric("vigil_runs_total") + second_runs
            assert len(items) == first.metric("vigil_flagged_runs_total") + second_flags
            assert first.metric("vigil_consumer_rebalances_total") >= 3
        finally:
            cluster.stop_all()


class TestDatabaseOutage:
    """PostgreSQL becomes unreachable mid-stream (a proxy in between is stopped, then restarted)."""

    def test_pause_and_catch_up(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """The scorer pauses while the database is down and catches up with nothing lost."""
        proxy = TcpProxy(("127.0.0.1", 5432))
        proxy.start()
        via_proxy = sa.make_url(pg_url).set(port=proxy.port).render_as_string(hide_password=False)
        cluster = make_cluster(tansu, pg_url, workdir)
        try:
            collector, scorer = cluster.pipeline(VIGIL_DATABASE_URL=via_proxy)
            truth, sender = cluster.send(collector, 1000, seed=6, seconds=10)
            time.sleep(3)
            proxy.stop()
            wait_for(lambda: scorer.metric("vigil_consumer_paused") == 1, 30, "the scorer to pause", scorer.log_tail)
            during = len(db_rows(pg_url)[0])
            time.sleep(4)
            assert 1 == scorer.metric("vigil_consumer_paused")
            assert 503 == httpx.get(f"http://127.0.0.1:{scorer.metrics_port}/readyz", timeout=5).status_code
            assert during == len(db_rows(pg_url)[0])  # nothing written while down
            proxy.start()
            sender.join()
            wait_runs(pg_url, truth, 90, scorer.log_tail)
            _, items = check_exact(pg_url, truth)
            assert 0 == scorer.metric("vigil_consumer_paused")
            assert scorer.metric("vigil_store_write_errors_total") >= 1
            assert len(truth) == scorer.metric("vigil_runs_total")
            assert len(items) == scorer.metric("vigil_flagged_runs_total")
        finally:
            cluster.stop_all()
            proxy.stop()


class TestKafkaUnreachable:
    """The collector refuses with retry-later answers instead of buffering without bound."""

    def test_never_reachable(self, workdir: Path, tansu: TansuBroker) -> None:
        """No broker at all: 503 with Retry-After over HTTP, UNAVAILABLE over gRPC, flat memory."""
        (workdir / "empty.yaml").write_text("{}\n")
        from vigil.process import free_port, spawn_role

        env = {"VIGIL_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}", "VIGIL_CONFIG": str(workdir / "empty.yaml")}
        collector = spawn_role("collector", workdir, env)
        try:
            collector.wait_ready(path="/healthz")
            assert 503 == httpx.get(f"http://127.0.0.1:{collector.metrics_port}/readyz", timeout=5).status_code
            payload = body(list(generate(1, seed=8)[0].spans))
            big = body([s for r in generate(40, seed=9) for s in r.spans])
            rss0 = _rss_kib(collector.process.pid)
            with httpx.Client(timeout=10) as client:
                for _ in range(300):
                    response = client.post(
                        f"{collector.otlp_endpoint}/v1/traces", content=big,
                        headers={"Content-Type": "application/x-protobuf"},
                    )  # fmt: skip
                    assert 503 == response.status_code
                    assert int(response.headers["Retry-After"]) >= 1
            assert _rss_kib(collector.process.pid) - rss0 < 30_000
            channel = grpc.insecure_channel(f"127.0.0.1:{collector.otlp_grpc_port}")
            with channel, pytest.raises(grpc.RpcError) as info:
                channel.unary_unary(EXPORT_METHOD)(payload, timeout=10)
            assert grpc.StatusCode.UNAVAILABLE == info.value.code()
            # refused before the body is read (the producer is not connected): counted per request
            assert 301 == collector.metric("vigil_otlp_rejected_requests_total", {"reason": "backpressure"})
        finally:
            if collector.alive():
                collector.stop()

    def test_broker_goes_away(self, workdir: Path, tansu: TansuBroker) -> None:
        """The broker dies after start: the byte budget fills, then 503s; memory stays bounded."""
        from vigil.bench.broker import start_tansu
        from vigil.process import spawn_role

        (workdir / "empty.yaml").write_text("{}\n")
        with start_tansu(workdir) as broker:
            broker.create_topic("otlp_spans", 2)
            env = {
                "VIGIL_KAFKA_BOOTSTRAP": broker.bootstrap,
                "VIGIL_KAFKA_BUFFER_BYTES": str(1024 * 1024),
                "VIGIL_CONFIG": str(workdir / "empty.yaml"),
            }
            collector = spawn_role("collector", workdir, env)
            try:
                collector.wait_ready()
                big = body([s for r in generate(40, seed=10) for s in r.spans])
                url = f"{collector.otlp_endpoint}/v1/traces"
                headers = {"Content-Type": "application/x-protobuf"}
                assert 200 == httpx.post(url, content=big, headers=headers, timeout=10).status_code
                broker.stop()
                codes = []
                rss0 = _rss_kib(collector.process.pid)
                with httpx.Client(timeout=10) as client:
                    for _ in range(200):
                        codes.append(client.post(url, content=big, headers=headers).status_code)
                assert 503 in codes
                assert codes.count(200) * len(big) < 4 * 1024 * 1024  # accepted only up to the budget
                assert collector.metric("vigil_kafka_buffer_bytes") <= 1024 * 1024 + len(big) * 2
                assert _rss_kib(collector.process.pid) - rss0 < 30_000
            finally:
                collector.kill()
