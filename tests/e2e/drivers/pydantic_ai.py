# ruff: noqa: E402
"""E2e driver: a PydanticAI agent traced by PydanticAI's own OpenTelemetry instrumentation.

``Agent(..., capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=...))])``
(PydanticAI 2.x; 1.x spelled it ``instrument=``; no logfire): the agent
run, model request and tool spans come from PydanticAI itself. The model is ``OpenAIChatModel``
(Chat Completions) pointed at the fake server; the client never retries. Scenarios:

* ``pa_normal``: one weather tool call, then an answer.
* ``pa_parallel``: two weather calls in one model turn, then an answer.
* ``pa_tool_retry``: the order tool raises ``ModelRetry``; the retry prompt goes back to the model,
  which answers (a handled tool error).
* ``pa_tool_raise``: the order tool raises ``LookupError``; PydanticAI does not catch it, so it
  ends the run and reaches the caller.
* ``pa_request_limit``: the model keeps calling the tool; ``UsageLimits(request_limit=3)`` raises
  ``UsageLimitExceeded`` before the fourth request.
* ``pa_content_filter``: the first answer ends ``finish_reason=content_filter``; PydanticAI raises
  ``ContentFilterError``.
* ``pa_content_filter_after_tool``: a tool call, then a ``content_filter`` answer.
* ``pa_http_500``: the model answers HTTP 500; ``ModelHTTPError`` reaches the caller.

Run: ``python tests/e2e/drivers/pydantic_ai.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the package it drives: put its own folder (harness.py) last on the
# path, or `import pydantic_ai` would import this script.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from harness import API_KEY, SERVER_ERROR, Harness, current, tools
from openai import AsyncOpenAI
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import AgentRunError, UnexpectedModelBehavior, UsageLimitExceeded
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCall, ToolCallTurn

AGENT = "pa_travel_agent"
get_weather, lookup_order = tools(ModelRetry)  # an unknown order asks the model to retry


def cancel_order(order_id: str) -> str:
    """Cancel an order; the backend is down (raises)."""
    current().tool(failed=True)
    raise LookupError(f"order backend unavailable for {order_id}")


def main() -> None:
    """Register the scripts, build the instrumented agent, run every scenario."""
    h = Harness("pydantic_ai", "pa-travel-desk")
    client = AsyncOpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    agent: Agent[None, str] = Agent(
        model,
        name=AGENT,
        instructions="You help travellers.",
        tools=[get_weather, lookup_order, cancel_order],
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=h.provider))],
    )
    weather = ToolCallTurn.of("get_weather", city="Paris")
    h.register("pa_normal", [weather, TextTurn("Sunny in Paris.")])
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    h.register("pa_parallel", [both, TextTurn("Sunny in Paris and Rome.")])
    h.register("pa_tool_retry", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("pa_tool_raise", [ToolCallTurn.of("cancel_order", order_id="A-404"), TextTurn("never served")])
    h.register("pa_request_limit", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("pa_content_filter", [ContentFilterTurn("")])
    h.register("pa_content_filter_after_tool", [weather, ContentFilterTurn("I can")])
    h.register("pa_http_500", [SERVER_ERROR])
    plan: list[tuple[str, str, UsageLimits | None]] = [
        ("pa_normal", "What is the weather in Paris?", None),
        ("pa_parallel", "Weather in Paris and Rome?", None),
        ("pa_tool_retry", "Where is my order A-404?", None),
        ("pa_tool_raise", "Cancel order A-404.", None),
        ("pa_request_limit", "Keep checking the weather.", UsageLimits(request_limit=3)),
        ("pa_content_filter", "Say something filtered.", None),
        ("pa_content_filter_after_tool", "Weather in Paris, then something filtered.", None),
        ("pa_http_500", "What is the weather in Paris?", None),
    ]
    expected: tuple[type[BaseException], ...] = (AgentRunError, LookupError)
    for name, prompt, limits in plan:
        with h.scenario(name, agent=AGENT, expected=expected) as run:
            try:
                agent.run_sync(f"{run.marker} {prompt}", usage_limits=limits)
            except UsageLimitExceeded:
                run.hit_max_iterations = True
                raise
            except UnexpectedModelBehavior as exc:  # ContentFilterError is a subclass
                run.safety_blocked = "content filter" in str(exc).lower()
                raise
    h.finish()


if __name__ == "__main__":
    main()
