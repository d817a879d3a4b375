"""The OpenAI Agents SDK through its tracing bridges (OpenInference, OTel contrib, OTel GenAI).

Quirks: the ``Agent workflow`` root (the SDK's default trace name, not an agent) stays OK even
when the run raised — the SDK does not recover from an error on an agent, turn or LLM span
(only tool errors are "non-fatal", status ``Error running tool (non-fatal): …``), so the first
such error is what reached the caller; a failed tool answers the model ``An error occurred
while running the tool…`` instead of raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from collector.model import Span, StatusCode
from scorers.dialects.base import Adapter, Found
from scorers.model import StepKind


class OpenAIAgents(Adapter):
    """OpenAI Agents SDK."""

    name = "openai_agents"
    scopes = frozenset(
        {
            "openinference.instrumentation.openai_agents",
            "opentelemetry.instrumentation.openai_agents",
            "opentelemetry.instrumentation.genai.openai_agents",
        }
    )
    generic_agent_names = frozenset({"agent workflow", "agent_workflow"})
    soft_error_prefixes = ("An error occurred while running the tool",)

    def raised(self, ordered: Sequence[Span], kinds: Mapping[str, Found]) -> Span | None:
        error, tool = StatusCode.ERROR, StepKind.TOOL  # locals: enum class attributes are slow look-ups on 3.11
        for span in ordered:
            if (
                span.status_code == error
                and kinds[span.span_id][0] is not tool
                and not span.status_message.startswith("Error running tool")
            ):
                return span
        return None
