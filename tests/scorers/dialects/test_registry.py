"""Tests for span classification, attribute readers and agent-name resolution."""

from __future__ import annotations

import pytest

from collector.model import Span
from scorers.dialects import (
    GENAI,
    LANGSMITH,
    OPENINFERENCE,
    TRACELOOP,
    UNKNOWN,
    VERCEL,
    agent_name,
    as_bool,
    as_int,
    as_json,
    classify,
    entity_name,
)
from scorers.model import StepKind
from scorers.normalise import normalise
from tests.support.spans import node, span, trace

K = StepKind


class TestClassifyByAttribute:
    """Each dialect's kind attribute decides the role."""

    @pytest.mark.parametrize(
        ("attributes", "expected"),
        [
            ({"gen_ai.operation.name": "chat"}, (K.LLM, GENAI)),
            ({"gen_ai.operation.name": "text_completion"}, (K.LLM, GENAI)),
            ({"gen_ai.operation.name": "generate_content"}, (K.LLM, GENAI)),
            ({"gen_ai.operation.name": "execute_tool"}, (K.TOOL, GENAI)),
            ({"gen_ai.operation.name": "invoke_agent"}, (K.AGENT, GENAI)),
            ({"gen_ai.operation.name": "create_agent"}, (K.OTHER, GENAI)),
            ({"gen_ai.operation.name": "invoke_workflow"}, (K.CHAIN, GENAI)),
            ({"gen_ai.operation.name": "retrieval"}, (K.RETRIEVAL, GENAI)),
            ({"gen_ai.operation.name": "embeddings"}, (K.EMBEDDING, GENAI)),
            ({"gen_ai.operation.name": "apply_guardrail"}, (K.GUARDRAIL, GENAI)),
            ({"gen_ai.operation.name": "run_guardrail"}, (K.GUARDRAIL, GENAI)),
            ({"gen_ai.operation.name": "guardrail_check"}, (K.GUARDRAIL, GENAI)),
            ({"gen_ai.operation.name": "agent_handoff"}, (K.HANDOFF, GENAI)),
            ({"openinference.span.kind": "LLM"}, (K.LLM, OPENINFERENCE)),
            ({"openinference.span.kind": "TOOL"}, (K.TOOL, OPENINFERENCE)),
            ({"openinference.span.kind": "AGENT"}, (K.AGENT, OPENINFERENCE)),
            ({"openinference.span.kind": "CHAIN"}, (K.CHAIN, OPENINFERENCE)),
            ({"openinference.span.kind": "RETRIEVER"}, (K.RETRIEVAL, OPENINFERENCE)),
            ({"openinference.span.kind": "RERANKER"}, (K.RETRIEVAL, OPENINFERENCE)),
            ({"openinference.span.kind": "EMBEDDING"}, (K.EMBEDDING, OPENINFERENCE)),
            ({"openinference.span.kind": "GUARDRAIL"}, (K.GUARDRAIL, OPENINFERENCE)),
            ({"openinference.span.kind": "EVALUATOR"}, (K.OTHER, OPENINFERENCE)),
            ({"traceloop.span.kind": "workflow"}, (K.CHAIN, TRACELOOP)),
            ({"traceloop.span.kind": "task"}, (K.CHAIN, TRACELOOP)),
            ({"traceloop.span.kind": "agent"}, (K.AGENT, TRACELOOP)),
            ({"traceloop.span.kind": "tool"}, (K.TOOL, TRACELOOP)),
            ({"llm.request.type": "chat"}, (K.LLM, TRACELOOP)),
            ({"llm.request.type": "completion"}, (K.LLM, TRACELOOP)),
            ({"gen_ai.guardrail.status": "PASSED"}, (K.GUARDRAIL, TRACELOOP)),
            ({"langsmith.span.kind": "llm"}, (K.LLM, LANGSMITH)),
            ({"langsmith.span.kind": "tool"}, (K.TOOL, LANGSMITH)),
            ({"langsmith.span.kind": "chain"}, (K.CHAIN, LANGSMITH)),
            ({"langsmith.span.kind": "retriever"}, (K.RETRIEVAL, LANGSMITH)),
        ],
    )
    def test_kind_attribute(self, attributes: dict[str, str], expected: tuple[StepKind, str]) -> None:
        """The kind attribute of each dialect maps to the expected role and dialect."""
        assert expected == classify(span(name="x", attributes=attributes))

    def test_genai_operation_wins_over_name(self) -> None:
        """``gen_ai.operation.name`` is checked before the span name."""
        assert (K.TOOL, GENAI) == classify(
            span(name="chat gpt-4o", attributes={"gen_ai.operation.name": "execute_tool"})
        )

    def test_openllmetry_genai_names(self) -> None:
        """OpenLLMetry spans with GenAI names inside a Traceloop workflow count as Traceloop."""
        one = span(name="openai.chat", attributes={"gen_ai.operation.name": "chat", "traceloop.workflow.name": "flow"})
        assert (K.LLM, TRACELOOP) == classify(one)

    def test_unknown_operation_falls_through(self) -> None:
        """An unknown GenAI operation lets the next evidence decide."""
        one = span(name="lookup.tool", attributes={"gen_ai.operation.name": "plan"})
        assert (K.TOOL, TRACELOOP) == classify(one)

    def test_openinference_handoff(self) -> None:
        """The OpenInference Agents SDK bridge's ``handoff to X`` TOOL spans are handoffs."""
        one = span(name="handoff to Billing", attributes={"openinference.span.kind": "TOOL"})
        assert (K.HANDOFF, OPENINFERENCE) == classify(one)

    def test_nothing_known(self) -> None:
        """A span with no evidence is OTHER of unknown dialect."""
        assert (K.OTHER, UNKNOWN) == classify(span(name="GET /health"))


