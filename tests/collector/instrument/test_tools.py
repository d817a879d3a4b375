"""Tests for collector.instrument.tools: execute_tool and apply_guardrail spans under a run."""

from __future__ import annotations

import asyncio
import json

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from collector.instrument import agent_run, guardrail, tool_call
from collector.instrument.content import MAX_ATTRIBUTE_CHARS


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    """Finished spans keyed by name (names are unique in these tests)."""
    return {span.name: span for span in exporter.get_finished_spans()}


def attrs(span: ReadableSpan) -> dict[str, object]:
    """The span's attributes as a plain dict."""
    return dict(span.attributes or {})


class TestToolCall:
    """tool_call emits execute_tool spans nested under the run."""

    def test_span_under_run(self, exporter: InMemorySpanExporter) -> None:
        """Name, kind, attributes and parent are right; no content with capture off."""
        with agent_run("a") as run, tool_call("lookup_order", call_id="call_1", arguments={"id": 7}) as call:
            call.set_result({"status": "shipped"})
        spans = by_name(exporter)
        tool, root = spans["execute_tool lookup_order"], spans["invoke_agent a"]
        assert SpanKind.INTERNAL == tool.kind
        assert {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.type": "function",
            "gen_ai.tool.call.id": "call_1",
        } == attrs(tool)
        assert tool.parent is not None
        assert (root.context.span_id, root.context.trace_id) == (tool.parent.span_id, tool.context.trace_id)
        assert run.trace_id == format(tool.context.trace_id, "032x")

    def test_content_captured_when_on(self, capturing: InMemorySpanExporter) -> None:
        """Capture on: arguments and result as JSON text; a string result is kept as is."""
        with agent_run("a"):
            with tool_call("lookup", arguments={"id": 7}) as call:
                call.set_result({"status": "shipped"})
            with tool_call("echo", arguments="raw text") as call:
                call.set_result("Error: not found")
        spans = by_name(capturing)
        lookup, echo = attrs(spans["execute_tool lookup"]), attrs(spans["execute_tool echo"])
        assert ({"id": 7}, {"status": "shipped"}) == (
            json.loads(str(lookup["gen_ai.tool.call.arguments"])),
            json.loads(str(lookup["gen_ai.tool.call.result"])),
        )
        assert ("raw text", "Error: not found") == (
            echo["gen_ai.tool.call.arguments"],
            echo["gen_ai.tool.call.result"],
        )

    def test_sizes_capped(self, capturing: InMemorySpanExporter) -> None:
        """Huge arguments and results are clipped to the cap."""
        with tool_call("big", arguments={"blob": "x" * 100_000}) as call:
            call.set_result(["y" * 50_000, "z" * 50_000])
        tool = attrs(by_name(capturing)["execute_tool big"])
        assert (MAX_ATTRIBUTE_CHARS, MAX_ATTRIBUTE_CHARS) == (
            len(str(tool["gen_ai.tool.call.arguments"])),
            len(str(tool["gen_ai.tool.call.result"])),
        )

    def test_unencodable_value_uses_repr(self, capturing: InMemorySpanExporter) -> None:
        """Values JSON cannot encode are written with repr instead of failing."""
        circular: list[object] = []
        circular.append(circular)
        with tool_call("odd", arguments={"when": {1, 2}}) as call:
            call.set_result(circular)
        tool = attrs(by_name(capturing)["execute_tool odd"])
        assert '{"when": "{1, 2}"}' == tool["gen_ai.tool.call.arguments"]
        assert "[[...]]" == tool["gen_ai.tool.call.result"]

    def test_exception_marks_tool_failed(self, exporter: InMemorySpanExporter) -> None:
        """A failing tool: status ERROR, error.type, exception event, re-raised; the run itself is fine."""
        with agent_run("a"), pytest.raises(LookupError), tool_call("lookup"):
            raise LookupError("order 7 not found")
        spans = by_name(exporter)
        tool, root = spans["execute_tool lookup"], spans["invoke_agent a"]
        assert (StatusCode.ERROR, "LookupError") == (tool.status.status_code, attrs(tool)["error.type"])
        assert ["exception"] == [e.name for e in tool.events]
        assert StatusCode.UNSET == root.status.status_code

    def test_outside_run_is_own_trace(self, exporter: InMemorySpanExporter) -> None:
        """Without a run a tool span is a root span on the default provider."""
        with tool_call("standalone"):
            pass
        assert by_name(exporter)["execute_tool standalone"].parent is None

    def test_set_result_outside_block(self) -> None:
        """set_result before entering is a usage error."""
        with pytest.raises(RuntimeError, match="outside"):
            tool_call("t").set_result(1)


