"""E2e driver: multi-turn Google ADK conversations (one ADK session each) traced by ADK's own spans.

Each turn is one ``InMemoryRunner.run_async`` on the conversation's session (one trace, root
``invoke_workflow travel_agent``). The driver creates the session with its own id
(``create_session(app_name=, user_id=, session_id=SESSION)``); ADK keeps the history and writes the
session id on its spans as ``gen_ai.conversation.id``. ADK writes the session's user id only on its
log records, never on a span: the truth keeps the user the driver set, and
``unobservable.json`` says so. The model is LiteLlm against the fake server (see google_adk.py).

Conversations:

* ``adks_trip`` (user ``gina``): Paris's weather; the user asks it again, rephrased (re-ask at
  turn 1); then says goodbye.
* ``adks_orders`` (user ``gina``): the order tool fails (an ``on_tool_error_callback`` hands the
  error to the model), the model says so; the user asks for a human (turn 1).
* ``adks_filtered`` (user ``hank``): a greeting, then an answer stopped by the content filter
  (ADK: ``SAFETY``, nothing raised); the user leaves (abandoned).
* ``adks_single``: one run on a session ADK names itself: a session of one (its id recorded).

Run: ``python tests/e2e/drivers/google_adk_sessions.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: use the bundled cost map

import asyncio
from collections.abc import Callable
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from harness import API_KEY, Conversation, Harness, Plan, Say, converse, tools
from opentelemetry import trace

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

APP = "travel_chat"
get_weather, lookup_order = tools()


def tool_error_as_result(
    tool: BaseTool, args: dict[str, Any], tool_context: Any, error: Exception
) -> dict[str, Any] | None:
    """Hand a tool's exception to the model as the tool's result."""
    return {"error": f"{type(error).__name__}: {error}"}


class Chat:
    """One conversation: its agent (the instruction carries the marker), runner and ADK session."""

    def __init__(self, model: LiteLlm, marker: str) -> None:
        agent = LlmAgent(
            name="travel_agent",
            model=model,
            instruction=f"{marker} You help travellers. Use the tools.",
            tools=[get_weather, lookup_order],
            on_tool_error_callback=tool_error_as_result,
        )
        self.runner = InMemoryRunner(agent=agent, app_name=APP)
        self.user = ""
        self.session = ""

    async def open(self, user: str, session_id: str | None) -> str:
        """Create the ADK session (with the driver's id, or ADK's own); returns its id."""
        session = await self.runner.session_service.create_session(app_name=APP, user_id=user, session_id=session_id)
        self.user, self.session = user, session.id
        return session.id

    async def say(self, text: str) -> None:
        """One user turn on the session, draining its events."""
        message = types.Content(role="user", parts=[types.Part(text=text)])
        async for _event in self.runner.run_async(user_id=self.user, session_id=self.session, new_message=message):
            pass


PLANS = [
    Plan(
        "adks_trip",
        "adk-session-trip",
        "gina",
        [
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("It is 21 C and sunny in Paris."),
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("Still 21 C and sunny in Paris."),
            TextTurn("Goodbye, safe travels!"),
        ],
        [
            Say("What is the weather in Paris?"),
            Say("Sorry, how warm is Paris right now, again?", reask=True),
            Say("Thanks, bye."),
        ],
    ),
    Plan(
        "adks_orders",
        "adk-session-orders",
        "gina",
        [
            ToolCallTurn.of("lookup_order", order_id="A-404"),
            TextTurn("I could not find order A-404."),
            TextTurn("A human colleague will call you back."),
        ],
        [Say("Where is my order A-404?"), Say("I want to talk to a human being.", human=True)],
    ),
    Plan(
        "adks_filtered",
        "adk-session-filtered",
        "hank",
        [TextTurn("Hello! How can I help?"), ContentFilterTurn("")],
        [Say("Hi."), Say("Write something your filter blocks.")],
        abandoned=True,
    ),
]
"""The conversations, each on its own ADK session (created with the driver's id)."""


def main() -> None:
    """Set the global provider for ADK, run the conversations (each ``run_async`` one trace), write the truth."""
    h = Harness("google_adk_sessions", "adk-travel-chat")
    trace.set_tracer_provider(h.provider)
    with asyncio.Runner() as loop:  # one event loop for every turn, as one asyncio.run would be
        model = LiteLlm(model="openai/gpt-4o-mini", api_base=h.base_url, api_key=API_KEY, num_retries=0)

        def start(c: Conversation) -> Callable[[str], None]:
            chat = Chat(model, c.marker)
            loop.run(chat.open(c.user_id or "", c.session_id))
            return lambda text: loop.run(chat.say(text))

        converse(h, "travel_agent", PLANS, start)
        h.register("adks_single", [ToolCallTurn.of("get_weather", city="Oslo"), TextTurn("Oslo: 21 C.")])
        with h.scenario("adks_single", agent="travel_agent") as run:
            chat = Chat(model, run.marker)
            run.session_id = loop.run(chat.open("ivan", None))
            run.user_id = "ivan"
            loop.run(chat.say("Weather in Oslo?"))
    h.finish()


if __name__ == "__main__":
    main()
