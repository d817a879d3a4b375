"""CrewAI through ``openinference-instrumentation-crewai``.

Quirks: the agent span is the task execution, named ``<agent role>._execute_core`` (the role
is the agent's name); the root is ``<crew name>.kickoff``; tools are ``<tool>.run`` with
``tool.name``. LLM spans come from the model client's own instrumentor.
"""

from __future__ import annotations

from scorers.dialects.base import Adapter


class CrewAI(Adapter):
    """CrewAI."""

    name = "crewai"
    scopes = frozenset({"openinference.instrumentation.crewai"})
    entry_methods = frozenset({"_execute_core", "execute_task", "kickoff", "kickoff_async", "run"})
