"""E2e driver: AutoGen AgentChat agents, traced both ways at once.

Two dialects land in the same traces, as in an app that sets the global tracer provider
(AutoGen's own GenAI spans, ``autogen-core`` / ``autogen SingleThreadedAgentRuntime``) and also
applies ``openinference-instrumentation-autogen-agentchat`` (agent, LLM and tool spans with
OpenInference attributes). ``AssistantAgent`` on ``OpenAIChatCompletionClient(base_url=fake,
max_retries=0)``. Agents are built *before* each scenario: AutoGen opens a one-span
``create_agent <name>`` trace at construction, which is kept in the capture but is not a run.
Scenarios (each one trace):

* ``au_normal``: one weather tool call, then an answer (``max_tool_iterations=3``).
* ``au_tool_error``: the order tool raises; AutoGen hands the error to the model, which
  answers. Streamed model calls (``model_client_stream=True``).
* ``au_max_tool_iterations``: the model keeps calling the tool; after ``max_tool_iterations=3``
  the agent stops and returns a ``ToolCallSummaryMessage`` (graceful limit hit).
* ``au_max_messages``: a ``RoundRobinGroupChat`` of two agents with
  ``MaxMessageTermination(4)`` stops with ``stop_reason`` "Maximum number of messages 4 reached,
  current message count: 4" (graceful limit hit).
* ``au_content_filter``: the only answer ends ``finish_reason=content_filter``; the agent returns
  an empty ``TextMessage``.
* ``au_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.

Run: ``python tests/e2e/drivers/autogen.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import openai
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallRequestEvent, ToolCallSummaryMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_ext.models.openai import OpenAIChatCompletionClient
from harness import API_KEY, SERVER_ERROR, Harness, drive, global_provider, tools
from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

MAX_TOOL_ITERATIONS = 3
MAX_MESSAGES = 4
MAX_MESSAGES_REASON = f"Maximum number of messages {MAX_MESSAGES} reached"

get_weather, lookup_order = tools()


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    h.register("au_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    h.register("au_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("au_max_tool_iterations", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("au_max_messages", [TextTurn("Let us think about it some more.")])
    h.register("au_content_filter", [ContentFilterTurn("")])
    h.register("au_http_500", [SERVER_ERROR])


async def scenarios(h: Harness) -> None:
    """Run every scenario; each ``run`` is one trace (plus ``create_agent`` traces before it)."""
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", base_url=h.base_url, api_key=API_KEY, max_retries=0)

    def assistant(name: str = "travel_agent", stream: bool = False) -> AssistantAgent:
        return AssistantAgent(
            name,
            model_client=client,
            tools=[get_weather, lookup_order],
            system_message="You help travellers. Use the tools.",
            max_tool_iterations=MAX_TOOL_ITERATIONS,
            model_client_stream=stream,
        )

    single: list[tuple[str, bool, str, tuple[type[BaseException], ...]]] = [
        ("au_normal", False, "What is the weather in Paris?", ()),
        ("au_tool_error", True, "Where is my order A-404?", ()),
        ("au_max_tool_iterations", False, "Keep checking the weather in Oslo.", ()),
        ("au_content_filter", False, "Say something filtered.", ()),
        ("au_http_500", False, "What is the weather in Lima?", (openai.APIError,)),
    ]
    for name, stream, text, expected in single:
        agent = assistant(stream=stream)
        with h.scenario(name, agent=agent.name, expected=expected) as run:
            result = await agent.run(task=f"{run.marker} {text}")
            run.hit_max_iterations = _used_all_tool_iterations(result)
    team = RoundRobinGroupChat(
        [assistant("planner"), assistant("critic")],
        termination_condition=MaxMessageTermination(MAX_MESSAGES),
        name="travel_team",
    )
    with h.scenario("au_max_messages", agent="travel_team") as run:
        result = await team.run(task=f"{run.marker} Plan a trip to Oslo.")
        run.hit_max_iterations = (result.stop_reason or "").startswith(MAX_MESSAGES_REASON)
    await client.close()


def _used_all_tool_iterations(result: TaskResult) -> bool:
    """The agent stopped on a tool-call summary after MAX_TOOL_ITERATIONS tool-calling rounds."""
    rounds = sum(isinstance(m, ToolCallRequestEvent) for m in result.messages)
    return rounds >= MAX_TOOL_ITERATIONS and isinstance(result.messages[-1], ToolCallSummaryMessage)


def instrument(h: Harness) -> None:
    """OpenInference's AutoGen AgentChat instrumentor, into ``h``'s provider."""
    AutogenAgentChatInstrumentor().instrument(tracer_provider=h.provider)


def main() -> None:
    """Register the scripts, instrument (both dialects), run, and write the ground truth."""
    # AutoGen's native spans use the global provider
    drive("autogen", "autogen-travel-desk", global_provider, instrument, register, scenarios)


if __name__ == "__main__":
    main()
