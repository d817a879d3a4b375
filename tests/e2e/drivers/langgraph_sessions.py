"""E2e driver: multi-turn LangGraph conversations (a checkpointer thread each) traced by OpenInference.

Each turn is one ``graph.invoke`` (one trace) on the conversation's thread: the driver passes
``{"configurable": {"thread_id": SESSION}, "metadata": {"user_id": USER}}``; LangGraph's
``InMemorySaver`` checkpointer keeps the history, and OpenInference's LangChain instrumentor copies
the ``thread_id`` into ``session.id`` and the run's metadata into the ``metadata`` JSON attribute.
The truth records, per turn, the ids the driver set, and per conversation its scripted signals.

Conversations:

* ``lgs_weather`` (user ``alice``): Paris's weather; the user asks it again, rephrased, after the
  answer (re-ask at turn 1); then Rome.
* ``lgs_orders`` (user ``alice``): the order tool fails, the model says so; the user asks for a
  human (turn 1).
* ``lgs_filtered`` (user ``bob``): a normal turn, then one the model's content filter stops; the
  user leaves (abandoned).
* ``lgs_single``: one run on a graph without a checkpointer and no thread: a session of one.

Run: ``python tests/e2e/drivers/langgraph_sessions.py --capture traces.json --out truth.json``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness import API_KEY, Conversation, Harness, Plan, Say, converse
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph_agent import build_graph
from openinference.instrumentation.langchain import LangChainInstrumentor
from pydantic import SecretStr

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

SYSTEM = "You are a helpful travel and orders assistant."

PLANS = [
    Plan(
        "lgs_weather",
        "lg-thread-weather",
        "alice",
        [
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("It is 21 C and sunny in Paris."),
            ToolCallTurn.of("get_weather", city="Paris"),
            TextTurn("Right now Paris is at 21 C, sunny."),
            ToolCallTurn.of("get_weather", city="Rome"),
            TextTurn("Rome is 21 C and sunny too."),
        ],
        [
            Say("What is the weather in Paris?"),
            Say("Sorry, so how warm is it in Paris right now?", reask=True),
            Say("Thanks. And in Rome?"),
        ],
    ),
    Plan(
        "lgs_orders",
        "lg-thread-orders",
        "alice",
        [
            ToolCallTurn.of("lookup_order", order_id="A-404"),
            TextTurn("I could not find order A-404."),
            TextTurn("I will hand you over to a human colleague."),
        ],
        [Say("Where is my order A-404?"), Say("That does not help. Can I talk to a human, please?", human=True)],
    ),
    Plan(
        "lgs_filtered",
        "lg-thread-filtered",
        "bob",
        [ToolCallTurn.of("get_weather", city="Oslo"), TextTurn("Oslo: 21 C, sunny."), ContentFilterTurn("")],
        [Say("Weather in Oslo?"), Say("Now write something your filter blocks.")],
        abandoned=True,
    ),
]
"""The conversations on the checkpointer's threads."""


def on_thread(graph: Any, c: Conversation) -> Callable[[str], Any]:
    """One user turn on the conversation's thread (the first also carries the system prompt and marker)."""

    def say(text: str) -> Any:
        messages: list[tuple[str, str]] = [] if c.truth.traces else [("system", f"{c.marker} {SYSTEM}")]
        messages.append(("user", text))
        config = {"configurable": {"thread_id": c.session_id}, "metadata": {"user_id": c.user_id}}
        return graph.invoke({"messages": messages}, config)

    return say


def main() -> None:
    """Run every conversation against the fake model and write the ground truth."""
    h = Harness("langgraph_sessions", "lg-chat-agent")
    LangChainInstrumentor().instrument(tracer_provider=h.provider)
    model = ChatOpenAI(
        model="gpt-4o-mini", base_url=h.base_url, api_key=SecretStr(API_KEY), max_retries=0, temperature=0
    )
    chat = build_graph(model, "chat_agent", InMemorySaver())
    converse(h, "chat_agent", PLANS, lambda c: on_thread(chat, c))

    single = build_graph(model, "chat_agent", None)
    h.register("lgs_single", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")])
    with h.scenario("lgs_single", agent="chat_agent") as run:
        single.invoke({"messages": [("system", f"{run.marker} {SYSTEM}"), ("user", "Weather in Paris?")]})
    h.finish()


if __name__ == "__main__":
    main()
