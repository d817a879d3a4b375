"""``vigil run`` killed with SIGKILL mid-stream loses nothing it answered 200 (issue 15, the spool).

Real subprocess, real sockets: HTTP and gRPC senders post bodies of whole runs (one run in four
split over two requests, children first) at a steady rate, the process is SIGKILLed while they
post, and a new process is started on the same working directory (same SQLite file, same spool).
Every run whose spans were all answered 200/OK must be stored exactly once, with every span; the
same when the last spool record was torn by hand after the kill (a crash in the middle of a write).
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

import pytest

from vigil.process import RoleProcess, spawn_role

from .scaleout import generate, wait_for
from .test_shutdown import Body, Poster, run_bodies

pytestmark = pytest.mark.integration


def _spawn(workdir: Path, **env: str) -> RoleProcess:
    base = {
        "VIGIL_DATABASE_URL": f"sqlite:///{workdir / 'vigil.db'}",
        "VIGIL_QUIET_PERIOD_S": "1.0",
        "VIGIL_SAMPLE_RATE": "0",
    }
    process = spawn_role("run", workdir, {**base, **env}, name="vigil")
    process.wait_ready()
    return process


def _stored(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT trace_id, span_count FROM runs").fetchall()
    return dict(rows)


def _fully_accepted(posters: list[Poster], bodies: list[Body]) -> dict[str, int]:
    """Span counts of the runs every body of which was answered 200 / OK."""
    offered: dict[str, set[str]] = {}
    for item in bodies:
        for trace_id, ids in item.spans.items():
            offered.setdefault(trace_id, set()).update(ids)
    accepted: dict[str, set[str]] = {}
    for poster in posters:
        for _, item in poster.accepted:
            for trace_id, ids in item.spans.items():
                accepted.setdefault(trace_id, set()).update(ids)
    return {t: len(ids) for t, ids in accepted.items() if ids == offered[t]}


def _kill_mid_stream(workdir: Path, seed: int) -> tuple[dict[str, int], list[Poster]]:
    """Post at a steady rate over HTTP (×2) and gRPC, SIGKILL after a while; return the fully accepted runs."""
    rng = random.Random(seed)
    runs = generate(1200, seed=seed)
    vigil = _spawn(workdir)
    chunks = [runs[i::3] for i in range(3)]
    all_bodies: list[Body] = []
    posters: list[Poster] = []
    try:
        for i, chunk in enumerate(chunks):
            items = run_bodies(chunk, rng, per_body=4)
            all_bodies.extend(items)
            grpc_target = f"127.0.0.1:{vigil.otlp_grpc_port}" if i == 2 else None
            posters.append(Poster(lambda: vigil.otlp_endpoint, items, pace_s=0.01, grpc_target=grpc_target))
        for poster in posters:
            poster.start()
        wait_for(lambda: sum(len(p.accepted) for p in posters) >= 120, 60, "the senders", vigil.log_tail)
        time.sleep(rng.uniform(0.0, 0.5))
        vigil.kill()  # SIGKILL: no drain, no state file
    finally:
        for poster in posters:
            poster.give_up.set()
        if vigil.alive():
            vigil.kill()
    for poster in posters:
        poster._thread.join(30)
    assert not (workdir / "vigil.state").exists()
    accepted = _fully_accepted(posters, all_bodies)
    assert sum(len(p.accepted) for p in posters) < len(all_bodies), "everything was sent before the kill"
    return accepted, posters


def _restart_and_check(workdir: Path, accepted: dict[str, int]) -> RoleProcess:
    db = workdir / "vigil.db"
    before = _stored(db)
    vigil = _spawn(workdir)
    try:
        wait_for(lambda: set(accepted) <= set(_stored(db)), 60, "the replayed runs", vigil.log_tail)
        time.sleep(1.5)  # anything replayed twice would be written by now
        stored = _stored(db)
        missing = set(accepted) - set(stored)
        print(f"accepted runs {len(accepted)}, stored before the restart {len(before)}, after {len(stored)}")
        assert set() == missing
        assert accepted == {t: stored[t] for t in accepted}  # every span
        assert len(accepted) > len(set(before) & set(accepted)), "the kill lost nothing: it came too late"
        assert vigil.metric("vigil_spool_replayed_records_total") > 0
    except BaseException:
        vigil.kill()
        raise
    return vigil


def _segments(workdir: Path) -> list[Path]:
    return sorted((workdir / "vigil.spool").glob("*.seg"))


class TestSigkill:
    """SIGKILL, restart, every fully accepted run stored exactly once."""

    def test_every_accepted_run_survives_sigkill(self, workdir: Path) -> None:
        """Default policy (batch): after the restart the store holds every run answered 200, whole."""
        accepted, _ = _kill_mid_stream(workdir, seed=151)
        assert _segments(workdir), "the killed process left no spool"
        vigil = _restart_and_check(workdir, accepted)
        assert 0 == vigil.metric("vigil_spool_corrupt_tails_total")
        assert 0 == vigil.stop()
        assert [] == _segments(workdir)  # a clean stop leaves nothing to replay

    def test_a_torn_last_record_is_truncated(self, workdir: Path) -> None:
        """A record cut short by hand after the kill is dropped and counted; the rest is replayed."""
        accepted, _ = _kill_mid_stream(workdir, seed=152)
        last = _segments(workdir)[-1]
        size = last.stat().st_size
        with last.open("ab") as f:  # a header promising 64 KiB, then the first 100 bytes of them
            f.write((65536).to_bytes(4, "big") + (12345).to_bytes(4, "big") + b"p" + b"\x0a" * 99)
        vigil = _restart_and_check(workdir, accepted)
        assert 1 == vigil.metric("vigil_spool_corrupt_tails_total")
        assert not last.exists() or size == last.stat().st_size  # truncated at the last good record (or replayed)
        assert 0 == vigil.stop()
        assert [] == _segments(workdir)
