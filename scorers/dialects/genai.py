"""OpenTelemetry GenAI semantic conventions: ``gen_ai.operation.name`` spans.

Both the legacy (≤ v1.36) and the latest-experimental attribute names: roles from
``gen_ai.operation.name`` (or an ``<operation> <target>`` span name such as ``chat gpt-4o``
or ``execute_tool search``), usage ``gen_ai.usage.*``, model ``gen_ai.response.model`` /
``gen_ai.request.model``, finish reasons ``gen_ai.response.finish_reasons`` (or inside
``gen_ai.output.messages``), conversation ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (JSON string or structured, ``parts`` or ``content``), agent
``gen_ai.agent.name``, workflow ``gen_ai.workflow.name``.

The event-based form (:func:`lift_events`). Some instrumentations record a model call's
conversation as *span events* instead of span attributes (GenAI semantic conventions up to
v1.36, ``gen-ai-events.md``; Strands Agents' tracer by default, older OpenLLMetry/OpenLIT releases):

* ``gen_ai.system.message`` / ``gen_ai.user.message`` / ``gen_ai.assistant.message`` /
  ``gen_ai.tool.message``: one input message each, ``content`` (text, a JSON list of content
  blocks, or a JSON message), ``role`` and ``tool_calls`` optional;
* ``gen_ai.choice``: one output choice, ``finish_reason``, ``message`` (text, content blocks or a
  ``{"role", "content", "tool_calls"}`` message), ``index``;
* ``gen_ai.content.prompt`` / ``gen_ai.content.completion``: the whole prompt / completion in
  ``gen_ai.prompt`` / ``gen_ai.completion`` (a JSON list of messages, or plain text);
* ``gen_ai.client.inference.operation.details``: the attribute form's own keys
  (``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions`` …)
  carried on an event.

:func:`lift_events` writes what these events say into the keys the attribute form uses —
``gen_ai.input.messages`` / ``gen_ai.output.messages`` as GenAI ``parts`` messages,
``gen_ai.response.finish_reasons``, and on ``execute_tool`` spans ``gen_ai.tool.call.arguments``
/ ``gen_ai.tool.call.result`` — so every reader and detection rule applies unchanged. A key the
span already has always wins: the events only fill what the attributes lack. Only spans with a
``gen_ai.*`` event are copied; the rest are returned as they are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Final, cast

import orjson

from collector.model import Attributes, Span, SpanEvent
from scorers.dialects.base import (
    MAX_MESSAGES,
    MAX_PARSE_CHARS,
    MAX_TEXT,
    Adapter,
    Found,
    Naming,
    add_reasons,
    as_json,
    as_str,
    as_text,
    attr_of,
    clip,
    content_text,
)
from scorers.model import Message, StepKind

GENAI: Final = "genai"
_K = StepKind

OPERATIONS: Final[Mapping[str, StepKind]] = {
    "chat": _K.LLM,
    "text_completion": _K.LLM,
    "generate_content": _K.LLM,
    "response": _K.LLM,  # OTel openai-agents-v2 bridge: one Responses API call
    "llm_request": _K.LLM,  # OpenLLMetry custom operation
    "execute_tool": _K.TOOL,
    "invoke_agent": _K.AGENT,
    "create_agent": _K.OTHER,
    "invoke_workflow": _K.CHAIN,
    "execute_task": _K.CHAIN,
    "retrieval": _K.RETRIEVAL,
    "vector_db_retrieve": _K.RETRIEVAL,
    "embeddings": _K.EMBEDDING,
    "apply_guardrail": _K.GUARDRAIL,
    "run_guardrail": _K.GUARDRAIL,
    "guardrail_check": _K.GUARDRAIL,
    "agent_handoff": _K.HANDOFF,
}
"""``gen_ai.operation.name`` values and the role they give."""

NAME_PREFIXES: Final[Mapping[str, StepKind]] = {
    "chat": _K.LLM,
    "text_completion": _K.LLM,
    "generate_content": _K.LLM,
    "execute_tool": _K.TOOL,
    "invoke_agent": _K.AGENT,
    "invoke_workflow": _K.CHAIN,
    "embeddings": _K.EMBEDDING,
    "retrieval": _K.RETRIEVAL,
    "apply_guardrail": _K.GUARDRAIL,
    "run_guardrail": _K.GUARDRAIL,
}
"""Span-name fallback: ``<operation> <target>`` names without the attribute."""

_FOUND: Final[Mapping[str, Found]] = {op: (kind, GENAI) for op, kind in OPERATIONS.items()}
_AS_TRACELOOP: Final[Mapping[StepKind, Found]] = {kind: (kind, "traceloop") for kind in StepKind}
"""Shared results: classifying a span allocates nothing."""

OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
_WORKFLOW_MARK: Final = "traceloop.workflow.name"


class GenAI(Adapter):
    """OTel GenAI semantic conventions."""

    name = GENAI
    generic_agent_names = frozenset({"invoke_agent"})
    input_token_keys = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
    output_token_keys = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
    model_keys = ("gen_ai.response.model", "gen_ai.request.model")
    finish_keys = (FINISH_REASONS,)
    extra_finish_keys = (OUTPUT_MESSAGES,)
    fallback_finish_keys = (OUTPUT_MESSAGES,)  # see finish_reasons below
    tool_name_keys = ("gen_ai.tool.name",)
    tool_call_id_keys = ("gen_ai.tool.call.id",)
    argument_keys = ("gen_ai.tool.call.arguments",)
    result_keys = ("gen_ai.tool.call.result",)
    message_keys = ("gen_ai.input.messages", OUTPUT_MESSAGES)
    # gen_ai.conversation.id: the GenAI conventions' conversation (Google ADK: its session id; PydanticAI);
    # user.id: the general conventions' user (enduser.id before semconv 1.28, still written by many SDKs).
    session_keys = ("gen_ai.conversation.id",)
    user_keys = ("user.id", "enduser.id")

    def classify(self, span: Span) -> Found | None:
        attrs = span.attributes
        op = attrs.get("gen_ai.operation.name")
        if not isinstance(op, str):
            return None
        found = _FOUND.get(op) or _FOUND.get(op.strip().lower())  # exact spelling first: no new strings
        if found is None:
            return None
        # OpenLLMetry ≥ 0.5 emits GenAI names; its processor stamps the workflow on every span.
        return _AS_TRACELOOP[found[0]] if _WORKFLOW_MARK in attrs else found

    def classify_name(self, name: str) -> Found | None:
        kind = NAME_PREFIXES.get(name.partition(" ")[0])
        return (kind, GENAI) if kind is not None else None

    def recognises(self, span: Span) -> bool:
        return isinstance(span.attributes.get("gen_ai.operation.name"), str)

    def entity_name(self, span: Span, kind: StepKind) -> str | None:
        head, space, rest = span.name.partition(" ")
        return rest.strip() if space and head in NAME_PREFIXES else None

    def messages(self, attributes: Attributes) -> list[Message]:
        return [Message(role, content) for role, content in self.message_pairs(attributes)]

    def message_pairs(self, attributes: Attributes) -> list[tuple[str, str]]:
        """:meth:`messages` as ``(role, content)`` pairs (the run details read these, for every model call):
        the common message shape is read in C (``genai_pairs`` of ``scorers/_redact_fast.c``) where built."""
        found: list[tuple[str, str]] = []
        for key in self.message_keys:
            found.extend(_latest_pairs(as_json(attributes.get(key))))
        return found

    def final_answer(self, attributes: Attributes) -> str | None:
        decoded = as_json(attributes.get(OUTPUT_MESSAGES))
        if not isinstance(decoded, list):
            return None
        for message in reversed([m for item in decoded if (m := message_of(item)) is not None]):
            if message.role in ("assistant", "ai", "model"):
                return message.content  # an empty answer is the answer (scorers.content.last_assistant)
        return None

    def finish_reasons(self, attributes: Attributes, found: list[str]) -> None:
        if found or (messages := attributes.get(OUTPUT_MESSAGES)) is None:
            return  # the output messages are read only when no finish-reason attribute said anything
        decoded = as_json(messages)
        for message in decoded if isinstance(decoded, list) else ():
            if isinstance(message, Mapping):
                add_reasons(message.get("finish_reason"), found)


def message_of(item: object) -> Message | None:
    """One message object (``{"role", "parts"}`` GenAI shape or ``{"role", "content"}`` chat shape)."""
    if not isinstance(item, (dict, Mapping)):  # (dict first: the Mapping ABC's test is slow)
        return None
    role = as_str(item.get("role"))
    if role is None:
        return None
    parts = item.get("parts")
    content = _parts_text(parts) if isinstance(parts, list) else content_text(item.get("content"))
    return Message(role=role, content=clip(content or ""))


def _pairs_py(
    items: list[object], read: Callable[[object], Message | None], text: Callable[[object], str | None], max_text: int
) -> list[tuple[str, str]]:
    """``(role, content)`` of each message :func:`message_of` reads (the pure-Python twin of ``genai_pairs``;
    ``text`` and ``max_text`` are :func:`as_text` and :data:`MAX_TEXT`, which the compiled one applies)."""
    return [(m.role, m.content) for item in items if (m := read(item)) is not None]


_Pairs = Callable[
    [list[object], Callable[[object], Message | None], Callable[[object], str | None], int], list[tuple[str, str]]
]


def _compiled_pairs() -> _Pairs:
    try:
        from scorers import _redact_fast
    except ImportError:  # no C compiler where it was installed
        return _pairs_py
    return getattr(_redact_fast, "genai_pairs", _pairs_py)  # (an extension built before it had none)


_pairs: Final = _compiled_pairs()


def _latest_pairs(decoded: object) -> list[tuple[str, str]]:
    """The pairs of the latest :data:`MAX_MESSAGES` items of a decoded message array; none if not an array."""
    return _pairs(decoded[-MAX_MESSAGES:], message_of, as_text, MAX_TEXT) if isinstance(decoded, list) else []


class History:
    """:meth:`GenAI.message_pairs` of one run's model calls, read in order, each call's
    ``gen_ai.input.messages`` parsed only where it adds to the previous call's.

    A model call's input messages are the whole conversation so far (every framework resends the
    history), so reading each call's from scratch parses a run's history once per call. When a call's
    text is the previous call's with messages appended (``[A,B]`` then ``[A,B,C,D]``: the same text up
    to the closing bracket, then a comma), only ``[C,D]`` is parsed and its messages are appended to
    the previous call's. Anything else (a history rewritten or cut, another spelling, a value that is
    not a JSON text) is read from scratch. The pairs are what :meth:`GenAI.message_pairs` gives for the
    same attributes (``tests/scorers/dialects/test_genai_history.py``). One per run; not thread-safe.
    """

    __slots__ = ("_items", "_pairs", "_raw")

    def __init__(self) -> None:
        self._raw: str | None = None  # the previous call's input text, when it ends with "]" and parsed as a list
        self._items: list[object] = []  # its messages, decoded
        self._pairs: list[tuple[str, str]] | None = None  # their pairs (None: more than MAX_MESSAGES)

    def pairs(self, attributes: Attributes) -> list[tuple[str, str]]:
        """The ``(role, content)`` pairs of this call's input then output messages."""
        found = self._input(attributes.get(INPUT))
        output = _latest_pairs(as_json(attributes.get(OUTPUT_MESSAGES)))
        return found + output if output else found

    def _input(self, raw: object) -> list[tuple[str, str]]:
        prev = self._raw
        self._raw = None
        if type(raw) is not str or len(raw) > MAX_PARSE_CHARS:
            return _latest_pairs(as_json(raw))  # not a JSON text: as the reader takes it (an array value, or nothing)
        if prev is not None and len(raw) > len(prev) and raw[len(prev) - 1] == "," and raw.startswith(prev[:-1]):
            try:
                new = orjson.loads("[" + raw[len(prev) :])
            except orjson.JSONDecodeError:
                new = None
            if isinstance(new, list):
                items = self._items
                items.extend(new)
                if self._pairs is not None and len(items) <= MAX_MESSAGES:
                    found = self._pairs + _pairs(new, message_of, as_text, MAX_TEXT)
                else:
                    found = _latest_pairs(items)
                self._remember(raw, items, found)
                return found
        if raw.lstrip()[:1] != "[":
            return []  # not an array (as_json gives the text back, or an object)
        try:
            items = orjson.loads(raw)
        except orjson.JSONDecodeError:  # NaN, lone surrogates, not JSON: the reader's own way
            return _latest_pairs(as_json(raw))
        if not isinstance(items, list):
            return []
        found = _latest_pairs(items)
        self._remember(raw, items, found)
        return found

    def _remember(self, raw: str, items: list[object], found: list[tuple[str, str]]) -> None:
        if raw.endswith("]"):
            self._raw, self._items = raw, items
            self._pairs = found if len(items) <= MAX_MESSAGES else None


