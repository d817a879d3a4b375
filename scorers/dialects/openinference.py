"""Arize OpenInference: ``openinference.span.kind`` spans.

Roles from ``openinference.span.kind`` (``LLM``, ``TOOL``, ``AGENT``, ``CHAIN`` …), usage
``llm.token_count.prompt`` / ``.completion``, model ``llm.model_name``, finish reason
``llm.finish_reason``, tool ``tool.name`` with ``input.value`` / ``output.value``, the
conversation flattened as ``llm.input_messages.{i}.message.*`` /
``llm.output_messages.{i}.message.*``, agent ``agent.name``. Framework instrumentors built on
OpenInference (CrewAI, LlamaIndex, smolagents, DSPy, AutoGen …) have their own adapters for
their quirks; this module is what they share.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from collector.model import Attributes, Span
from scorers.dialects.base import Adapter, Found, Naming, attr_of, clip
from scorers.model import Message, StepKind

OPENINFERENCE: Final = "openinference"
_K = StepKind

KINDS: Final[Mapping[str, StepKind]] = {
    "LLM": _K.LLM,
    "TOOL": _K.TOOL,
    "AGENT": _K.AGENT,
    "CHAIN": _K.CHAIN,
    "RETRIEVER": _K.RETRIEVAL,
    "RERANKER": _K.RETRIEVAL,
    "EMBEDDING": _K.EMBEDDING,
    "GUARDRAIL": _K.GUARDRAIL,
    "EVALUATOR": _K.OTHER,
    "PROMPT": _K.OTHER,
    "UNKNOWN": _K.OTHER,
}
"""``openinference.span.kind`` values (any case) and the role they give."""

SPAN_KIND: Final = "openinference.span.kind"
_FOUND: Final[Mapping[str, Found]] = {value: (kind, OPENINFERENCE) for value, kind in KINDS.items()}
_HANDOFF: Final = (_K.HANDOFF, OPENINFERENCE)
_TOOL: Final = _K.TOOL  # a global: ``_K.TOOL`` is an unspecialised EnumType.__getattr__ look-up on 3.11

_MESSAGE_KEY: Final = re.compile(
    r"llm\.(input|output)_messages\.(\d+)\.message\."
    r"(role|content|contents\.\d+\.message_content\.text|tool_calls\.\d+\.tool_call\.function\.name)"
)
_MARKERS: Final = (
    "llm.input_messages.0.message.role",
    "llm.input_messages.1.message.role",
    "llm.output_messages.0.message.role",
)


class OpenInference(Adapter):
    """Arize OpenInference semantic conventions."""

    name = OPENINFERENCE
    input_token_keys = ("llm.token_count.prompt",)
    output_token_keys = ("llm.token_count.completion",)
    model_keys = ("llm.model_name",)
    finish_keys = ("llm.finish_reason",)
    tool_name_keys = ("tool.name",)
    tool_call_id_keys = ("tool.id",)
    argument_keys = ("input.value",)
    last_resort_argument_keys = ("tool.parameters",)  # usually the schema, sometimes the arguments
    result_keys = ("output.value",)
    final_output_keys = ("output.value",)
    message_keys = _MARKERS
    # using_session / using_user, and the LangChain instrumentor's copy of a run's metadata
    # session_id, conversation_id or thread_id (LangGraph's checkpointer thread) into session.id.
    session_keys = ("session.id",)
    user_keys = ("user.id",)

    def classify(self, span: Span) -> Found | None:
        value = span.attributes.get(SPAN_KIND)
        if not isinstance(value, str) or (found := _FOUND.get(value) or _FOUND.get(value.upper())) is None:
            return None
        if found[0] is _TOOL and span.name.startswith("handoff to "):
            return _HANDOFF  # OpenInference Agents SDK bridge handoffs
        return found

    def messages(self, attributes: Attributes) -> list[Message]:
        slots: dict[tuple[int, int], dict[str, list[str]]] = {}
        for key, value in attributes.items():
            if not key.startswith("llm.") or not isinstance(value, str):
                continue
            match = _MESSAGE_KEY.fullmatch(key)
            if match is None:
                continue
            side = 0 if match[1] == "input" else 1
            slot = slots.setdefault((side, int(match[2])), {})
            field = match[3]
            if field == "role":
                name = "role"
            elif field.startswith("tool_calls"):
                name = "tool"
            else:
                name = "content" if field == "content" else "contents"
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


def agent_attribute(run: Naming) -> str | None:
    """OpenInference ``agent.name``, root first, then the agent spans top down."""
    return attr_of(run.heads, "agent.name")


def is_chain(span: Span) -> bool:
    """Whether ``span`` is an OpenInference CHAIN span."""
    kind = span.attributes.get(SPAN_KIND)
    return isinstance(kind, str) and kind.upper() == "CHAIN"
