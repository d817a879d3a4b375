# ruff: noqa: E402
"""E2e driver: multi-turn PydanticAI conversations traced by PydanticAI's own OpenTelemetry instrumentation.

Each turn is one ``agent.run_sync`` (one trace). The first turn of a conversation passes
``conversation_id=SESSION``; later turns pass only ``message_history`` (the previous result's
messages), from which PydanticAI inherits the conversation id; it writes it on every span as
``gen_ai.conversation.id``. PydanticAI has no user id of its own: the app passes
``metadata={"user_id": USER}``, exported with the run. The truth records, per turn, the ids
the driver set, and per conversation its scripted signals.

Conversations:

* ``pas_trip`` (user ``erin``): Paris's weather, then Rome's; then the user asks the Paris question
  again, rephrased (re-ask at turn 2).
* ``pas_cut`` (user ``erin``): a normal turn, then one where the model's content filter stops the
  answer (PydanticAI raises ``ContentFilterError``); the user leaves (abandoned).
* ``pas_human`` (user ``frank``): the order tool asks the model to retry, the model gives up; the
  user asks for a human (turn 1), who is promised.
* ``pas_single``: one run without a conversation id: PydanticAI still draws a fresh one (UUID7),
  so it is a session of one with an id the driver did not set (recorded from the run).

Run: ``python tests/e2e/drivers/pydantic_ai_sessions.py --capture F --out F``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file's folder holds pydantic_ai.py: put it last on the path (see pydantic_ai.py).
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from typing import Any

from harness import API_KEY, Conversation, Harness, Plan, Say, converse, tools
from openai import AsyncOpenAI
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

AGENT = "pa_chat_agent"
get_weather, lookup_order = tools(ModelRetry)


class Chat:
    """One conversation's agent (its instructions carry the marker) and the history so far."""

    def __init__(self, h: Harness, c: Conversation, model: OpenAIChatModel) -> None:
        self.c = c
        self.history: list[Any] | None = None
        self.agent: Agent[None, str] = Agent(
            model,
            name=AGENT,
            instructions=f"{c.marker} You help travellers.",
            tools=[get_weather, lookup_order],
            capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=h.provider))],
        )

    def say(self, text: str) -> None:
        """One user turn: the first names the conversation, later ones carry its history."""
        metadata = {"user_id": self.c.user_id} if self.c.user_id else None
        if self.history is None:
            result = self.agent.run_sync(text, conversation_id=self.c.session_id, metadata=metadata)
        else:
            result = self.agent.run_sync(text, message_history=self.history, metadata=metadata)
        self.history = result.all_messages()


PLANS = [
    Plan(
        "pas_trip",
        "pa-conv-trip",
        "erin",
        [
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("It is 21 C and sunny in Paris."),
            ToolCallTurn.of("get_weather", city="Rome"),
            TextTurn("Rome is sunny, 21 C."),
            TextTurn("As I said, Paris is 21 C and sunny."),
        ],
        [
            Say("What is the weather in Paris?"),
            Say("And in Rome?"),
            Say("Sorry, what was the weather in Paris again?", reask=True),
        ],
    ),
    Plan(
        "pas_cut",
        "pa-conv-cut",
        "erin",
        [TextTurn("Hello! How can I help?"), ContentFilterTurn("")],
        [
            Say("Hi there."),
            # ContentFilterError reaches the caller
            Say("Write something your filter blocks.", expected=(AgentRunError,), safety_blocked=True),
        ],
        abandoned=True,
    ),
    Plan(
        "pas_human",
        "pa-conv-human",
        "frank",
        [
            ToolCallTurn.of("lookup_order", order_id="A-404"),
            TextTurn("I could not find order A-404."),
            TextTurn("Of course: a human colleague will contact you."),
        ],
        [Say("Where is my order A-404?"), Say("Please get me a human operator.", human=True)],
    ),
]
"""The conversations, each on its own agent (its instructions carry the conversation's marker)."""


def main() -> None:
    """Run every conversation against the fake model and write the ground truth."""
    h = Harness("pydantic_ai_sessions", "pa-travel-chat")
    client = AsyncOpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    converse(h, AGENT, PLANS, lambda c: Chat(h, c, model).say)

    h.register("pas_single", [ToolCallTurn.of("get_weather", city="Oslo"), TextTurn("Oslo: 21 C.")])
    single: Agent[None, str] = Agent(
        model,
        name=AGENT,
        tools=[get_weather, lookup_order],
        capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=h.provider))],
    )
    with h.scenario("pas_single", agent=AGENT) as run:
        run.session_id = single.run_sync(f"{run.marker} Weather in Oslo?").conversation_id
    h.finish()


if __name__ == "__main__":
    main()
