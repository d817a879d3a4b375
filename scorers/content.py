"""Captured content: conversation messages, tool arguments and results, final answers.

Content is opt-in in most instrumentations, so every reader here returns ``None`` or an
empty tuple when nothing was captured. Text is bounded: at most :data:`MAX_TEXT`
characters per text and :data:`MAX_MESSAGES` messages per run (the latest are kept). Where
each dialect keeps content (its keys and message shapes) is declared by its adapter in
:mod:`scorers.dialects`; this module applies the bounds and the run-level choices.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Final

from collector.model import Attributes
from scorers.dialects import (
    ANSWER_READERS,
    ARGUMENT_KEYS,
    FINAL_OUTPUT_KEYS,
    RESULT_KEYS,
    STATE_READERS,
    MessageHistory,
    as_json,
    first,
    message_pairs,
    messages_of,
)
from scorers.dialects.base import MAX_MESSAGES, MAX_TEXT, as_str, as_text, clip, content_text, dumps, loads
from scorers.model import Message

__all__ = [
    "ARGUMENT_KEYS",
    "FINAL_OUTPUT_KEYS",
    "MAX_MESSAGES",
    "MAX_TEXT",
    "RESULT_KEYS",
    "RESULT_KEY_SET",
    "TOOL_CONTENT_KEYS",
    "MessageHistory",
    "as_text",
    "bound",
    "canonical_json",
    "clip",
    "content_text",
    "final_output",
    "last_assistant",
    "message_pairs",
    "messages_of",
]

TOOL_CONTENT_KEYS: Final = frozenset((*ARGUMENT_KEYS, *RESULT_KEYS))
"""Any of these on a tool span means arguments or results were captured."""
RESULT_KEY_SET: Final = frozenset(RESULT_KEYS)
"""Any of these on a tool span means its result was captured."""
_FINAL_OUTPUT_KEY_SET: Final = frozenset(FINAL_OUTPUT_KEYS)


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


@functools.lru_cache(maxsize=1024)
def _canonical_text(value: str) -> str | None:
    # Agents call the same tool with the same arguments often (that is what loops are);
    # short argument strings are memoised so repeated calls cost a dict lookup. A loop repeats
    # within a run, so a thousand entries hold it (8,192 held up to ~8 MB of one-off arguments).
    return _canonical(value)


def _canonical(value: object) -> str | None:
    obj: object = value
    if isinstance(value, str):
        try:
            obj = loads(value) if len(value) <= MAX_TEXT * 16 else value
        except (ValueError, RecursionError):
            return clip(value)
    text = dumps(obj)
    if text is None:
        return clip(value) if isinstance(value, str) else None
    return clip(text)


def bound(found: Sequence[Message]) -> tuple[Message, ...]:
    """Keep the latest :data:`MAX_MESSAGES` messages."""
    return tuple(found[-MAX_MESSAGES:])


def final_output(attributes: Attributes) -> str | None:
    """The agent's final answer on a root/agent span, when captured.

    ``output.value`` / ``traceloop.entity.output`` / ``ai.response.text``
    (:data:`FINAL_OUTPUT_KEYS`); a JSON run state is reduced to its answer by the adapters
    (LangGraph's ``{"messages": [...]}`` gives the last message text, AgentExecutor's
    ``{"output": ...}`` the output). Else the adapters' structured answers: the last assistant
    message of ``gen_ai.output.messages``.
    """
    if not _FINAL_OUTPUT_KEY_SET.isdisjoint(attributes):  # a set test before reading key by key
        value = first(attributes, FINAL_OUTPUT_KEYS)
        if value is not None:
            return _answer(value)
    for read in ANSWER_READERS:
        if (text := read(attributes)) is not None:
            return text
    return None


def _answer(value: object) -> str | None:
    decoded = _json_string(value) if isinstance(value, str) and value.startswith('"') else as_json(value)
    if isinstance(decoded, str):
        return clip(decoded)
    if isinstance(decoded, Mapping):
        for read in STATE_READERS:
            if (text := read(decoded)) is not None:
                return clip(text)
    return as_text(value)


def _json_string(value: str) -> object:
    """Decode a JSON-encoded string (Traceloop ``json.dumps``-es entity outputs)."""
    try:
        decoded: object = loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded


def last_assistant(found: Sequence[Message]) -> str | None:
    """Content of the last assistant message, empty or blank included; None when there is none.

    An empty last answer stays empty: an earlier assistant message (a previous turn's answer in
    the history, the text beside a tool call) never stands in for it, as Google ADK's evaluation
    takes the final response event's text and nothing else
    (https://github.com/google/adk-python/blob/main/src/google/adk/evaluation/evaluation_generator.py).
    """
    for message in reversed(found):
        if message.role in ("assistant", "ai", "model"):
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
