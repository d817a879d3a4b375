"""Captured content: conversation messages, tool arguments and results, final answers.

Content is opt-in in most instrumentations, so every reader here returns ``None`` or an
empty tuple when nothing was captured. Text is bounded: at most :data:`MAX_TEXT`
characters per text and :data:`MAX_MESSAGES` messages per run (the latest are kept).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from typing import Final

from collector.model import Attributes
from scorers.dialects import as_json, as_str, first
from scorers.model import Message

MAX_TEXT: Final = 8192
"""Characters kept of one message, argument, result or final output."""

MAX_MESSAGES: Final = 200
"""Messages kept of one run's conversation."""

ARGUMENT_KEYS: Final = (
    "gen_ai.tool.call.arguments",
    "ai.toolCall.args",
    "ai.toolCall.input",
    "input.value",
    "traceloop.entity.input",
    "tool.parameters",  # OpenInference: usually the schema; a last resort only
)
RESULT_KEYS: Final = (
    "gen_ai.tool.call.result",
    "output.value",
    "traceloop.entity.output",
    "ai.toolCall.result",
    "ai.toolCall.output",
)
FINAL_OUTPUT_KEYS: Final = ("output.value", "traceloop.entity.output", "ai.response.text")
_MAX_DEPTH: Final = 4

_OI_MESSAGE_KEY: Final = re.compile(
    r"llm\.(input|output)_messages\.(\d+)\.message\."
    r"(role|content|contents\.\d+\.message_content\.text|tool_calls\.\d+\.tool_call\.function\.name)"
)
_OI_MARKERS: Final = (
    "llm.input_messages.0.message.role",
    "llm.input_messages.1.message.role",
    "llm.output_messages.0.message.role",
)
_MESSAGE_KEYS: Final = frozenset(
    (
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        *_OI_MARKERS,
        "gen_ai.prompt.0.role",
        "gen_ai.completion.0.role",
        "ai.prompt.messages",
        "ai.response.text",
    )
)
TOOL_CONTENT_KEYS: Final = frozenset((*ARGUMENT_KEYS, *RESULT_KEYS))
"""Any of these on a tool span means arguments or results were captured."""


