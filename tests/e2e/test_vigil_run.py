"""End to end over a real ``vigil run`` subprocess: bad input, late spans, SIGTERM drain, a real SDK exporter.

Uses raw OTLP bodies over real HTTP and reads results back from the REST API, the
Prometheus endpoint and the SQLite file.
"""

from __future__ import annotations

import gzip
import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus
from prometheus_client.parser import text_string_to_metric_families

from vigil.bench.synth import _kv, body, make_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

PROTO = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """One ``vigil run`` with a short quiet period and every run sampled."""
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": "1", "VIGIL_MAX_BODY_BYTES": str(1 << 20)}
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        yield running


def metric(vigil: VigilProcess, name: str, **labels: str) -> float:
    """Current value of one sample on the real /metrics endpoint (0 when absent)."""
    text = httpx.get(vigil.metrics_url).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def wait_run(vigil: VigilProcess, trace_id: str, *, version: int = 1, timeout_s: float = 15.0) -> dict[str, Any]:
    """Poll the API until the run exists at ``version`` or more."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}")
        if r.status_code == 200 and r.json()["version"] >= version:
            return dict(r.json())
        time.sleep(0.1)
    raise AssertionError(f"run {trace_id} v{version} never appeared\n{vigil.log_tail()}")


def good_body(seed: int) -> tuple[str, bytes]:
    """One synthetic GenAI run as a protobuf body."""
    run = make_run(random.Random(seed))
    return run.trace_id, body(list(run.spans))


class TestBadInput:
    """Each bad request gets the right status and a counter; the next good one still works."""

    @pytest.mark.parametrize(
        ("headers", "payload", "status", "reason"),
        [
            (PROTO, b"\x0a\xff\xff\xff\x0f garbage", 400, "decode"),
            ({"Content-Type": "application/json"}, b"{not json", 400, "decode"),
            ({"Content-Type": "text/plain"}, b"hello", 415, "unsupported_media_type"),
            ({**PROTO, "Content-Encoding": "gzip"}, gzip.compress(bytes(50 << 20)), 413, "too_large"),
            ({**PROTO, "Content-Encoding": "gzip"}, b"not gzip at all", 400, "decode"),
        ],
        ids=["garbage-protobuf", "invalid-json", "wrong-content-type", "gzip-bomb", "bad-gzip"],
    )
    def test_rejected_counted_and_recovers(
        self, vigil: VigilProcess, headers: dict[str, str], payload: bytes, status: int, reason: str
    ) -> None:
        """The rejection has the right status, is counted by reason, and a good body still lands."""
        before = metric(vigil, "vigil_otlp_rejected_requests_total", reason=reason)
        r = httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=payload, headers=headers)
        assert status == r.status_code
        assert before + 1 == metric(vigil, "vigil_otlp_rejected_requests_total", reason=reason)
        trace_id, good = good_body(len(payload))
        assert 200 == httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=good, headers=PROTO).status_code
        assert trace_id == wait_run(vigil, trace_id)["trace_id"]

    def test_span_with_missing_ids_is_partial_success(self, vigil: VigilProcess) -> None:
        """A JSON span without ids is rejected alone; its neighbour is scored."""
        trace_id = "5b8efff798038103d269b633813fc60c"
        spans = [
            {"traceId": trace_id, "spanId": "eee19b7ec3c1b174", "name": "invoke_agent ok", "kind": 1,
             "startTimeUnixNano": "1", "endTimeUnixNano": str(time.time_ns()),
             "attributes": [{"key": "gen_ai.agent.name", "value": {"stringValue": "json_agent"}}]},
            {"name": "no ids at all"},
        ]  # fmt: skip
        doc = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
        r = httpx.post(f"{vigil.otlp_endpoint}/v1/traces", json=doc)
        assert 200 == r.status_code
        assert "1" == str(r.json()["partialSuccess"]["rejectedSpans"])
        assert "json_agent" == wait_run(vigil, trace_id)["agent"]


class TestLateSpans:
    """A span after scoring re-scores the run and updates it, never duplicates it."""

    def test_late_tool_error_updates_run(self, vigil: VigilProcess) -> None:
        """The late failing tool call shows up in the same run row (version 2), counted once."""
        trace_id, good = good_body(4242)
        httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=good, headers=PROTO)
        first = wait_run(vigil, trace_id)
        runs_before = metric(vigil, "vigil_runs_total", agent=first["agent"], outcome=first["status"], complete="true")
        late_before = metric(vigil, "vigil_assembler_events_total", event="late_spans")
        root = next(s for s in make_run(random.Random(4242)).spans if not s.parent_span_id)
        late = PbSpan(
            trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex("00000000000000ff"), parent_span_id=root.span_id,
            name="execute_tool search", start_time_unix_nano=root.start_time_unix_nano + 1,
            end_time_unix_nano=root.start_time_unix_nano + 2, status=PbStatus(code=PbStatus.STATUS_CODE_ERROR),
            attributes=[_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "search"),
                        _kv("error.type", "TimeoutError")],
        )  # fmt: skip
        httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=body([late]), headers=PROTO)
        second = wait_run(vigil, trace_id, version=2)
        assert (first["tool_calls"] + 1, first["tool_errors"] + 1) == (second["tool_calls"], second["tool_errors"])
        listed = httpx.get(f"{vigil.api}/api/v1/runs", params={"limit": 500}).json()["items"]
        assert 1 == sum(1 for item in listed if item["trace_id"] == trace_id)
        assert late_before + 1 == metric(vigil, "vigil_assembler_events_total", event="late_spans")
        assert runs_before == metric(
            vigil, "vigil_runs_total", agent=first["agent"], outcome=first["status"], complete="true"
        )


class TestRealExporter:
    """The OpenTelemetry SDK's own OTLP/HTTP exporter, gzip-compressed, lands runs."""

    def test_sdk_exporter_gzip(self, vigil: VigilProcess) -> None:
        """A run made with the SDK and exported with gzip is scored with its agent name."""
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=f"{vigil.otlp_endpoint}/v1/traces", compression=Compression.Gzip)
        run = wait_run(vigil, _sdk_run(exporter, "sdk", chats=2, input_tokens=7))
        assert ("sdk_agent", 2, 14, "sdk-agent") == tuple(run[f] for f in _SDK_FIELDS)
        assert run["flag"] is not None
        assert ["random_sample"] == run["flag"]["reasons"]

    def test_sdk_grpc_exporter_gzip(self, vigil: VigilProcess) -> None:
        """A run exported by the SDK's OTLP/gRPC exporter (insecure, gzip) is scored with its agent name."""
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=vigil.otlp_grpc_target, insecure=True, compression=grpc.Compression.Gzip)
        run = wait_run(vigil, _sdk_run(exporter, "grpc", chats=1, input_tokens=5))
        assert ("grpc_agent", 1, 5, "grpc-agent") == tuple(run[f] for f in _SDK_FIELDS)
        assert 2.0 == metric(vigil, "vigil_spans_received_total", encoding="grpc")


