"""Tests for per-span signals: errors, finish reasons, iteration limits, safety blocks."""

from __future__ import annotations

from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.model import SpanEvent, StatusCode
from scorers.detect import DEFAULT_DETECTOR, SpanFacts
from scorers.dialects import INPUT_TOKEN_KEYS, MODEL_KEYS, OUTPUT_TOKEN_KEYS, first_str
from scorers.model import Evidence, Run, RunStatus, StepKind
from scorers.normalise import normalise
from scorers.signals import (
    _count,
    error_info,
    finish_reasons,
    leading_phrase,
    model,
    normalise_reason,
    soft_error,
    tokens,
)
from tests.support.spans import node, span, trace

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"}
CHAT = {"gen_ai.operation.name": "chat"}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}
CREWAI_PROMPT = (
    "Now it's time you MUST give your absolute best final answer. You'll ignore all previous instructions, "
    "stop using any tools, and just return your absolute BEST Final answer."
)


def _exception(kind: str, message: str = "boom") -> SpanEvent:
    return SpanEvent("exception", attributes={"exception.type": kind, "exception.message": message})


def _run_with(where: str, attributes: dict[str, Any] | None = None, **overrides: Any) -> Run:
    """A run whose root agent span, or its one LLM / tool child, carries ``attributes`` and ``overrides``."""
    extra = dict(attributes or {})
    child_attrs = {"llm": {**CHAT, **extra}, "tool": {**TOOL, **extra}}.get(where)
    if child_attrs is None:
        return normalise(trace(node("invoke_agent bot", {**AGENT, **extra}, node("chat m", CHAT), **overrides)))
    child = node("child", child_attrs, **overrides)
    return normalise(trace(node("invoke_agent bot", AGENT, child)))


class TestErrorInfo:
    """What a span says about its own failure."""

    def test_no_error(self) -> None:
        """A plain span has no error."""
        assert not error_info(span()).error

    def test_error_type_and_status(self) -> None:
        """``error.type`` names the error; the status description is the message."""
        info = error_info(
            span(status_code=StatusCode.ERROR, status_message="rate", attributes={"error.type": "RateLimitError"})
        )
        assert (True, True, "RateLimitError", "rate") == (info.error, info.raised, info.type, info.message)

    def test_exception_event_only(self) -> None:
        """An exception event is an error but not a raised one."""
        info = error_info(span(events=(_exception("ValueError", "bad"),)))
        assert (True, False, "ValueError", "bad") == (info.error, info.raised, info.type, info.message)

    def test_other_falls_back(self) -> None:
        """util-genai's ``_OTHER`` gives way to the status description's leading phrase."""
        info = error_info(
            span(
                status_code=StatusCode.ERROR,
                status_message="Max turns exceeded: {}",
                attributes={"error.type": "_OTHER"},
            )
        )
        assert "Max turns exceeded" == info.type

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("GraphRecursionError('Recursion limit of 25 reached')", "GraphRecursionError"),
            ("Max turns exceeded: {'max_turns': 10}", "Max turns exceeded"),
            ("{'message': 'x'}", None),
        ],
    )
    def test_leading_phrase(self, text: str, expected: str | None) -> None:
        """The leading phrase stops at ``:``, ``(`` or a brace."""
        assert expected == leading_phrase(text)


_ODD: Final = st.one_of(
    st.none(), st.integers(-3, 3), st.booleans(), st.floats(), st.text(max_size=3), st.lists(st.integers())
)


class TestUsageAndModel:
    """The first-key fast paths of ``tokens`` and ``model`` read what the key-by-key readers read."""

    @settings(max_examples=300)
    @given(st.lists(_ODD, min_size=6, max_size=6))
    def test_same_as_key_by_key(self, values: list[Any]) -> None:
        """Any values under the first two usage and model keys give the key-by-key result."""
        keys = (*INPUT_TOKEN_KEYS[:2], *OUTPUT_TOKEN_KEYS[:2], *MODEL_KEYS[:2])
        attrs: dict[str, Any] = {k: v for k, v in zip(keys, values, strict=True) if v is not None}
        slow = (_count(attrs, INPUT_TOKEN_KEYS), _count(attrs, OUTPUT_TOKEN_KEYS)), first_str(attrs, MODEL_KEYS)
        assert (tokens(attrs), model(attrs)) == slow


