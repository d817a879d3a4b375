"""Traceloop / OpenLLMetry: ``traceloop.span.kind`` spans and the legacy indexed attributes.

Roles from ``traceloop.span.kind`` (decorators ``@workflow``, ``@task``, ``@agent``,
``@tool``), legacy ``llm.request.type``, guardrail attributes ``gen_ai.guardrail.*``, or the
span name (``<entity>.<kind>`` such as ``lookup.tool``, ``openai.chat``; ``execute_task X``);
entity ``traceloop.entity.name`` with ``traceloop.entity.input`` / ``.output``; workflow
``traceloop.workflow.name``; the conversation as ``gen_ai.prompt.{i}.*`` /
``gen_ai.completion.{i}.*`` with finish reasons ``gen_ai.completion.{i}.finish_reason`` or
the singular ``gen_ai.response.finish_reason``. OpenLLMetry ≥ 0.5 LLM spans use GenAI names
(:mod:`scorers.dialects.genai` classifies them, as Traceloop's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
    attr_of,
    clip,
    content_text,
)
from scorers.model import Message, StepKind

TRACELOOP: Final = "traceloop"
_K = StepKind

KINDS: Final[Mapping[str, StepKind]] = {
    "workflow": _K.CHAIN,
    "task": _K.CHAIN,
    "agent": _K.AGENT,
    "tool": _K.TOOL,
    "handoff": _K.HANDOFF,
}
"""``traceloop.span.kind`` values (any case) and the role they give."""

LEGACY_REQUEST_TYPES: Final[Mapping[str, StepKind]] = {
    "chat": _K.LLM,
    "completion": _K.LLM,
    "embedding": _K.EMBEDDING,
    "rerank": _K.RETRIEVAL,
}
"""Legacy ``llm.request.type`` values."""

NAME_PREFIXES: Final[Mapping[str, StepKind]] = {"execute_task": _K.CHAIN, "vector_db_retrieve": _K.RETRIEVAL}
"""``<operation> <target>`` span names of OpenLLMetry's LangChain instrumentation."""

NAME_SUFFIXES: Final[Mapping[str, StepKind]] = {
    "tool": _K.TOOL,
    "workflow": _K.CHAIN,
    "task": _K.CHAIN,
    "agent": _K.AGENT,
    "chat": _K.LLM,
    "completion": _K.LLM,
}
"""``<entity>.<kind>`` span names (Traceloop decorators, OpenLLMetry LLM spans)."""

_FIRST_COMPLETION_REASON: Final = "gen_ai.completion.0.finish_reason"
_MAX_INDEXED: Final = 256


ASSOCIATION: Final = "traceloop.association.properties."
"""Prefix of the app's association properties (``Traceloop.set_association_properties``)."""


class Traceloop(Adapter):
    """Traceloop SDK decorators and OpenLLMetry instrumentations."""

    name = TRACELOOP
    finish_keys = ("gen_ai.response.finish_reason",)
    extra_finish_keys = (_FIRST_COMPLETION_REASON,)
    tool_name_keys = ("traceloop.entity.name",)
    argument_keys = ("traceloop.entity.input",)
    result_keys = ("traceloop.entity.output",)
    final_output_keys = ("traceloop.entity.output",)
    message_keys = ("gen_ai.prompt.0.role", "gen_ai.completion.0.role")
    # Traceloop.set_association_properties({...}): each key becomes traceloop.association.properties.<key>.
    session_keys = tuple(
        f"{ASSOCIATION}{key}" for key in ("session_id", "conversation_id", "thread_id", "chat_id", "sessionId")
    )
    user_keys = (f"{ASSOCIATION}user_id", f"{ASSOCIATION}userId")

    def classify(self, span: Span) -> Found | None:
        attrs = span.attributes
        value = attrs.get("traceloop.span.kind")
        if isinstance(value, str) and (kind := KINDS.get(value.lower())) is not None:
            return kind, TRACELOOP
        legacy = attrs.get("llm.request.type")
        if isinstance(legacy, str) and (kind := LEGACY_REQUEST_TYPES.get(legacy.lower())) is not None:
            return kind, TRACELOOP
        if "gen_ai.guardrail.status" in attrs or "gen_ai.guardrail.name" in attrs:
            return _K.GUARDRAIL, TRACELOOP
        return None

    def classify_name(self, name: str) -> Found | None:
        kind = NAME_PREFIXES.get(name.partition(" ")[0])
        if kind is None:
            stem, dot, suffix = name.rpartition(".")
            kind = NAME_SUFFIXES.get(suffix) if dot and stem else None
        return (kind, TRACELOOP) if kind is not None else None

    def entity_name(self, span: Span, kind: StepKind) -> str | None:
        name = span.name
        head, space, rest = name.partition(" ")
        if space and head in NAME_PREFIXES:
            return rest.strip()
        stem, dot, suffix = name.rpartition(".")
        return stem if dot and stem and NAME_SUFFIXES.get(suffix) is kind else None

    def messages(self, attributes: Attributes) -> list[Message]:
        return _indexed(attributes, "gen_ai.prompt.") + _indexed(attributes, "gen_ai.completion.")

    def finish_reasons(self, attributes: Attributes, found: list[str]) -> None:
        if _FIRST_COMPLETION_REASON not in attributes:
            return
        for i in range(_MAX_INDEXED):
            value = attributes.get(f"gen_ai.completion.{i}.finish_reason")
            if value is None:
                break
            add_reasons(value, found)


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


def agent_name(run: Naming) -> str | None:
    """``traceloop.entity.name`` of the topmost Traceloop agent span, then the workflow name
    (``traceloop.workflow.name``, root first, or the workflow span's entity name)."""
    agent = StepKind.AGENT
    for span, kind, dialect in run.top:
        name = as_str(span.attributes.get("traceloop.entity.name"))
        if kind is agent and dialect == TRACELOOP and name is not None:
            return name
    spans = run.spans if run.root is None else [run.root, *run.spans]
    return attr_of(spans, "traceloop.workflow.name") or _workflow_entity(spans)


def _workflow_entity(spans: Sequence[Span]) -> str | None:
    for span in spans:
        if span.attributes.get("traceloop.span.kind") == "workflow":
            return as_str(span.attributes.get("traceloop.entity.name"))
    return None
