"""The event-based GenAI form read into the attribute form (scorers.dialects.genai.lift_events)."""

from __future__ import annotations

import json
from typing import Any

from collector.model import SpanEvent
from scorers.dialects import lift_events
from scorers.model import Message, RunStatus
from scorers.normalise import normalise
from tests.support.spans import node, span, trace


def _ev(name: str, **attributes: Any) -> SpanEvent:
    return SpanEvent(name, 0, attributes)


def _blocks(*blocks: dict[str, Any]) -> str:
    return json.dumps(list(blocks))


CHAT = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 100, "gen_ai.usage.output_tokens": 20}
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "c1"}
AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "travel_agent"}
USE = {"toolUse": {"toolUseId": "c1", "name": "get_weather", "input": {"city": "Oslo"}}}


class TestLiftEvents:
    """Each event shape gives the attribute the attribute form would have carried."""

    def test_no_genai_event_returns_the_span_itself(self) -> None:
        """Exception events alone: the same object, nothing copied."""
        given = span(attributes=CHAT, events=(_ev("exception", **{"exception.type": "ValueError"}),))
        assert given is lift_events(given)

    def test_message_and_choice_events(self) -> None:
        """v1.28–1.36 message events and gen_ai.choice: messages in parts form and the finish reason."""
        events = (
            _ev("gen_ai.system.message", content=_blocks({"text": "Be brief."})),
            _ev("gen_ai.user.message", content=_blocks({"text": "Weather in Oslo?"})),
            _ev("gen_ai.choice", finish_reason="tool_use", message=_blocks(USE)),
        )
        attrs = lift_events(span(attributes=CHAT, events=events)).attributes
        assert ["tool_use"] == attrs["gen_ai.response.finish_reasons"]
        assert [
            {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
            {"role": "user", "parts": [{"type": "text", "content": "Weather in Oslo?"}]},
        ] == attrs["gen_ai.input.messages"]
        call = {"type": "tool_call", "id": "c1", "name": "get_weather", "arguments": {"city": "Oslo"}}
        assert [{"role": "assistant", "parts": [call], "finish_reason": "tool_use"}] == attrs["gen_ai.output.messages"]

    def test_chat_shaped_choice_and_tool_calls(self) -> None:
        """A choice whose message is a chat message object with tool_calls (the spec's body shape)."""
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c9", "function": {"name": "lookup", "arguments": '{"id": "A"}'}}],
        }
        attrs = lift_events(
            span(
                attributes=CHAT,
                events=(_ev("gen_ai.choice", index=0, finish_reason="tool_calls", message=json.dumps(message)),),
            )
        ).attributes
        assert ["tool_calls"] == attrs["gen_ai.response.finish_reasons"]
        parts = attrs["gen_ai.output.messages"][0]["parts"]  # type: ignore[index]
        assert [{"type": "tool_call", "id": "c9", "name": "lookup", "arguments": '{"id": "A"}'}] == parts

    def test_content_prompt_and_completion_events(self) -> None:
        """Older gen_ai.content.prompt / .completion events: a JSON message list or plain text."""
        prompt = json.dumps([{"role": "user", "content": "Hi"}])
        events = (
            _ev("gen_ai.content.prompt", **{"gen_ai.prompt": prompt}),
            _ev("gen_ai.content.completion", **{"gen_ai.completion": "Hello there."}),
        )
        run = normalise(trace(node("chat gpt-4o", CHAT, events=events)))
        assert (Message("user", "Hi"), Message("assistant", "Hello there.")) == run.messages

    def test_operation_details_event_keys(self) -> None:
        """The latest-experimental details event carries the attribute form's keys: copied as they are."""
        out = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}], "finish_reason": "stop"}]
        )
        details = _ev("gen_ai.client.inference.operation.details", **{"gen_ai.output.messages": out})
        attrs = lift_events(span(attributes=CHAT, events=(details,))).attributes
        assert out == attrs["gen_ai.output.messages"]

    def test_attributes_win_over_events(self) -> None:
        """A key the span already has is kept; the events only fill the missing ones."""
        given = span(
            attributes={**CHAT, "gen_ai.response.finish_reasons": ["stop"]},
            events=(_ev("gen_ai.choice", finish_reason="length", message="cut"),),
        )
        attrs = lift_events(given).attributes
        assert ["stop"] == attrs["gen_ai.response.finish_reasons"]
        assert "cut" == attrs["gen_ai.output.messages"][0]["parts"][0]["content"]  # type: ignore[index]

    def test_tool_span_events_are_arguments_and_result(self) -> None:
        """On execute_tool spans the tool message is the call's input and the choice its result."""
        events = (
            _ev("gen_ai.tool.message", role="tool", content='{"city": "Oslo"}', id="c1"),
            _ev("gen_ai.choice", message=_blocks({"text": "Sunny."}), id="c1"),
        )
        attrs = lift_events(span(attributes=TOOL, events=events)).attributes
        assert '{"city": "Oslo"}' == attrs["gen_ai.tool.call.arguments"]
        assert "gen_ai.output.messages" not in attrs
        assert "gen_ai.response.finish_reasons" not in attrs
        assert "Sunny." == attrs["gen_ai.tool.call.result"]

    def test_odd_values_never_raise(self) -> None:
        """Non-JSON, wrong types and empty events give what they can and nothing else."""
        events = (
            _ev("gen_ai.user.message", content="[not json"),
            _ev("gen_ai.choice", finish_reason=7, message={"unexpected": 1}),
            _ev("gen_ai.assistant.message"),
            _ev("gen_ai.content.completion", **{"gen_ai.completion": 12}),
        )
        attrs = lift_events(span(attributes=CHAT, events=events)).attributes
        assert "gen_ai.response.finish_reasons" not in attrs
        assert [{"type": "text", "content": "[not json"}] == attrs["gen_ai.input.messages"][0]["parts"]  # type: ignore[index]


class TestEventBasedRun:
    """Detection applies unchanged to a run recorded in the event form (as Strands Agents writes it)."""

    def _turn(self, finish: str, message: str) -> Any:
        return node("chat", CHAT, events=(_ev("gen_ai.choice", finish_reason=finish, message=message),))

    def test_turn_limit_cutoff(self) -> None:
        """The last model turn asked for a tool and the agent's final choice is empty: a limit hit."""
        tool = node("execute_tool get_weather", TOOL)
        final = _ev("gen_ai.choice", message="", finish_reason="cancelled")
        run = normalise(
            trace(node("invoke_agent travel_agent", AGENT, self._turn("tool_use", _blocks(USE)), tool, events=(final,)))
        )
        assert (RunStatus.LIMIT_HIT, "limit.cutoff", "") == (run.status, run.evidence[0].rule, run.final_output)

    def test_content_filter_finish_reason(self) -> None:
        """A content-filter finish reason only in a gen_ai.choice event is a block."""
        run = normalise(trace(node("invoke_agent travel_agent", AGENT, self._turn("content_filtered", "[]"))))
        assert (RunStatus.BLOCKED, "block.finish_reason") == (run.status, run.evidence[0].rule)

    def test_normal_answer_from_events(self) -> None:
        """The agent span's choice is the final output; no signal on a normal stop."""
        answer = _ev("gen_ai.choice", message="Sunny in Oslo.", finish_reason="end_turn")
        root = node(
            "invoke_agent travel_agent",
            AGENT,
            self._turn("end_turn", _blocks({"text": "Sunny in Oslo."})),
            events=(answer,),
        )
        run = normalise(trace(root))
        assert (RunStatus.OK, "Sunny in Oslo.", ()) == (run.status, run.final_output, run.evidence)