class TestToolDecorator:
    """@tool_call(name) records each call with its arguments and return value."""

    def test_sync_records_arguments_and_result(self, capturing: InMemorySpanExporter) -> None:
        """Positional and keyword arguments are recorded by parameter name, the return value as result."""

        @tool_call("lookup_order")
        def lookup_order(order_id: int, *, verbose: bool = False) -> dict[str, object]:
            return {"id": order_id, "status": "shipped"}

        with agent_run("a"):
            assert {"id": 7, "status": "shipped"} == lookup_order(7, verbose=True)
        tool = attrs(by_name(capturing)["execute_tool lookup_order"])
        assert {"order_id": 7, "verbose": True} == json.loads(str(tool["gen_ai.tool.call.arguments"]))
        assert {"id": 7, "status": "shipped"} == json.loads(str(tool["gen_ai.tool.call.result"]))

    def test_method_skips_self(self, capturing: InMemorySpanExporter) -> None:
        """On a method, self is not recorded."""

        class Tools:
            @tool_call("add")
            def add(self, a: int, b: int) -> int:
                return a + b

        assert 5 == Tools().add(2, b=3)
        assert {"a": 2, "b": 3} == json.loads(
            str(attrs(by_name(capturing)["execute_tool add"])["gen_ai.tool.call.arguments"])
        )

    def test_nothing_recorded_with_capture_off(self, exporter: InMemorySpanExporter) -> None:
        """Capture off: the decorator records neither arguments nor result."""

        @tool_call("lookup")
        def lookup(order_id: int) -> str:
            return "shipped"

        lookup(1)
        tool = attrs(by_name(exporter)["execute_tool lookup"])
        assert "gen_ai.tool.call.arguments" not in tool
        assert "gen_ai.tool.call.result" not in tool

    def test_async_tool(self, capturing: InMemorySpanExporter) -> None:
        """async def tools are supported and nest under the run."""

        @tool_call("fetch")
        async def fetch(url: str) -> str:
            await asyncio.sleep(0)
            return "ok"

        @agent_run("a")
        async def agent() -> str:
            return await fetch("https://example.test")

        assert "ok" == asyncio.run(agent())
        spans = by_name(capturing)
        tool, root = spans["execute_tool fetch"], spans["invoke_agent a"]
        assert tool.parent is not None
        assert root.context.span_id == tool.parent.span_id
        assert ("ok", {"url": "https://example.test"}) == (
            attrs(tool)["gen_ai.tool.call.result"],
            json.loads(str(attrs(tool)["gen_ai.tool.call.arguments"])),
        )

    def test_failure_through_decorator(self, exporter: InMemorySpanExporter) -> None:
        """A raising decorated tool is recorded as failed and the exception reaches the caller."""

        @tool_call("flaky")
        def flaky() -> None:
            raise TimeoutError("backend slow")

        with pytest.raises(TimeoutError):
            flaky()
        tool = by_name(exporter)["execute_tool flaky"]
        assert (StatusCode.ERROR, "TimeoutError") == (tool.status.status_code, attrs(tool)["error.type"])


class TestGuardrail:
    """guardrail emits apply_guardrail spans; block() marks the span and the run."""

    def test_pass_leaves_run_unmarked(self, exporter: InMemorySpanExporter) -> None:
        """A guardrail that does not block carries only its name; the run is not blocked."""
        with agent_run("a") as run, guardrail("pii_filter") as g:
            pass
        spans = by_name(exporter)
        rail = spans["apply_guardrail pii_filter"]
        assert {"gen_ai.operation.name": "apply_guardrail", "gen_ai.guardrail.component.name": "pii_filter"} == attrs(
            rail
        )
        assert (SpanKind.INTERNAL, False, False) == (rail.kind, g.blocked, run.safety_blocked)
        assert "vigil.safety_blocked" not in attrs(spans["invoke_agent a"])

    def test_block_marks_span_and_run(self, exporter: InMemorySpanExporter) -> None:
        """block(reason) sets the guardrail markers and vigil.safety_blocked on the root span."""
        with agent_run("a") as run, guardrail("pii_filter") as g:
            g.block("card number in input")
        spans = by_name(exporter)
        rail, root = spans["apply_guardrail pii_filter"], spans["invoke_agent a"]
        assert (True, "card number in input") == (
            attrs(rail)["vigil.guardrail.blocked"],
            attrs(rail)["gen_ai.guardrail.result.reason"],
        )
        assert True is attrs(root)["vigil.safety_blocked"]
        assert rail.parent is not None
        assert root.context.span_id == rail.parent.span_id
        assert (True, True) == (g.blocked, run.safety_blocked)

    def test_block_marks_innermost_run(self, exporter: InMemorySpanExporter) -> None:
        """Inside a nested run, the block marks the sub-agent's span."""
        with agent_run("outer"), agent_run("inner"), guardrail("g") as g:
            g.block("no")
        spans = by_name(exporter)
        assert True is attrs(spans["invoke_agent inner"])["vigil.safety_blocked"]
        assert "vigil.safety_blocked" not in attrs(spans["invoke_agent outer"])

    def test_block_outside_run(self, exporter: InMemorySpanExporter) -> None:
        """A guardrail outside any run still records its own block."""
        with guardrail("g") as g:
            g.block("r" * 100_000)
        rail = attrs(by_name(exporter)["apply_guardrail g"])
        assert (True, MAX_ATTRIBUTE_CHARS) == (
            rail["vigil.guardrail.blocked"],
            len(str(rail["gen_ai.guardrail.result.reason"])),
        )

    def test_exception_in_guardrail(self, exporter: InMemorySpanExporter) -> None:
        """An exception inside the guardrail block fails its span and propagates."""
        with pytest.raises(ConnectionError), guardrail("remote_moderation"):
            raise ConnectionError("moderation API down")
        rail = by_name(exporter)["apply_guardrail remote_moderation"]
        assert (StatusCode.ERROR, "ConnectionError") == (rail.status.status_code, attrs(rail)["error.type"])