def _parts_text(parts: list[object]) -> str:
    """The text of a message's parts (https://opentelemetry.io/docs/specs/semconv/gen-ai/, the input and
    output messages' JSON schemas): text parts as they are, tool call requests as ``tool_call name(args)``,
    tool call responses by their ``response`` (``result``, as some instrumentations write it)."""
    texts: list[str] = []
    for part in parts:
        if not isinstance(part, (dict, Mapping)):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(as_str(part.get("content")) or "")
        elif kind == "tool_call":
            texts.append(f"tool_call {as_str(part.get('name')) or ''}({as_text(part.get('arguments')) or ''})")
        elif kind == "tool_call_response":
            found = part.get("response")
            texts.append(as_text(part.get("result") if found is None else found) or "")
    return "\n".join(texts)


def agent_attribute(run: Naming) -> str | None:
    """``gen_ai.agent.name`` of the root, then of the agent spans top down."""
    return attr_of(run.heads, "gen_ai.agent.name")


def workflow_name(run: Naming) -> str | None:
    """``gen_ai.workflow.name``, root first."""
    return attr_of(run.spans, "gen_ai.workflow.name")


# the event-based form ---------------------------------------------------------------------------

MESSAGE_EVENTS: Final[Mapping[str, str]] = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
"""Input-message events and the role each gives when the event names none."""

