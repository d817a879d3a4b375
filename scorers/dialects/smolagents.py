"""Hugging Face smolagents through ``openinference-instrumentation-smolagents``.

Quirks: the agent span is ``<agent name>.run``; a ``ToolCallingAgent`` ends every run by
calling its built-in ``final_answer`` tool (``FinalAnswerTool`` span): the agent's answer,
not a tool call.
"""

from __future__ import annotations

from scorers.dialects.base import Adapter


class Smolagents(Adapter):
    """smolagents."""

    name = "smolagents"
    scopes = frozenset({"openinference.instrumentation.smolagents"})
    entry_methods = frozenset({"run"})
    answer_tools = frozenset({"final_answer"})
