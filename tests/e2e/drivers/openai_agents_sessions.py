"""E2e driver: multi-turn OpenAI Agents SDK conversations traced by OpenInference's openai-agents instrumentor.

Each turn is one ``Runner.run`` (one SDK trace, one OTel trace). The conversation's memory is the
SDK's own ``SQLiteSession(SESSION)``; the SDK groups the traces of one conversation with
``RunConfig(group_id=SESSION)``, which OpenInference's processor does not export, so the app
also names the session and user the way OpenInference documents it: ``using_attributes(session_id=,
user_id=)`` around the run, which its tracer copies onto every span as ``session.id`` / ``user.id``.
The truth records, per turn, the ids the driver set, and per conversation its scripted signals.

Conversations:

* ``ags_weather`` (user ``carol``): Paris's weather; the user asks it again, rephrased (re-ask at
  turn 1); then asks for a human (turn 2).
* ``ags_filtered`` (user ``dave``): a normal turn, then one the model's content filter stops (the
  SDK raises to the caller); the user leaves (abandoned).
* ``ags_orders`` (no user id): the order tool fails, the model says so, the user thanks it.
* ``ags_single``: one run outside any session: a session of one.

Run: ``python tests/e2e/drivers/openai_agents_sessions.py --capture traces.json --out truth.json``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from agents import Agent, OpenAIResponsesModel, RunConfig, Runner, SQLiteSession, function_tool
from agents.exceptions import AgentsException
from harness import API_KEY, Conversation, Harness, Plan, Say, converse, tools
from openai import AsyncOpenAI, OpenAIError
from openinference.instrumentation import using_attributes
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

get_weather, lookup_order = (function_tool(f) for f in tools())
INSTRUCTIONS = "You help travellers."


def agent_for(model: OpenAIResponsesModel, marker: str) -> Agent[Any]:
    """The travel agent of one conversation (its instructions carry the conversation's marker)."""
    return Agent(
        name="travel_agent", instructions=f"{marker} {INSTRUCTIONS}", model=model, tools=[get_weather, lookup_order]
    )


async def say(c: Conversation, agent: Agent[Any], memory: SQLiteSession, text: str) -> Any:
    """One user turn: the SDK session holds the history; the ids go on the spans through the context."""
    run_config = RunConfig(group_id=c.session_id, workflow_name="travel desk")
    if c.user_id is None:
        with using_attributes(session_id=c.session_id):
            return await Runner.run(agent, text, session=memory, run_config=run_config)
    with using_attributes(session_id=c.session_id, user_id=c.user_id):
        return await Runner.run(agent, text, session=memory, run_config=run_config)


PLANS = [
    Plan(
        "ags_weather",
        "ag-conv-weather",
        "carol",
        [
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("It is 21 C and sunny in Paris."),
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("Paris: 21 C and sunny right now."),
            TextTurn("I am passing you to a human agent."),
        ],
        [
            Say("What is the weather in Paris?"),
            Say("I mean, how warm is it in Paris at the moment?", reask=True),
            Say("I would rather speak to a real person.", human=True),
        ],
    ),
    Plan(
        "ags_filtered",
        "ag-conv-filtered",
        "dave",
        [ToolCallTurn.of("get_weather", city="Lima"), TextTurn("Mild in Lima."), ContentFilterTurn("")],
        [
            Say("Weather in Lima?"),
            # The SDK raises on an `incomplete` response before adding its usage (see openai_agents.py).
            Say(
                "Now say something your filter blocks.",
                expected=(AgentsException, OpenAIError),
                rejected_kinds=("content_filter",),
            ),
        ],
        abandoned=True,
    ),
    Plan(
        "ags_orders",
        "ag-conv-orders",
        None,
        [
            ToolCallTurn.of("lookup_order", order_id="A-404"),
            TextTurn("I could not find order A-404."),
            TextTurn("You are welcome."),
        ],
        [Say("Where is my order A-404?"), Say("Thanks, I will check the number.")],
    ),
]
"""The conversations, each on its own SDK session."""


def main() -> None:
    """Instrument, run the conversations (each ``Runner.run`` one trace), and write the ground truth."""
    h = Harness("openai_agents_sessions", "agents-travel-chat")
    OpenAIAgentsInstrumentor().instrument(tracer_provider=h.provider)
    with asyncio.Runner() as loop:  # one event loop for every turn, as one asyncio.run would be
        client = AsyncOpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
        model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)

        def start(c: Conversation) -> Callable[[str], Any]:
            agent, memory = agent_for(model, c.marker), SQLiteSession(c.session_id)
            return lambda text: loop.run(say(c, agent, memory, text))

        converse(h, "travel_agent", PLANS, start)
        h.register("ags_single", [ToolCallTurn.of("get_weather", city="Rome"), TextTurn("Sunny in Rome.")])
        with h.scenario("ags_single", agent="travel_agent") as run:
            loop.run(Runner.run(agent_for(model, run.marker), "Weather in Rome?"))
        loop.run(client.close())
    h.finish()


if __name__ == "__main__":
    main()
