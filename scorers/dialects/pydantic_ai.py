"""PydanticAI through its own OpenTelemetry instrumentation (scope ``pydantic-ai``, GenAI keys).

Quirks: an output type given as a tool (``ToolOutput``, or a structured output type) is answered
through an *output tool*, ``final_result`` unless renamed (PydanticAI's ``DEFAULT_OUTPUT_TOOL_NAME``);
its span is an ``execute_tool final_result`` span (``logfire.msg``
``running output function: final_result``): the agent's answer, not a tool call. An output
function that raises ``ModelRetry`` marks that span ERROR with ``pydantic_ai.tool.retry.*``
attributes (tests/fixtures/traces/pydantic_ai_output_validator.md).
"""

from __future__ import annotations

from scorers.dialects.base import Adapter


class PydanticAI(Adapter):
    """PydanticAI."""

    name = "pydantic_ai"
    scopes = frozenset({"pydantic-ai"})
    answer_tools = frozenset({"final_result"})