class TestClassifyByName:
    """Span names decide when no kind attribute is present."""

    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("ai.generateText", (K.AGENT, VERCEL)),
            ("ai.streamText", (K.AGENT, VERCEL)),
            ("ai.generateObject", (K.AGENT, VERCEL)),
            ("ai.generateText.doGenerate", (K.LLM, VERCEL)),
            ("ai.streamText.doStream", (K.LLM, VERCEL)),
            ("ai.toolCall", (K.TOOL, VERCEL)),
            ("execute_tool search", (K.TOOL, GENAI)),
            ("chat gpt-4o", (K.LLM, GENAI)),
            ("invoke_agent support", (K.AGENT, GENAI)),
            ("invoke_agent", (K.AGENT, GENAI)),
            ("invoke_workflow crew", (K.CHAIN, GENAI)),
            ("lookup.tool", (K.TOOL, TRACELOOP)),
            ("my_flow.workflow", (K.CHAIN, TRACELOOP)),
            ("planner.agent", (K.AGENT, TRACELOOP)),
            ("ChatOpenAI.chat", (K.LLM, TRACELOOP)),
            ("execute_task call_model", (K.CHAIN, TRACELOOP)),
        ],
    )
    def test_name(self, name: str, expected: tuple[StepKind, str]) -> None:
        """The span name alone gives the expected role and dialect."""
        assert expected == classify(span(name=name))

    def test_vercel_operation_id(self) -> None:
        """``ai.operationId`` classifies a Vercel span whatever its name."""
        one = span(name="custom", attributes={"ai.operationId": "ai.toolCall"})
        assert (K.TOOL, VERCEL) == classify(one)

    @pytest.mark.parametrize(
        ("name", "kind", "expected"),
        [
            ("execute_tool search", K.TOOL, "search"),
            ("lookup.tool", K.TOOL, "lookup"),
            ("invoke_agent Math Tutor", K.AGENT, "Math Tutor"),
            ("planner.agent", K.AGENT, "planner"),
            ("search", K.TOOL, "search"),
        ],
    )
    def test_entity_name(self, name: str, kind: StepKind, expected: str) -> None:
        """The entity name is derived from the span-name patterns."""
        assert expected == entity_name(span(name=name), kind)


class TestReaders:
    """Attribute readers treat wrong types as absent."""

    @pytest.mark.parametrize(("value", "expected"), [(3, 3), (3.0, 3), (True, None), ("3", None), (3.5, None)])
    def test_as_int(self, value: object, expected: int | None) -> None:
        """Only ints and integral floats are ints."""
        assert expected == as_int(value)

    @pytest.mark.parametrize(("value", "expected"), [(True, True), ("true", True), ("TRUE", True), (1, False)])
    def test_as_bool(self, value: object, expected: bool) -> None:
        """Only True and the string ``true`` are true."""
        assert expected is as_bool(value)

    def test_as_json(self) -> None:
        """JSON arrays/objects are decoded; other strings and broken JSON are kept."""
        assert [1] == as_json("[1]")
        assert "hello" == as_json("hello")
        assert "[1," == as_json("[1,")


