"""Tests for normalising the spans of one trace into a Run, per dialect and per edge case."""

from __future__ import annotations

import json
from dataclasses import replace
from operator import attrgetter
from typing import Any

from collector.model import Span, SpanEvent, StatusCode
from scorers.model import Message, Run, RunStatus, StepKind, ToolCall
from scorers.normalise import normalise
from tests.support.spans import agent_run, node, trace

OI_LLM = {"openinference.span.kind": "LLM"}
OI_TOOL = {"openinference.span.kind": "TOOL"}
OI_AGENT = {"openinference.span.kind": "AGENT"}


def _oi_llm(prompt: int, completion: int, **extra: Any) -> dict[str, Any]:
    return {**OI_LLM, "llm.token_count.prompt": prompt, "llm.token_count.completion": completion, **extra}


def _kinds(run: Run) -> list[StepKind]:
    return [s.kind for s in run.steps]


class TestGenAI:
    """OTel GenAI conventions, latest-experimental and legacy names."""

    def test_latest_experimental_run(self) -> None:
        """Counts, tokens from chat spans only (not the agent aggregate), agent, dialect and rule attributes."""
        run = normalise(agent_run(llm_calls=3, tools_per_call=2, input_tokens=100, output_tokens=20))
        summary = (run.agent, run.dialect, run.status, run.llm_calls, run.tool_calls, run.tool_errors)
        assert ("support-bot", "genai", RunStatus.OK, 3, 4, 0) == summary
        assert (300, 60) == (run.input_tokens, run.output_tokens)
        assert (True, 8, "support-bot") == (run.complete, run.span_count, run.service)
        assert {"service.name": "support-bot", "deployment.environment.name": "test"} == run.attributes
        assert ("tool_call",) == run.steps[1].finish_reasons

    def test_content_captured(self) -> None:
        """With content capture: the conversation, the final answer and tool arguments/results."""
        run = normalise(agent_run(llm_calls=2, tools_per_call=1, content=True))
        roles = [m.role for m in run.messages]
        assert ["user", "assistant", "tool", "assistant"] == roles
        assert ("Paris 18C, Rome 24C.", '{"city":"Paris"}', "18C") == (
            run.final_output,
            run.tools[0].arguments,
            run.tools[0].result,
        )

    def test_legacy_names(self) -> None:
        """Legacy ``gen_ai.system`` / ``prompt_tokens`` spans from openai-v2 under an app span."""
        chat = {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini"}
        spans = trace(
            node(
                "POST /ask",
                {},
                node(
                    "chat gpt-4o-mini", {**chat, "gen_ai.usage.prompt_tokens": 11, "gen_ai.usage.completion_tokens": 3}
                ),
                node(
                    "chat gpt-4o-mini", {**chat, "gen_ai.usage.prompt_tokens": 13, "gen_ai.usage.completion_tokens": 5}
                ),
            ),
            resource={"service.name": "asker"},
        )
        run = normalise(spans)
        assert ("asker", 2, 24, 8, "gpt-4o-mini") == (
            run.agent,
            run.llm_calls,
            run.input_tokens,
            run.output_tokens,
            run.steps[1].model,
        )

    def test_tool_call_fields(self) -> None:
        """Tool name, call id, canonical arguments and result are read."""
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"unit": "C", "city": "Paris"}',
            "gen_ai.tool.call.result": "18C",
        }
        run = normalise(
            trace(node("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, node("execute_tool weather", tool)))
        )
        expected = ToolCall(run.tools[0].span_id, "weather", "call_1", '{"city":"Paris","unit":"C"}', "18C", None)
        assert expected == run.tools[0]

    def test_optimal_steps_and_vigil_attributes(self) -> None:
        """``vigil.optimal_steps`` and other scalar ``vigil.*`` root attributes are kept."""
        attrs = {
            "gen_ai.operation.name": "invoke_agent",
            "vigil.optimal_steps": 4,
            "vigil.tenant": "acme",
            "vigil.blob": [1],
        }
        run = normalise(trace(node("invoke_agent a", attrs)))
        assert (4, {"vigil.optimal_steps": 4, "vigil.tenant": "acme"}) == (run.optimal_steps, dict(run.attributes))


class TestOpenInference:
    """OpenInference LangGraph/LangChain and OpenAI Agents SDK bridge shapes."""

    def _langgraph(self, tool_output: str = "18C") -> list[Span]:
        state = json.dumps({"messages": [{"type": "human", "content": "hi"}, {"type": "ai", "content": "It is 18C."}]})
        return trace(
            node(
                "LangGraph",
                {"openinference.span.kind": "CHAIN", "output.value": state},
                node(
                    "agent",
                    OI_AGENT,
                    node(
                        "ChatOpenAI",
                        _oi_llm(0, 0),
                        node("ChatCompletion", _oi_llm(120, 30, **{"llm.model_name": "gpt-4o"})),
                    ),
                ),
                node(
                    "tools",
                    {"openinference.span.kind": "CHAIN"},
                    node("weather", {**OI_TOOL, "tool.name": "weather", "output.value": tool_output}),
                ),
                node("agent", OI_AGENT, node("ChatOpenAI", _oi_llm(160, 12))),
            )
        )

    def test_langgraph_run(self) -> None:
        """Graph name, nested LLM de-duplicated with usage filled in, and the final answer from the state."""
        run = normalise(self._langgraph())
        assert ("LangGraph", "openinference", 2, 1, 280, 42) == attrgetter(
            "agent", "dialect", "llm_calls", "tool_calls", "input_tokens", "output_tokens"
        )(run)
        outer = run.steps[2]
        assert (StepKind.LLM, "gpt-4o", 120) == (outer.kind, outer.model, outer.input_tokens)
        assert StepKind.OTHER == run.steps[3].kind
        assert "It is 18C." == run.final_output

    def test_langgraph_soft_tool_error(self) -> None:
        """A ToolNode ``Error:`` result counts as a tool error with its text."""
        run = normalise(self._langgraph(tool_output="Error: city not found\n Please fix your mistakes."))
        assert (1, "Error: city not found\n Please fix your mistakes.") == (run.tool_errors, run.tools[0].error)

    def _agents_sdk(self, agent_status: str) -> list[Span]:
        return trace(
            node(
                "Agent workflow",
                OI_AGENT,
                node(
                    "Triage",
                    OI_AGENT,
                    node("response", _oi_llm(50, 5)),
                    node(
                        "lookup",
                        {**OI_TOOL, "tool.name": "lookup"},
                        status_code=StatusCode.ERROR,
                        status_message="Error running tool (non-fatal): {'tool_name': 'lookup'}",
                    ),
                    status_code=StatusCode.ERROR,
                    status_message=agent_status,
                ),
                status_code=StatusCode.OK,
            )
        )

    def test_agents_sdk_max_turns(self) -> None:
        """``Max turns exceeded: {...}`` on the agent span is a limit hit; the OK root is not errored."""
        run = normalise(self._agents_sdk("Max turns exceeded: {'max_turns': 10}"))
        assert ("Triage", RunStatus.LIMIT_HIT, True, False, 1) == attrgetter(
            "agent", "status", "hit_max_iterations", "errored", "tool_errors"
        )(run)
        assert "Error running tool (non-fatal): {'tool_name': 'lookup'}" == run.tools[0].error

    def test_agents_sdk_guardrail(self) -> None:
        """``Guardrail tripwire triggered: {...}`` on the agent span is a safety block."""
        run = normalise(self._agents_sdk("Guardrail tripwire triggered: {'guardrail': 'pii_check'}"))
        assert (RunStatus.BLOCKED, True, False) == (run.status, run.safety_blocked, run.hit_max_iterations)

    def test_conversation_from_last_llm_call(self) -> None:
        """Messages are the last LLM call's inputs plus its output."""
        first = _oi_llm(
            1, 1, **{"llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": "a"}
        )
        last = _oi_llm(
            1,
            1,
            **{
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "a",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "b",
            },
        )
        run = normalise(trace(node("root", OI_AGENT, node("llm", first), node("llm", last), node("tool", OI_TOOL))))
        assert (Message("user", "a"), Message("assistant", "b")) == run.messages
        assert "b" == run.final_output


class TestTraceloop:
    """Traceloop / OpenLLMetry decorator and LangChain shapes."""

    def _run(self, **root: Any) -> list[Span]:
        llm = {"llm.request.type": "chat", "gen_ai.usage.prompt_tokens": 40, "gen_ai.usage.completion_tokens": 4}
        tool = {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "lookup",
            "traceloop.entity.input": '{"args": [], "kwargs": {"q": "x"}}',
        }
        workflow = {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "flow",
            "traceloop.workflow.name": "flow",
        }
        return trace(
            node(
                "flow.workflow",
                {**workflow, "traceloop.entity.output": '"done"'},
                node(
                    "triage.agent",
                    {"traceloop.span.kind": "agent", "traceloop.entity.name": "triage"},
                    node("openai.chat", llm),
                    node("lookup.tool", tool),
                ),
                **root,
            )
        )

    def test_run(self) -> None:
        """Agent entity name, legacy token names, tool arguments and the workflow output."""
        run = normalise(self._run())
        assert ("triage", "traceloop", 1, 1, 40, 4, "done") == attrgetter(
            "agent", "dialect", "llm_calls", "tool_calls", "input_tokens", "output_tokens", "final_output"
        )(run)
        assert '{"args":[],"kwargs":{"q":"x"}}' == run.tools[0].arguments

    def test_root_error(self) -> None:
        """A workflow in error without limit markers is an ERROR run."""
        run = normalise(self._run(status_code=StatusCode.ERROR))
        assert (False, RunStatus.ERROR) == (run.hit_max_iterations, run.status)

    def test_graph_recursion_error(self) -> None:
        """A raised GraphRecursionError errors the run, but the status says limit hit."""
        root = {"traceloop.span.kind": "workflow", "error.type": "GraphRecursionError"}
        run = normalise(trace(node("LangGraph.workflow", root, status_code=StatusCode.ERROR)))
        assert (True, True, RunStatus.LIMIT_HIT, "GraphRecursionError") == attrgetter(
            "errored", "hit_max_iterations", "status", "error_type"
        )(run)


class TestVercel:
    """Vercel AI SDK v4 and v5 attribute names."""

    def _run(self, usage: tuple[str, str], tool_keys: tuple[str, str]) -> Run:
        inp, out = usage
        args, result = tool_keys
        spans = trace(
            node(
                "ai.generateText",
                {
                    "ai.operationId": "ai.generateText",
                    "ai.telemetry.functionId": "weather-bot",
                    inp: 500,
                    out: 50,
                    "ai.response.text": "Sunny.",
                },
                node(
                    "ai.generateText.doGenerate",
                    {"ai.model.id": "gpt-4o", inp: 200, out: 20, "ai.response.finishReason": "tool-calls"},
                ),
                node(
                    "ai.toolCall",
                    {"ai.toolCall.name": "weather", "ai.toolCall.id": "t1", args: '{"city":"Paris"}', result: "18C"},
                ),
                node(
                    "ai.generateText.doGenerate",
                    {"ai.model.id": "gpt-4o", inp: 300, out: 30, "ai.response.finishReason": "stop"},
                ),
            )
        )
        return normalise(spans)

    def test_v4(self) -> None:
        """v4 ``promptTokens``/``completionTokens`` and ``ai.toolCall.args``/``result``."""
        run = self._run(
            ("ai.usage.promptTokens", "ai.usage.completionTokens"), ("ai.toolCall.args", "ai.toolCall.result")
        )
        assert ("weather-bot", "vercel", 2, 500, 50, "Sunny.") == attrgetter(
            "agent", "dialect", "llm_calls", "input_tokens", "output_tokens", "final_output"
        )(run)
        assert ToolCall(run.tools[0].span_id, "weather", "t1", '{"city":"Paris"}', "18C") == run.tools[0]

    def test_v5(self) -> None:
        """v5 ``inputTokens``/``outputTokens`` and ``ai.toolCall.input``/``output``."""
        run = self._run(("ai.usage.inputTokens", "ai.usage.outputTokens"), ("ai.toolCall.input", "ai.toolCall.output"))
        assert (500, 50, '{"city":"Paris"}', "18C") == (
            run.input_tokens,
            run.output_tokens,
            run.tools[0].arguments,
            run.tools[0].result,
        )


class TestLangSmith:
    """LangSmith OTel export."""

    def test_run(self) -> None:
        """Lower-case ``langsmith.span.kind`` values classify the spans."""
        llm = {"langsmith.span.kind": "llm", "gen_ai.usage.input_tokens": 9, "gen_ai.usage.output_tokens": 1}
        spans = trace(
            node(
                "agent",
                {"langsmith.span.kind": "chain"},
                node("ChatOpenAI", llm),
                node("search", {"langsmith.span.kind": "tool"}),
            )
        )
        run = normalise(spans)
        assert ("langsmith", 1, 1, 9) == (run.dialect, run.llm_calls, run.tool_calls, run.input_tokens)


class TestStatus:
    """Errored vs limit hit vs blocked precedence."""

    def _run(self, **root: Any) -> Run:
        return normalise(
            trace(node("invoke_agent a", {"gen_ai.operation.name": "invoke_agent", **root.pop("attrs", {})}, **root))
        )

    def test_errored(self) -> None:
        """A root in error without markers is ERROR with its error type."""
        run = self._run(status_code=StatusCode.ERROR, attrs={"error.type": "RateLimitError"})
        assert (RunStatus.ERROR, True, "RateLimitError") == (run.status, run.errored, run.error_type)

    def test_exception_type_names_error(self) -> None:
        """Without ``error.type`` the exception type names the error."""
        exc = SpanEvent("exception", attributes={"exception.type": "openai.APITimeoutError"})
        run = self._run(status_code=StatusCode.ERROR, events=(exc,))
        assert "openai.APITimeoutError" == run.error_type

    def test_limit_beats_error(self) -> None:
        """An errored run that hit a limit is LIMIT_HIT and still errored."""
        run = self._run(status_code=StatusCode.ERROR, attrs={"error.type": "MaxTurnsExceeded"})
        assert (RunStatus.LIMIT_HIT, True) == (run.status, run.errored)

    def test_block_beats_error(self) -> None:
        """An errored run blocked by a guardrail is BLOCKED."""
        run = self._run(status_code=StatusCode.ERROR, attrs={"error.type": "InputGuardrailTripwireTriggered"})
        assert (RunStatus.BLOCKED, True) == (run.status, run.errored)

    def test_limit_beats_block(self) -> None:
        """With both markers the limit wins."""
        run = self._run(attrs={"vigil.max_iterations_hit": True, "vigil.safety_blocked": True})
        assert (RunStatus.LIMIT_HIT, True, True) == (run.status, run.hit_max_iterations, run.safety_blocked)

    def test_child_error_does_not_error_run(self) -> None:
        """A failed tool that the agent handled does not error the run."""
        tool = node("execute_tool t", {"gen_ai.operation.name": "execute_tool"}, status_code=StatusCode.ERROR)
        run = normalise(trace(node("invoke_agent a", {"gen_ai.operation.name": "invoke_agent"}, tool)))
        assert (RunStatus.OK, False, 1) == (run.status, run.errored, run.tool_errors)


class TestTwoInstrumentations:
    """One call recorded by two instrumentations counts once; distinct calls never merge."""

    def _tool(self, name: str, call_id: str | None = None) -> dict[str, Any]:
        extra = {"gen_ai.tool.call.id": call_id} if call_id else {}
        return {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **extra}

    def test_same_call_id_while_running(self) -> None:
        """Two sibling tool spans with one call id that overlap in time are one call."""
        spans = trace(
            node(
                "invoke_agent a",
                {"gen_ai.operation.name": "invoke_agent"},
                node("execute_tool t", self._tool("t", "c1"), duration_ns=50_000_000),
                node("t", {**OI_TOOL, "tool.name": "t", "tool.id": "c1"}),
            )
        )
        spans[2] = replace(spans[2], start_ns=spans[1].start_ns + 1_000, end_ns=spans[1].end_ns - 1_000)
        run = normalise(spans)
        assert (1, ["tool", "other"]) == (run.tool_calls, [s.kind.value for s in run.steps[1:]])

    def test_same_call_id_one_after_the_other(self) -> None:
        """The same call id run again after the first ended is a second call (a retry)."""
        spans = trace(
            node(
                "invoke_agent a",
                {"gen_ai.operation.name": "invoke_agent"},
                node("execute_tool t", self._tool("t", "c1")),
                node("execute_tool t", self._tool("t", "c1")),
            )
        )
        assert 2 == normalise(spans).tool_calls

    def test_nested_tool_of_another_name(self) -> None:
        """A tool that calls another tool (an agent as a tool) makes two calls."""
        spans = trace(
            node(
                "invoke_agent a",
                {"gen_ai.operation.name": "invoke_agent"},
                node("execute_tool outer", self._tool("outer"), node("execute_tool inner", self._tool("inner"))),
            )
        )
        assert (2, ["outer", "inner"]) == (normalise(spans).tool_calls, [t.name for t in normalise(spans).tools])

    def test_nested_same_name_twin(self) -> None:
        """A tool span inside a tool span of the same name is that call; its error counts."""
        spans = trace(
            node(
                "invoke_agent a",
                {"gen_ai.operation.name": "invoke_agent"},
                node(
                    "lookup",
                    {**OI_TOOL, "tool.name": "lookup"},
                    node("execute_tool lookup", self._tool("lookup", "c7"), status_code=StatusCode.ERROR),
                ),
            )
        )
        run = normalise(spans)
        assert (1, 1, "c7") == (run.tool_calls, run.tool_errors, run.tools[0].call_id)

    def test_one_instrumentation_never_twins(self) -> None:
        """A tool that calls itself (one instrumentation, same name) makes two calls."""
        spans = trace(
            node(
                "invoke_agent a",
                {"gen_ai.operation.name": "invoke_agent"},
                node(
                    "execute_tool walk", self._tool("walk", "c1"), node("execute_tool walk", self._tool("walk", "c1"))
                ),
            )
        )
        assert 2 == normalise(spans).tool_calls


def test_json_through_orjson_reads_and_writes_what_the_standard_library_does() -> None:
    """``loads`` and ``dumps`` take orjson's fast path only where its result is the standard library's."""
    import json

    from scorers.dialects.base import dumps, loads

    for text in ('{"b": [1, 2.5, null], "a": "é"}', "[NaN, Infinity]", '"\\ud800"', '{"k": -0.0}'):
        assert json.dumps(json.loads(text)) == json.dumps(loads(text))
    for value in ({"b": 1, "a": [True, None]}, {"x": 6.103515625e-05}, {"x": float("nan")}, {"é": "ü\x7f"}, {1: 2}):
        assert json.dumps(value, sort_keys=True, separators=(",", ":"), default=str) == dumps(value)


def test_tool_call_response_parts_are_read_by_response() -> None:
    """A GenAI tool-call response part carries its text in ``response`` (the semantic conventions' message
    schema; captured Traceloop traces write it so); ``result`` is read where an instrumentation uses it."""
    from scorers.dialects.genai import message_of

    response = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "21 C in Paris"}]}
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "result": {"temp": 21}}]}
    assert "21 C in Paris" == message_of(response).content  # type: ignore[union-attr]
    assert '{"temp":21}' == message_of(result).content  # type: ignore[union-attr]


class TestSkippedRequests:
    """A model span that ended with its framework's skip exception made no request: no LLM call."""

    def test_skip_exception_is_no_llm_call(self) -> None:
        skip = SpanEvent("exception", 0, {"exception.type": "pydantic_ai.exceptions.SkipModelRequest"})
        chat = {"gen_ai.operation.name": "chat"}
        skipped = node(
            "chat gpt-4o", chat, status_code=StatusCode.ERROR, status_message="SkipModelRequest: ", events=(skip,)
        )
        run = normalise(trace(node("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent"}, skipped)))
        assert (0, RunStatus.OK, StepKind.OTHER) == (run.llm_calls, run.status, run.steps[1].kind)

    def test_other_model_errors_still_count(self) -> None:
        boom = SpanEvent("exception", 0, {"exception.type": "openai.InternalServerError"})
        failed = node("chat gpt-4o", {"gen_ai.operation.name": "chat"}, status_code=StatusCode.ERROR, events=(boom,))
        run = normalise(trace(node("invoke_agent bot", {"gen_ai.operation.name": "invoke_agent"}, failed)))
        assert 1 == run.llm_calls
