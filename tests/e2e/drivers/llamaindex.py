"""E2e driver: LlamaIndex workflow agents traced by OpenInference's LlamaIndex instrumentor.

``FunctionAgent`` (native tool calling) and ``ReActAgent`` (text ReAct format) on
``llama_index.llms.openai.OpenAI(api_base=fake, max_retries=0)``. Scenarios (each one trace,
root ``FunctionAgent.run`` / ``ReActAgent.run``):

* ``li_normal``: one weather tool call, then an answer (not streamed).
* ``li_parallel``: one model turn asks for two weather calls; both run, then an answer.
  Streamed with ``stream_options.include_usage``.
* ``li_tool_error``: the order tool raises; LlamaIndex hands the error to the model, which
  answers. Streamed without usage (FunctionAgent's default): no tokens anywhere.
* ``li_max_iterations``: the model keeps calling the tool; ``run(max_iterations=3)`` raises
  ``WorkflowRuntimeError('Max iterations of 3 reached! ...')`` to the caller.
* ``li_max_iterations_generate``: the same loop with ``early_stopping_method="generate"``: at
  the limit the agent asks the model for a final answer and returns it (graceful limit hit).
* ``li_content_filter``: the only answer ends ``finish_reason=content_filter`` with no content;
  the agent returns an empty response.
* ``li_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.
* ``li_react``: a ``ReActAgent``: ``Thought/Action/Action Input`` text, the tool, ``Answer``.

Run: ``python tests/e2e/drivers/llamaindex.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from harness import API_KEY, SERVER_ERROR, Harness, drive, tools
from llama_index.core.agent.workflow import AgentOutput, FunctionAgent, ReActAgent
from llama_index.llms.openai import OpenAI
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
from workflows.errors import WorkflowRuntimeError

from collector.demo.fakeopenai import (
    ContentFilterTurn,
    TextTurn,
    ToolCall,
    ToolCallTurn,
)

MAX_ITERATIONS = 3

get_weather, lookup_order = tools()


def _react(thought: str, action: str, **arguments: Any) -> TextTurn:
    return TextTurn(f"Thought: {thought}\nAction: {action}\nAction Input: {json.dumps(arguments)}")


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    h.register("li_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    h.register("li_parallel", [both, TextTurn("Sunny in Paris and in Rome.")])
    h.register("li_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("li_max_iterations", [ToolCallTurn.of("get_weather", city="Oslo")])
    # The early-stopping request has as many assistant turns as the one before it (the last tool
    # call is not in memory), so this script walks by request count instead.
    h.register(
        "li_max_iterations_generate",
        [ToolCallTurn.of("get_weather", city="Oslo")] * MAX_ITERATIONS + [TextTurn("Best I can say: mild in Oslo.")],
        sequential=True,
    )
    h.register("li_content_filter", [ContentFilterTurn("")])
    h.register("li_http_500", [SERVER_ERROR])
    h.register(
        "li_react",
        [
            _react("I need the weather in Lima.", "get_weather", city="Lima"),
            TextTurn("Thought: I can answer without using any more tools.\nAnswer: Mild, 21 C in Lima."),
        ],
    )


async def scenarios(h: Harness) -> None:
    """Run every scenario; each ``agent.run`` is one trace."""
    plain = OpenAI(model="gpt-4o-mini", api_base=h.base_url, api_key=API_KEY, max_retries=0)
    with_usage = OpenAI(
        model="gpt-4o-mini",
        api_base=h.base_url,
        api_key=API_KEY,
        max_retries=0,
        additional_kwargs={"stream_options": {"include_usage": True}},
    )
    tools = [get_weather, lookup_order]
    prompt = "You help travellers. Use the tools."

    def function_agent(streaming: bool, llm: OpenAI = plain, **kwargs: Any) -> FunctionAgent:
        return FunctionAgent(
            name="travel_agent",
            description="Answers travellers' questions.",
            tools=tools,
            llm=llm,
            system_prompt=prompt,
            streaming=streaming,
            **kwargs,
        )

    react = ReActAgent(name="react_agent", description="Answers with ReAct.", tools=tools, llm=plain, streaming=False)
    plan: list[tuple[str, Any, str, tuple[type[BaseException], ...]]] = [
        ("li_normal", function_agent(False), "What is the weather in Paris?", ()),
        ("li_parallel", function_agent(True, with_usage), "Weather in Paris and Rome?", ()),
        ("li_tool_error", function_agent(True), "Where is my order A-404?", ()),
        ("li_max_iterations", function_agent(False), "Keep checking the weather in Oslo.", (WorkflowRuntimeError,)),
        (
            "li_max_iterations_generate",
            function_agent(False, early_stopping_method="generate"),
            "Keep checking the weather in Oslo.",
            (),
        ),
        ("li_content_filter", function_agent(False), "Say something filtered.", ()),
        ("li_http_500", function_agent(False), "What is the weather in Lima?", (openai.APIError,)),
        ("li_react", react, "What is the weather in Lima?", ()),
    ]
    for name, agent, text, expected in plan:
        limited = name.startswith("li_max_iterations")
        with h.scenario(name, agent=agent.name, expected=expected) as run:
            try:
                handler = agent.run(user_msg=f"{run.marker} {text}", max_iterations=MAX_ITERATIONS if limited else 20)
                # Every agent step the driver sees; at the limit all MAX_ITERATIONS steps asked for tools.
                steps = [ev async for ev in handler.stream_events() if isinstance(ev, AgentOutput)]
                await handler
                if name == "li_max_iterations_generate":
                    # The run ends normally with the early-stopping answer after the limit.
                    run.hit_max_iterations = len(steps) > MAX_ITERATIONS and all(
                        s.tool_calls for s in steps[:MAX_ITERATIONS]
                    )
            except WorkflowRuntimeError as exc:
                run.hit_max_iterations = str(exc).startswith("Max iterations of")
                raise


def instrument(h: Harness) -> None:
    """OpenInference's LlamaIndex instrumentor, into ``h``'s provider."""
    LlamaIndexInstrumentor().instrument(tracer_provider=h.provider)


def main() -> None:
    """Register the scripts, instrument, run, and write the ground truth."""
    drive("llamaindex", "llamaindex-travel-desk", instrument, register, scenarios)


if __name__ == "__main__":
    main()