CHOICE: Final = "gen_ai.choice"
PROMPT: Final = "gen_ai.content.prompt"
COMPLETION: Final = "gen_ai.content.completion"
DETAILS: Final = "gen_ai.client.inference.operation.details"
DETAIL_KEYS: Final = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.response.finish_reasons",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)
"""Attribute-form keys an operation-details event may carry."""

INPUT: Final = "gen_ai.input.messages"
OUTPUT: Final = "gen_ai.output.messages"
FINISH: Final = "gen_ai.response.finish_reasons"
ARGUMENTS: Final = "gen_ai.tool.call.arguments"
RESULT: Final = "gen_ai.tool.call.result"
_PREFIX: Final = "gen_ai."


def lift_events(span: Span) -> Span:
    """``span`` with what its GenAI events say written into the attribute form (see the module doc).

    Call only for spans that have events. Returns ``span`` itself when no event is a GenAI event.
    """
    for event in span.events:
        if event.name.startswith(_PREFIX):
            break
    else:
        return span  # the common case among spans with events: exception events only
    lifted = _read(span.events, span.attributes.get("gen_ai.operation.name") == "execute_tool")
    attrs = span.attributes
    extra = {key: value for key, value in lifted.items() if attrs.get(key) is None}
    if not extra:
        return span
    return dataclasses.replace(span, attributes=cast(Attributes, {**attrs, **extra}))  # JSON-shaped values


