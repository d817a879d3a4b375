"""E2e driver: a hand-written tool loop on the plain ``openai`` client, traced by Traceloop (OpenLLMetry).

``Traceloop.init`` (traceloop-sdk) enables only OpenLLMetry's OpenAI instrumentation
(``opentelemetry-instrumentation-openai``) and the app marks its structure with Traceloop's
decorators: ``@workflow`` (the root), ``@agent`` (the loop) and ``@tool`` (each tool). The
harness's tracer provider is made the global one first, so Traceloop adds its span processor
to it instead of building its own and exporting to Traceloop's cloud (its processor here is a
no-op: it only lets Traceloop stamp ``traceloop.*`` / ``gen_ai.agent.name`` attributes on
start). Scenarios (Chat Completions, not streamed, no retries):

* ``tl_normal``: one weather tool call, then an answer.
* ``tl_parallel``: two weather calls in one model turn, then an answer.
* ``tl_tool_error``: the order tool raises ``LookupError``; the app reports the error to the model,
  which answers.
* ``tl_max_iterations``: the model keeps calling the tool; after 6 iterations the app raises its
  own ``MaxIterationsExceeded("agent tl_travel_agent stopped after 6 iterations")``, which
  reaches the caller.
* ``tl_graceful_cap``: the same loop with a cap of 3 and no exception: the agent returns
  ``"I could not finish the task within 3 steps."`` although the model's last turn asked for tools.
* ``tl_content_filter``: the answer ends ``finish_reason=content_filter``; the loop returns the
  (empty) text, nothing raised.
* ``tl_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.

Run: ``python tests/e2e/drivers/traceloop_loop.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

import os

# Before traceloop is imported: no metrics pipeline, and prompts/completions on the spans.
os.environ.setdefault("TRACELOOP_METRICS_ENABLED", "false")
os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")

import json
from collections.abc import Callable
from typing import Any

from harness import API_KEY, TOOL_SPECS, Harness, RunTruth, loop_scenarios, tools
from openai import InternalServerError, OpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from traceloop.sdk import Instruments, Traceloop
from traceloop.sdk.decorators import agent, tool, workflow

AGENT = "tl_travel_agent"
MODEL = "gpt-4o-mini"


class MaxIterationsExceeded(RuntimeError):
    """The app's own loop cap: raised when the agent used up its iterations."""


get_weather, lookup_order = (tool(name=f.__name__)(f) for f in tools(LookupError))


TOOLS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "lookup_order": lookup_order}


class TravelAgent:
    """A minimal Chat Completions tool loop with a hard iteration cap."""

    def __init__(self, client: OpenAI) -> None:
        self.client = client

    @agent(name=AGENT)
    def run(self, prompt: str, max_iterations: int, raise_on_cap: bool) -> str:
        """Answer ``prompt``, executing requested tools, for at most ``max_iterations`` model turns."""
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You help travellers."},
            {"role": "user", "content": prompt},
        ]
        for _ in range(max_iterations):
            r = self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOL_SPECS)  # type: ignore[arg-type]
            choice = r.choices[0]
            messages.append(choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            if choice.finish_reason != "tool_calls":
                return choice.message.content or ""
            for call in choice.message.tool_calls or []:
                fn: Any = call.function  # type: ignore[union-attr]
                try:
                    result = TOOLS[fn.name](**json.loads(fn.arguments))
                except LookupError as exc:
                    result = f"Error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        if raise_on_cap:
            raise MaxIterationsExceeded(f"agent {AGENT} stopped after {max_iterations} iterations")
        return f"I could not finish the task within {max_iterations} steps."


@workflow(name="tl_travel_desk")
def travel_desk(travel: TravelAgent, prompt: str, max_iterations: int = 10, raise_on_cap: bool = True) -> str:
    """The app's entry point: one workflow per user request."""
    return travel.run(prompt, max_iterations, raise_on_cap)


def main() -> None:
    """Register the scripts, initialise Traceloop, run every scenario and write the ground truth."""
    h = Harness("traceloop_loop", "tl-travel-desk")
    trace.set_tracer_provider(h.provider)
    Traceloop.init(
        app_name="tl-travel-desk",
        processor=SpanProcessor(),
        disable_batch=True,
        telemetry_enabled=False,
        instruments={Instruments.OPENAI},
    )
    travel = TravelAgent(OpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0))

    def ask(prompt: str, run: RunTruth, cap: int, raise_on_cap: bool) -> str:
        return travel_desk(travel, prompt, cap, raise_on_cap)

    loop_scenarios(h, "tl", AGENT, ask, capped=MaxIterationsExceeded, errors=(InternalServerError,))
    h.finish()


if __name__ == "__main__":
    main()