def _agent(spans: list[Span]) -> str:
    return normalise(spans).agent


class TestAgentName:
    """The agent name follows the documented order of sources."""

    def test_genai_agent_name_on_agent_span(self) -> None:
        """``gen_ai.agent.name`` of the topmost agent span wins over the workflow name."""
        spans = trace(
            node(
                "invoke_workflow crew",
                {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "crew"},
                node("invoke_agent x", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Researcher"}),
            )
        )
        assert "Researcher" == _agent(spans)

    def test_openinference_agent_span_name(self) -> None:
        """The OpenAI Agents bridge: the trace-named root is generic, the child agent names the run."""
        spans = trace(
            node(
                "Agent workflow",
                {"openinference.span.kind": "AGENT"},
                node("Triage Agent", {"openinference.span.kind": "AGENT"}),
            )
        )
        assert "Triage Agent" == _agent(spans)

    def test_openinference_agent_name_attribute(self) -> None:
        """OpenInference ``agent.name`` wins over span names."""
        spans = trace(node("run", {"openinference.span.kind": "AGENT", "agent.name": "planner"}))
        assert "planner" == _agent(spans)

    def test_langgraph_graph_name(self) -> None:
        """A LangGraph ``agent`` node is not a name; the CHAIN root's graph name is."""
        spans = trace(
            node(
                "LangGraph",
                {"openinference.span.kind": "CHAIN"},
                node(
                    "agent",
                    {"openinference.span.kind": "AGENT"},
                    node("ChatOpenAI", {"openinference.span.kind": "LLM"}),
                ),
            )
        )
        assert "LangGraph" == _agent(spans)

    def test_traceloop_agent_entity(self) -> None:
        """Traceloop: the agent entity name, before the workflow name."""
        spans = trace(
            node(
                "flow.workflow",
                {"traceloop.span.kind": "workflow", "traceloop.entity.name": "flow", "traceloop.workflow.name": "flow"},
                node("triage.agent", {"traceloop.span.kind": "agent", "traceloop.entity.name": "triage"}),
            )
        )
        assert "triage" == _agent(spans)

    def test_traceloop_workflow_name(self) -> None:
        """Traceloop without an agent span: the workflow name."""
        spans = trace(
            node("flow.workflow", {"traceloop.span.kind": "workflow", "traceloop.workflow.name": "flow"}),
        )
        assert "flow" == _agent(spans)

    def test_genai_workflow_name(self) -> None:
        """``gen_ai.workflow.name`` when no agent is named."""
        spans = trace(
            node("invoke_workflow", {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": "crew"})
        )
        assert "crew" == _agent(spans)

    def test_vercel_function_id(self) -> None:
        """Vercel: ``ai.telemetry.functionId``, never the ``ai.generateText`` span name."""
        spans = trace(node("ai.generateText", {"ai.telemetry.functionId": "weather-bot"}))
        assert "weather-bot" == _agent(spans)

    def test_service_name(self) -> None:
        """Without any agent evidence: the ``service.name`` resource attribute."""
        spans = trace(node("chat gpt-4o", {"gen_ai.operation.name": "chat"}), resource={"service.name": "svc"})
        assert "svc" == _agent(spans)

    def test_clipped(self) -> None:
        """A very long name is clipped."""
        spans = trace(node("LangGraph" * 100, {"openinference.span.kind": "CHAIN"}))
        assert 256 == len(_agent(spans))

    def test_unknown(self) -> None:
        """Nothing at all gives ``unknown``."""
        assert "unknown" == _agent(trace(node("work")))

    def test_direct_call(self) -> None:
        """``agent_name`` does not compute the top-down list when the root names the agent."""

        def boom() -> list[tuple[Span, StepKind, str]]:
            raise AssertionError("not needed")

        root = span(attributes={"gen_ai.agent.name": "a"})
        assert "a" == agent_name(root, boom)
