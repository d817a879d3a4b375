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
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import httpx
from prometheus_client.parser import text_string_to_metric_families

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0


class VigilProcessError(RuntimeError):
    """A Vigil subprocess failed to start or to stop cleanly; the message ends with its log."""


class RoleProcessError(VigilProcessError):
    """A role (``vigil collector`` / ``scorer`` / ``review``) failed to start or stop."""


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
_BELOW_EPHEMERAL = 10_000
"""How many ports under the kernel's ephemeral range :func:`free_port` picks from."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (``ip_local_port_range``; Linux's default where unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, for a child process to bind a moment later.

    Picked at random below the kernel's ephemeral range, so that no process's outgoing connection
    (to Kafka, PostgreSQL, another child) can be given it in that moment, and never handed out twice
    by this process (two children of one test cannot be told the same port). Falls back to a port
    the kernel picks when none is found.
    """
    high = _ephemeral_low()
    low = max(1024, high - _BELOW_EPHEMERAL)
    pick = random.SystemRandom()
    with _HANDED_OUT_LOCK:
        for _ in range(100):
            port = pick.randrange(low, high)
            if port in _HANDED_OUT:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class _Subprocess:
    """What ``vigil run`` and a role share: the process, its log, its ports and how to stop it."""

    process: subprocess.Popen[bytes]
    log_path: Path
    otlp_http_port: int
    otlp_grpc_port: int
    http_port: int
    metrics_port: int

    name: ClassVar[str] = "vigil"
    error: ClassVar[type[VigilProcessError]] = VigilProcessError
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S
    ready_timeout_s: ClassVar[float] = READY_TIMEOUT_S

    @property
    def title(self) -> str:
        """``vigil <command>``, for messages."""
        return f"vigil {self.name}"

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

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the process's log, for assertion messages."""
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        """Sum of the samples called ``name`` (matching ``labels``) on ``/metrics``."""
        text = httpx.get(self.metrics_url, timeout=10).text
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += sample.value
        return total

    def alive(self) -> bool:
        """Whether the process is running."""
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.alive():
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self, timeout_s: float | None = None) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL and raise after ``timeout_s``)."""
        timeout_s = self.stop_timeout_s if timeout_s is None else timeout_s
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise self.error(f"{self.title} did not stop within {timeout_s} s\n{self.log_tail()}") from None

    def wait_ready(self, timeout_s: float | None = None, path: str = "/readyz", port: int | None = None) -> None:
        """Wait until ``path`` on ``port`` (default: the metrics port, where a role's probes are) answers 200.

        Raises:
            VigilProcessError: the process exited or did not become ready in time.
        """
        timeout_s = self.ready_timeout_s if timeout_s is None else timeout_s
        url = f"http://127.0.0.1:{port or self.metrics_port}{path}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                raise self.error(f"{self.title} exited {self.process.returncode} at start-up\n{self.log_tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise self.error(f"{self.title} not ready within {timeout_s} s\n{self.log_tail()}")


def _spawn(
    command: Sequence[str], workdir: Path, log_path: Path, env: Mapping[str, str]
) -> tuple[subprocess.Popen[bytes], dict[str, int]]:
    """Start ``command`` in ``workdir`` on free ports (``VIGIL_*_PORT``) with ``env`` overrides, logging
    to ``log_path`` (appended); returns the process and its ports."""
    ports = {name: free_port() for name in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")}
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}
    full.update({f"VIGIL_{name}_PORT": str(port) for name, port in ports.items()})
    full.update({"VIGIL_OTLP_HTTP_HOST": "127.0.0.1", "VIGIL_HTTP_HOST": "127.0.0.1"})
    full.update(env)
    with log_path.open("ab") as log:
        process = subprocess.Popen(list(command), cwd=workdir, env=full, stdout=log, stderr=log)
    return process, ports


@dataclass(frozen=True)
class VigilProcess(_Subprocess):
    """A running ``vigil run`` subprocess and its ports."""

    name: ClassVar[str] = "run"

    @property
    def workdir(self) -> Path:
        """Its working directory (the SQLite database and ``vigil.log``)."""
        return self.log_path.parent


def spawn_vigil(
    workdir: Path,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = (sys.executable, "-m", "vigil.cli"),
) -> VigilProcess:
    """Start ``vigil run [args]`` in ``workdir`` (SQLite there, ``vigil.log`` rewritten) on free ports with
    ``env`` overrides and return at once; the caller owns the process (:func:`start_vigil` waits and stops)."""
    log_path = workdir / "vigil.log"
    log_path.unlink(missing_ok=True)
    env = {"VIGIL_DATABASE_URL": f"sqlite:///{workdir / 'vigil.db'}", **(env or {})}
    process, ports = _spawn([*command, "run", *args], workdir, log_path, env)
    return VigilProcess(process, log_path, ports["OTLP_HTTP"], ports["OTLP_GRPC"], ports["HTTP"], ports["METRICS"])


@contextmanager
def start_vigil(
    workdir: Path,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = (sys.executable, "-m", "vigil.cli"),
) -> Iterator[VigilProcess]:
    """Start ``vigil run [args]`` in ``workdir`` (SQLite there) with ``env`` overrides; stop it on exit.

    ``args`` are extra ``vigil run`` arguments, e.g. ``("--demo", "--demo-rate", "5")``; ``command``
    is the ``vigil`` to run (default: this interpreter's; e.g. an installed ``.../bin/vigil``).

    Raises:
        VigilProcessError: it did not become ready, or did not exit 0 after SIGTERM.
    """
    running = spawn_vigil(workdir, env, args, command=command)
    stopped = False
    try:
        running.wait_ready(port=running.http_port)
        yield running
        code = running.stop()
        stopped = True
        if code != 0:
            raise VigilProcessError(f"vigil run exited {code} after SIGTERM\n{running.log_tail()}")
    finally:
        if not stopped:
            running.kill()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process (all its threads) has used so far (benchmarks)."""
    return stat_cpu_seconds(Path(f"/proc/{pid}/stat").read_text())


def process_name(pid: int) -> str:
    """The system's name of a process (``/proc/<pid>/comm``: its main thread's)."""
    return Path(f"/proc/{pid}/comm").read_text().strip()


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) the threads of a process have used so far, summed by each thread's
    system name (``/proc/<pid>/task/<tid>/comm``; Vigil names its own, :func:`collector.lifecycle.name_os_thread`);
    the main thread and the threads nobody named carry the process's name. Threads that ended are absent."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            seconds = stat_cpu_seconds((task / "stat").read_text())
        except OSError:  # the thread ended meanwhile
            continue
        out[name] = out.get(name, 0.0) + seconds
    return out


def status_mib(pid: int, key: str) -> float:
    """A memory line of ``/proc/<pid>/status`` (``VmHWM``: peak RSS, ``VmRSS``: resident now) in MiB; 0 if absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def stat_cpu_seconds(stat: str) -> float:
    """User + system CPU seconds from the text of a ``/proc/<pid>/stat``."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class RoleProcess(_Subprocess):
    """A running Vigil role and its ports."""

    role: str = "collector"
    error: ClassVar[type[VigilProcessError]] = RoleProcessError
    stop_timeout_s: ClassVar[float] = 60.0
    ready_timeout_s: ClassVar[float] = 60.0

    @property
    def title(self) -> str:
        """``vigil <role>``, for messages."""
        return f"vigil {self.role}"


def spawn_role(role: str, workdir: Path, env: Mapping[str, str], *, name: str | None = None) -> RoleProcess:
    """Start ``vigil <role>`` in ``workdir`` on free ports with ``env`` (``VIGIL_*``) overrides.

    The log goes to ``workdir/<name or role>.log`` (appended, so restarts keep history).
    """
    log_path = workdir / f"{name or role}.log"
    process, ports = _spawn([sys.executable, "-m", "vigil.cli", role], workdir, log_path, env)
    return RoleProcess(process, log_path, ports["OTLP_HTTP"], ports["OTLP_GRPC"], ports["HTTP"], ports["METRICS"], role)
