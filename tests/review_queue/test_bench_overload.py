"""Tests for vigil.bench.overload: the wrk-driven overload check of ``vigil bench --overload``."""

from __future__ import annotations

import pytest

from collector.otlp import decode_protobuf
from vigil.bench import overload as bench_overload
from vigil.bench.overload import (
    MARKER,
    WrkMissingError,
    group_check,
    overload_run,
    parse_wrk,
    template_bodies,
)

WRK_LINE = (
    "Running 3s test\nVIGIL_OVERLOAD duration_us=3000000 requests=90 bytes=100 c200=60 c503=30 c503_retry_after=30 "
    "cother=0 connect=0 read=1 write=0 status=30 timeout=2 p50_us=1500 p99_us=90000\n"
)


def test_template_bodies_mark_every_trace_id() -> None:
    """Every trace id of a template starts with the marker; bodies hold whole runs of ~512 spans."""
    (data, spans, runs), *_ = template_bodies(2)
    batches = decode_protobuf(data).batches
    assert runs == len(batches)
    assert spans == sum(len(b.spans) for b in batches) >= 512
    assert all(b.trace_id.startswith(MARKER.hex()) for b in batches)


def test_parse_wrk() -> None:
    """The summary line of overload.lua is parsed; a missing one is an error."""
    summary = parse_wrk(WRK_LINE)
    assert (3.0, 90, 60, 30, 30, 1, 2) == (
        summary.seconds,
        summary.requests,
        summary.c200,
        summary.c503,
        summary.c503_retry_after,
        summary.socket_errors,
        summary.timeouts,
    )
    with pytest.raises(RuntimeError, match="no summary"):
        parse_wrk("unable to connect")


def test_group_check() -> None:
    """Trace ids grouped by their 16-hex request prefix: complete and partial groups."""
    ids = ["a" * 16 + f"{i:016x}" for i in range(3)] + ["b" * 16 + f"{i:016x}" for i in range(2)]
    assert (1, 1) == group_check(ids, 3)


def test_missing_wrk_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without wrk the bench names the package to install."""
    monkeypatch.setattr(bench_overload.shutil, "which", lambda _: None)
    with pytest.raises(WrkMissingError, match="apt-get install wrk"):
        bench_overload.wrk_binary()


@pytest.mark.integration
def test_wrk_overload_of_vigil_run() -> None:
    """wrk against a real vigil run with a tiny stream: 200s and 503s only, every 503 with
    Retry-After, and exactly the runs of the requests answered 200 stored, request by request."""
    result = overload_run(3, 16, 2, 768, extra_env={"VIGIL_QUEUE_MAX_BATCHES": "64"})
    print(result.wrk, result.metrics)
    assert [] == result.failures()
    assert result.wrk.c503 > 0
    assert result.server_200 > 0
    assert result.stored == result.server_200 * result.runs_per_body
