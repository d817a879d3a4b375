"""SIGTERM under load, in every role, and the restart after it (issue 8, item 3).

What each role promises on SIGTERM (deploy/RUNBOOK.md, "Shutdown and restart"):

* ``vigil run``: every request answered 200 is written at drain (finished runs) or saved in
  the state file (runs whose root had not arrived) and completed after the restart; requests
  refused meanwhile get 503 or a refused/closed connection, never 500, and the sender retries.
* ``vigil collector``: every span of every request answered 200 is in Kafka when it exits.
* ``vigil scorer``: what is written is committed, what is not is re-delivered; counted once.
* ``vigil review``: requests in flight finish (no 500). A client stalled mid-upload cannot hold
  any role's stop: tests/review_queue/test_http_stop.py.
"""

from __future__ import annotations

import json
import random
import shutil
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from collector.otlp import decode_protobuf
from scorers.assemble import Assembler
from scorers.state import load_state
from vigil.bench.broker import TansuBroker
from vigil.bench.synth import SynthRun, body
from vigil.process import RoleProcess, spawn_role, start_vigil

from .scaleout import (
    EXPORT_METHOD,
    SAMPLE_RATE,
    Background,
    check_exact,
    expected,
    generate,
    make_cluster,
    stopped_counts,
    wait_for,
    wait_runs,
)

pytestmark = pytest.mark.integration

PROTO = {"Content-Type": "application/x-protobuf"}

RETRYABLE_GRPC = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})
"""Refusals a sender retries (OTLP/gRPC spec: both are retryable). CANCELLED is what an export
still running when the server's stop grace ends gets; it was not acknowledged, so it is resent."""


# --- load: senders that retry what was refused, remembering who accepted what ----------------


@dataclass(frozen=True)
class Body:
    """One OTLP request: its bytes and the spans it carries, per trace."""

    data: bytes
    spans: dict[str, frozenset[str]]


def run_bodies(runs: list[SynthRun], rng: random.Random, per_body: int = 3) -> list[Body]:
    """Bodies of ``per_body`` whole runs; one run in four is split in two requests, children then root."""
    out: list[Body] = []
    whole: list[SynthRun] = []
    for run in runs:
        if rng.random() < 0.25:
            children = [s for s in run.spans if s.parent_span_id]
            root = [s for s in run.spans if not s.parent_span_id]
            out.extend(_body(children) for children in (children, root))
            continue
        whole.append(run)
        if len(whole) == per_body:
            out.append(_body([s for r in whole for s in r.spans]))
            whole = []
    if whole:
        out.append(_body([s for r in whole for s in r.spans]))
    return out


def _body(spans: list[Any]) -> Body:
    by_trace: dict[str, set[str]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id.hex(), set()).add(span.span_id.hex())
    return Body(body(spans), {t: frozenset(ids) for t, ids in by_trace.items()})


@dataclass
class Poster(Background):
    """Posts its bodies in order to ``target()``, retrying each until it is answered 200.

    Every answer is kept: ``accepted`` pairs a body with the endpoint that took it,
    ``statuses`` counts the non-200 answers, ``transport_errors`` refused or closed connections.
    """

    target: Callable[[], str]
    bodies: list[Body]
    accepted: list[tuple[str, Body]] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    transport_errors: int = 0
    error: BaseException | None = None
    pace_s: float = 0.0
    grpc_target: str | None = None
    give_up: threading.Event = field(default_factory=threading.Event)

    def _work(self) -> None:
        if self.grpc_target is not None:
            self._run_grpc(self.grpc_target)
            return
        with httpx.Client(timeout=30) as client:
            for item in self.bodies:
                self._post(client, item)
                time.sleep(self.pace_s)

    def _run_grpc(self, target: str) -> None:
        """Export over OTLP/gRPC; ``statuses`` then counts gRPC status codes by value."""
        with grpc.insecure_channel(target) as channel:
            export = channel.unary_unary(EXPORT_METHOD)
            for item in self.bodies:
                while not self.give_up.is_set():
                    try:
                        export(item.data, timeout=30)
                    except grpc.RpcError as exc:
                        code = exc.code().value[0]
                        self.statuses[code] = self.statuses.get(code, 0) + 1
                        if exc.code() not in RETRYABLE_GRPC:
                            raise AssertionError(f"gRPC answered {exc.code()}: {exc.details()}") from exc
                        time.sleep(0.05)
                        continue
                    self.accepted.append((target, item))
                    break
                time.sleep(self.pace_s)

    def _post(self, client: httpx.Client, item: Body) -> None:
        for _ in range(2000):
            if self.give_up.is_set():
                return
            endpoint = self.target()
            try:
                response = client.post(f"{endpoint}/v1/traces", content=item.data, headers=PROTO)
            except httpx.TransportError:
                self.transport_errors += 1
                time.sleep(0.05)
                continue
            if response.status_code == 200:
                self.accepted.append((endpoint, item))
                return
            self.statuses[response.status_code] = self.statuses.get(response.status_code, 0) + 1
            if response.status_code != 503:
                raise AssertionError(f"answered {response.status_code}: {response.text[:200]}")
            time.sleep(0.05)
        raise AssertionError("a body was never accepted")


