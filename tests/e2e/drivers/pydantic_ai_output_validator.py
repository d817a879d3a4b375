# ruff: noqa: E402
"""E2e driver: PydanticAI output validators that make the model answer again (``ModelRetry``).

The same agent setup as ``pydantic_ai_guards.py`` (PydanticAI's own ``Instrumentation`` capability,
no logfire, ``OpenAIChatModel`` on the fake server, no client retries). An output validator that
raises ``ModelRetry(reason)`` makes PydanticAI send the reason back to the model as retry feedback
(a ``RetryFeedbackPart``, shown to the model as a user message fenced in ``<pyai:retry_feedback>``)
after the rejected answer, and ask again; past ``retries={"output": 1}``
it raises ``UnexpectedModelBehavior: Exceeded maximum output retries (1)``.

Scenarios:

* ``pv_normal``: one weather tool call, then an answer the validator accepts.
* ``pv_ssn_retried``: the first answer holds a social security number; the validator rejects it
  (``ModelRetry``), the second answer passes. Truth: blocked (the output safety check triggered),
  not errored.
* ``pv_ssn_exhausted``: every answer holds a social security number; the validator rejects both
  and the run raises. Truth: blocked and errored.
* ``pv_format_retried``: the first answer is not JSON; the format validator rejects it, the second
  passes. Truth: neither blocked nor errored (a format rejection names no safety reason).
* ``pv_ssn_output_tool``: the answer goes through an output function (``ToolOutput(book)``, the
  ``final_result`` output tool); the function raises ``ModelRetry`` on the first call's social
  security number, the second passes. PydanticAI records the output function's span with the
  exception and its ``pydantic_ai.tool.retry.*`` attributes, and answers the tool call with the
  retry (``ToolReturnPart(outcome='retried')``). Truth: blocked, not errored.

Run: ``python tests/e2e/drivers/pydantic_ai_output_validator.py --capture F --out F``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

# This folder holds pydantic_ai.py (another driver): put it last on the path, or `import
# pydantic_ai` would import that script.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from harness import Harness, current
from pydantic_ai import Agent, ModelRetry, ToolOutput
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai_guards import json_summary, travel_agents

from collector.demo.fakeopenai import TextTurn, ToolCallTurn

AGENT = "pv_travel_agent"
SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")


def main() -> None:
    """Register the scripts, build the instrumented agents, run every scenario."""
    h = Harness("pydantic_ai_output_validator", "pa-validated-travel-desk")
    agent = travel_agents(h, AGENT)
    private = agent()
    formatted = agent()

    @private.output_validator
    def no_ssn(output: str) -> str:
        """Reject answers that hold a social security number (driver truth: the safety check triggered)."""
        if SSN.search(output):
            current().safety_blocked = True
            raise ModelRetry("The answer reveals a social security number (SSN). Answer without it.")
        return output

    formatted.output_validator(json_summary)

    def book(summary: str) -> str:
        """Book the trip; return its summary (rejected when it holds a social security number)."""
        if SSN.search(summary):
            current().safety_blocked = True
            raise ModelRetry("The summary reveals a social security number (SSN). Book again without it.")
        return summary

    tooled = agent(output_type=ToolOutput(book, name="final_result"))

    h.register("pv_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")])
    h.register("pv_ssn_retried", [TextTurn("Booked for SSN 078-05-1120."), TextTurn("Your trip is booked.")])
    h.register("pv_ssn_exhausted", [TextTurn("Booked for SSN 078-05-1120.")])
    h.register("pv_format_retried", [TextTurn("Sunny in Paris."), TextTurn('{"summary": "Sunny in Paris."}')])
    h.register(
        "pv_ssn_output_tool",
        [
            ToolCallTurn.of("final_result", summary="Booked for SSN 078-05-1120."),
            ToolCallTurn.of("final_result", summary="Your trip is booked."),
        ],
    )
    plan: list[tuple[str, Agent[None, str], str]] = [
        ("pv_normal", private, "What is the weather in Paris?"),
        ("pv_ssn_retried", private, "Book my trip to Paris."),
        ("pv_ssn_exhausted", private, "Book my trip to Rome."),
        ("pv_format_retried", formatted, "Summarise the weather in Paris."),
        ("pv_ssn_output_tool", tooled, "Book my trip to Lima."),
    ]
    for name, app, prompt in plan:
        with h.scenario(name, agent=AGENT, expected=(AgentRunError,)) as run:
            app.run_sync(f"{run.marker} {prompt}")
    h.finish()


if __name__ == "__main__":
    main()