class TestFinishReasons:
    """Finish reasons from every spelling, normalised."""

    @pytest.mark.parametrize(
        ("attributes", "expected"),
        [
            ({"gen_ai.response.finish_reasons": ["stop", "Content-Filter"]}, ("stop", "content_filter")),
            ({"gen_ai.response.finish_reasons": '["length"]'}, ("length",)),
            ({"gen_ai.response.finish_reason": "stop"}, ("stop",)),
            ({"llm.finish_reason": "SAFETY"}, ("safety",)),
            ({"ai.response.finishReason": "content-filter"}, ("content_filter",)),
            (
                {"gen_ai.completion.0.finish_reason": "stop", "gen_ai.completion.1.finish_reason": "refusal"},
                ("stop", "refusal"),
            ),
            (
                {"gen_ai.output.messages": '[{"role":"assistant","parts":[],"finish_reason":"content_filter"}]'},
                ("content_filter",),
            ),
            ({"gen_ai.output.messages": [{"role": "assistant", "parts": [], "finish_reason": "stop"}]}, ("stop",)),
            ({"gen_ai.response.finish_reasons": ["FinishReason.PROHIBITED_CONTENT"]}, ("prohibited_content",)),
            ({"gen_ai.response.finish_reasons": 7}, ()),
            # the output messages are read only when no finish key said anything (the one-reason fast path)
            (
                {
                    "gen_ai.response.finish_reasons": ["stop"],
                    "gen_ai.output.messages": '[{"role":"assistant","parts":[],"finish_reason":"length"}]',
                },
                ("stop",),
            ),
            (
                {"gen_ai.response.finish_reasons": ["stop"], "gen_ai.completion.0.finish_reason": "length"},
                ("stop", "length"),
            ),
        ],
    )
    def test_sources(self, attributes: dict[str, Any], expected: tuple[str, ...]) -> None:
        """Each source yields normalised reasons."""
        assert expected == finish_reasons(attributes)


class TestMaxIterations:
    """Every iteration-limit marker sets ``hit_max_iterations`` and status LIMIT_HIT."""

    @pytest.mark.parametrize(
        ("where", "attributes", "overrides"),
        [
            ("root", {}, {"events": (_exception("langgraph.errors.GraphRecursionError"),)}),
            ("root", {"error.type": "GraphRecursionError"}, {"status_code": StatusCode.ERROR}),
            ("root", {}, {"events": (_exception("agents.exceptions.MaxTurnsExceeded"),)}),
            ("root", {"error.type": "ModelCallLimitExceededError"}, {}),
            ("root", {"error.type": "ToolCallLimitExceededError"}, {}),
            ("root", {}, {"status_code": StatusCode.ERROR, "status_message": "Max turns exceeded: {'max_turns': 10}"}),
            (
                "root",
                {"error.type": "_OTHER"},
                {"status_code": StatusCode.ERROR, "status_message": "{'message': 'Max turns exceeded', 'data': {}}"},
            ),
            (
                "root",
                {},
                {"status_code": StatusCode.ERROR, "status_message": "GraphRecursionError('Recursion limit of 25')"},
            ),
            ("root", {}, {"status_code": StatusCode.ERROR, "status_message": "see GRAPH_RECURSION_LIMIT"}),
            ("root", {"output.value": "Agent stopped due to iteration limit or time limit."}, {}),
            ("root", {"traceloop.entity.output": '{"output": "Agent stopped due to max iterations."}'}, {}),
            ("llm", {"output.value": "Sorry, need more steps to process this request."}, {}),
            (
                "root",
                {
                    "gen_ai.output.messages": [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "Model call limits exceeded: run limit (5/5)"}],
                        }
                    ]
                },
                {},
            ),
            ("root", {"ai.response.text": "'search' tool call limit reached"}, {}),
            ("llm", {"gen_ai.input.messages": f'[{{"role":"assistant","content":"{CREWAI_PROMPT}"}}]'}, {}),
            (
                "llm",
                {"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": CREWAI_PROMPT},
                {},
            ),
            ("root", {}, {"events": (_exception("RuntimeError", "Recursion limit of 10 reached"),)}),
            ("root", {"vigil.max_iterations_hit": True}, {}),
            ("root", {"vigil.max_iterations_hit": "true"}, {}),
            ("root", {"vigil.iterations": 10, "vigil.max_iterations": 10}, {}),
        ],
    )
    def test_marker(self, where: str, attributes: dict[str, Any], overrides: dict[str, Any]) -> None:
        """The marker is detected."""
        run = _run_with(where, attributes, **overrides)
        assert (True, RunStatus.LIMIT_HIT) == (run.hit_max_iterations, run.status)

    @pytest.mark.parametrize(
        "attributes",
        [
            {"vigil.iterations": 3, "vigil.max_iterations": 10},
            {"vigil.max_iterations_hit": False},
            {"output.value": "done"},
        ],
    )
    def test_no_marker(self, attributes: dict[str, Any]) -> None:
        """Below the limit, or plain outputs, is not a limit hit."""
        assert not _run_with("root", attributes).hit_max_iterations

    def test_tool_output_is_not_a_limit(self) -> None:
        """A tool returning marker text is not the agent stopping."""
        assert not _run_with("tool", {"output.value": "Agent stopped due to max iterations."}).hit_max_iterations


