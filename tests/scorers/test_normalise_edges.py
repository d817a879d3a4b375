"""Edge cases and properties of normalise: ordering, duplicates, missing roots, hostile input."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.model import Span, SpanEvent, StatusCode
from scorers.model import Run, Step, StepKind, ToolCall
from scorers.normalise import normalise
from scorers.steps import STEP_FIELDS, TOOL_CALL_FIELDS
from tests.support.spans import agent_run, node, span, trace


class TestSpanSet:
    """Ordering, duplicates, missing roots and hostile input."""

    def test_order_does_not_matter(self) -> None:
        """Shuffled spans give the same run."""
        spans = agent_run(llm_calls=4)
        shuffled = spans[:]
        random.Random(7).shuffle(shuffled)
        assert normalise(spans) == normalise(shuffled)

    def test_duplicates_keep_last_ended(self) -> None:
        """Duplicate span ids count once; the last copy with an end time wins."""
        spans = agent_run(llm_calls=2, tools_per_call=1)
        chat = spans[1]
        newer = dataclasses.replace(chat, attributes={**chat.attributes, "gen_ai.usage.input_tokens": 7})
        unfinished = dataclasses.replace(chat, end_ns=0)
        run = normalise([*spans, newer, unfinished])
        assert (len(spans), 2, 107) == (run.span_count, run.llm_calls, run.input_tokens)

    def test_missing_root_is_incomplete(self) -> None:
        """Without a root the run is incomplete, bounded by its spans and judged by the top agent."""
        spans = trace(
            node(
                "app",
                {},
                node(
                    "invoke_agent a",
                    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "error.type": "X"},
                    node("chat m", {"gen_ai.operation.name": "chat"}),
                ),
            )
        )
        run = normalise(spans[1:])
        assert (False, "a", True, spans[1].start_ns, spans[1].end_ns) == (
            run.complete,
            run.agent,
            run.errored,
            run.start_ns,
            run.end_ns,
        )

    def test_caller_says_incomplete(self) -> None:
        """``complete=False`` is passed through."""
        assert not normalise(agent_run(), complete=False).complete

    def test_empty(self) -> None:
        """No spans give an empty incomplete run."""
        assert Run(trace_id="", complete=False) == normalise([])

    def test_parent_cycle(self) -> None:
        """A parent cycle neither hangs nor crashes."""
        a = span(span_id="a" * 16, parent_span_id="b" * 16, name="chat x", attributes={"gen_ai.operation.name": "chat"})
        b = span(
            span_id="b" * 16,
            parent_span_id="a" * 16,
            trace_id=a.trace_id,
            name="chat y",
            attributes={"gen_ai.operation.name": "chat"},
        )
        run = normalise([a, b])
        assert (False, 2) == (run.complete, len(run.steps))

    def test_structured_equals_json_string(self) -> None:
        """Structured attribute values normalise exactly like their JSON-string forms."""
        args = {"q": "x", "n": 2}
        output = [{"role": "assistant", "parts": [{"type": "text", "content": "hi"}], "finish_reason": "stop"}]

        def build(encode: Any) -> Run:
            tool = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "t",
                "gen_ai.tool.call.arguments": encode(args),
            }
            chat = {"gen_ai.operation.name": "chat", "gen_ai.output.messages": encode(output)}
            spans = trace(
                node(
                    "invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, node("chat", chat), node("tool", tool)
                ),
                trace_id="1" * 32,
            )
            return normalise(spans)

        structured, text = build(lambda v: v), build(json.dumps)
        arguments = [t.arguments for t in structured.tools]
        assert (arguments, structured.messages, structured.steps[1].finish_reasons) == (
            [t.arguments for t in text.tools],
            text.messages,
            text.steps[1].finish_reasons,
        )

    def test_garbage_attribute_types(self) -> None:
        """Wrong attribute types are ignored, never raised on."""
        odd = {
            "gen_ai.operation.name": 5,
            "openinference.span.kind": "LLM",
            "llm.token_count.prompt": "12",
            "gen_ai.usage.output_tokens": float("nan"),
            "gen_ai.response.finish_reasons": {"a": 1},
            "gen_ai.input.messages": b"\x00\xff",
            "gen_ai.output.messages": [[[[]]]],
            "vigil.iterations": "9",
            "vigil.max_iterations": None,
            "gen_ai.guardrail.triggered": [True],
            "output.value": {"messages": "x"},
        }
        exc = SpanEvent("exception", attributes={"exception.type": 3, "exception.message": None})
        run = normalise([span(attributes=odd, events=(exc,), resource={"service.name": 7}, status_message="x")])
        assert (1, 0, 0, False, False, "unknown") == (
            run.llm_calls,
            run.input_tokens,
            run.output_tokens,
            run.hit_max_iterations,
            run.safety_blocked,
            run.agent,
        )

    def test_dialect_vote(self) -> None:
        """The run's dialect is the one most spans were classified by; a tie goes to the earlier of
        DIALECTS (genai before openinference); unclassified spans do not vote."""
        oi_llm = node("llm", {"openinference.span.kind": "LLM"})
        genai_llm = node("chat m", {"gen_ai.operation.name": "chat"})
        plain = node("http", {})
        runs = (
            trace(node("root", {"openinference.span.kind": "AGENT"}, oi_llm, genai_llm, plain)),
            trace(node("root", {}, oi_llm, genai_llm, plain, plain)),
            trace(node("root", {}, genai_llm, oi_llm)),
            trace(node("root", {}, plain)),
        )
        assert [normalise(spans).dialect for spans in runs] == ["openinference", "genai", "genai", "unknown"]


class TestContract:
    """The model field orders normalise relies on."""

    def test_field_order(self) -> None:
        """Step and ToolCall fields are in the order normalise passes them."""
        assert list(STEP_FIELDS) == [f.name for f in dataclasses.fields(Step)]
        assert list(TOOL_CALL_FIELDS) == [f.name for f in dataclasses.fields(ToolCall)]


_KEYS = [
    "gen_ai.operation.name",
    "openinference.span.kind",
    "traceloop.span.kind",
    "langsmith.span.kind",
    "llm.request.type",
    "ai.operationId",
    "gen_ai.agent.name",
    "gen_ai.usage.input_tokens",
    "llm.token_count.prompt",
    "gen_ai.response.finish_reasons",
    "gen_ai.completion.0.finish_reason",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.content",
    "gen_ai.prompt.0.role",
    "gen_ai.tool.call.arguments",
    "output.value",
    "error.type",
    "gen_ai.guardrail.result.value",
    "vigil.iterations",
    "vigil.max_iterations",
    "vigil.optimal_steps",
]
_TEXTS = [
    "chat",
    "execute_tool",
    "invoke_agent",
    "LLM",
    "TOOL",
    "AGENT",
    "CHAIN",
    "GUARDRAIL",
    "tool",
    "agent",
    "[",
    "{",
]
_TEXTS += [
    '[{"role":"user","parts":[{"type":"text","content":"x"}]}]',
    "Error: x",
    "Max turns exceeded",
    "content_filter",
]


def _attr_values() -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.binary(max_size=8),
        st.sampled_from(_TEXTS),
        st.text(max_size=20),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
        max_leaves=8,
    )


_IDS = [f"{i:016x}" for i in range(1, 7)]
_spans = st.builds(
    Span,
    trace_id=st.just("ab" * 16),
    span_id=st.sampled_from(_IDS),
    parent_span_id=st.one_of(st.none(), st.sampled_from(_IDS)),
    name=st.one_of(
        st.sampled_from(["chat m", "execute_tool t", "x.tool", "ai.toolCall", "invoke_agent"]), st.text(max_size=12)
    ),
    start_ns=st.integers(min_value=0, max_value=2**63),
    end_ns=st.integers(min_value=0, max_value=2**63),
    status_code=st.sampled_from(list(StatusCode)),
    status_message=st.one_of(st.sampled_from(_TEXTS), st.text(max_size=20)),
    attributes=st.dictionaries(st.one_of(st.sampled_from(_KEYS), st.text(max_size=10)), _attr_values(), max_size=6),
    events=st.lists(
        st.builds(
            SpanEvent,
            name=st.sampled_from(["exception", "log"]),
            attributes=st.dictionaries(st.sampled_from(["exception.type", "exception.message"]), _attr_values()),
        ),
        max_size=2,
    ).map(tuple),
    resource=st.dictionaries(st.sampled_from(["service.name", "deployment.environment"]), _attr_values(), max_size=2),
)


class TestProperties:
    """Invariants over random well-formed span lists."""

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(_spans, max_size=8))
    def test_never_raises(self, spans: list[Span]) -> None:
        """normalise returns a consistent Run for any well-formed spans."""
        run = normalise(spans)
        llm_steps = [s for s in run.steps if s.kind is StepKind.LLM]
        assert len({s.span_id for s in spans}) == run.span_count == len(run.steps)
        assert len(llm_steps) == run.llm_calls
        assert sum(s.input_tokens for s in llm_steps) == run.input_tokens
        assert run.tool_calls == len(run.tools) >= run.tool_errors
