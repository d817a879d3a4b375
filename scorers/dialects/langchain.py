"""LangChain / LangGraph, whichever dialect traces them (OpenInference, OpenLLMetry, LangSmith).

Quirks: the prebuilt ReAct graph's node is called ``agent`` (a node name, not the agent's: the
graph's name on the CHAIN root is); LangGraph's ``ToolNode`` answers the model ``Error: …``
when a tool raises instead of failing the span.
"""

from __future__ import annotations

from scorers.dialects.base import Adapter


class LangChain(Adapter):
    """LangChain and LangGraph."""

    name = "langchain"
    scopes = frozenset({"openinference.instrumentation.langchain", "opentelemetry.instrumentation.langchain"})
    generic_agent_names = frozenset({"agent", "agents"})
    soft_error_prefixes = ("Error:",)
