"""Fuzzing the whole run path with hostile traces: decode → assemble → normalise → score →
decide → store (SQLite and PostgreSQL) → REST API read → metrics.

Properties: nothing raises; no stage reports an error (a normaliser, scorer or rule that
crashes is isolated in production, but on well-formed-enough input it is a bug); every
trace the decoder accepted ends as exactly one stored run, readable through the store,
with a snapshot (every run is flagged: sample rate 1). Parent cycles, duplicate span ids,
zero and reversed timestamps, NaN numbers, invalid UTF-8, huge strings and deep nesting
are all in the mix (``tests.support.fuzzing``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.otlp import decode_protobuf
from review_queue.api import create_api_app
from review_queue.store import SqlStore, upgrade_database
from scorers.assemble import Assembler
from scorers.metrics import RunMetrics
from scorers.pipeline import Pipeline
from scorers.registry import build_chain
from scorers.rules import compile_rules
from tests.support.fuzzing import otlp_requests
from tests.support.review_queue import postgres_scratch_url, postgres_unreachable
from vigil.settings import Settings

EXAMPLES = int(os.environ.get("VIGIL_FUZZ_EXAMPLES", "100"))
POSTGRES_URL = os.environ.get("VIGIL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


class _Path:
    """The run path of ``vigil run`` without threads, on one SQLite file."""

    def __init__(self, url: str) -> None:
        self.registry = CollectorRegistry()
        self.metrics = RunMetrics(self.registry)
        chain = build_chain(Settings.load({}).scorers)
        self.errors: list[tuple[str, str, str]] = []
        rules = compile_rules(None, [name for name, _ in chain])
        self.pipeline = Pipeline(
            chain, rules, 1.0, on_error=lambda stage, name, exc: self.errors.append((stage, name, repr(exc)))
        )
        upgrade_database(url)
        self.store = SqlStore(url)
        self.api = TestClient(create_api_app(self.store, admin_token=None))
        self.now = 0.0

    def run(self, request: ExportTraceServiceRequest) -> None:
        result = decode_protobuf(request.SerializeToString())
        self.now += 1000.0
        assembler = Assembler(quiet_period_s=2.0, clock=lambda: self.now, observer=self.metrics)
        for batch in result.batches:
            assert [] == assembler.add(batch)
        closed = assembler.drain()
        assert sorted(b.trace_id for b in result.batches) == sorted(c.trace_id for c in closed)
        scored = [self.pipeline.process(c) for c in closed]
        assert [] == self.errors
        self.store.write(scored)
        for s in scored:
            self.metrics.observe_run(s)
            self.metrics.observe_flag(s)
            response = self.api.get(f"/api/v1/runs/{s.run.trace_id}")
            assert 200 == response.status_code, response.text
            row = json.loads(response.text)
            assert row["trace_id"] == s.run.trace_id
            assert row["flag"] is not None
            assert "random_sample" in row["flag"]["reasons"]
        queue = self.api.get("/api/v1/queue", params={"limit": 200})
        assert 200 == queue.status_code, queue.text


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def path(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Path]:
    """The run path on a SQLite file or on a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        db: Path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
        p = _Path(f"sqlite:///{db}")
        yield p
        p.store.close()
        return
    reason = postgres_unreachable(POSTGRES_URL)
    if reason is not None:
        pytest.skip(f"!!! PostgreSQL at {POSTGRES_URL} is unreachable ({reason}); PostgreSQL fuzzing SKIPPED")
    with postgres_scratch_url(POSTGRES_URL) as url:
        p = _Path(url)
        yield p
        p.store.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(otlp_requests())
def test_hostile_traces_are_scored_and_stored(path: _Path, request: ExportTraceServiceRequest) -> None:
    """Every accepted trace becomes one stored, readable, flagged run; no stage fails."""
    path.run(request)


def test_out_of_range_integers_are_clamped_not_crashing(path: _Path) -> None:
    """Found by the fuzzer: unsigned 64-bit timestamps and token sums past int64 overflowed SQLite."""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    root = ss.spans.add(trace_id=b"\x07" * 16, span_id=b"\x01" * 8, name="invoke_agent bot")
    root.start_time_unix_nano, root.end_time_unix_nano = 2**64 - 2, 2**64 - 1
    root.attributes.add(key="gen_ai.operation.name").value.string_value = "invoke_agent"
    for i in range(2):
        chat = ss.spans.add(
            trace_id=b"\x07" * 16, span_id=bytes([2 + i]) * 8, parent_span_id=b"\x01" * 8, name="chat m"
        )
        chat.start_time_unix_nano, chat.end_time_unix_nano = 2**64 - 2, 2**64 - 1
        chat.attributes.add(key="gen_ai.operation.name").value.string_value = "chat"
        chat.attributes.add(key="gen_ai.usage.input_tokens").value.int_value = 2**63 - 1
    path.run(request)
    row = path.api.get(f"/api/v1/runs/{'07' * 16}").json()
    assert (2**63 - 1, 2**63 - 1) == (row["end_ns"], row["input_tokens"])
