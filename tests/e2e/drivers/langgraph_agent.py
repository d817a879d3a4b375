"""E2e driver: a LangGraph tool-calling agent traced by OpenInference's LangChain instrumentor.

Scenarios (each one trace):

* ``lg_normal``: one weather tool call, then an answer.
* ``lg_tool_error``: the order tool raises; ``ToolNode(handle_tool_errors=True)`` turns it into an
  error ``ToolMessage`` and the model answers. Streamed (SSE) model calls.
* ``lg_recursion``: the model keeps calling the tool; ``recursion_limit=6`` raises
  ``GraphRecursionError`` to the caller.
* ``lg_content_filter``: the model's only answer ends with ``finish_reason=content_filter``.
* ``lg_need_more_steps``: the prebuilt ReAct agent with ``recursion_limit=4`` stops itself with
  "Sorry, need more steps to process this request." (a limit hit without an exception).

Run: ``python tests/e2e/drivers/langgraph_agent.py --endpoint URL --openai-base-url URL --out F``.
"""

from __future__ import annotations

import warnings
from typing import Any

from harness import API_KEY, Harness, tools
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphRecursionError
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from openinference.instrumentation.langchain import LangChainInstrumentor
from pydantic import SecretStr

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn

SORRY = "Sorry, need more steps to process this request."
"""What LangGraph's prebuilt ReAct agent answers when it runs out of steps."""

get_weather, lookup_order = (tool(f) for f in tools())


TOOLS = [get_weather, lookup_order]


def build_graph(model: ChatOpenAI, name: str, checkpointer: BaseCheckpointSaver[Any] | None = None) -> Any:
    """A hand-built agent graph: ``agent`` (model with tools) <-> ``tools`` (ToolNode), with ``checkpointer``
    (the conversations of langgraph_sessions.py keep their history in one)."""
    bound = model.bind_tools(TOOLS)

    def agent(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [bound.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(TOOLS, handle_tool_errors=True))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    return graph.compile(name=name, checkpointer=checkpointer)


def main() -> None:
    """Run every scenario against the fake model and write the ground truth."""
    h = Harness("langgraph", "lg-weather-agent")
    LangChainInstrumentor().instrument(tracer_provider=h.provider)
    h.register("lg_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    h.register("lg_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("lg_recursion", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("lg_content_filter", [ContentFilterTurn("")])
    h.register("lg_need_more_steps", [ToolCallTurn.of("get_weather", city="Rome")])

    def chat(streaming: bool = False) -> ChatOpenAI:
        return ChatOpenAI(
            model="gpt-4o-mini",
            base_url=h.base_url,
            api_key=SecretStr(API_KEY),
            max_retries=0,
            streaming=streaming,
            stream_usage=True,
            temperature=0,
        )

    weather = build_graph(chat(), "weather_agent")
    streamed = build_graph(chat(streaming=True), "orders_agent")
    for name, graph, limit in (
        ("lg_normal", weather, 25),
        ("lg_tool_error", streamed, 25),
        ("lg_content_filter", weather, 25),
    ):
        with h.scenario(name, agent=graph.name) as run:
            graph.invoke({"messages": [("user", f"{run.marker} Please help.")]}, {"recursion_limit": limit})
    with h.scenario("lg_recursion", agent="weather_agent", expected=(GraphRecursionError,)) as run:
        run.hit_max_iterations = True
        weather.invoke({"messages": [("user", f"{run.marker} Weather, again?")]}, {"recursion_limit": 6})
    _need_more_steps(h, chat())
    h.finish()


def _need_more_steps(h: Harness, model: ChatOpenAI) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # create_react_agent is deprecated in favour of langchain's
        from langgraph.prebuilt import create_react_agent

        planner = create_react_agent(model, TOOLS, name="planner_agent")
    with h.scenario("lg_need_more_steps", agent="planner_agent") as run:
        out = planner.invoke({"messages": [("user", f"{run.marker} Plan a trip.")]}, {"recursion_limit": 4})
        last = out["messages"][-1]
        run.hit_max_iterations = isinstance(last, AIMessage) and last.content == SORRY


if __name__ == "__main__":
    main()