def _read(events: tuple[SpanEvent, ...], tool_span: bool) -> dict[str, object]:
    """The attribute-form values of a span's GenAI events, in the keys of the module doc."""
    inputs: list[dict[str, object]] = []
    outputs: list[dict[str, object]] = []
    reasons: list[str] = []
    out: dict[str, object] = {}
    for event in events:
        name, attrs = event.name, event.attributes
        role = MESSAGE_EVENTS.get(name)
        if role is not None:
            if tool_span:  # on a tool span the tool message is the call's input (Strands)
                out.setdefault(ARGUMENTS, as_text(attrs.get("content")))
            elif len(inputs) < MAX_MESSAGES:
                inputs.append(_message(attrs, as_str(attrs.get("role")) or role))
        elif name == CHOICE:
            if tool_span:  # … and the choice its result
                out.setdefault(
                    RESULT, _result_text({"content": as_json(attrs.get("message"))}) or as_text(attrs.get("message"))
                )
                continue
            choice = _choice(attrs)
            if len(outputs) < MAX_MESSAGES:
                outputs.append(choice)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                reasons.append(reason)
        elif name == PROMPT:
            inputs.extend(_messages(attrs.get("gen_ai.prompt"), "user")[: MAX_MESSAGES - len(inputs)])
        elif name == COMPLETION:
            for message in _messages(attrs.get("gen_ai.completion"), "assistant")[: MAX_MESSAGES - len(outputs)]:
                outputs.append(message)
                reason = message.get("finish_reason")
                if isinstance(reason, str) and reason:
                    reasons.append(reason)
        elif name == DETAILS:
            for key in DETAIL_KEYS:
                value = attrs.get(key)
                if value is not None:
                    out.setdefault(key, value)
    if inputs:
        out.setdefault(INPUT, inputs)
    if outputs:
        out.setdefault(OUTPUT, outputs)
    if reasons:
        out.setdefault(FINISH, reasons)
    return {key: value for key, value in out.items() if value is not None}


