"""Tests for collector.instrument.run: the invoke_agent root span, ticks, caps, decorators, errors."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from collector.instrument import MaxIterationsExceeded, agent_run, current_run, tool_call
from collector.instrument.content import MAX_ATTRIBUTE_CHARS


def spin(name: str, max_iterations: int) -> None:
    """An agent that loops until its raising cap stops it."""
    with agent_run(name, max_iterations=max_iterations, raise_on_max=True) as run:
        while True:
            run.tick()


def only(exporter: InMemorySpanExporter) -> ReadableSpan:
    """The single finished span."""
    [span] = exporter.get_finished_spans()
    return span


class TestRootSpan:
    """agent_run emits one invoke_agent span with the GenAI and vigil.* attributes."""

    def test_name_kind_and_attributes(self, exporter: InMemorySpanExporter) -> None:
        """Name, kind and every documented attribute are set."""
        with agent_run("support", max_iterations=8, optimal_steps=2, conversation_id="conv-1") as run:
            run.tick()
        span = only(exporter)
        assert ("invoke_agent support", SpanKind.INTERNAL) == (span.name, span.kind)
        assert {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "support",
            "gen_ai.conversation.id": "conv-1",
            "vigil.max_iterations": 8,
            "vigil.optimal_steps": 2,
            "vigil.iterations": 1,
        } == dict(span.attributes or {})
        assert StatusCode.UNSET == span.status.status_code

    def test_optional_attributes_left_out(self, exporter: InMemorySpanExporter) -> None:
        """Without a cap or optimal steps only the counters and ids are recorded."""
        with agent_run("bare"):
            pass
        attrs = dict(only(exporter).attributes or {})
        assert {"gen_ai.operation.name", "gen_ai.agent.name", "gen_ai.conversation.id", "vigil.iterations"} == set(
            attrs
        )

    def test_conversation_id_generated_as_uuid4_hex(self, exporter: InMemorySpanExporter) -> None:
        """A missing conversation id becomes a fresh random UUID4 in hex."""
        with agent_run("a") as first:
            pass
        with agent_run("a") as second:
            pass
        assert first.conversation_id != second.conversation_id
        assert first.conversation_id is not None
        assert re.fullmatch(r"[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}", first.conversation_id)

    def test_trace_id_is_the_spans(self, exporter: InMemorySpanExporter) -> None:
        """run.trace_id is the root span's trace id as 32 hex digits."""
        with agent_run("a") as run:
            pass
        assert format(only(exporter).context.trace_id, "032x") == run.trace_id

    def test_current_run_inside_and_outside(self, exporter: InMemorySpanExporter) -> None:
        """current_run() is the innermost run inside the block and None after it."""
        with agent_run("outer") as outer:
            assert outer is current_run()
            with agent_run("inner") as inner:
                assert inner is current_run()
            assert outer is current_run()
        assert current_run() is None

    def test_explicit_provider(self, exporter: InMemorySpanExporter) -> None:
        """tracer_provider= sends the run and its tools to that provider, not the default."""
        provider, mine = _recorded_provider()
        with agent_run("a", tracer_provider=provider), tool_call("t"):
            pass
        assert ["execute_tool t", "invoke_agent a"] == [s.name for s in mine.get_finished_spans()]
        assert () == exporter.get_finished_spans()

    def test_sub_agent_follows_parent_provider(self, exporter: InMemorySpanExporter) -> None:
        """A nested run without its own provider uses its parent's and becomes its child."""
        provider, mine = _recorded_provider()
        with agent_run("outer", tracer_provider=provider), agent_run("inner"):
            pass
        inner, outer = mine.get_finished_spans()
        assert inner.parent is not None
        assert ("invoke_agent inner", outer.context.span_id) == (inner.name, inner.parent.span_id)
        assert () == exporter.get_finished_spans()

    def test_name_clipped(self, exporter: InMemorySpanExporter) -> None:
        """An absurdly long agent name is clipped."""
        with agent_run("x" * 100_000):
            pass
        assert MAX_ATTRIBUTE_CHARS == len(str((only(exporter).attributes or {})["gen_ai.agent.name"]))

    @pytest.mark.parametrize(
        "kwargs",
        [{"max_iterations": 0}, {"optimal_steps": -1}, {"max_iterations": 2.5}, {"raise_on_max": True}],
        ids=["zero-cap", "negative-optimal", "float-cap", "raise-without-cap"],
    )
    def test_bad_arguments(self, kwargs: dict[str, object]) -> None:
        """Invalid caps and optimal steps are refused at construction."""
        with pytest.raises(ValueError, match=r"max_iterations|optimal_steps"):
            agent_run("a", **kwargs)  # type: ignore[arg-type]

    def test_reentry_refused(self, exporter: InMemorySpanExporter) -> None:
        """One run object is one span: entering it twice raises."""
        run = agent_run("a")
        with run:
            pass
        with pytest.raises(RuntimeError, match="already entered"), run:
            pass


