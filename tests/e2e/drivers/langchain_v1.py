"""E2e driver: a LangChain v1 ``create_agent`` agent traced by ``openinference-instrumentation-langchain``.

``create_agent`` (langchain>=1.0, a LangGraph graph underneath) with ``ChatOpenAI`` at the fake
server (Chat Completions, no retries); each scenario builds the agent with its own middleware.
The graph is named ``lc_travel_agent``. Scenarios:

* ``lc_normal``: one weather tool call, then an answer.
* ``lc_parallel``: two weather calls in one model turn, then an answer.
* ``lc_tool_error``: the order tool raises ``LookupError``; ``ToolErrorMiddleware`` turns it into an
  error ``ToolMessage`` and the model answers (handled).
* ``lc_tool_raise``: the same tool error without ``ToolErrorMiddleware``: the exception ends the
  run and reaches the caller.
* ``lc_model_limit_end``: ``ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")``; the model
  keeps calling the tool; after two model calls the middleware jumps to the end and appends an
  AI message ``Model call limits exceeded: ...``. Nothing is raised (graceful limit).
* ``lc_model_limit_error``: the same with ``exit_behavior="error"``: ``ModelCallLimitExceededError``.
* ``lc_tool_limit_end``: ``ToolCallLimitMiddleware(run_limit=2, exit_behavior="end")``: after two
  tool executions the third requested call is not run and the agent stops (graceful).
* ``lc_tool_limit_error``: the same with ``exit_behavior="error"``: ``ToolCallLimitExceededError``.
* ``lc_pii_block``: ``PIIMiddleware("email", strategy="block")`` finds an e-mail address in the
  prompt and raises ``PIIDetectionError`` before any model call (a safety block).
* ``lc_recursion``: the model keeps calling the tool; ``recursion_limit=6`` raises ``GraphRecursionError``.
* ``lc_content_filter``: the answer ends ``finish_reason=content_filter`` (empty text); LangChain
  returns it as the final AI message, nothing raised.
* ``lc_refusal``: the provider refuses (``message.refusal``, no content); ``ModelRefusalMiddleware``
  raises ``langchain_core.exceptions.ModelRefusalError``.
* ``lc_http_500``: the model answers HTTP 500; langchain-openai re-raises ``openai.InternalServerError``
  as its own ``langchain_openai.chat_models.base.OpenAIAPIError``, which reaches the caller.

Run: ``python tests/e2e/drivers/langchain_v1.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

from typing import Any

import openai
from harness import API_KEY, SERVER_ERROR, Harness, tools
from langchain.agents import create_agent
from langchain.agents.middleware import (
    AgentMiddleware,
    ModelCallLimitMiddleware,
    ModelRefusalMiddleware,
    PIIDetectionError,
    PIIMiddleware,
    ToolCallLimitMiddleware,
    ToolErrorMiddleware,
)
from langchain.agents.middleware.model_call_limit import ModelCallLimitExceededError
from langchain.agents.middleware.tool_call_limit import ToolCallLimitExceededError
from langchain_core.exceptions import ModelRefusalError
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.errors import GraphRecursionError
from openinference.instrumentation.langchain import LangChainInstrumentor

from collector.demo.fakeopenai import ContentFilterTurn, RefusalTurn, TextTurn, ToolCall, ToolCallTurn

AGENT = "lc_travel_agent"
get_weather, lookup_order = (tool(f) for f in tools(LookupError))


def _tool_error_text(exc: Exception, request: Any) -> str:
    return f"Error: {type(exc).__name__}: {exc}"


GRACEFUL_LIMITS = ("Model call limits exceeded", "Tool call limit reached")
"""How the final AI message of a run stopped by a limit middleware with ``exit_behavior="end"`` starts."""
LIMITS = (ModelCallLimitExceededError, ToolCallLimitExceededError, GraphRecursionError)
BLOCKS = (PIIDetectionError, ModelRefusalError)
RAISED = (*LIMITS, *BLOCKS, LookupError, openai.OpenAIError)


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("langchain_v1", "lc-travel-desk")
    LangChainInstrumentor().instrument(tracer_provider=h.provider)
    model = ChatOpenAI(model="gpt-4o-mini", base_url=h.base_url, api_key=API_KEY, max_retries=0)  # type: ignore[arg-type]
    weather = ToolCallTurn.of("get_weather", city="Paris")
    oslo = ToolCallTurn.of("get_weather", city="Oslo")
    order = ToolCallTurn.of("lookup_order", order_id="A-404")
    h.register("lc_normal", [weather, TextTurn("Sunny in Paris.")])
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    h.register("lc_parallel", [both, TextTurn("Sunny in Paris and Rome.")])
    h.register("lc_tool_error", [order, TextTurn("No such order.")])
    h.register("lc_tool_raise", [order, TextTurn("never served")])
    for name in ("lc_model_limit_end", "lc_model_limit_error", "lc_tool_limit_end", "lc_tool_limit_error"):
        h.register(name, [oslo])
    h.register("lc_pii_block", [TextTurn("never served")])
    h.register("lc_recursion", [oslo])
    h.register("lc_content_filter", [ContentFilterTurn("")])
    h.register("lc_refusal", [RefusalTurn("I'm sorry, but I can't help with that request.")])
    h.register("lc_http_500", [SERVER_ERROR])
    tool_errors = ToolErrorMiddleware(_tool_error_text)
    model_end = ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")
    model_error = ModelCallLimitMiddleware(run_limit=2, exit_behavior="error")
    tool_end = ToolCallLimitMiddleware(run_limit=2, exit_behavior="end")
    tool_error = ToolCallLimitMiddleware(run_limit=2, exit_behavior="error")
    pii = PIIMiddleware("email", strategy="block")
    plan: list[tuple[str, str, list[AgentMiddleware[Any, Any, Any]], int]] = [
        ("lc_normal", "What is the weather in Paris?", [], 25),
        ("lc_parallel", "Weather in Paris and Rome?", [], 25),
        ("lc_tool_error", "Where is my order A-404?", [tool_errors], 25),
        ("lc_tool_raise", "Where is my order A-404?", [], 25),
        ("lc_model_limit_end", "Keep checking Oslo.", [model_end], 25),
        ("lc_model_limit_error", "Keep checking Oslo.", [model_error], 25),
        ("lc_tool_limit_end", "Keep checking Oslo.", [tool_end], 25),
        ("lc_tool_limit_error", "Keep checking Oslo.", [tool_error], 25),
        ("lc_pii_block", "Mail the forecast to jane.doe@example.com.", [pii], 25),
        ("lc_recursion", "Keep checking Oslo.", [], 6),
        ("lc_content_filter", "Say something filtered.", [], 25),
        ("lc_refusal", "Help me with something forbidden.", [ModelRefusalMiddleware()], 25),
        ("lc_http_500", "What is the weather in Paris?", [], 25),
    ]
    for name, prompt, middleware, recursion_limit in plan:
        tools = [get_weather, lookup_order]
        agent = create_agent(model, tools, system_prompt="You help travellers.", middleware=middleware, name=AGENT)
        with h.scenario(name, agent=AGENT, expected=RAISED) as run:
            try:
                state = agent.invoke(
                    {"messages": [("user", f"{run.marker} {prompt}")]}, {"recursion_limit": recursion_limit}
                )
            except LIMITS:
                run.hit_max_iterations = True
                raise
            except BLOCKS:
                run.safety_blocked = True
                raise
            # A graceful limit ends the run with the middleware's own final message.
            last = state["messages"][-1]
            run.hit_max_iterations = isinstance(last, AIMessage) and str(last.content).startswith(GRACEFUL_LIMITS)
    h.finish()


if __name__ == "__main__":
    main()
