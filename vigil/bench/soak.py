"""``vigil soak``: a long steady-load run of a real ``vigil run`` that shows whether memory stays flat.

A ``vigil run`` subprocess (SQLite in a temporary folder) receives synthetic agent runs
(:mod:`vigil.bench.synth`, ~14 spans each) at a fixed rate over OTLP/HTTP for the given
duration, while its resident memory (``VmRSS``) is sampled. Memory is "flat" when the median
RSS of the last quarter of the run exceeds the median of the third quarter by less than the
tolerance: the first half is warm-up (SQLite page cache, the late-span cache filling to its
bound of ``VIGIL_CLOSED_RUN_CACHE`` runs, interned strings), so run long enough for the cache
to fill within the first half (5,000 runs: 50 s at 100 runs/s). Meant to run on demand for tens of minutes (not in CI):

    vigil soak --minutes 30 --rate 200
    vigil soak --minutes 10 --spans-per-s 1000 --content-bytes 1024   # content capture on: 1–2 KB per LLM span

Every span sent is accounted for at the end: accepted runs must all be stored.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from rich.console import Console
from rich.live import Live
from rich.table import Table

from vigil.bench.synth import body, make_run
from vigil.process import start_vigil

__all__ = ["SoakResult", "rss_mib", "soak"]


@dataclass
class SoakResult:
    """What a soak run measured.

    Attributes:
        samples: ``(seconds since start, RSS MiB)`` pairs.
        sent_runs / accepted_runs / stored_runs: runs offered, answered 200, found in the store.
        refused: export requests answered 503.
        growth: last-quarter median RSS over third-quarter median, minus 1.
        sent_spans: spans offered.
    """

    samples: list[tuple[float, float]] = field(default_factory=list)
    sent_runs: int = 0
    accepted_runs: int = 0
    stored_runs: int = 0
    refused: int = 0
    growth: float = 0.0
    sent_spans: int = 0

    def rss(self) -> tuple[float, float, float, float]:
        """``(start, median, peak, end)`` RSS in MiB (zeros without samples)."""
        values = [rss for _, rss in self.samples]
        if not values:
            return 0.0, 0.0, 0.0, 0.0
        return values[0], statistics.median(values), max(values), values[-1]

    def flat(self, tolerance: float) -> bool:
        """True when memory grew less than ``tolerance`` and every accepted run was stored."""
        return self.growth < tolerance and self.accepted_runs == self.stored_runs


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _growth(samples: list[tuple[float, float]]) -> float:
    n = len(samples)
    if n < 8:
        return 0.0
    third = statistics.median(rss for _, rss in samples[n // 2 : 3 * n // 4])
    last = statistics.median(rss for _, rss in samples[3 * n // 4 :])
    return last / third - 1.0


def soak(
    seconds: float,
    runs_per_s: float,
    *,
    sample_every_s: float = 5.0,
    console: Console | None = None,
    seed: int = 11,
    content_bytes: int = 0,
    env: dict[str, str] | None = None,
) -> SoakResult:
    """Run the soak and return what it measured (see the module docstring).

    Args:
        seconds: how long to send.
        runs_per_s: runs sent per second (16.6 spans each on average).
        sample_every_s: seconds between RSS samples.
        console: where the live table goes.
        seed: of the synthetic runs.
        content_bytes: captured message content per LLM span, ``content_bytes`` to twice that (0: none).
        env: more ``VIGIL_*`` settings for the ``vigil run`` under test.
    """
    result = SoakResult()
    stop = threading.Event()
    rng = random.Random(seed)
    with (
        tempfile.TemporaryDirectory(prefix="vigil-soak-") as tmp,
        start_vigil(Path(tmp), {"VIGIL_QUIET_PERIOD_S": "1", "VIGIL_LOG_LEVEL": "warning", **(env or {})}) as vigil,
    ):
        url = f"{vigil.otlp_endpoint}/v1/traces"

        def send() -> None:
            per_body = max(1, int(runs_per_s / 10))
            interval = per_body / runs_per_s
            next_at = time.monotonic()
            with httpx.Client(timeout=30) as client:
                while not stop.is_set():
                    runs = [make_run(rng, content_bytes=content_bytes) for _ in range(per_body)]
                    spans = [s for run in runs for s in run.spans]
                    r = client.post(url, content=body(spans), headers={"Content-Type": "application/x-protobuf"})
                    result.sent_runs += per_body
                    result.sent_spans += len(spans)
                    if r.status_code == 200:
                        result.accepted_runs += per_body
                    else:
                        result.refused += 1
                    next_at += interval
                    stop.wait(max(0.0, next_at - time.monotonic()))

        sender = threading.Thread(target=send, name="vigil-soak-sender", daemon=True)
        started = time.monotonic()
        sender.start()
        table = Table("elapsed s", "RSS MiB", "runs sent", "accepted")
        with Live(table, console=console or Console(stderr=True), transient=False, auto_refresh=False) as live:
            while time.monotonic() - started < seconds:
                time.sleep(min(sample_every_s, max(0.0, seconds - (time.monotonic() - started))))
                elapsed = time.monotonic() - started
                rss = rss_mib(vigil.process.pid)
                result.samples.append((elapsed, rss))
                table.add_row(f"{elapsed:.0f}", f"{rss:.1f}", str(result.sent_runs), str(result.accepted_runs))
                live.refresh()
        stop.set()
        sender.join()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with sqlite3.connect(Path(tmp) / "vigil.db") as db:
                result.stored_runs = db.execute("SELECT count(*) FROM runs").fetchone()[0]
            if result.stored_runs >= result.accepted_runs:
                break
            time.sleep(0.5)
    result.growth = _growth(result.samples)
    return result
