"""The Vercel AI SDK's built-in telemetry: ``ai.*`` spans.

Roles from the operation id (``ai.operationId`` or the span name): ``ai.generateText`` /
``ai.streamText`` … are the agent call, ``….doGenerate`` / ``….doStream`` the model calls,
``ai.toolCall`` a tool call; usage ``ai.usage.*``, model ``ai.response.model`` /
``ai.model.id``, finish reason ``ai.response.finishReason``, tool ``ai.toolCall.name`` /
``.id`` / ``.args`` / ``.result``, the conversation ``ai.prompt.messages`` plus
``ai.response.text``, the application's name for the call ``ai.telemetry.functionId``.
The agent span names are operation ids, never an agent's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from collector.model import Attributes, Span
from scorers.dialects.base import Adapter, Found, Naming, as_json, as_str, attr_of, clip
from scorers.dialects.genai import message_of
from scorers.model import Message, StepKind

VERCEL: Final = "vercel"
_K = StepKind

OPERATIONS: Final[Mapping[str, StepKind]] = {
    "ai.generateText": _K.AGENT,
    "ai.streamText": _K.AGENT,
    "ai.generateObject": _K.AGENT,
    "ai.streamObject": _K.AGENT,
    "ai.generateText.doGenerate": _K.LLM,
    "ai.streamText.doStream": _K.LLM,
    "ai.generateObject.doGenerate": _K.LLM,
    "ai.streamObject.doStream": _K.LLM,
    "ai.toolCall": _K.TOOL,
    "ai.embed": _K.EMBEDDING,
    "ai.embedMany": _K.EMBEDDING,
    "ai.embed.doEmbed": _K.EMBEDDING,
    "ai.embedMany.doEmbed": _K.EMBEDDING,
}
"""Operation ids and the role they give."""


class Vercel(Adapter):
    """Vercel AI SDK telemetry."""

    name = VERCEL
    names_agents = False
    input_token_keys = ("ai.usage.inputTokens", "ai.usage.promptTokens")
    output_token_keys = ("ai.usage.outputTokens", "ai.usage.completionTokens")
    model_keys = ("ai.response.model", "ai.model.id")
    finish_keys = ("ai.response.finishReason",)
    tool_name_keys = ("ai.toolCall.name",)
    tool_call_id_keys = ("ai.toolCall.id",)
    argument_keys = ("ai.toolCall.args", "ai.toolCall.input")
    result_keys = ("ai.toolCall.result", "ai.toolCall.output")
    final_output_keys = ("ai.response.text",)
    message_keys = ("ai.prompt.messages", "ai.response.text")
    # experimental_telemetry: {metadata: {...}}: each key becomes ai.telemetry.metadata.<key>.
    session_keys = tuple(
        f"ai.telemetry.metadata.{key}"
        for key in ("sessionId", "session_id", "conversationId", "conversation_id", "threadId", "thread_id", "chatId")
    )
    user_keys = ("ai.telemetry.metadata.userId", "ai.telemetry.metadata.user_id")

    def classify(self, span: Span) -> Found | None:
        op = span.attributes.get("ai.operationId")
        kind = OPERATIONS.get(op if isinstance(op, str) else span.name)
        return (kind, VERCEL) if kind is not None else None

    def messages(self, attributes: Attributes) -> list[Message]:
        decoded = as_json(attributes.get("ai.prompt.messages"))
        found = [m for item in decoded if (m := message_of(item)) is not None] if isinstance(decoded, list) else []
        answer = as_str(attributes.get("ai.response.text"))
        if answer is not None:
            found.append(Message(role="assistant", content=clip(answer)))
        return found


def function_id(run: Naming) -> str | None:
    """``ai.telemetry.functionId``, root first."""
    return attr_of(run.spans, "ai.telemetry.functionId")
