"""Tests for captured content: messages, tool arguments and results, final answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scorers.content import MAX_MESSAGES, MAX_TEXT, as_text, bound, canonical_json, final_output, messages_of
from scorers.model import Message

GENAI_INPUT: list[Any] = [
    {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
]
GENAI_OUTPUT: list[Any] = [
    {
        "role": "assistant",
        "parts": [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}}],
        "finish_reason": "tool_call",
    }
]


class TestCanonicalJson:
    """Tool arguments become canonical JSON text."""

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ('{"b": 1, "a": [1, 2]}', '{"a":[1,2],"b":1}'),
            ({"b": 1, "a": "x"}, '{"a":"x","b":1}'),
            ("not json", "not json"),
            (None, None),
            (b"\x00", None),
            (3, "3"),
        ],
    )
    def test_value(self, value: Any, expected: str | None) -> None:
        """JSON (text or structured) is canonicalised; other text is kept raw."""
        assert expected == canonical_json(value)

    def test_matches_json_dumps(self) -> None:
        """Canonical text is exactly ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``."""
        obj = {"city": "Zürich", "n": [1.5, None, True]}
        assert json.dumps(obj, sort_keys=True, separators=(",", ":")) == canonical_json(json.dumps(obj))

    def test_key_order_does_not_matter(self) -> None:
        """The same arguments in another order give the same text."""
        assert canonical_json('{"a":1,"b":2}') == canonical_json('{ "b": 2, "a": 1 }')

    def test_bounded(self) -> None:
        """Huge values are clipped."""
        assert MAX_TEXT == len(canonical_json("x" * (MAX_TEXT * 3)) or "")
        assert MAX_TEXT == len(as_text(["y" * MAX_TEXT * 2]) or "")


class TestMessages:
    """Conversations from every content encoding."""

    def test_genai_json_string(self) -> None:
        """``gen_ai.input.messages`` / ``gen_ai.output.messages`` as JSON strings."""
        found = messages_of(
            {"gen_ai.input.messages": json.dumps(GENAI_INPUT), "gen_ai.output.messages": json.dumps(GENAI_OUTPUT)}
        )
        expected = [
            Message("system", "Be brief."),
            Message("user", "Weather in Paris?"),
            Message("assistant", 'tool_call weather({"city":"Paris"})'),
        ]
        assert expected == found

    def test_genai_structured_equals_json(self) -> None:
        """Structured (kvlist/array) values read the same as their JSON strings."""
        structured = messages_of({"gen_ai.input.messages": GENAI_INPUT, "gen_ai.output.messages": GENAI_OUTPUT})
        text = messages_of(
            {"gen_ai.input.messages": json.dumps(GENAI_INPUT), "gen_ai.output.messages": json.dumps(GENAI_OUTPUT)}
        )
        assert text == structured

    def test_openinference_flattened(self) -> None:
        """OpenInference flattened message keys, including ``contents`` parts and tool calls."""
        attrs = {
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Be brief.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.contents.0.message_content.type": "text",
            "llm.input_messages.1.message.contents.0.message_content.text": "Hi",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "search",
        }
        expected = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "tool_call search")]
        assert expected == messages_of(attrs)

    def test_openinference_starting_at_one(self) -> None:
        """The Agents SDK bridge numbers input messages from 1 when there are no instructions."""
        attrs = {"llm.input_messages.1.message.role": "user", "llm.input_messages.1.message.content": "Hi"}
        assert [Message("user", "Hi")] == messages_of(attrs)

    def test_legacy_indexed(self) -> None:
        """Legacy ``gen_ai.prompt.{i}`` / ``gen_ai.completion.{i}`` keys."""
        attrs = {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "Hi",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Hello",
        }
        assert [Message("user", "Hi"), Message("assistant", "Hello")] == messages_of(attrs)

    def test_vercel(self) -> None:
        """Vercel ``ai.prompt.messages`` with content parts, plus ``ai.response.text``."""
        prompt = [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
        attrs = {"ai.prompt.messages": json.dumps(prompt), "ai.response.text": "Hello"}
        assert [Message("user", "Hi"), Message("assistant", "Hello")] == messages_of(attrs)

    def test_nothing_captured(self) -> None:
        """No content keys, no messages."""
        assert [] == messages_of({"gen_ai.operation.name": "chat"})

    def test_garbage(self) -> None:
        """Malformed message values are skipped, not raised on."""
        assert [] == messages_of({"gen_ai.input.messages": [1, "x", {"parts": 3}], "gen_ai.output.messages": "[oops"})

    def test_bound(self) -> None:
        """At most MAX_MESSAGES messages are kept, the latest ones."""
        many = [Message("user", str(i)) for i in range(MAX_MESSAGES + 5)]
        kept = bound(many)
        assert (MAX_MESSAGES, "5") == (len(kept), kept[0].content)


class TestFinalOutput:
    """The final answer on the root span."""

    @pytest.mark.parametrize(
        ("attributes", "expected"),
        [
            ({"output.value": "42"}, "42"),
            ({"traceloop.entity.output": '{"output": "done"}'}, "done"),
            ({"output.value": '{"messages": [{"content": "hi"}, {"kwargs": {"content": "bye"}}]}'}, "bye"),
            ({"ai.response.text": "sunny"}, "sunny"),
            (
                {
                    "gen_ai.output.messages": [
                        *GENAI_OUTPUT,
                        {"role": "assistant", "parts": [{"type": "text", "content": "ok"}]},
                    ]
                },
                "ok",
            ),
            ({"traceloop.entity.output": '"done"'}, "done"),
            ({}, None),
        ],
    )
    def test_sources(self, attributes: dict[str, Any], expected: str | None) -> None:
        """Each output key gives the answer text."""
        assert expected == final_output(attributes)
