"""Google ADK's own OpenTelemetry spans (scope ``gcp.vertex.agent``), in the GenAI dialect.

Quirks: when one model turn asks for several tools, ADK runs them in parallel, records each in
its own ``execute_tool <tool>`` span and then, beside them, one more ``execute_tool (merged)``
span for the merged response event, with ``gen_ai.operation.name`` = ``execute_tool`` and
``gen_ai.tool.name`` = ``(merged tools)`` (``trace_merged_tool_calls`` in
``google/adk/telemetry/tracing.py``, opened in ``google/adk/flows/llm_flows/tools/_batch_executor.py``:
"Calling this function is not needed for telemetry purposes"). That span is a record of the
calls already counted, not a tool call.
"""

from __future__ import annotations

from typing import Final

from collector.model import Span
from scorers.dialects.base import Adapter, Found
from scorers.model import StepKind

MERGED_TOOLS: Final = "(merged tools)"
"""ADK's ``gen_ai.tool.name`` on the merged span of parallel tool calls."""
# Globals: ``StepKind.X`` is an unspecialised EnumType.__getattr__ look-up on 3.11 (scorers/normalise.py).
_TOOL: Final = StepKind.TOOL
_OTHER: Final = StepKind.OTHER


class GoogleADK(Adapter):
    """Google ADK."""

    name = "google_adk"
    scopes = frozenset({"gcp.vertex.agent"})

    def refine(self, span: Span, found: Found) -> Found:
        if found[0] is _TOOL and span.attributes.get("gen_ai.tool.name") == MERGED_TOOLS:
            return _OTHER, found[1]  # the merged record of parallel calls, each counted on its own span
        return found
