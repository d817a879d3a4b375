"""Run Vigil as subprocesses on free ports — for benches and end-to-end tests (ours and users').

``vigil run``:

:func:`start_vigil` starts it in a working directory with ``VIGIL_*`` overrides, waits for
``/readyz``, yields a :class:`VigilProcess`, and on exit sends SIGTERM and checks that the
process drained and exited 0.

The scale-out roles (``vigil collector`` / ``vigil scorer`` / ``vigil review``): :func:`spawn_role`
starts one role on free ports with ``VIGIL_*`` overrides and returns a :class:`RoleProcess` that
can wait for readiness, scrape its metrics, be stopped with SIGTERM or killed with SIGKILL. The
caller owns the process (use ``try/finally``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class VigilProcessError(RuntimeError):
    """``vigil run`` failed to start or to stop cleanly; the message ends with its log."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class VigilProcess:
    """A running ``vigil run`` subprocess and its ports."""

    process: subprocess.Popen[bytes]
    otlp_http_port: int
    http_port: int
    metrics_port: int
    workdir: Path
    otlp_grpc_port: int = 0

    @property
    def otlp_grpc_target(self) -> str:
        """OTLP/gRPC target (``host:port``)."""
        return f"127.0.0.1:{self.otlp_grpc_port}"

    @property
    def otlp_endpoint(self) -> str:
        """OTLP/HTTP base URL."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def api(self) -> str:
        """Base URL of the REST API."""
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """The Prometheus scrape URL."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log_tail(self) -> str:
        """The end of Vigil's log, for assertion messages."""
        path = self.workdir / "vigil.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; returns the exit code (kills and raises after ``timeout_s``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise VigilProcessError(f"vigil run did not stop within {timeout_s} s\n{self.log_tail()}") from None


@contextmanager
def start_vigil(
    workdir: Path, env: Mapping[str, str] | None = None, args: Sequence[str] = ()
) -> Iterator[VigilProcess]:
    """Start ``vigil run [args]`` in ``workdir`` (SQLite there) with ``env`` overrides; stop it on exit.

    ``args`` are extra ``vigil run`` arguments, e.g. ``("--demo", "--demo-rate", "5")``.

    Raises:
        VigilProcessError: it did not become ready, or did not exit 0 after SIGTERM.
    """
    ports = {name: free_port() for name in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")}
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}
    full.update({f"VIGIL_{name}_PORT": str(port) for name, port in ports.items()})
    full.update(
        {
            "VIGIL_OTLP_HTTP_HOST": "127.0.0.1",
            "VIGIL_HTTP_HOST": "127.0.0.1",
            "VIGIL_DATABASE_URL": f"sqlite:///{workdir / 'vigil.db'}",
        }
    )
    full.update(env or {})
    with (workdir / "vigil.log").open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "review_queue.app.cli", "run", *args], cwd=workdir, env=full, stdout=log, stderr=log
        )
        running = VigilProcess(
            process, ports["OTLP_HTTP"], ports["HTTP"], ports["METRICS"], workdir, ports["OTLP_GRPC"]
        )
        stopped = False
        try:
            _wait_ready(running)
            yield running
            code = running.stop()
            stopped = True
            if code != 0:
                raise VigilProcessError(f"vigil run exited {code} after SIGTERM\n{running.log_tail()}")
        finally:
            if not stopped and process.poll() is None:
                process.kill()
                process.wait()


def _wait_ready(vigil: VigilProcess) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if vigil.process.poll() is not None:
            raise VigilProcessError(f"vigil run exited {vigil.process.returncode} at start-up\n{vigil.log_tail()}")
        try:
            if httpx.get(f"{vigil.api}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise VigilProcessError(f"vigil run not ready within {READY_TIMEOUT_S} s\n{vigil.log_tail()}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (all its threads) has used so far (benchmarks)."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from the text of a ``/proc/<pid>/stat``."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RoleProcessError(RuntimeError):
    """A role failed to start or stop; the message ends with its log."""


@dataclass
class RoleProcess:
    """A running Vigil role and its ports."""

    role: str
    process: subprocess.Popen[bytes]
    log_path: Path
    metrics_port: int
    otlp_http_port: int
    otlp_grpc_port: int
    http_port: int

    @property
    def otlp_endpoint(self) -> str:
        """OTLP/HTTP base URL (collector)."""
        return f"http://127.0.0.1:{self.otlp_http_port}"

    @property
    def api(self) -> str:
        """REST API base URL (review)."""
        return f"http://127.0.0.1:{self.http_port}"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the role's log."""
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.process.poll() is None

    def wait_ready(self, timeout_s: float = 60.0, path: str = "/readyz") -> None:
        """Wait until ``path`` on the metrics port answers 200.

        Raises:
            RoleProcessError: the process exited or did not become ready in time.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise RoleProcessError(f"vigil {self.role} exited {self.process.returncode}\n{self.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RoleProcessError(f"vigil {self.role} not ready within {timeout_s} s\n{self.log_tail()}")

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Sum of the samples called ``name`` (matching ``labels``) on ``/metrics``."""
        text = httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += sample.value
        return total

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL and raise after ``timeout_s``)."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RoleProcessError(f"vigil {self.role} did not stop within {timeout_s} s\n{self.log_tail()}") from None


def spawn_role(role: str, workdir: Path, env: Mapping[str, str], *, name: str | None = None) -> RoleProcess:
    """Start ``vigil <role>`` in ``workdir`` on free ports with ``env`` (``VIGIL_*``) overrides.

    The log goes to ``workdir/<name or role>.log`` (appended, so restarts keep history).
    """
    ports = {key: free_port() for key in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")}
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}
    full.update({f"VIGIL_{key}_PORT": str(port) for key, port in ports.items()})
    full.update({"VIGIL_OTLP_HTTP_HOST": "127.0.0.1", "VIGIL_HTTP_HOST": "127.0.0.1"})
    full.update(env)
    log_path = workdir / f"{name or role}.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "review_queue.app.cli", role], cwd=workdir, env=full, stdout=log, stderr=log
        )
    return RoleProcess(role, process, log_path, ports["METRICS"], ports["OTLP_HTTP"], ports["OTLP_GRPC"], ports["HTTP"])
