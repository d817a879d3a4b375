"""AutoGen AgentChat: its own GenAI spans and ``openinference-instrumentation-autogen-agentchat``.

Quirks: with both on, every tool call is an OpenInference TOOL span ``<agent>.<tool>`` with
the native ``execute_tool <tool>`` span inside (one call, two instrumentations: de-duplicated
by nesting); agent spans are ``<agent>.on_messages_stream``; a team run's root is
``<team class>.run_stream`` with ``team_id`` / ``participant_names`` — the team, not its
first speaker, is the run's agent, and its name is not exported: the team class is AutoGen's
default team name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from collector.model import Span
from scorers.dialects.base import Adapter, strip_method

_TEAM_KEYS: Final = ("team_id", "participant_names")


class AutoGen(Adapter):
    """AutoGen AgentChat."""

    name = "autogen"
    scopes = frozenset({"openinference.instrumentation.autogen_agentchat"})
    entry_methods = frozenset({"on_messages_stream", "on_messages", "run_stream", "run"})

    def run_name(self, root: Span, spans: Sequence[Span]) -> str | None:
        if any(key in root.attributes for key in _TEAM_KEYS):
            return strip_method(root.name, self.entry_methods) or None
        return None
