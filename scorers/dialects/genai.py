"""OpenTelemetry GenAI semantic conventions: ``gen_ai.operation.name`` spans.

Both the legacy (≤ v1.36) and the latest-experimental attribute names: roles from
``gen_ai.operation.name`` (or an ``<operation> <target>`` span name such as ``chat gpt-4o``
or ``execute_tool search``), usage ``gen_ai.usage.*``, model ``gen_ai.response.model`` /
``gen_ai.request.model``, finish reasons ``gen_ai.response.finish_reasons`` (or inside
``gen_ai.output.messages``), conversation ``gen_ai.input.messages`` /
``gen_ai.output.messages`` (JSON string or structured, ``parts`` or ``content``), agent
``gen_ai.agent.name``, workflow ``gen_ai.workflow.name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from collector.model import Attributes, Span
from scorers.dialects.base import (
    MAX_MESSAGES,
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
        found: list[Message] = []
        for key in self.message_keys:
            decoded = as_json(attributes.get(key))
            if isinstance(decoded, list):
                found.extend(m for item in decoded[-MAX_MESSAGES:] if (m := message_of(item)) is not None)
        return found

    def final_answer(self, attributes: Attributes) -> str | None:
        decoded = as_json(attributes.get(OUTPUT_MESSAGES))
        if not isinstance(decoded, list):
            return None
        for message in reversed([m for item in decoded if (m := message_of(item)) is not None]):
            if message.role in ("assistant", "ai", "model") and message.content:
                return message.content
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
