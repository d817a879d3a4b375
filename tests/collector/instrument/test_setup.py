"""Tests for collector.instrument.setup: vigil_setup's provider, exporter, lifecycle and OpenAI instrumentation."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.demo.fakeopenai import FakeOpenAI, TextTurn
from collector.instrument import agent_run, tool_call, vigil_setup
from collector.instrument import spans as helper_spans
from collector.otlp import decode_protobuf
from tests.support.fixtures import wait_until

QUIET = {"OTEL_BSP_SCHEDULE_DELAY": "60000"}
"""A batch delay long enough that nothing is exported unless flushed."""


class Recorder(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps every request."""

    seen: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        """Record path, headers and body; answer 200 with an empty protobuf."""
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Keep test output quiet."""


@pytest.fixture
def otlp_server() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A local OTLP/HTTP endpoint: (base URL, recorded requests)."""
    seen: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


class TestExport:
    """Spans reach the exporter through a batch processor configured by OTEL_BSP_*."""

    def test_batched_until_flushed(self) -> None:
        """Nothing is exported before force_flush (60 s batch delay); everything after it."""
        exporter = InMemorySpanExporter()
        tracing = vigil_setup("svc", exporter=exporter, instrument_openai=False, environ=QUIET)
        with agent_run("a"), tool_call("t"):
            pass
        assert () == exporter.get_finished_spans()
        assert tracing.force_flush(5000) is True
        assert ["execute_tool t", "invoke_agent a"] == [s.name for s in exporter.get_finished_spans()]
        tracing.shutdown()

    def test_bsp_schedule_delay_honoured(self) -> None:
        """With OTEL_BSP_SCHEDULE_DELAY=20 spans leave on their own, without a flush."""
        exporter = InMemorySpanExporter()
        environ = {
            "OTEL_BSP_SCHEDULE_DELAY": "20",
            "OTEL_BSP_MAX_QUEUE_SIZE": "64",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16",
        }
        with vigil_setup("svc", exporter=exporter, instrument_openai=False, environ=environ) as tracing:
            assert (20, 64) == (tracing.settings.schedule_delay_ms, tracing.settings.max_queue_size)
            with agent_run("a"):
                pass
            wait_until(exporter.get_finished_spans, timeout_s=5)
            assert 1 == len(exporter.get_finished_spans())

    def test_shutdown_flushes_and_is_idempotent(self) -> None:
        """shutdown() exports what is queued; calling it twice is harmless; later spans are dropped."""
        exporter = InMemorySpanExporter()
        tracing = vigil_setup("svc", exporter=exporter, instrument_openai=False, environ=QUIET)
        with agent_run("a"):
            pass
        tracing.shutdown()
        tracing.shutdown()
        with agent_run("late", tracer_provider=tracing.tracer_provider):
            pass
        assert ["invoke_agent a"] == [s.name for s in exporter.get_finished_spans()]

    def test_context_manager(self) -> None:
        """``with vigil_setup(...)`` shuts down (and so flushes) on exit."""
        exporter = InMemorySpanExporter()
        with vigil_setup("svc", exporter=exporter, instrument_openai=False, environ=QUIET), agent_run("a"):
            pass
        assert 1 == len(exporter.get_finished_spans())

    def test_resource_from_arguments_and_env(self) -> None:
        """service_name and OTEL_RESOURCE_ATTRIBUTES end up on the provider's resource."""
        environ = {"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=staging", "OTEL_SERVICE_NAME": "env-name"}
        with vigil_setup("support-bot", exporter=InMemorySpanExporter(), instrument_openai=False, environ=environ) as t:
            attrs = t.tracer_provider.resource.attributes
        assert ("support-bot", "staging") == (attrs["service.name"], attrs["deployment.environment"])

    def test_otlp_http_on_the_wire(self, otlp_server: tuple[str, list[tuple[str, dict[str, str], bytes]]]) -> None:
        """OTEL_EXPORTER_OTLP_ENDPOINT and _HEADERS steer the real OTLP/HTTP exporter."""
        url, seen = otlp_server
        environ = {
            **QUIET,
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,
            "OTEL_EXPORTER_OTLP_HEADERS": "x-api-key=abc",
            "OTEL_SERVICE_NAME": "wire-bot",
        }
        tracing = vigil_setup(instrument_openai=False, environ=environ)
        assert (f"{url}/v1/traces", "http/protobuf") == (tracing.settings.endpoint, tracing.settings.protocol)
        with agent_run("wired") as run:
            pass
        assert tracing.force_flush(5000)
        tracing.shutdown()
        [(path, headers, body)] = seen
        assert ("/v1/traces", "abc", "application/x-protobuf") == (path, headers["x-api-key"], headers["content-type"])
        [batch] = decode_protobuf(body).batches
        assert (run.trace_id, ["invoke_agent wired"], "wire-bot") == (
            batch.trace_id,
            [s.name for s in batch.spans],
            batch.spans[0].resource["service.name"],
        )

    def test_grpc_settings(self) -> None:
        """protocol="grpc" builds the gRPC exporter on localhost:4317 by default."""
        with vigil_setup(protocol="grpc", instrument_openai=False, environ={}) as tracing:
            assert ("grpc", "http://localhost:4317") == (tracing.settings.protocol, tracing.settings.endpoint)


