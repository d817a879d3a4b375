"""Agent-side instrumentation: send an agent's runs to Vigil in three lines.

:func:`vigil_setup` exports over OTLP (and turns on the official OpenAI instrumentation);
:func:`agent_run`, :func:`tool_call` and :func:`guardrail` emit GenAI-convention spans
with the ``vigil.*`` markers Vigil's scorer reads (iteration caps, safety blocks, optimal
steps). Test doubles live in :mod:`collector.instrument.testing`.
"""

from __future__ import annotations

from collector.instrument.errors import MaxIterationsExceeded
from collector.instrument.run import AgentRun, agent_run, current_run
from collector.instrument.setup import VigilTracing, vigil_setup
from collector.instrument.tools import Guardrail, ToolCall, guardrail, tool_call

__all__ = [
    "AgentRun",
    "Guardrail",
    "MaxIterationsExceeded",
    "ToolCall",
    "VigilTracing",
    "agent_run",
    "current_run",
    "guardrail",
    "tool_call",
    "vigil_setup",
]
