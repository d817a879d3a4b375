"""``vigil collector`` answers 200 only once the data is safe: kill -9 loses nothing that was answered 200.

A real ``vigil collector`` subprocess on the real tansu broker, loaded over loopback by concurrent
senders at a steady rate. The collector is killed with SIGKILL twice mid-stream: once with the
broker answering, once while the broker is frozen (SIGSTOP: a slow Kafka, the moment a collector
that answers before Kafka's acknowledgement holds the most answered-but-unacknowledged records).
Then the topic is read back: every run whose spans were all answered 200 (counted on the sender
side) must be on it, keyed by its trace id.
"""

from __future__ import annotations

import random
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from vigil.bench.broker import TansuBroker, topic_keys
from vigil.bench.synth import body, make_run
from vigil.process import RoleProcess, spawn_role

pytestmark = pytest.mark.integration

SENDERS = 6
RUNS_PER_BODY = 5
BODY_INTERVAL_S = 0.1  # 6 senders, 10 bodies/s each, 5 runs a body: ~300 runs/s (~5,000 spans/s)


class Senders:
    """Concurrent senders posting runs at a steady rate to whichever collector is current.

    A body answered 200 adds its runs to :attr:`acked`; a 503 is retried after its Retry-After
    (capped, as exporters do); a body whose collector died before answering is given up (its runs
    are not in the ground truth, as an exporter's would be retried to the next collector).
    """

    def __init__(self, seed: int) -> None:
        self.endpoint = ""  # empty while no collector is up: the senders wait
        self.acked: set[str] = set()
        self.unanswered = 0
        self.refused = 0
        self.error: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(random.Random(seed + i),), daemon=True) for i in range(SENDERS)
        ]

    def start(self, endpoint: str) -> None:
        """Start every sender against ``endpoint``."""
        self.endpoint = endpoint
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop sending; re-raise a sender's failure."""
        self._stop.set()
        for thread in self._threads:
            thread.join(60)
        assert not any(t.is_alive() for t in self._threads), "a sender did not stop"
        if self.error is not None:
            raise self.error

    def _run(self, rng: random.Random) -> None:
        try:
            with httpx.Client(timeout=30, headers={"Content-Type": "application/x-protobuf"}) as client:
                while not self._stop.is_set():
                    started = time.monotonic()
                    if self.endpoint:
                        runs = [make_run(rng) for _ in range(RUNS_PER_BODY)]
                        if self._post(client, body([s for run in runs for s in run.spans])):
                            with self._lock:
                                self.acked.update(run.trace_id for run in runs)
                    time.sleep(max(0.0, started + BODY_INTERVAL_S - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - re-raised by stop() in the test thread
            self.error = exc

    def _post(self, client: httpx.Client, data: bytes) -> bool:
        for _ in range(20):
            try:
                response = client.post(f"{self.endpoint}/v1/traces", content=data)
            except httpx.TransportError:  # the collector was killed while holding this request
                with self._lock:
                    self.unanswered += 1
                return False
            if response.status_code == 200:
                return True
            assert 503 == response.status_code, response.text
            with self._lock:
                self.refused += 1
            time.sleep(min(0.5, float(response.headers.get("Retry-After", "1"))))
        return False


@contextmanager
def _collector(workdir: Path, env: dict[str, str], name: str) -> Iterator[RoleProcess]:
    process = spawn_role("collector", workdir, env, name=name)
    try:
        process.wait_ready()
        yield process
    finally:
        process.kill()


def _fresh_topic(tansu: TansuBroker, workdir: Path) -> tuple[str, dict[str, str]]:
    """A new 4-partition topic and the collector environment that publishes to it (no rules file)."""
    (workdir / "empty.yaml").write_text("{}\n")
    topic = f"otlp_spans_{secrets.token_hex(4)}"
    tansu.create_topic(topic, 4)
    env = {
        "VIGIL_KAFKA_BOOTSTRAP": tansu.bootstrap,
        "VIGIL_KAFKA_TOPIC": topic,
        "VIGIL_CONFIG": str(workdir / "empty.yaml"),
        "VIGIL_LOG_LEVEL": "info",
    }
    return topic, env


class TestKillNine:
    """SIGKILL of the collector mid-stream: every run answered 200 is on the topic."""

    def test_every_acknowledged_run_is_on_the_topic(self, tansu: TansuBroker, workdir: Path) -> None:
        """Two kills (broker answering; broker frozen): the topic holds every run the senders saw answered 200."""
        topic, env = _fresh_topic(tansu, workdir)
        senders = Senders(seed=20)
        frozen_acked = 0
        try:
            with _collector(workdir, env, "collector-1") as first:
                senders.start(first.otlp_endpoint)
                time.sleep(3.0)  # steady stream, then kill -9 with requests in flight
                first.kill()
                senders.endpoint = ""
            killed_acked = len(senders.acked)
            with _collector(workdir, env, "collector-2") as second:
                senders.endpoint = second.otlp_endpoint
                time.sleep(2.0)
                tansu.pause()  # Kafka stops answering; the collector keeps receiving
                try:
                    before = len(senders.acked)
                    time.sleep(1.5)
                    frozen_acked = len(senders.acked) - before
                    second.kill()
                finally:
                    tansu.resume()
        finally:
            senders.stop()
        on_topic = set(topic_keys(tansu.bootstrap, topic, timeout_s=120))
        missing = senders.acked - on_topic
        summary = (
            f"{len(missing)} of {len(senders.acked)} runs answered 200 are not on the topic "
            f"(answered 200 before the first kill: {killed_acked}; while the broker was frozen: {frozen_acked}; "
            f"requests unanswered (collector killed or down): {senders.unanswered}; 503s retried: {senders.refused})"
        )
        assert killed_acked > 100, summary  # the stream was running at the first kill
        assert senders.unanswered >= 1, summary  # requests were in flight at the kills
        assert set() == missing, summary


class TestSpoolWhileKafkaIsDown:
    """``VIGIL_KAFKA_SPOOL=true``: requests Kafka does not take are spooled (200), kept across a kill -9, drained."""

    def test_spooled_runs_survive_kill_nine_and_reach_the_topic(self, tansu: TansuBroker, workdir: Path) -> None:
        """The broker freezes: requests are spooled and answered 200; the collector is killed while it
        holds them; a new one on the same spool drains them once the broker answers: every run answered
        200 is on the topic."""
        topic, env = _fresh_topic(tansu, workdir)
        env |= {
            "VIGIL_KAFKA_SPOOL": "true",
            "VIGIL_SPOOL_PATH": str(workdir / "spool"),
            "VIGIL_KAFKA_ACK_TIMEOUT_S": "1",
        }
        senders = Senders(seed=40)
        try:
            with _collector(workdir, env, "spool-1") as first:
                senders.start(first.otlp_endpoint)
                time.sleep(2.0)
                tansu.pause()
                try:
                    before = len(senders.acked)
                    time.sleep(4.0)
                    frozen_acked = len(senders.acked) - before
                    spooling = first.metric("vigil_kafka_spooling")
                    first.kill()
                    senders.endpoint = ""
                finally:
                    tansu.resume()
            with _collector(workdir, env, "spool-2") as second:
                senders.endpoint = second.otlp_endpoint
                time.sleep(2.0)
                senders.stop()

                def drained() -> bool:
                    return second.metric("vigil_spool_records") == 0 and second.metric("vigil_kafka_spooling") == 0

                deadline = time.monotonic() + 60
                while not drained():
                    assert time.monotonic() < deadline, second.log_tail()
                    time.sleep(0.5)
                drained_bodies = second.metric("vigil_kafka_spool_drained_total")
        finally:
            tansu.resume()
            senders.stop()
        on_topic = set(topic_keys(tansu.bootstrap, topic, timeout_s=120))
        missing = senders.acked - on_topic
        summary = (
            f"{len(missing)} of {len(senders.acked)} runs answered 200 are not on the topic "
            f"(answered 200 while the broker was frozen: {frozen_acked}; bodies drained after the restart: "
            f"{drained_bodies}; unanswered: {senders.unanswered})"
        )
        assert 1 == spooling, summary
        assert frozen_acked > 0, summary  # the spool answered while Kafka did not
        assert drained_bodies > 0, summary  # the new collector drained what the killed one had spooled
        assert set() == missing, summary