def _read_topic(bootstrap: str, topic: str) -> tuple[dict[str, set[str]], int]:
    """Span ids per trace id of every record on ``topic``, and the record count."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    spans: dict[str, set[str]] = {}
    records = 0
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        idle = 0
        while idle < 3 and any(consumer.position(tp) < ends[tp] for tp in tps):
            polled = consumer.poll(timeout_ms=1000)
            idle = 0 if polled else idle + 1
            for batch in polled.values():
                for record in batch:
                    records += 1
                    for trace in decode_protobuf(record.value).batches:
                        spans.setdefault(trace.trace_id, set()).update(s.span_id for s in trace.spans)
    finally:
        consumer.close(autocommit=False)
    return spans, records


def _sum_metric(url: str, name: str) -> float:
    text = httpx.get(url, timeout=10).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


def _log_event(path: Path, event: str) -> dict[str, Any]:
    for line in reversed(path.read_text().splitlines()):
        if f'"{event}"' in line:
            return dict(json.loads(line))
    raise AssertionError(f"no {event} line in {path}")


def _log_events(path: Path, event: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if f'"{event}"' in line]


# --- vigil collector -------------------------------------------------------------------------


class TestCollector:
    """``vigil collector`` SIGTERMed while three HTTP senders and one gRPC sender post."""

    def test_every_accepted_span_is_in_kafka(self, tansu: TansuBroker, workdir: Path) -> None:
        """Spans of every request answered 200/OK are on the topic after exit; refusals are 503/UNAVAILABLE."""
        cluster = make_cluster(tansu, "sqlite://", workdir)
        collector = cluster.spawn("collector")
        rng = random.Random(83)
        runs = generate(2000, seed=84)
        chunks = [runs[i::4] for i in range(4)]
        try:
            collector.wait_ready()
            posters = [Poster(lambda: collector.otlp_endpoint, run_bodies(c, rng), pace_s=0.005) for c in chunks[:3]]
            grpc_target = f"127.0.0.1:{collector.otlp_grpc_port}"
            posters.append(Poster(lambda: "", run_bodies(chunks[3], rng), pace_s=0.005, grpc_target=grpc_target))
            for poster in posters:
                poster.start()
            wait_for(lambda: sum(len(p.accepted) for p in posters) >= 60, 30, "the senders", collector.log_tail)
            time.sleep(rng.uniform(0.1, 0.5))
            assert 0 == collector.stop(timeout_s=45)  # within its drain timeouts (HTTP 5+5 s, gRPC 2 s, flush 30 s)
        finally:
            for poster in posters:
                poster.give_up.set()
            if collector.alive():
                collector.kill()
        for poster in posters:
            poster.join(30)
        assert _log_event(collector.log_path, "collector_stopped")["flushed"] is True
        accepted: dict[str, set[str]] = {}
        for poster in posters:
            for _, item in poster.accepted:
                for trace_id, ids in item.spans.items():
                    accepted.setdefault(trace_id, set()).update(ids)
        assert any(len(p.accepted) < len(p.bodies) for p in posters), "everything was sent before SIGTERM"
        assert all(p.accepted for p in posters)
        on_topic, records = _read_topic(tansu.bootstrap, cluster.topic)
        missing = {t: ids - on_topic.get(t, set()) for t, ids in accepted.items() if ids - on_topic.get(t, set())}
        print("accepted traces", len(accepted), "records", records, "refusals",
              [(p.transport_errors, p.statuses) for p in posters])  # fmt: skip
        assert {} == missing
        assert all(set(p.statuses) <= {503} for p in posters[:3]), [p.statuses for p in posters]
        assert set(posters[3].statuses) <= {code.value[0] for code in RETRYABLE_GRPC}

    def test_flush_waits_for_a_slow_broker(self, workdir: Path) -> None:
        """Requests waiting for Kafka's acknowledgement while it does not answer are not cut by SIGTERM:
        once it answers again they are answered 200, and their records are on the topic."""
        from concurrent.futures import ThreadPoolExecutor

        from vigil.bench.broker import start_tansu

        with start_tansu(workdir) as broker:
            cluster = make_cluster(broker, "sqlite://", workdir, partitions=2)
            collector = cluster.spawn("collector", VIGIL_KAFKA_ACK_TIMEOUT_S="30")
            try:
                collector.wait_ready()
                runs = generate(60, seed=88)
                url = f"{collector.otlp_endpoint}/v1/traces"
                assert 200 == httpx.post(url, content=body(list(runs[0].spans)), headers=PROTO).status_code
                broker.pause()
                pool = ThreadPoolExecutor(len(runs) - 1)
                try:
                    post = lambda run: httpx.post(url, content=body(list(run.spans)), headers=PROTO, timeout=60)  # noqa: E731
                    answers = [pool.submit(post, run) for run in runs[1:]]
                    wait_for(lambda: collector.metric("vigil_kafka_buffer_bytes") > 0, 30, "records unacknowledged")
                    time.sleep(0.5)
                    assert not any(a.done() for a in answers)  # nothing answered before Kafka acknowledged
                    collector.process.send_signal(15)
                    time.sleep(1.5)  # the collector is stopping against a broker that does not answer
                    assert collector.alive()
                finally:
                    broker.resume()
                    pool.shutdown(wait=True)
                assert [200] * len(answers) == [a.result().status_code for a in answers]
                assert 0 == collector.stop(timeout_s=45)
            finally:
                if collector.alive():
                    collector.kill()
            assert _log_event(collector.log_path, "collector_stopped")["flushed"] is True
            on_topic, _ = _read_topic(broker.bootstrap, cluster.topic)
        assert {r.trace_id: {s.span_id.hex() for s in r.spans} for r in runs} == on_topic

    def test_shutdown_delay_keeps_receiving(self, tansu: TansuBroker, workdir: Path) -> None:
        """With VIGIL_SHUTDOWN_DELAY_S, after SIGTERM /readyz says 503 but a sidecar's last export is still taken."""
        cluster = make_cluster(tansu, "sqlite://", workdir)
        collector = cluster.spawn("collector", VIGIL_SHUTDOWN_DELAY_S="2")
        try:
            collector.wait_ready()
            collector.process.send_signal(15)
            ready = f"http://127.0.0.1:{collector.metrics_port}/readyz"
            wait_for(lambda: httpx.get(ready, timeout=5).status_code == 503, 10, "not ready", collector.log_tail)
            last = generate(1, seed=87)[0]
            response = httpx.post(f"{collector.otlp_endpoint}/v1/traces", content=body(list(last.spans)), headers=PROTO)
            assert 200 == response.status_code
            assert 0 == collector.stop(timeout_s=45)
        finally:
            if collector.alive():
                collector.kill()
        on_topic, _ = _read_topic(tansu.bootstrap, cluster.topic)
        assert {last.trace_id: {s.span_id.hex() for s in last.spans}} == on_topic


