# ruff: noqa: E402
"""E2e driver: a smolagents ``ToolCallingAgent`` traced by ``openinference-instrumentation-smolagents``.

The model is ``OpenAIServerModel`` (Chat Completions) pointed at the fake server; the client
never retries. A ``ToolCallingAgent`` ends a run by calling its built-in ``final_answer`` tool,
so every script that ends normally ends with a ``final_answer`` tool call. Scenarios:

* ``sa_normal``: one weather tool call, then ``final_answer``.
* ``sa_parallel``: two weather calls in one model turn (run on the agent's thread pool), then
  ``final_answer``.
* ``sa_tool_error``: the order tool raises; smolagents turns it into an ``AgentToolExecutionError``
  on the step, shows it to the model, and the model answers with ``final_answer``.
* ``sa_max_steps``: the model keeps calling the tool; with ``max_steps=3`` smolagents stops
  looping, asks the model once more for a final answer (without tools) and returns it. Nothing
  is raised: the driver records the limit hit because the run's last memory step carries
  ``AgentMaxStepsError`` (``RunResult.state == "max_steps_error"``).
* ``sa_content_filter``: every answer ends ``finish_reason=content_filter`` with no content and
  no tool call. smolagents does not look at the finish reason: each step fails with
  ``AgentParsingError`` (no tool call in the output) and the loop goes on, so the run ends
  through ``max_steps=3`` and a last (also filtered) final-answer request, returning ``""``.
  Truth: blocked (every answer was filtered) *and* limit hit (state ``max_steps_error``).
* ``sa_http_500``: the model answers HTTP 500; smolagents raises ``AgentGenerationError`` to the
  caller. Runs last: the instrumentor never ends (nor detaches) the agent span of a run that
  raised, so anything traced after it in this process would nest under that span.

Run: ``python tests/e2e/drivers/smolagents.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the package it drives: put its own folder (harness.py) last on the
# path, or `import smolagents` would import this script.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from collections.abc import Sequence
from typing import Any

from harness import SERVER_ERROR, Harness
from smolagents import ToolCallingAgent
from smolagents.utils import AgentError, AgentMaxStepsError
from smolagents_tools import final, get_weather, instrumented_model, lookup_order

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCall, ToolCallTurn, Turn

AGENT = "sa_travel_agent"


def register(h: Harness, name: str, turns: Sequence[Turn]) -> None:
    """Register ``turns`` as a *sequential* script: the turn is the request's number in its run.

    smolagents does not replay a failed step's tool-call message (the error is merged into the
    user message), so the fake server cannot count assistant turns in the conversation.
    """
    h.register(name, turns, sequential=True)


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("smolagents", "sa-travel-desk")
    model = instrumented_model(h)
    weather = ToolCallTurn.of("get_weather", city="Paris")
    register(h, "sa_normal", [weather, final("Sunny in Paris.")])
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    register(h, "sa_parallel", [both, final("Sunny in Paris and Rome.")])
    register(h, "sa_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), final("No such order.")])
    oslo = ToolCallTurn.of("get_weather", city="Oslo")
    register(h, "sa_max_steps", [oslo, oslo, oslo, TextTurn("Probably sunny in Oslo.")])
    register(h, "sa_content_filter", [ContentFilterTurn("")])
    register(h, "sa_http_500", [SERVER_ERROR])
    plan: list[tuple[str, str, int]] = [
        ("sa_normal", "What is the weather in Paris?", 6),
        ("sa_parallel", "Weather in Paris and Rome?", 6),
        ("sa_tool_error", "Where is my order A-404?", 6),
        ("sa_max_steps", "Keep checking the weather in Oslo.", 3),
        ("sa_content_filter", "Say something filtered.", 3),
        ("sa_http_500", "What is the weather in Paris?", 6),
    ]
    for name, prompt, max_steps in plan:
        agent = ToolCallingAgent(
            tools=[get_weather, lookup_order], model=model, name=AGENT, max_steps=max_steps, verbosity_level=0
        )
        with h.scenario(name, agent=AGENT, expected=(AgentError,)) as run:
            result: Any = agent.run(f"{run.marker} {prompt}", return_full_result=True)
            # Graceful limit: nothing is raised, but the run's state and last step say so.
            last_error = getattr(agent.memory.steps[-1], "error", None)
            run.hit_max_iterations = result.state == "max_steps_error" or isinstance(last_error, AgentMaxStepsError)
    h.finish()


if __name__ == "__main__":
    main()