class TestProviders:
    """The global provider is set only when none is; a provider of yours is joined, not owned."""

    def test_sets_global_when_unset(self) -> None:
        """With no global provider yet, the new one becomes global (so instrumentors pick it up)."""
        with vigil_setup(exporter=InMemorySpanExporter(), instrument_openai=False, environ={}) as tracing:
            assert tracing.tracer_provider is trace.get_tracer_provider()

    def test_keeps_existing_global(self) -> None:
        """An existing global provider is left alone; the helpers still use Vigil's."""
        theirs = TracerProvider()
        trace.set_tracer_provider(theirs)
        exporter = InMemorySpanExporter()
        with vigil_setup(exporter=exporter, instrument_openai=False, environ=QUIET) as tracing:
            assert theirs is trace.get_tracer_provider()
            with agent_run("a"):
                pass
        assert ["invoke_agent a"] == [s.name for s in exporter.get_finished_spans()]
        assert tracing.tracer_provider is not theirs

    def test_joins_given_provider(self) -> None:
        """With tracer_provider= Vigil's processor is added to it; shutdown stops only that processor."""
        theirs, theirs_out, vigil_out = TracerProvider(), InMemorySpanExporter(), InMemorySpanExporter()
        theirs.add_span_processor(SimpleSpanProcessor(theirs_out))
        tracing = vigil_setup(tracer_provider=theirs, exporter=vigil_out, instrument_openai=False, environ=QUIET)
        assert theirs is tracing.tracer_provider
        with agent_run("a"):
            pass
        tracing.shutdown()
        with agent_run("after", tracer_provider=theirs):
            pass
        assert ["invoke_agent a"] == [s.name for s in vigil_out.get_finished_spans()]
        assert ["invoke_agent a", "invoke_agent after"] == [s.name for s in theirs_out.get_finished_spans()]

    def test_shutdown_restores_previous_defaults(self) -> None:
        """After shutdown the helpers go back to the defaults in force before the setup."""
        first, second = InMemorySpanExporter(), InMemorySpanExporter()
        outer = vigil_setup(exporter=first, instrument_openai=False, environ=QUIET)
        inner = vigil_setup(exporter=second, instrument_openai=False, environ=QUIET, capture_content=True)
        assert (inner.tracer_provider, True) == (helper_spans.defaults().provider, helper_spans.defaults().capture)
        inner.shutdown()
        assert (outer.tracer_provider, False) == (helper_spans.defaults().provider, helper_spans.defaults().capture)
        outer.shutdown()


class TestCaptureSetting:
    """capture_content: argument > OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT > off."""

    @pytest.mark.parametrize(
        ("argument", "variable", "expected"),
        [(None, None, False), (None, "SPAN_ONLY", True), (False, "true", False), (True, None, True)],
    )
    def test_precedence(self, argument: bool | None, variable: str | None, expected: bool) -> None:
        """The argument wins; without it the standard variable decides; default off."""
        environ = {} if variable is None else {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": variable}
        exporter = InMemorySpanExporter()
        with vigil_setup(exporter=exporter, capture_content=argument, instrument_openai=False, environ=environ) as t:
            with tool_call("t", arguments={"q": 1}):
                pass
            assert expected is t.capture_content
        assert expected == ("gen_ai.tool.call.arguments" in (exporter.get_finished_spans()[0].attributes or {}))


class TestOpenAIInstrumentation:
    """instrument_openai enables the official OpenAI instrumentation on Vigil's provider, and shutdown undoes it."""

    def test_llm_spans_nest_under_run(self) -> None:
        """A chat completion inside agent_run gives a chat span under the run, with token usage."""
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

        exporter = InMemorySpanExporter()
        with FakeOpenAI({"hello": [TextTurn("Hi.")]}) as fake:
            tracing = vigil_setup(exporter=exporter, environ=QUIET)
            try:
                assert OpenAIInstrumentor().is_instrumented_by_opentelemetry
                second = vigil_setup(exporter=InMemorySpanExporter(), environ=QUIET)
                second.shutdown()  # did not enable it, so must not disable it
                assert OpenAIInstrumentor().is_instrumented_by_opentelemetry
                client = openai.OpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
                with agent_run("a"):
                    client.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "[[scenario:hello]]"}]
                    )
                tracing.force_flush(5000)
            finally:
                tracing.shutdown()
        assert not OpenAIInstrumentor().is_instrumented_by_opentelemetry
        spans = {s.name: s for s in exporter.get_finished_spans()}
        chat, root = spans["chat gpt-4o-mini"], spans["invoke_agent a"]
        assert chat.parent is not None
        assert root.context.span_id == chat.parent.span_id
        assert (100, 20) == (
            (chat.attributes or {})["gen_ai.usage.input_tokens"],
            (chat.attributes or {})["gen_ai.usage.output_tokens"],
        )
