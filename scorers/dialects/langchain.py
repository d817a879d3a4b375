"""LangChain / LangGraph, whichever dialect traces them (OpenInference, OpenLLMetry, LangSmith).

Quirks: the prebuilt ReAct graph's node is called ``agent`` (a node name, not the agent's: the
graph's name on the CHAIN root is); LangGraph's ``ToolNode`` answers the model ``Error: …``
when a tool raises instead of failing the span; a graph outputs its state
(``{"messages": [...]}``, the answer is the last message) and an ``AgentExecutor``
``{"output": ...}``.
"""

from __future__ import annotations

from collections.abc import Mapping

from scorers.dialects.base import Adapter, as_str, content_text


class LangChain(Adapter):
    """LangChain and LangGraph."""

    name = "langchain"
    scopes = frozenset({"openinference.instrumentation.langchain", "opentelemetry.instrumentation.langchain"})
    generic_agent_names = frozenset({"agent", "agents"})
    soft_error_prefixes = ("Error:",)

    def answer_in_state(self, state: Mapping[str, object]) -> str | None:
        messages = state.get("messages")
        if isinstance(messages, list) and messages and (text := _message_text(messages[-1])) is not None:
            return text
        return as_str(state.get("output"))


def _message_text(item: object) -> str | None:
    """Text of a (possibly LangChain-serialised) message dict (``kwargs`` of ``dumpd``, ``data`` of
    ``message_to_dict`` as OpenInference records a LangGraph state)."""
    if not isinstance(item, Mapping):
        return as_str(item)
    kwargs = item.get("kwargs")
    if not isinstance(kwargs, Mapping):
        kwargs = item.get("data")
    source = kwargs if isinstance(kwargs, Mapping) else item
    return content_text(source.get("content"))
