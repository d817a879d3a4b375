"""E2e driver: a Strands Agents ``Agent`` traced by Strands' own OpenTelemetry tracer.

Strands' tracer (``strands.telemetry.tracer``) uses the global tracer provider, so the driver sets
it before the first agent is built. Without ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
(the default, kept here) it writes the conversation in the **event-based** form of the GenAI
conventions: ``gen_ai.system.message`` / ``gen_ai.user.message`` / ``gen_ai.assistant.message`` /
``gen_ai.tool.message`` events for the input and a ``gen_ai.choice`` event (``finish_reason``,
``message``) for the output of every agent, cycle and model span. The model is
``OpenAIModel(client_args={"base_url": fake, "max_retries": 0}, model_id="gpt-4o-mini")``; each
scenario is one call of a fresh ``Agent(name="travel_agent")`` (one trace, root ``invoke_agent
travel_agent``).

Scenarios:

* ``st_normal``: one weather tool call, then an answer.
* ``st_parallel``: two weather tool calls in one turn (Strands runs them concurrently), then an answer.
* ``st_tool_error``: the order tool raises; Strands hands the error to the model as an ``error``
  tool result and the model answers.
* ``st_turn_limit``: the model keeps calling the tool; a hook (Strands has no turn cap of its own)
  counts tool calls and, at the third, calls ``agent.cancel(after_current_tools=True)``: the run
  returns normally with ``stop_reason="cancelled"`` and the model's last (tool-use) message.
* ``st_content_filter``: the only answer ends ``finish_reason=content_filter``; Strands' OpenAI
  model maps every finish reason but ``tool_calls`` and ``length`` to ``end_turn``.
* ``st_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.

Run: ``python tests/e2e/drivers/strands_agents.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

from typing import Any

import openai
from harness import API_KEY, SERVER_ERROR, Harness, current, drive, global_provider, tools
from strands import Agent, tool
from strands.hooks import AfterToolCallEvent, HookProvider, HookRegistry
from strands.models.openai import OpenAIModel

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCall, ToolCallTurn

MAX_TOOL_CALLS = 3
get_weather, lookup_order = tools()


class ToolCallCap(HookProvider):
    """The app's turn limit: stop the loop once ``cap`` tool calls have run."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.calls = 0

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Count every finished tool call."""
        registry.add_callback(AfterToolCallEvent, self.after_tool)

    def after_tool(self, event: AfterToolCallEvent) -> None:
        """At the cap, let the current tools finish and stop before the next model call."""
        self.calls += 1
        if self.calls == self.cap:
            current().hit_max_iterations = True
            event.agent.cancel(after_current_tools=True)


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    h.register("st_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    h.register("st_parallel", [both, TextTurn("Sunny in Paris and Rome.")])
    h.register("st_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("st_turn_limit", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("st_content_filter", [ContentFilterTurn("")])
    h.register("st_http_500", [SERVER_ERROR])


def scenarios(h: Harness) -> None:
    """Run every scenario, each on a fresh agent."""
    model = OpenAIModel(
        client_args={"api_key": API_KEY, "base_url": h.base_url, "max_retries": 0}, model_id="gpt-4o-mini"
    )
    plan: list[tuple[str, str, tuple[type[BaseException], ...]]] = [
        ("st_normal", "What is the weather in Paris?", ()),
        ("st_parallel", "Weather in Paris and Rome?", ()),
        ("st_tool_error", "Where is my order A-404?", ()),
        ("st_turn_limit", "Keep checking the weather in Oslo.", ()),
        ("st_content_filter", "Say something filtered.", ()),
        ("st_http_500", "What is the weather in Lima?", (openai.APIError,)),
    ]
    for name, text, expected in plan:
        agent = Agent(
            name="travel_agent",
            model=model,
            system_prompt="You help travellers. Use the tools.",
            tools=[tool(get_weather), tool(lookup_order)],
            hooks=[ToolCallCap(MAX_TOOL_CALLS)],
            callback_handler=None,
        )
        with h.scenario(name, agent="travel_agent", expected=expected) as run:
            agent(f"{run.marker} {text}")


def main(driver: str = "strands_agents") -> None:
    """Register the scripts, set the global provider for Strands, run, and write the ground truth."""
    drive(driver, "strands-travel-desk", global_provider, register, scenarios)


if __name__ == "__main__":
    main()
