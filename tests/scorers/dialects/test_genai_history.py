"""scorers.dialects.genai.History / scorers.dialects.MessageHistory: a run's model calls read in order
give what message_pairs gives for each call, the growing history parsed only where it grew."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scorers.dialects import MessageHistory, message_pairs
from scorers.dialects.base import MAX_MESSAGES

_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_MESSAGE = st.one_of(
    st.builds(lambda role, text: {"role": role, "parts": [{"type": "text", "content": text}]},
              st.sampled_from(["user", "assistant", "tool", "system"]), _TEXT),
    st.builds(lambda name, args: {"role": "assistant", "parts": [{"type": "tool_call", "name": name,
                                                                  "arguments": args}]},
              _TEXT, st.dictionaries(_TEXT, st.integers(), max_size=2)),
    st.builds(lambda text: {"role": "tool", "parts": [{"type": "tool_call_response", "response": text}]}, _TEXT),
    st.builds(lambda role, text: {"role": role, "content": text}, st.sampled_from(["user", "assistant"]), _TEXT),
    st.sampled_from([7, None, "text", {"parts": []}, [], {"role": 3}]),  # not messages: skipped, still counted
)  # fmt: skip
_STEP = st.tuples(
    st.sampled_from(["grow", "grow", "grow", "rewrite", "spaced", "trailing-space", "not-json", "object", "list",
                     "absent", "other-dialect"]),
    st.lists(_MESSAGE, max_size=4),
    st.booleans(),
)  # fmt: skip


def _calls(steps: list[tuple[str, list[Any], bool]]) -> list[dict[str, Any]]:
    """Successive model calls' attributes, the history growing as frameworks send it (and the other shapes)."""
    history: list[Any] = []
    calls = []
    for how, messages, output in steps:
        attrs: dict[str, Any] = {}
        if how in ("grow", "spaced", "trailing-space"):
            history = history + messages
        elif how == "rewrite":
            history = messages
        text = json.dumps(history, separators=(", ", ": ") if how == "spaced" else (",", ":"))
        attrs["gen_ai.input.messages"] = {
            "trailing-space": text + " ", "not-json": text[:-1], "object": json.dumps({"messages": history}),
            "list": history, "absent": None, "other-dialect": None,
        }.get(how, text)  # fmt: skip
        if how == "other-dialect":
            attrs["llm.input_messages.0.message.role"] = "user"
            attrs["llm.input_messages.0.message.content"] = "hello"
        if output:
            attrs["gen_ai.output.messages"] = json.dumps(messages[-1:])
        calls.append({k: v for k, v in attrs.items() if v is not None})
    return calls


@settings(max_examples=300, deadline=None)
@given(st.lists(_STEP, max_size=8))
def test_same_pairs_as_reading_every_call_from_scratch(steps: list[tuple[str, list[Any], bool]]) -> None:
    read = MessageHistory()
    for attrs in _calls(steps):
        assert read(attrs) == message_pairs(attrs)


def test_only_the_added_messages_are_parsed() -> None:
    """A history that grows is read as its growth: the second call's pairs are the first's plus the new ones."""
    first = [{"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
             {"role": "user", "parts": [{"type": "text", "content": "weather?"}]}]  # fmt: skip
    added = [{"role": "assistant", "parts": [{"type": "text", "content": "sunny"}]}]
    read = MessageHistory()
    assert read({"gen_ai.input.messages": json.dumps(first)}) == [("system", "be brief"), ("user", "weather?")]
    assert read({"gen_ai.input.messages": json.dumps(first + added)}) == [
        ("system", "be brief"), ("user", "weather?"), ("assistant", "sunny")
    ]  # fmt: skip


def test_a_history_past_the_message_cap_keeps_its_latest_messages() -> None:
    """Past MAX_MESSAGES the pairs are those of the latest messages, as from scratch."""
    message = [{"role": "user", "parts": [{"type": "text", "content": f"m{i}"}]} for i in range(MAX_MESSAGES + 30)]
    read = MessageHistory()
    for n in (MAX_MESSAGES - 5, MAX_MESSAGES, MAX_MESSAGES + 1, MAX_MESSAGES + 30):
        attrs = {"gen_ai.input.messages": json.dumps(message[:n])}
        found = read(attrs)
        assert found == message_pairs(attrs)
        assert len(found) == min(n, MAX_MESSAGES)
        assert found[-1] == ("user", f"m{n - 1}")