def clip(text: str) -> str:
    """Truncate ``text`` to :data:`MAX_TEXT` characters."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


def canonical_json(value: object) -> str | None:
    """Return ``value`` as canonical JSON text when it is (or parses as) JSON, else raw text.

    Canonical means ``json.dumps(obj, sort_keys=True, separators=(",", ":"))``, so equal
    arguments compare equal whatever their key order or spacing. Clipped to
    :data:`MAX_TEXT`.
    """
    if value is None or isinstance(value, bytes):
        return None
    if isinstance(value, str) and len(value) <= _CACHED_LEN:
        return _canonical_text(value)
    return _canonical(value)


_CACHED_LEN = 1024


@functools.lru_cache(maxsize=8192)
def _canonical_text(value: str) -> str | None:
    # Agents call the same tool with the same arguments often (that is what loops are);
    # short argument strings are memoised so repeated calls cost a dict lookup.
    return _canonical(value)


def _canonical(value: object) -> str | None:
    obj: object = value
    if isinstance(value, str):
        try:
            obj = json.loads(value) if len(value) <= MAX_TEXT * 16 else value
        except (ValueError, RecursionError):
            return clip(value)
    text = _dumps(obj)
    if text is None:
        return clip(value) if isinstance(value, str) else None
    return clip(text)


def as_text(value: object) -> str | None:
    """Return a string as is, structured values as JSON text, clipped; ``None`` for nothing."""
    if isinstance(value, str):
        return clip(value)
    if value is None or isinstance(value, bytes):
        return None
    text = _dumps(value)
    return clip(text) if text is not None else None


# One shared encoder: ``json.dumps`` with non-default options builds a new one per call.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def _dumps(obj: object) -> str | None:
    """Canonical JSON text of ``obj`` (sorted keys, no spaces), or ``None`` if it cannot be encoded."""
    try:
        return _CANONICAL.encode(obj)
    except (TypeError, ValueError, RecursionError):
        return None


def messages_of(attributes: Attributes) -> list[Message]:
    """Return the input messages followed by the output messages captured on one LLM span.

    Reads, in order of preference: ``gen_ai.input.messages`` / ``gen_ai.output.messages``
    (JSON string or structured), OpenInference flattened ``llm.input_messages.{i}.message.*``
    / ``llm.output_messages.{i}.message.*``, legacy ``gen_ai.prompt.{i}.*`` /
    ``gen_ai.completion.{i}.*``, and Vercel ``ai.prompt.messages`` + ``ai.response.text``.
    """
    if _MESSAGE_KEYS.isdisjoint(attributes):
        return []
    found = _genai_messages(attributes)
    if not found and any(key in attributes for key in _OI_MARKERS):
        found = _openinference_messages(attributes)
    if not found and ("gen_ai.prompt.0.role" in attributes or "gen_ai.completion.0.role" in attributes):
        found = _indexed(attributes, "gen_ai.prompt.") + _indexed(attributes, "gen_ai.completion.")
    if not found and ("ai.prompt.messages" in attributes or "ai.response.text" in attributes):
        found = _vercel_messages(attributes)
    return found


def bound(found: Sequence[Message]) -> tuple[Message, ...]:
    """Keep the latest :data:`MAX_MESSAGES` messages."""
    return tuple(found[-MAX_MESSAGES:])


def _genai_messages(attributes: Attributes) -> list[Message]:
    found: list[Message] = []
    for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
        decoded = as_json(attributes.get(key))
        if isinstance(decoded, list):
            found.extend(m for item in decoded[-MAX_MESSAGES:] if (m := _message(item)) is not None)
    return found


def _message(item: object) -> Message | None:
    if not isinstance(item, Mapping):
        return None
    role = as_str(item.get("role"))
    if role is None:
        return None
    parts = item.get("parts")
    content = _parts_text(parts) if isinstance(parts, list) else content_text(item.get("content"))
    return Message(role=role, content=clip(content or ""))


def _parts_text(parts: list[object]) -> str:
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(as_str(part.get("content")) or "")
        elif kind == "tool_call":
            texts.append(f"tool_call {as_str(part.get('name')) or ''}({as_text(part.get('arguments')) or ''})")
        elif kind == "tool_call_response":
            texts.append(as_text(part.get("result")) or "")
    return "\n".join(texts)


def content_text(value: object, depth: int = 0) -> str | None:
    """Text of a message content: a string, or text parts (``text``/``content`` keys) joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return as_str(value.get("text")) or as_str(value.get("content"))
    if isinstance(value, list) and depth < _MAX_DEPTH:
        texts = [t for item in value[:MAX_MESSAGES] if (t := content_text(item, depth + 1))]
        return "\n".join(texts) if texts else None
    return None


def _openinference_messages(attributes: Attributes) -> list[Message]:
    slots: dict[tuple[int, int], dict[str, list[str]]] = {}
    for key, value in attributes.items():
        if not key.startswith("llm.") or not isinstance(value, str):
            continue
        match = _OI_MESSAGE_KEY.fullmatch(key)
        if match is None:
            continue
        side = 0 if match[1] == "input" else 1
        slot = slots.setdefault((side, int(match[2])), {})
        field = match[3]
        name = (
            "role"
            if field == "role"
            else "tool"
            if field.startswith("tool_calls")
            else "content"
            if field == "content"
            else "contents"
        )
        slot.setdefault(name, []).append(value)
    found: list[Message] = []
    for position in sorted(slots):
        slot = slots[position]
        if "role" not in slot:
            continue
        # ``message.content`` and ``message.contents.{i}.message_content.text`` may both hold the text
        # (the openai-agents instrumentor writes both): the whole content wins over its parts
        text = "\n".join(slot.get("content") or slot.get("contents") or [])
        if not text and "tool" in slot:
            text = "\n".join(f"tool_call {name}" for name in slot["tool"])
        found.append(Message(role=slot["role"][0], content=clip(text)))
    return found


def _indexed(attributes: Attributes, prefix: str) -> list[Message]:
    found: list[Message] = []
    for i in range(MAX_MESSAGES):
        role = attributes.get(f"{prefix}{i}.role")
        content = attributes.get(f"{prefix}{i}.content")
        if role is None and content is None:
            break
        text = content_text(as_json(content)) if content is not None else None
        found.append(Message(role=as_str(role) or "unknown", content=clip(text or "")))
    return found