class TestTick:
    """tick() counts iterations; reaching max_iterations marks the cap (and raises when asked)."""

    def test_counts_without_cap(self, exporter: InMemorySpanExporter) -> None:
        """Without a cap every tick returns True and the count is recorded."""
        with agent_run("a") as run:
            assert all(run.tick() for _ in range(5))
        assert (5, False) == (run.iterations, run.max_iterations_hit)
        attrs = only(exporter).attributes or {}
        assert 5 == attrs["vigil.iterations"]
        assert "vigil.max_iterations_hit" not in attrs

    def test_below_cap_not_marked(self, exporter: InMemorySpanExporter) -> None:
        """A run that stops before its cap carries no cap marker."""
        with agent_run("a", max_iterations=3) as run:
            run.tick()
            run.tick()
        attrs = only(exporter).attributes or {}
        assert (2, 3) == (attrs["vigil.iterations"], attrs["vigil.max_iterations"])
        assert "vigil.max_iterations_hit" not in attrs

    def test_reaching_cap_marks_and_returns_false(self, exporter: InMemorySpanExporter) -> None:
        """The tick that reaches the cap returns False and marks the root span; later ticks stay False."""
        with agent_run("a", max_iterations=3) as run:
            results = [run.tick() for _ in range(4)]
        assert [True, True, False, False] == results
        assert run.max_iterations_hit
        attrs = only(exporter).attributes or {}
        assert (True, 4) == (attrs["vigil.max_iterations_hit"], attrs["vigil.iterations"])
        assert StatusCode.UNSET == only(exporter).status.status_code

    def test_while_loop_idiom(self, exporter: InMemorySpanExporter) -> None:
        """while run.tick() runs max_iterations - 1 bodies, then stops marked."""
        bodies = 0
        with agent_run("a", max_iterations=4) as run:
            while run.tick():
                bodies += 1
        assert (3, 4, True) == (bodies, run.iterations, run.max_iterations_hit)

    def test_raise_on_max(self, exporter: InMemorySpanExporter) -> None:
        """With raise_on_max the capping tick raises to the caller after marking; the root span fails."""
        with pytest.raises(MaxIterationsExceeded) as caught:
            spin("a", max_iterations=2)
        assert ("a", 2, 2) == (caught.value.agent, caught.value.iterations, caught.value.max_iterations)
        span = only(exporter)
        attrs = span.attributes or {}
        assert (True, 2) == (attrs["vigil.max_iterations_hit"], attrs["vigil.iterations"])
        assert "collector.instrument.MaxIterationsExceeded" == attrs["error.type"]
        assert StatusCode.ERROR == span.status.status_code
        assert ["exception"] == [e.name for e in span.events]

    def test_tick_outside_block(self) -> None:
        """Ticking a run that was never entered is a usage error."""
        with pytest.raises(RuntimeError, match="outside"):
            agent_run("a").tick()


class TestErrors:
    """An exception escaping the run marks the root span failed and propagates."""

    def test_exception_recorded_and_reraised(self, exporter: InMemorySpanExporter) -> None:
        """Status ERROR with the message, error.type, and one exception event."""
        with pytest.raises(KeyError), agent_run("a"):
            raise KeyError("order 7")
        span = only(exporter)
        assert (StatusCode.ERROR, "KeyError: 'order 7'") == (span.status.status_code, span.status.description)
        assert "KeyError" == (span.attributes or {})["error.type"]
        [event] = span.events
        assert ("exception", "KeyError") == (event.name, (event.attributes or {})["exception.type"])

    def test_error_type_is_qualified(self, exporter: InMemorySpanExporter) -> None:
        """A non-builtin exception's error.type is module.QualName, like the SDK's exception.type."""

        class AgentFailure(Exception):
            pass

        with pytest.raises(AgentFailure), agent_run("a"):
            raise AgentFailure("boom")
        error_type = str((only(exporter).attributes or {})["error.type"])
        assert error_type.endswith(".TestErrors.test_error_type_is_qualified.<locals>.AgentFailure")
        assert (only(exporter).events[0].attributes or {})["exception.type"] == error_type

    def test_context_restored_after_error(self, exporter: InMemorySpanExporter) -> None:
        """After a failed run the next run is a new root, not a child of the failed one."""
        with pytest.raises(ValueError, match="x"), agent_run("a"):
            raise ValueError("x")
        with agent_run("b"):
            pass
        assert [None, None] == [s.parent for s in exporter.get_finished_spans()]
        assert current_run() is None


