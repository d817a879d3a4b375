"""E2e driver: an Agno agent traced by OpenInference's Agno instrumentor.

``Agent(name="travel_agent", model=OpenAIChat(id="gpt-4o-mini", base_url=fake, max_retries=0),
tools=[get_weather, lookup_order], tool_call_limit=2)``; ``agent.run(prompt)`` per scenario (one
trace, root ``travel_agent.run``). Agno never raises a run's exception to the caller: a failed
run comes back as ``RunOutput.status == RunStatus.error`` with the message as its content. The
driver records such a run as ``errored`` (with ``exception`` left empty: no exception object
reached it).

Scenarios:

* ``ag_normal``: one weather tool call, then an answer.
* ``ag_tool_error``: the order tool raises; Agno hands the error to the model, which answers.
* ``ag_tool_call_limit``: the model keeps calling the tool; after ``tool_call_limit=2`` executed
  calls Agno answers the third with a "Tool call limit reached" tool message instead of running
  it, and the model then answers (graceful limit hit, seen in the run's messages).
* ``ag_pii_guardrail``: a ``PIIDetectionGuardrail`` pre-hook raises ``InputCheckError`` on a card
  number before any model call; the run ends with status error.
* ``ag_content_filter``: the only answer ends ``finish_reason=content_filter`` with no content;
  Agno returns an empty, completed run.
* ``ag_http_500``: the model answers HTTP 500; the run ends with status error.

Run: ``python tests/e2e/drivers/agno.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os
import sys

# This file is named like the framework: let ``import agno`` find the package, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_HERE]

from typing import Any  # noqa: E402

from agno.agent import Agent  # noqa: E402
from agno.exceptions import InputCheckError  # noqa: E402
from agno.guardrails import PIIDetectionGuardrail  # noqa: E402
from agno.models.openai import OpenAIChat  # noqa: E402
from agno.run.base import RunStatus  # noqa: E402
from harness import API_KEY, SERVER_ERROR, Harness, tools  # noqa: E402
from openinference.instrumentation.agno import AgnoInstrumentor  # noqa: E402

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn  # noqa: E402

TOOL_CALL_LIMIT = 2
LIMIT_MESSAGE = "Tool call limit reached."
"""How Agno's tool message starts when it refuses a call over ``tool_call_limit``."""

_current: dict[str, bool] = {}
"""What the driver's callbacks noticed during the scenario in progress."""
get_weather, lookup_order = tools()


class NotedPIIGuardrail(PIIDetectionGuardrail):  # type: ignore[misc]
    """Agno's PII guardrail, noting for the driver when it blocks."""

    def check(self, run_input: Any) -> None:
        """Run the check; remember a block before re-raising it."""
        try:
            super().check(run_input)
        except InputCheckError:
            _current["blocked"] = True
            raise


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    h.register("ag_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    h.register("ag_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    oslo = ToolCallTurn.of("get_weather", city="Oslo")
    h.register("ag_tool_call_limit", [oslo] * (TOOL_CALL_LIMIT + 1) + [TextTurn("I must stop: mild in Oslo.")])
    h.register("ag_pii_guardrail", [TextTurn("This must never be served.")])
    h.register("ag_content_filter", [ContentFilterTurn("")])
    h.register("ag_http_500", [SERVER_ERROR])


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("agno", "agno-travel-desk")
    AgnoInstrumentor().instrument(tracer_provider=h.provider)
    register(h)
    model = OpenAIChat(id="gpt-4o-mini", base_url=h.base_url, api_key=API_KEY, max_retries=0)
    agent = Agent(
        name="travel_agent",
        model=model,
        tools=[get_weather, lookup_order],
        instructions="You help travellers. Use the tools.",
        tool_call_limit=TOOL_CALL_LIMIT,
        pre_hooks=[NotedPIIGuardrail()],
    )
    plan = [
        ("ag_normal", "What is the weather in Paris?"),
        ("ag_tool_error", "Where is my order A-404?"),
        ("ag_tool_call_limit", "Keep checking the weather in Oslo."),
        ("ag_pii_guardrail", "My credit card is 4111 1111 1111 1111, book a hotel."),
        ("ag_content_filter", "Say something filtered."),
        ("ag_http_500", "What is the weather in Lima?"),
    ]
    for name, text in plan:
        with h.scenario(name, agent=agent.name or "travel_agent") as run:
            _current["blocked"] = False
            output = agent.run(f"{run.marker} {text}")
            run.errored = output.status == RunStatus.error
            run.safety_blocked = bool(_current["blocked"])
            run.hit_max_iterations = any(
                m.role == "tool" and str(m.content or "").startswith(LIMIT_MESSAGE) for m in output.messages or []
            )
    h.finish()


if __name__ == "__main__":
    main()