# --- vigil scorer ----------------------------------------------------------------------------


class TestScorer:
    """``vigil scorer`` SIGTERMed at random moments while runs flow, restarted each time."""

    def test_three_sigterms_exact_store_and_counters(self, tansu: TansuBroker, pg_url: str, workdir: Path) -> None:
        """Three graceful stops during 1,500 runs: store exact, each stop clean, every run and flag counted once."""
        cluster = make_cluster(tansu, pg_url, workdir)
        try:
            collector, scorer = cluster.pipeline("scorer-0")
            truth, sender = cluster.send(collector, 1500, seed=85, seconds=12)
            rng = random.Random(86)
            stopped: list[RoleProcess] = []
            for restart in range(1, 4):
                if restart > 1:  # stop only a scorer that is consuming, at a random moment after it started
                    cluster.consuming(scorer)
                time.sleep(rng.uniform(0.5, 2.0))
                assert 0 == scorer.stop()
                stopped.append(scorer)
                scorer = cluster.spawn("scorer", name=f"scorer-{restart}")
            sender.join()
            wait_runs(pg_url, truth, 90, scorer.log_tail)
            _, items = check_exact(pg_url, truth)
            cluster.consuming(scorer)
            events = [_log_events(p.log_path, "scorer_stopped") for p in stopped]
            assert all(len(e) == 1 and e[0]["clean"] is True for e in events), events
            counts = [stopped_counts(p) for p in stopped]
            assert all(runs_ > 0 for runs_, _ in counts), counts  # each stop interrupted real work

            def counted() -> bool:  # the last scorer's counters move just after its writes
                return sum(r for r, _ in counts) + scorer.metric("vigil_runs_total") >= len(truth)

            wait_for(counted, 30, "every run counted", scorer.log_tail)
            # Graceful stops commit what was written: nothing written is counted twice.
            assert len(truth) == sum(r for r, _ in counts) + scorer.metric("vigil_runs_total")
            assert len(items) == sum(f for _, f in counts) + scorer.metric("vigil_flagged_runs_total")
        finally:
            cluster.stop_all()