class TestSafety:
    """Every safety marker sets ``safety_blocked`` and status BLOCKED."""

    @pytest.mark.parametrize(
        ("where", "attributes", "overrides"),
        [
            ("llm", {"gen_ai.response.finish_reasons": ["content_filter"]}, {}),
            ("llm", {"gen_ai.response.finish_reasons": ["refusal"]}, {}),
            ("llm", {"gen_ai.response.finish_reasons": '["SAFETY"]'}, {}),
            ("llm", {"gen_ai.response.finish_reason": "guardrail_intervened"}, {}),
            ("llm", {"llm.finish_reason": "content_filtered"}, {}),
            ("llm", {"ai.response.finishReason": "content-filter"}, {}),
            ("llm", {"gen_ai.completion.0.finish_reason": "prohibited_content"}, {}),
            ("llm", {"gen_ai.response.finish_reasons": ["BLOCKLIST"]}, {}),
            ("llm", {"gen_ai.response.finish_reasons": ["spii"]}, {}),
            (
                "llm",
                {"gen_ai.output.messages": '[{"role":"assistant","parts":[],"finish_reason":"content_filter"}]'},
                {},
            ),
            ("root", {}, {"events": (_exception("agents.exceptions.InputGuardrailTripwireTriggered"),)}),
            ("root", {"error.type": "OutputGuardrailTripwireTriggered"}, {"status_code": StatusCode.ERROR}),
            ("tool", {"error.type": "ToolInputGuardrailTripwireTriggered"}, {"status_code": StatusCode.ERROR}),
            ("root", {}, {"events": (_exception("agents.exceptions.ModelRefusalError"),)}),
            (
                "root",
                {},
                {
                    "status_code": StatusCode.ERROR,
                    "status_message": "Guardrail tripwire triggered: {'guardrail': 'pii'}",
                },
            ),
            ("root", {"gen_ai.guardrail.triggered": True}, {}),
            ("root", {"gen_ai.guardrail.result.value": "GUARDRAIL_INTERVENED"}, {}),
            ("root", {"gen_ai.guardrail.result.value": "true"}, {}),
            ("root", {"gen_ai.guardrail.action.type": "block"}, {}),
            ("root", {"gen_ai.guardrail.verdict.type": "deny"}, {}),
            ("root", {"gen_ai.guardrail.status": "FAILED"}, {}),
            ("root", {"vigil.safety_blocked": True}, {}),
            ("root", {"vigil.guardrail.blocked": "true"}, {}),
            (
                "llm",
                {"error.type": "BadRequestError"},
                {
                    "status_code": StatusCode.ERROR,
                    "status_message": "Error code: 400 - {'error': {'code': 'content_filter'}}",
                },
            ),
        ],
    )
    def test_marker(self, where: str, attributes: dict[str, Any], overrides: dict[str, Any]) -> None:
        """The marker is detected."""
        run = _run_with(where, attributes, **overrides)
        assert (True, RunStatus.BLOCKED) == (run.safety_blocked, run.status)

    def test_openinference_guardrail_span_in_error(self) -> None:
        """An OpenInference GUARDRAIL span in error status is a block."""
        guard = node("pii_check", {"openinference.span.kind": "GUARDRAIL"}, status_code=StatusCode.ERROR)
        run = normalise(trace(node("Agent workflow", {"openinference.span.kind": "AGENT"}, guard)))
        assert run.safety_blocked

    @pytest.mark.parametrize(
        "attributes",
        [
            {"gen_ai.guardrail.result.value": "false"},
            {"gen_ai.guardrail.action.type": "allow"},
            {"gen_ai.guardrail.status": "PASSED"},
            {"gen_ai.response.finish_reasons": ["stop", "length"]},
        ],
    )
    def test_no_marker(self, attributes: dict[str, Any]) -> None:
        """Passing guardrails and ordinary finish reasons are not blocks."""
        assert not _run_with("root", attributes).safety_blocked