def _choice(attrs: Mapping[str, object]) -> dict[str, object]:
    """One ``gen_ai.choice`` event as an output message with its finish reason."""
    message = as_json(attrs.get("message"))
    if isinstance(message, Mapping) and ("role" in message or "content" in message or "tool_calls" in message):
        found = _message(message, as_str(message.get("role")) or "assistant")
    else:
        found = {"role": "assistant", "parts": _parts(message, None)}
    reason = as_str(attrs.get("finish_reason"))
    if reason is None and isinstance(message, Mapping):
        reason = as_str(message.get("finish_reason"))
    if reason is not None:
        found["finish_reason"] = reason
    return found


def _messages(value: object, role: str) -> list[dict[str, object]]:
    """``gen_ai.prompt`` / ``gen_ai.completion``: a JSON list of messages (or choices), or plain text."""
    decoded = as_json(value)
    if isinstance(decoded, list):
        found: list[dict[str, object]] = []
        for item in decoded[:MAX_MESSAGES]:
            if isinstance(item, Mapping):
                inner = item.get("message")  # a choice: {"index", "finish_reason", "message": {...}}
                message = inner if isinstance(inner, Mapping) else item
                one = _message(message, as_str(message.get("role")) or role)
                reason = as_str(item.get("finish_reason"))
                if reason is not None:
                    one["finish_reason"] = reason
                found.append(one)
        return found
    if isinstance(decoded, Mapping):
        return [_message(decoded, as_str(decoded.get("role")) or role)]
    text = as_str(decoded)
    return [{"role": role, "parts": [{"type": "text", "content": text}]}] if text else []


def _message(attrs: Mapping[str, object], role: str) -> dict[str, object]:
    """A ``{"role", "parts"}`` message from a message event's (or a message object's) fields."""
    return {"role": role, "parts": _parts(as_json(attrs.get("content")), attrs.get("tool_calls"))}


def _parts(content: object, tool_calls: object) -> list[dict[str, object]]:
    """GenAI message parts from an event's content and tool calls.

    ``content`` is text, a text part, or a list of content blocks: GenAI parts, chat parts
    (``{"type": "text", "text"}``) or Bedrock Converse blocks as Strands records them
    (``{"text"}``, ``{"toolUse": {"name", "toolUseId", "input"}}``, ``{"toolResult": {"toolUseId",
    "content"}}``). ``tool_calls`` are chat-completions calls (``{"id", "function": {"name",
    "arguments"}}``).
    """
    parts: list[dict[str, object]] = []
    if isinstance(content, str):
        if content:
            parts.append({"type": "text", "content": content})
    elif isinstance(content, Mapping):
        _block(content, parts)
    elif isinstance(content, list):
        for block in content[:MAX_MESSAGES]:
            if isinstance(block, Mapping):
                _block(block, parts)
            elif isinstance(block, str) and block:
                parts.append({"type": "text", "content": block})
    decoded = as_json(tool_calls)
    for call in decoded[:MAX_MESSAGES] if isinstance(decoded, list) else ():
        if isinstance(call, Mapping):
            function = call.get("function")
            fields = function if isinstance(function, Mapping) else call
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": as_str(fields.get("name")) or "",
                    "arguments": fields.get("arguments"),
                }
            )
    return parts


def _block(block: Mapping[str, object], parts: list[dict[str, object]]) -> None:
    """Append the part one content block gives (nothing for a block with no text or tool call)."""
    kind = block.get("type")
    if kind in ("tool_call", "tool_call_response"):
        parts.append(dict(block))
        return
    text = block.get("text") if "text" in block else block.get("content") if kind == "text" else None
    if isinstance(text, str):
        parts.append({"type": "text", "content": text})
        return
    use = block.get("toolUse")
    if isinstance(use, Mapping):
        parts.append(
            {
                "type": "tool_call",
                "id": use.get("toolUseId"),
                "name": as_str(use.get("name")) or "",
                "arguments": use.get("input"),
            }
        )
        return
    result = block.get("toolResult")
    if isinstance(result, Mapping):
        parts.append({"type": "tool_call_response", "id": result.get("toolUseId"), "response": _result_text(result)})


def _result_text(result: Mapping[str, object]) -> str:
    """The text of a Converse ``toolResult`` block's content."""
    content = result.get("content")
    texts: list[str] = []
    for item in content[:MAX_MESSAGES] if isinstance(content, list) else ():
        if isinstance(item, Mapping):
            text = as_str(item.get("text")) or as_text(item.get("json"))
            if text:
                texts.append(text)
    return "\n".join(texts)