# --- vigil review ----------------------------------------------------------------------------


class TestReview:
    """``vigil review`` SIGTERMed while readers poll and a write is half uploaded."""

    def test_inflight_requests_finish(self, pg_url: str, workdir: Path) -> None:
        """The half-sent feedback completes after SIGTERM and is stored; no reader ever gets a 500."""
        (workdir / "empty.yaml").write_text("{}\n")
        env = {"VIGIL_DATABASE_URL": pg_url, "VIGIL_ADMIN_TOKEN": "s3cret", "VIGIL_CONFIG": str(workdir / "empty.yaml")}
        review = spawn_role("review", workdir, env)
        auth = {"Authorization": "Bearer s3cret"}
        statuses: list[int] = []
        errors: list[str] = []
        done = threading.Event()

        def read() -> None:
            with httpx.Client(timeout=10, headers=auth) as client:
                while not done.is_set():
                    try:
                        statuses.append(client.get(f"{review.api}/api/v1/runs").status_code)
                    except httpx.TransportError as exc:
                        errors.append(type(exc).__name__)
                        time.sleep(0.05)

        readers = [threading.Thread(target=read, daemon=True) for _ in range(3)]
        try:
            review.wait_ready()
            for reader in readers:
                reader.start()
            wait_for(lambda: len(statuses) >= 20, 30, "the readers", review.log_tail)
            payload = json.dumps({"trace_id": "ab" * 16, "score": "down", "feedback_id": "in-flight-1"}).encode()
            head = (
                f"POST /api/v1/feedback HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
            ).encode()
            with socket.create_connection(("127.0.0.1", review.http_port)) as writer:
                writer.sendall(head + payload[:10])
                time.sleep(0.3)  # the request is in flight: headers read, body pending
                review.process.send_signal(15)
                time.sleep(0.5)
                writer.sendall(payload[10:])
                writer.settimeout(10)
                answer = _recv_all(writer)
            assert 0 == review.stop()
        finally:
            done.set()
            if review.alive():
                review.kill()
        for reader in readers:
            reader.join(15)
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        assert set(statuses) == {200}, sorted(set(statuses))
        assert errors, "no reader saw the listener close: SIGTERM did not land mid-stream"
        engine = sa.create_engine(pg_url, poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                stored = conn.execute(sa.text("SELECT trace_id FROM feedback WHERE feedback_id = 'in-flight-1'")).all()
        finally:
            engine.dispose()
        assert [("ab" * 16,)] == [tuple(row) for row in stored]


# --- vigil run -------------------------------------------------------------------------------


class TestEmbedded:
    """``vigil run`` SIGTERMed while four senders post; restarted; the senders retry what was refused."""

    def test_sigterm_under_load_loses_and_duplicates_nothing(self, tmp_path: Path) -> None:
        """Accepted before exit = written or saved; after the restart the store equals the runs sent, counted once."""
        runs = generate(800, seed=81)
        truth = expected(runs)
        rng = random.Random(82)
        # Five runs whose root is sent only after the restart: in flight at SIGTERM for sure.
        held = runs[:5]
        chunks = [runs[5 + i :: 4] for i in range(4)]
        env = {
            "VIGIL_QUIET_PERIOD_S": "0.5",
            "VIGIL_SAMPLE_RATE": str(SAMPLE_RATE),
            "VIGIL_STATE_PATH": str(tmp_path / "vigil.state"),
        }
        endpoint = {"url": ""}
        posters = [Poster(lambda: endpoint["url"], run_bodies(chunk, rng), pace_s=0.01) for chunk in chunks]
        with start_vigil(tmp_path, env) as first:
            endpoint["url"] = first.otlp_endpoint
            children = [s for r in held for s in r.spans if s.parent_span_id]
            answer = httpx.post(f"{first.otlp_endpoint}/v1/traces", content=body(children), headers=PROTO)
            assert 200 == answer.status_code
            for poster in posters:
                poster.start()
            wait_for(lambda: sum(len(p.accepted) for p in posters) >= 40, 30, "the senders", first.log_tail)
            time.sleep(rng.uniform(0.1, 0.5))
            assert 0 == first.stop()
            first_url = first.otlp_endpoint
        stopped = _log_event(tmp_path / "vigil.log", "vigil_stopped")
        assert stopped["drained"] is True
        stored_at_exit = set(_sqlite_runs(tmp_path / "vigil.db"))
        saved = _saved_in_flight(tmp_path / "vigil.state", tmp_path / "state-copy")
        assert {r.trace_id for r in held} <= saved
        # Every trace of every request the first process answered 200: its run is written
        # (the run was whole) or saved in flight (its root had not been accepted yet).
        accepted_first = _spans_accepted(posters, first_url)
        root_ids = {r.trace_id: next(s for s in r.spans if not s.parent_span_id).span_id.hex() for r in runs}
        roots_first = {t for t, ids in accepted_first.items() if root_ids[t] in ids}
        assert roots_first <= stored_at_exit
        assert set(accepted_first) - roots_first <= saved
        assert not saved & stored_at_exit
        assert roots_first, "the first process accepted nothing whole: test too weak"
        assert any(len(p.accepted) < len(p.bodies) for p in posters), "everything was sent before SIGTERM"
        (tmp_path / "vigil.log").rename(tmp_path / "vigil-1.log")
        with start_vigil(tmp_path, env) as second:
            assert not (tmp_path / "vigil.state").exists()
            endpoint["url"] = second.otlp_endpoint
            roots = [s for r in held for s in r.spans if not s.parent_span_id]
            answer = httpx.post(f"{second.otlp_endpoint}/v1/traces", content=body(roots), headers=PROTO)
            assert 200 == answer.status_code
            for poster in posters:
                poster.join()
            url = f"sqlite:///{tmp_path / 'vigil.db'}"
            wait_runs(url, truth, 60, second.log_tail)
            _, items = check_exact(url, truth)

            def counted() -> bool:  # counters move just after the write: wait for the last batch
                return stopped["new_runs"] + _sum_metric(second.metrics_url, "vigil_runs_total") >= len(truth)

            wait_for(counted, 30, "every run counted", second.log_tail)
            second_runs = _sum_metric(second.metrics_url, "vigil_runs_total")
            second_flags = _sum_metric(second.metrics_url, "vigil_flagged_runs_total")
        refusals = [p.transport_errors + sum(p.statuses.values()) for p in posters]
        print(  # shown when an assertion below fails
            "accepted by the first process",
            len(accepted_first),
            "whole",
            len(roots_first),
            "saved",
            len(saved),
            "refusals",
            [(p.transport_errors, p.statuses) for p in posters],
            "counted",
            stopped,
            second_runs,
        )
        assert sum(refusals) > 0, "no request was refused: SIGTERM did not land mid-stream"
        assert all(set(p.statuses) <= {503} for p in posters), [p.statuses for p in posters]
        # Counted once across the restart: what the first process counted plus what the second did.
        assert len(truth) == stopped["new_runs"] + second_runs
        assert len(items) == stopped["new_flags"] + second_flags


def _recv_all(sock: socket.socket) -> bytes:
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def _sqlite_runs(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT trace_id, version FROM runs").fetchall())


def _saved_in_flight(state: Path, copy: Path) -> set[str]:
    """Trace ids of the runs the state file holds in flight (read from a copy: loading removes it)."""
    shutil.copy(state, copy)
    assembler = Assembler()
    load_state(copy, assembler)
    return {b.trace_id for b in assembler.export_state()[0]}


def _spans_accepted(posters: list[Poster], endpoint: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for poster in posters:
        for where, item in poster.accepted:
            if where == endpoint:
                for trace_id, ids in item.spans.items():
                    out.setdefault(trace_id, set()).update(ids)
    return out