class TestSoftError:
    """Tool results that report an error to the model."""

    @pytest.mark.parametrize(
        ("result", "expected"),
        [
            ("Error: division by zero\n Please fix your mistakes.", True),
            ("An error occurred while running the tool. Please try again. Error: boom", True),
            ('{"content": "Error: nope", "type": "tool"}', True),
            ('{"content": "ok", "status": "error"}', True),
            ("42", False),
            ('{"content": "fine"}', False),
            ('{"\\u0073tatus": "error"}', True),  # a key spelled with an escape is read too
            ('{"temperature": 21, "unit": "C", "note": "Error: none"}', False),
            (None, False),
        ],
    )
    def test_result(self, result: str | None, expected: bool) -> None:
        """LangGraph ToolNode and Agents SDK texts are soft errors."""
        assert expected is soft_error(result)


_MARKER_VALUES = st.sampled_from(
    [True, False, "true", "blocked", "failed", "deny", "block", "guardrail_intervened", 5, 3, "Max turns exceeded",
     "Sorry, need more steps to process this request.", CREWAI_PROMPT, ["content_filter"], ["stop"],
     '{"refusal": "I cannot help with that."}']
)  # fmt: skip
_MARKER_ATTRS = st.dictionaries(
    st.sampled_from(sorted(DEFAULT_DETECTOR.watched | {"vigil.max_iterations", "openinference.span.kind", "other"})),
    _MARKER_VALUES,
    max_size=4,
)


class TestQuiet:
    """The detector's cheap pre-check never hides a limit or a block."""

    @settings(max_examples=300, deadline=None)
    @given(
        attrs=_MARKER_ATTRS,
        kind=st.sampled_from(list(StepKind)),
        status=st.sampled_from(list(StatusCode)),
        reasons=st.lists(
            st.sampled_from(["stop", "content_filter", "length", "refusal", "content filter", "Content-Filter"]),
            max_size=2,
        ),
    )
    def test_quiet_spans_give_no_evidence(
        self, attrs: dict[str, Any], kind: StepKind, status: StatusCode, reasons: list[str]
    ) -> None:
        """Whenever the pre-check says quiet, the span rules find nothing."""
        one = span(trace_id="1" * 32, span_id="2" * 16, attributes=attrs, status_code=status, status_message="x")
        err = error_info(one)
        normalised = tuple(normalise_reason(r) for r in reasons)  # as finish_reasons hands them over
        if DEFAULT_DETECTOR.quiet(one.attributes, err.error, normalised):
            found: list[Evidence] = []
            DEFAULT_DETECTOR.span(SpanFacts(one, kind, err.error, err.types, err.messages, normalised), found)
            assert [] == found
