"""E2e driver: a one-agent CrewAI crew traced by OpenInference's CrewAI + OpenAI instrumentors.

CrewAI 1.x sends ``openai/...`` models through its native OpenAI provider (the ``openai`` SDK,
not litellm), so the LLM spans come from ``openinference-instrumentation-openai``; the crew,
agent/task and tool spans from ``openinference-instrumentation-crewai`` (its default wrapper
mode). The model uses native function calling. Scenarios (each one trace, root
``<crew name>.kickoff``):

* ``cr_normal``: one weather tool call, then an answer.
* ``cr_tool_error``: the order tool raises; CrewAI hands the error to the model, which answers.
  Streamed model calls.
* ``cr_max_iter``: the model keeps calling the tool; with ``max_iter=3`` CrewAI stops after three
  iterations and makes one more call (without tools) with its "force final answer" prompt; the
  model answers and the crew returns normally. The driver records the limit hit when it sees
  that forced-answer prompt in an ``LLMCallStartedEvent`` after ``max_iter`` tool iterations.
* ``cr_content_filter``: every answer ends ``finish_reason=content_filter`` with no content;
  CrewAI retries and raises ``ValueError('Invalid response from LLM call - None or empty.')``.
* ``cr_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.

Run: ``python tests/e2e/drivers/crewai.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os
import sys

# This file is named like the framework: let ``import crewai`` find the package, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE] + [_HERE]

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # CrewAI's own telemetry phones home
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")

from typing import Any  # noqa: E402

import openai  # noqa: E402
from crewai import LLM, Agent, Crew, Task  # noqa: E402
from crewai.events import LLMCallStartedEvent, crewai_event_bus  # noqa: E402
from crewai.tools import tool  # noqa: E402
from harness import API_KEY, SERVER_ERROR, Harness, RunTruth, tools  # noqa: E402
from openinference.instrumentation.crewai import CrewAIInstrumentor  # noqa: E402
from openinference.instrumentation.openai import OpenAIInstrumentor  # noqa: E402

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCallTurn  # noqa: E402

FORCE_FINAL = "Now it's time you MUST give your absolute best final answer."
"""The start of CrewAI's ``force_final_answer`` prompt (sent once max_iter is reached)."""

MAX_ITER = 3

_current: dict[str, bool] = {}
"""What the driver's callbacks noticed during the scenario in progress."""
get_weather, lookup_order = (tool(f.__name__)(f) for f in tools())


@crewai_event_bus.on(LLMCallStartedEvent)
def _saw_llm_call(source: Any, event: LLMCallStartedEvent) -> None:
    """Note when CrewAI asks the model for a forced final answer (max_iter reached)."""
    if FORCE_FINAL in str(event.messages):
        _current["forced"] = True


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("crewai", "crewai-travel-desk")
    CrewAIInstrumentor().instrument(tracer_provider=h.provider)
    OpenAIInstrumentor().instrument(tracer_provider=h.provider)
    h.register("cr_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    h.register("cr_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    weather_loop = ToolCallTurn.of("get_weather", city="Oslo")
    h.register("cr_max_iter", [weather_loop] * MAX_ITER + [TextTurn("Best I can say: Oslo is mild today.")])
    h.register("cr_content_filter", [ContentFilterTurn("")])
    h.register("cr_http_500", [SERVER_ERROR])

    def agent(stream: bool = False) -> Agent:
        llm = LLM(model="openai/gpt-4o-mini", base_url=h.base_url, api_key=API_KEY, max_retries=0, stream=stream)
        return Agent(
            role="travel_agent",
            goal="Answer travellers' questions about weather and orders.",
            backstory="You help travellers. Use the tools.",
            tools=[get_weather, lookup_order],
            llm=llm,
            max_iter=MAX_ITER,
            verbose=False,
        )

    plan: list[tuple[str, str, bool, tuple[type[BaseException], ...]]] = [
        ("cr_normal", "What is the weather in Paris?", False, ()),
        ("cr_tool_error", "Where is my order A-404?", True, ()),
        ("cr_max_iter", "Keep checking the weather in Oslo.", False, ()),
        ("cr_content_filter", "Say something filtered.", False, (ValueError,)),
        ("cr_http_500", "What is the weather in Lima?", False, (openai.APIError,)),
    ]
    for name, prompt, stream, expected in plan:
        crew_agent = agent(stream)
        with h.scenario(name, agent=crew_agent.role, expected=expected) as run:
            _current["forced"] = False
            task = Task(description=f"{run.marker} {prompt}", expected_output="A short answer.", agent=crew_agent)
            try:
                Crew(agents=[crew_agent], tasks=[task], name="travel_crew").kickoff()
            finally:
                crewai_event_bus.flush()
                run.hit_max_iterations = _observed_limit(run)
    h.finish()


def _observed_limit(run: RunTruth) -> bool:
    """All ``max_iter`` iterations used (one tool call each) and the forced final answer asked for."""
    return bool(_current["forced"]) and run.tool_calls >= MAX_ITER


if __name__ == "__main__":
    main()
