"""A tiny support agent to try ``vigil eval run`` on, with no model and no network.

It is a plain chat-completions tool loop on the ``openai`` client, traced the way any agent is:
``vigil_setup`` (the official OpenAI instrumentation for the LLM calls) and Vigil's helpers
(``agent_run`` for the root span, ``tool_call`` for each tool). The model is the scripted
OpenAI-compatible server shipped with Vigil (:mod:`collector.demo.fakeopenai`), started in-process
unless ``OPENAI_BASE_URL`` points elsewhere; a keyword of the user's message picks its script,
standing in for a real model's judgement.

Entry points (``--agent examples.support_agent.agent:<name>``):

* ``answer(message, history)``: the good agent; every case of ``evalset.json`` passes.
* ``answer_regressed(message, history)``: the same agent after a bad change: it lower-cases the
  city it asks the weather of and forgets to look the order up before refunding it.

Run from the repository root::

    vigil eval run --agent examples.support_agent.agent:answer examples/support_agent/evalset.json \\
        --config examples/support_agent/eval_config.json
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from collector.demo.fakeopenai import TextTurn, ToolCallTurn, Turn, function_tools
from collector.instrument import tool_call
from examples.scripted import ScriptedModel, tool_loop

SCRIPTS: dict[str, list[Turn]] = {
    "weather": [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("It is 21 C and sunny in Paris.")],
    "order": [ToolCallTurn.of("lookup_order", order_id="A-17"), TextTurn("Your order A-17 ships today.")],
    "refund": [ToolCallTurn.of("refund_order", order_id="A-17"), TextTurn("Refund issued for order A-17.")],
    "hello": [TextTurn("Hello! I can check the weather and your orders.")],
    # the regressed agent's model
    "weather_v2": [ToolCallTurn.of("get_weather", city="paris"), TextTurn("Sunny.")],
    "refund_v2": [TextTurn("Refund issued for order A-17.")],
}
KEYWORDS = (("weather", "weather"), ("refund", "refund"), ("order", "order"))

TOOL_SPECS = function_tools(
    (
        ("get_weather", "city", "Current weather of a city"),
        ("lookup_order", "order_id", "Status of an order"),
        ("refund_order", "order_id", "Refund an order"),
    )
)
TOOLS: dict[str, Callable[..., str]] = {
    "get_weather": lambda city: f"21 C and sunny in {city}",
    "lookup_order": lambda order_id: f"order {order_id}: shipping today",
    "refund_order": lambda order_id: f"order {order_id} refunded",
}

_model = ScriptedModel("support-agent", SCRIPTS)


def _act(name: str, call_id: str, args: dict[str, Any]) -> str:
    with tool_call(name, call_id=call_id, arguments=args) as step:
        result = TOOLS[name](**args)
        step.set_result(result)
    return result


def _scenario(message: str, suffix: str) -> str:
    text = message.lower()
    name = next((s for word, s in KEYWORDS if word in text), "hello")
    return name + suffix if name + suffix in SCRIPTS else name


def _run(message: str, history: Sequence[dict[str, str]], suffix: str) -> str:
    earlier = " ".join(f"{m['role']}: {m['content']}" for m in history)
    system = f"You are a support agent. [[scenario:{_scenario(message, suffix)}]]"
    if earlier:
        system += f" Earlier in this conversation: {earlier}"
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": message}]
    return tool_loop(_model, "support_agent", messages, TOOL_SPECS, _act, max_iterations=5)


def answer(message: str, history: Sequence[dict[str, str]] = ()) -> str:
    """The support agent: answer ``message`` given the conversation so far."""
    return _run(message, history, "")


def answer_regressed(message: str, history: Sequence[dict[str, str]] = ()) -> str:
    """The support agent after a bad change (see the module docstring)."""
    return _run(message, history, "_v2")
