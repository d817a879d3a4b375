"""E2e driver: a DSPy ``ReAct`` agent traced by OpenInference's DSPy (+ LiteLLM) instrumentors.

The agent is a ``dspy.Module`` subclass ``TravelAgent`` wrapping ``dspy.ReAct("question ->
answer", tools=[get_weather, lookup_order], max_iters=3)`` on ``dspy.LM("openai/gpt-4o-mini",
api_base=fake, cache=False, num_retries=0)``. DSPy ReAct is text-only: every step is one model
call answering in DSPy's ``[[ ## field ## ]]`` format (``next_thought``, ``next_tool_name``,
``next_tool_args``), ending with the ``finish`` tool; then one ``ChainOfThought`` extraction call
(``reasoning``, ``answer``). Each DSPy call is a fresh two-message conversation, so the fake's
scripts are registered ``sequential`` (turn = number of requests already served for the run).

Scenarios (each one trace, root ``TravelAgent.forward``):

* ``dr_normal``: ``get_weather`` → ``finish`` → extract.
* ``dr_tool_error``: ``lookup_order`` raises; ReAct records ``Execution error in lookup_order``
  as the observation and continues → ``finish`` → extract.
* ``dr_max_iters``: the model keeps choosing ``get_weather``; after ``max_iters=3`` steps ReAct
  stops without ``finish`` and extracts an answer anyway (graceful limit hit: the driver sees
  three tool steps and no ``finish`` in the returned trajectory).
* ``dr_content_filter``: every answer ends ``finish_reason=content_filter`` with no content; the
  ChatAdapter and then its JSONAdapter fallback fail to parse and ``AdapterParseError`` reaches
  the caller.
* ``dr_http_500``: the model answers HTTP 500; ``dspy.utils.exceptions.LMServerError`` reaches
  the caller.
* ``dr_litellm``: ``dr_normal`` with ``dspy.LM(..., engine="litellm")``: DSPy 3.4's default engine
  (``auto`` → ``lm15``) does not go through LiteLLM, so only this run has LiteLLM's LLM spans
  (with token counts) under DSPy's ``LM.__call__`` spans.

Run: ``python tests/e2e/drivers/dspy_react.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: use the bundled cost map

import dspy
from dspy.utils.exceptions import AdapterParseError, LMError
from harness import API_KEY, SERVER_ERROR, Harness, tools
from openinference.instrumentation.dspy import DSPyInstrumentor
from openinference.instrumentation.litellm import LiteLLMInstrumentor

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn

MAX_ITERS = 3

get_weather, lookup_order = tools()


class TravelAgent(dspy.Module):  # type: ignore[misc]
    """The named agent: a ReAct loop over the two tools."""

    def __init__(self) -> None:
        super().__init__()
        self.react = dspy.ReAct("question -> answer", tools=[get_weather, lookup_order], max_iters=MAX_ITERS)

    def forward(self, question: str) -> dspy.Prediction:
        """Answer ``question`` with the ReAct loop."""
        return self.react(question=question)


def _fields(**fields: str) -> TextTurn:
    """A model answer in DSPy's ChatAdapter format."""
    body = "".join(f"[[ ## {name} ## ]]\n{value}\n\n" for name, value in fields.items())
    return TextTurn(body + "[[ ## completed ## ]]")


def _step(thought: str, tool: str, **arguments: Any) -> TextTurn:
    return _fields(next_thought=thought, next_tool_name=tool, next_tool_args=json.dumps(arguments))


def _answer(text: str) -> TextTurn:
    return _fields(reasoning="The observations answer the question.", answer=text)


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    normal = [_step("I need the weather in Paris.", "get_weather", city="Paris"), _step("I know enough.", "finish")]
    h.register("dr_normal", [*normal, _answer("Sunny, 21 C in Paris.")], sequential=True)
    h.register("dr_litellm", [*normal, _answer("Sunny, 21 C in Paris.")], sequential=True)
    h.register(
        "dr_tool_error",
        [
            _step("I should look the order up.", "lookup_order", order_id="A-404"),
            _step("The order does not exist.", "finish"),
            _answer("No such order."),
        ],
        sequential=True,
    )
    oslo = _step("Let me check Oslo again.", "get_weather", city="Oslo")
    h.register("dr_max_iters", [oslo] * MAX_ITERS + [_answer("Mild in Oslo.")], sequential=True)
    h.register("dr_content_filter", [ContentFilterTurn("")], sequential=True)
    h.register("dr_http_500", [SERVER_ERROR], sequential=True)


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("dspy_react", "dspy-travel-desk")
    DSPyInstrumentor().instrument(tracer_provider=h.provider)
    LiteLLMInstrumentor().instrument(tracer_provider=h.provider)
    register(h)
    settings: dict[str, Any] = {"api_base": h.base_url, "api_key": API_KEY, "cache": False, "num_retries": 0}
    default_lm = dspy.LM("openai/gpt-4o-mini", **settings)
    litellm_lm = dspy.LM("openai/gpt-4o-mini", engine="litellm", **settings)
    agent = TravelAgent()
    plan: list[tuple[str, Any, str, tuple[type[BaseException], ...]]] = [
        ("dr_normal", default_lm, "What is the weather in Paris?", ()),
        ("dr_tool_error", default_lm, "Where is my order A-404?", ()),
        ("dr_max_iters", default_lm, "Keep checking the weather in Oslo.", ()),
        ("dr_content_filter", default_lm, "Say something filtered.", (AdapterParseError,)),
        ("dr_http_500", default_lm, "What is the weather in Lima?", (LMError,)),
        ("dr_litellm", litellm_lm, "What is the weather in Paris?", ()),
    ]
    for name, lm, text, expected in plan:
        with dspy.context(lm=lm), h.scenario(name, agent="TravelAgent", expected=expected) as run:
            prediction = agent(question=f"{run.marker} {text}")
            tools_used = [v for k, v in prediction.trajectory.items() if k.startswith("tool_name_")]
            run.hit_max_iterations = len(tools_used) >= MAX_ITERS and "finish" not in tools_used
    h.finish()


if __name__ == "__main__":
    main()
