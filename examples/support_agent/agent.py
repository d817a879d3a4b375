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

import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import openai

from collector.demo.fakeopenai import FakeOpenAI, TextTurn, ToolCallTurn, Turn
from collector.instrument import agent_run, tool_call, vigil_setup

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

MODEL = "gpt-4o-mini"

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

TOOL_SPECS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": doc,
            "parameters": {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]},
        },
    }
    for name, arg, doc in (
        ("get_weather", "city", "Current weather of a city"),
        ("lookup_order", "order_id", "Status of an order"),
        ("refund_order", "order_id", "Refund an order"),
    )
]
TOOLS: dict[str, Callable[..., str]] = {
    "get_weather": lambda city: f"21 C and sunny in {city}",
    "lookup_order": lambda order_id: f"order {order_id}: shipping today",
    "refund_order": lambda order_id: f"order {order_id} refunded",
}

_lock = threading.Lock()
_state: dict[str, Any] = {}


def _openai() -> openai.OpenAI:
    """The client (and, the first time, the tracing and the scripted server)."""
    with _lock:
        if "client" not in _state:
            _state["tracing"] = vigil_setup(service_name="support-agent", capture_content=True)
            base_url = os.environ.get("OPENAI_BASE_URL")
            if not base_url:
                _state["fake"] = FakeOpenAI(SCRIPTS).start()
                base_url = _state["fake"].base_url
            key = os.environ.get("OPENAI_API_KEY", "unused")
            _state["client"] = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
        client: openai.OpenAI = _state["client"]
        return client


def _scenario(message: str, suffix: str) -> str:
    text = message.lower()
    name = next((s for word, s in KEYWORDS if word in text), "hello")
    return name + suffix if name + suffix in SCRIPTS else name


def _run(message: str, history: Sequence[dict[str, str]], suffix: str) -> str:
    client = _openai()
    earlier = " ".join(f"{m['role']}: {m['content']}" for m in history)
    system = f"You are a support agent. [[scenario:{_scenario(message, suffix)}]]"
    if earlier:
        system += f" Earlier in this conversation: {earlier}"
    messages: list[Any] = [{"role": "system", "content": system}, {"role": "user", "content": message}]
    with agent_run("support_agent", max_iterations=5) as run:
        while run.tick():
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOL_SPECS)  # type: ignore[arg-type]
            choice = reply.choices[0].message
            if not choice.tool_calls:
                answer = choice.content or ""
                run.set_output(answer)
                return answer
            messages.append(choice)
            for call in choice.tool_calls:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                name = call.function.name  # type: ignore[union-attr]
                with tool_call(name, call_id=call.id, arguments=args) as step:
                    result = TOOLS[name](**args)
                    step.set_result(result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return "I ran out of steps."


def answer(message: str, history: Sequence[dict[str, str]] = ()) -> str:
    """The support agent: answer ``message`` given the conversation so far."""
    return _run(message, history, "")


def answer_regressed(message: str, history: Sequence[dict[str, str]] = ()) -> str:
    """The support agent after a bad change (see the module docstring)."""
    return _run(message, history, "_v2")