_SDK_FIELDS = ("agent", "llm_calls", "input_tokens", "service")
"""What the two SDK-exporter tests compare."""


def _sdk_run(exporter: Any, name: str, chats: int, input_tokens: int) -> str:
    """One agent run made with the OTel SDK (service ``{name}-agent``, agent ``{name}_agent``, ``chats``
    LLM calls of ``input_tokens`` each) and exported by ``exporter``; its trace id."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": f"{name}-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": f"{name}_agent"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": input_tokens}
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=agent) as root:
        for _ in range(chats):
            with tracer.start_as_current_span("chat m", attributes=chat):
                pass
        trace_id = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


class TestSigterm:
    """SIGTERM drains: finished runs are scored and written before exit, unfinished ones saved for the restart."""

    def test_inflight_run_written_on_sigterm(self, tmp_path: Path) -> None:
        """With a 60 s quiet period nothing closes on its own; SIGTERM still writes the run."""
        trace_id, good = good_body(77)
        with start_vigil(tmp_path, {"VIGIL_QUIET_PERIOD_S": "60"}) as running:
            assert 200 == httpx.post(f"{running.otlp_endpoint}/v1/traces", content=good, headers=PROTO).status_code
            time.sleep(0.3)
            assert 404 == httpx.get(f"{running.api}/api/v1/runs/{trace_id}").status_code
        with sqlite3.connect(tmp_path / "vigil.db") as db:
            rows = db.execute("SELECT complete FROM runs WHERE trace_id = ?", (trace_id,)).fetchall()
        assert [(1,)] == rows

    def test_unfinished_run_resumes_after_restart(self, tmp_path: Path) -> None:
        """A run without its root at SIGTERM is saved, not scored; after a restart its root completes it."""
        synth = make_run(random.Random(78))
        root = next(s for s in synth.spans if not s.parent_span_id)
        children = [s for s in synth.spans if s.parent_span_id]
        env = {"VIGIL_QUIET_PERIOD_S": "0.3", "VIGIL_SAMPLE_RATE": "1"}
        with start_vigil(tmp_path, env) as running:
            url = f"{running.otlp_endpoint}/v1/traces"
            assert 200 == httpx.post(url, content=body(children), headers=PROTO).status_code
            time.sleep(0.5)
        assert (tmp_path / "vigil.state").exists()
        with sqlite3.connect(tmp_path / "vigil.db") as db:
            assert [] == db.execute("SELECT 1 FROM runs WHERE trace_id = ?", (synth.trace_id,)).fetchall()
        with start_vigil(tmp_path, env) as running:
            assert not (tmp_path / "vigil.state").exists()
            url = f"{running.otlp_endpoint}/v1/traces"
            assert 200 == httpx.post(url, content=body([root]), headers=PROTO).status_code
            run = wait_run(running, synth.trace_id)
        assert run["complete"]
        assert len(synth.spans) == run["review_item"]["snapshot"]["span_count"]


def test_metrics_have_no_trace_id_labels(vigil: VigilProcess) -> None:
    """Label sets are bounded: no metric carries a trace id label."""
    text = httpx.get(vigil.metrics_url).text
    labels = {k for f in text_string_to_metric_families(text) for s in f.samples for k in s.labels}
    allowed = {"agent", "outcome", "complete", "direction", "tool", "priority", "reason", "stage", "name", "event",
               "encoding", "code", "le", "quantile",
               "state", "verdict", "source", "kind", "table", "listener", "signal", "rule", "structure",
               "target", "bound"}  # fmt: skip
    assert set() == labels - allowed


class TestIngestToken:
    """VIGIL_INGEST_TOKEN guards OTLP ingest."""

    def test_token_required(self, tmp_path: Path) -> None:
        """Without the token: 401 and counted; with it: accepted and scored."""
        trace_id, good = good_body(91)
        with start_vigil(tmp_path, {"VIGIL_INGEST_TOKEN": "t0ken", "VIGIL_QUIET_PERIOD_S": "0.3"}) as running:
            url = f"{running.otlp_endpoint}/v1/traces"
            assert 401 == httpx.post(url, content=good, headers=PROTO).status_code
            assert 1 == metric(running, "vigil_otlp_rejected_requests_total", reason="unauthorized")
            authed = {**PROTO, "Authorization": "Bearer t0ken"}
            assert 200 == httpx.post(url, content=good, headers=authed).status_code
            assert trace_id == wait_run(running, trace_id)["trace_id"]


class TestMemoryLimit:
    """VIGIL_MEMORY_LIMIT_MB: over the ceiling, ingest is refused with 503 + Retry-After and counted."""

    def test_over_ceiling_refuses(self, tmp_path: Path) -> None:
        """A 1 MiB ceiling is always exceeded: every export is refused, none is lost silently."""
        _, good = good_body(92)
        with start_vigil(tmp_path, {"VIGIL_MEMORY_LIMIT_MB": "1", "VIGIL_RETRY_AFTER_S": "3"}) as running:
            response = httpx.post(f"{running.otlp_endpoint}/v1/traces", content=good, headers=PROTO)
            assert (503, "3") == (response.status_code, response.headers["Retry-After"])
            assert b"memory limit of 1048576 bytes reached" in response.content
            # refused before the body was read: counted as a request (its spans are unknown)
            assert 1 == metric(running, "vigil_otlp_rejected_requests_total", reason="backpressure")


class TestRedaction:
    """Personal data in span content never reaches the store or the API (default patterns)."""

    def test_snapshot_is_redacted(self, vigil: VigilProcess) -> None:
        """Emails, phone numbers and keys in span status messages come back redacted."""
        trace_id, root_id, tool_id = "5e" * 16, "00000000000000a1", "00000000000000a2"
        leak = "no user +4915112345678, key sk-abcdefghijklmnop1234"
        t0 = time.time_ns()
        root = PbSpan(
            trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex(root_id), name="invoke_agent support",
            start_time_unix_nano=t0, end_time_unix_nano=t0 + 10**6,
            status=PbStatus(code=PbStatus.STATUS_CODE_ERROR, message="failed for bob@example.com"),
            attributes=[_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", "support"),
                        _kv("error.type", "LookupError")],
        )  # fmt: skip
        tool = PbSpan(
            trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex(tool_id), parent_span_id=bytes.fromhex(root_id),
            name="execute_tool crm", start_time_unix_nano=t0 + 1, end_time_unix_nano=t0 + 2,
            status=PbStatus(code=PbStatus.STATUS_CODE_ERROR, message=leak),
            attributes=[_kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", "crm")],
        )  # fmt: skip
        httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=body([root, tool]), headers=PROTO)
        run = wait_run(vigil, trace_id)
        text = str(run)
        assert "bob@example.com" not in text
        assert "+4915112345678" not in text
        assert "sk-abcdefghijklmnop1234" not in text
        messages = {s["status_message"] for s in run["review_item"]["snapshot"]["steps"]}
        assert "failed for [REDACTED:email]" in messages
        assert "no user [REDACTED:phone], key [REDACTED:api_key]" in messages