class TestOutput:
    """set_output records the final answer only when content capture is on."""

    def test_not_recorded_by_default(self, exporter: InMemorySpanExporter) -> None:
        """Capture off: no output attribute."""
        with agent_run("a") as run:
            run.set_output("the answer")
        assert "gen_ai.output.messages" not in (only(exporter).attributes or {})

    def test_recorded_as_output_messages(self, capturing: InMemorySpanExporter) -> None:
        """Capture on: one assistant text part in gen_ai.output.messages."""
        with agent_run("a") as run:
            run.set_output("the answer")
        messages = json.loads(str((only(capturing).attributes or {})["gen_ai.output.messages"]))
        assert [
            {"role": "assistant", "parts": [{"type": "text", "content": "the answer"}], "finish_reason": "stop"}
        ] == messages

    def test_huge_output_clipped_and_valid_json(self, capturing: InMemorySpanExporter) -> None:
        """A huge answer is clipped to the cap inside still-valid JSON."""
        with agent_run("a") as run:
            run.set_output("y" * 1_000_000)
        messages = json.loads(str((only(capturing).attributes or {})["gen_ai.output.messages"]))
        assert MAX_ATTRIBUTE_CHARS == len(messages[0]["parts"][0]["content"])


class TestInput:
    """set_input records what the user asked on the run's span only when content capture is on."""

    def test_not_recorded_by_default(self, exporter: InMemorySpanExporter) -> None:
        """Capture off: no input attribute."""
        with agent_run("a") as run:
            run.set_input("my card is 4111 1111 1111 1111")
        assert "gen_ai.input.messages" not in (only(exporter).attributes or {})

    def test_recorded_as_input_messages(self, capturing: InMemorySpanExporter) -> None:
        """Capture on: one user text part in gen_ai.input.messages, clipped inside valid JSON."""
        with agent_run("a") as run:
            run.set_input("Where is my order?")
        messages = json.loads(str((only(capturing).attributes or {})["gen_ai.input.messages"]))
        assert [{"role": "user", "parts": [{"type": "text", "content": "Where is my order?"}]}] == messages
        with agent_run("b") as run:
            run.set_input("x" * 1_000_000)
        long = json.loads(str((capturing.get_finished_spans()[-1].attributes or {})["gen_ai.input.messages"]))
        assert MAX_ATTRIBUTE_CHARS == len(long[0]["parts"][0]["content"])

    def test_outside_the_block_raises(self) -> None:
        """Like set_output, it needs the run's span."""
        with pytest.raises(RuntimeError):
            agent_run("a").set_input("x")


class TestDecorator:
    """@agent_run(...) makes every call its own run."""

    def test_sync_function(self, exporter: InMemorySpanExporter) -> None:
        """Each call is one root span; the function reaches its run through current_run()."""

        @agent_run("support", max_iterations=5)
        def answer(question: str) -> str:
            run = current_run()
            assert run is not None
            run.tick()
            return question.upper()

        assert ("A", "B") == (answer("a"), answer("b"))
        spans = exporter.get_finished_spans()
        assert ["invoke_agent support"] * 2 == [s.name for s in spans]
        assert [1, 1] == [(s.attributes or {})["vigil.iterations"] for s in spans]
        assert spans[0].context.trace_id != spans[1].context.trace_id
        assert "answer" == answer.__name__

    def test_async_function(self, exporter: InMemorySpanExporter) -> None:
        """async def functions are supported: the span covers the awaited body."""

        @agent_run("async_agent")
        async def answer() -> int:
            run = current_run()
            assert run is not None
            run.tick()
            await asyncio.sleep(0)
            return 7

        assert 7 == asyncio.run(answer())
        assert 1 == (only(exporter).attributes or {})["vigil.iterations"]

    def test_exception_through_decorator(self, exporter: InMemorySpanExporter) -> None:
        """An exception from the decorated function fails the run and reaches the caller."""

        @agent_run("a")
        def broken() -> None:
            raise RuntimeError("nope")

        with pytest.raises(RuntimeError, match="nope"):
            broken()
        assert StatusCode.ERROR == only(exporter).status.status_code

    def test_concurrent_async_runs_stay_apart(self, exporter: InMemorySpanExporter) -> None:
        """Runs in concurrent asyncio tasks each see their own current run."""

        @agent_run("a")
        async def work(n: int) -> None:
            run = current_run()
            assert run is not None
            for _ in range(n):
                run.tick()
                await asyncio.sleep(0)

        async def main() -> None:
            await asyncio.gather(work(1), work(3))

        asyncio.run(main())
        assert [1, 3] == sorted(
            int(str((s.attributes or {})["vigil.iterations"])) for s in exporter.get_finished_spans()
        )


def _recorded_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider of the test's own, and the exporter that records what it ends."""
    recorded = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    return provider, recorded
