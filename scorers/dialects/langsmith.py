"""LangSmith's OpenTelemetry export: ``langsmith.span.kind`` spans.

Only the role comes from LangSmith's own vocabulary; usage, model and messages are exported
with GenAI attribute names (read by :mod:`scorers.dialects.genai`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from collector.model import Span
from scorers.dialects.base import Adapter, Found
from scorers.model import StepKind

LANGSMITH: Final = "langsmith"
_K = StepKind

KINDS: Final[Mapping[str, StepKind]] = {
    "llm": _K.LLM,
    "chain": _K.CHAIN,
    "tool": _K.TOOL,
    "agent": _K.AGENT,
    "retriever": _K.RETRIEVAL,
    "embedding": _K.EMBEDDING,
    "prompt": _K.OTHER,
    "parser": _K.OTHER,
}
"""``langsmith.span.kind`` values (any case) and the role they give."""


class LangSmith(Adapter):
    """LangSmith OTel export."""

    name = LANGSMITH
    # A run's metadata, exported as langsmith.metadata.<key>; LangSmith groups threads by these three.
    # (langsmith.trace.session_id is the tracing project, not a conversation.)
    session_keys = tuple(f"langsmith.metadata.{key}" for key in ("session_id", "thread_id", "conversation_id"))
    user_keys = ("langsmith.metadata.user_id",)

    def classify(self, span: Span) -> Found | None:
        value = span.attributes.get("langsmith.span.kind")
        if isinstance(value, str) and (kind := KINDS.get(value.lower())) is not None:
            return kind, LANGSMITH
        return None