def _vercel_messages(attributes: Attributes) -> list[Message]:
    decoded = as_json(attributes.get("ai.prompt.messages"))
    found = [m for item in decoded if (m := _message(item)) is not None] if isinstance(decoded, list) else []
    answer = as_str(attributes.get("ai.response.text"))
    if answer is not None:
        found.append(Message(role="assistant", content=clip(answer)))
    return found


def final_output(attributes: Attributes) -> str | None:
    """The agent's final answer on a root/agent span, when captured.

    ``output.value`` / ``traceloop.entity.output`` / ``ai.response.text``; a JSON state
    such as LangGraph's ``{"messages": [...]}`` or AgentExecutor's ``{"output": ...}`` is
    reduced to the last message text. Falls back to the last assistant message of
    ``gen_ai.output.messages``.
    """
    value = first(attributes, FINAL_OUTPUT_KEYS)
    if value is not None:
        return _answer(value)
    decoded = as_json(attributes.get("gen_ai.output.messages"))
    if isinstance(decoded, list):
        return last_assistant([m for item in decoded if (m := _message(item)) is not None])
    return None


def _answer(value: object) -> str | None:
    decoded = _json_string(value) if isinstance(value, str) and value.startswith('"') else as_json(value)
    if isinstance(decoded, str):
        return clip(decoded)
    if isinstance(decoded, Mapping):
        messages = decoded.get("messages")
        if isinstance(messages, list) and messages:
            text = _lc_message_text(messages[-1])
            if text is not None:
                return clip(text)
        if (output := as_str(decoded.get("output"))) is not None:
            return clip(output)
    return as_text(value)


def _json_string(value: str) -> object:
    """Decode a JSON-encoded string (Traceloop ``json.dumps``-es entity outputs)."""
    try:
        decoded: object = json.loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded


def _lc_message_text(item: object) -> str | None:
    """Text of a (possibly LangChain-serialised) message dict (``kwargs`` of ``dumpd``, ``data`` of
    ``message_to_dict`` as OpenInference records a LangGraph state)."""
    if not isinstance(item, Mapping):
        return as_str(item)
    kwargs = item.get("kwargs")
    if not isinstance(kwargs, Mapping):
        kwargs = item.get("data")
    source = kwargs if isinstance(kwargs, Mapping) else item
    return content_text(source.get("content"))


def last_assistant(found: Sequence[Message]) -> str | None:
    """Content of the last assistant message with text, if any."""
    for message in reversed(found):
        if message.role in ("assistant", "ai", "model") and message.content:
            return message.content
    return None


_OI_TOOL_CALL: Final = re.compile(
    r"llm\.output_messages\.(\d+)\.message\.tool_calls\.(\d+)\.tool_call\.function\.(name|arguments)"
)


def requested_tool_calls(attributes: Attributes) -> list[tuple[str, str | None]]:
    """The tool calls an LLM span's answer asked for, in order: ``(name, canonical JSON arguments)``.

    Reads OpenInference ``llm.output_messages.{i}.message.tool_calls.{j}.tool_call.function.*`` and
    OTel GenAI ``gen_ai.output.messages`` ``tool_call`` parts. Used when a tool span records its
    input in another form (LangChain passes a one-argument tool its bare value).
    """
    found: dict[tuple[int, int], dict[str, object]] = {}
    for key, value in attributes.items():
        if not key.startswith("llm.output_messages."):
            continue
        m = _OI_TOOL_CALL.fullmatch(key)
        if m is not None:
            found.setdefault((int(m.group(1)), int(m.group(2))), {})[m.group(3)] = value
    calls = [
        (name, canonical_json(entry.get("arguments")))
        for _, entry in sorted(found.items())
        if (name := as_str(entry.get("name")))
    ]
    if calls:
        return calls
    decoded = as_json(attributes.get("gen_ai.output.messages"))
    if isinstance(decoded, list):
        for message in decoded:
            parts = message.get("parts") if isinstance(message, Mapping) else None
            for part in parts if isinstance(parts, list) else ():
                if isinstance(part, Mapping) and part.get("type") == "tool_call" and (name := as_str(part.get("name"))):
                    calls.append((name, canonical_json(part.get("arguments"))))
    return calls
