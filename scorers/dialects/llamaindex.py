"""LlamaIndex agents through ``openinference-instrumentation-llama-index``.

Quirks: every span is ``<class>.<method>`` (the root is ``FunctionAgent.run``, a CHAIN: the
agent class, not its name); the LLM class's private helpers are LLM spans too
(``OpenAI._prepare_chat_with_tools`` only builds the request: no model call); the agent's
name is in no attribute, only in the Python reprs of the workflow events
(``AgentOutput(..., current_agent_name='travel_agent', ...)``) on the step spans.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from collector.model import Span
from scorers.dialects.base import Adapter, Found
from scorers.model import StepKind

_AGENT_NAME: Final = re.compile(r"current_agent_name='([^'\\]{1,256})'")
_EVENT_KEYS: Final = ("output.value", "input.value")
# Globals: ``StepKind.X`` is an unspecialised EnumType.__getattr__ look-up on 3.11 (scorers/normalise.py).
_LLM: Final = StepKind.LLM
_OTHER: Final = StepKind.OTHER


class LlamaIndex(Adapter):
    """LlamaIndex."""

    name = "llamaindex"
    scopes = frozenset({"openinference.instrumentation.llama_index"})
    entry_methods = frozenset({"run"})

    def refine(self, span: Span, found: Found) -> Found:
        if found[0] is _LLM and span.name.rpartition(".")[2].startswith("_"):
            return _OTHER, found[1]  # a private helper of the LLM class, not a model call
        return found

    def run_name(self, root: Span, spans: Sequence[Span]) -> str | None:
        for span in spans:
            if span.scope != root.scope:
                continue
            for key in _EVENT_KEYS:
                value = span.attributes.get(key)
                if isinstance(value, str) and "current_agent_name=" in value:
                    match = _AGENT_NAME.search(value)
                    if match is not None:
                        return match[1]
        return None
