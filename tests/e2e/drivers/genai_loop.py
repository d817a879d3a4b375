"""E2e driver: a hand-written tool loop traced by the OTel GenAI instrumentation, latest-semconv opt-in.

LLM spans come from ``opentelemetry-instrumentation-genai-openai`` (1.3b0), the ``invoke_agent``
and ``execute_tool`` spans from ``opentelemetry-util-genai``'s ``TelemetryHandler`` (1.3b0), the
versions of Vigil's ``instrumentors`` extra. Message content is captured on the spans
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only``, the 1.3b0 spelling: one of
``span_only`` / ``event_only`` / ``span_and_event``, case-insensitive).

This driver runs with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``;
``genai_loop_legacy.py`` runs the very same code without it (default mode) under its own
service name, as a separate driver (one process per mode: the variable is read from the
environment, so each mode gets a fresh interpreter). Scenarios (Chat Completions, no retries):

* ``gl_normal``: one weather tool call, then an answer.
* ``gl_parallel``: two weather calls in one model turn, then an answer.
* ``gl_tool_error``: the order tool raises ``LookupError``; the app reports it to the model.
* ``gl_max_iterations``: the model keeps calling the tool; after 6 iterations the app raises its
  own ``MaxIterationsExceeded("agent gl_travel_agent stopped after 6 iterations")`` inside the
  ``invoke_agent`` span; it reaches the caller.
* ``gl_graceful_cap``: the same loop with a cap of 3 and no exception: the agent returns
  ``"I could not finish the task within 3 steps."``; its last finish reason is ``tool_calls``.
* ``gl_content_filter``: the answer ends ``finish_reason=content_filter``; returned, nothing raised.
* ``gl_http_500``: the model answers HTTP 500; ``openai.InternalServerError`` reaches the caller.

The agent span carries the run's aggregate usage and last finish reasons (as the semconv allows).

Run: ``python tests/e2e/drivers/genai_loop.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from harness import API_KEY, TOOL_SPECS, Harness, RunTruth, loop_scenarios, tools

AGENT = "gl_travel_agent"
MODEL = "gpt-4o-mini"


class MaxIterationsExceeded(RuntimeError):
    """The app's own loop cap: raised when the agent used up its iterations."""


get_weather, lookup_order = tools(LookupError)
TOOLS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "lookup_order": lookup_order}


class TravelAgent:
    """A minimal Chat Completions tool loop with a hard iteration cap and GenAI agent/tool spans."""

    def __init__(self, client: Any, handler: Any) -> None:
        self.client = client
        self.handler = handler

    def run(self, prompt: str, truth: RunTruth, max_iterations: int, raise_on_cap: bool) -> str:
        """Answer ``prompt`` in at most ``max_iterations`` model turns; records tool outcomes in ``truth``."""
        from opentelemetry.util.genai.types import InputMessage, OutputMessage, Text

        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        with self.handler.invoke_local_agent(agent_name=AGENT, request_model=MODEL) as agent:
            agent.input_tokens, agent.output_tokens = 0, 0
            agent.input_messages = [InputMessage(role="user", parts=[Text(content=prompt)])]
            for _ in range(max_iterations):
                r = self.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOL_SPECS)
                choice = r.choices[0]
                agent.input_tokens += r.usage.prompt_tokens if r.usage else 0
                agent.output_tokens += r.usage.completion_tokens if r.usage else 0
                agent.finish_reasons = [choice.finish_reason]
                messages.append(choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
                if choice.finish_reason != "tool_calls":
                    answer = choice.message.content or ""
                    agent.output_messages = [OutputMessage(role="assistant", parts=[Text(content=answer)])]
                    return answer
                for call in choice.message.tool_calls or []:
                    messages.append(self._execute(call, truth))
            if raise_on_cap:
                raise MaxIterationsExceeded(f"agent {AGENT} stopped after {max_iterations} iterations")
            answer = f"I could not finish the task within {max_iterations} steps."
            agent.output_messages = [OutputMessage(role="assistant", parts=[Text(content=answer)])]
            return answer

    def _execute(self, call: Any, truth: RunTruth) -> dict[str, Any]:
        name, arguments = call.function.name, json.loads(call.function.arguments)
        try:
            with self.handler.tool(name, tool_type="function", agent_name=AGENT) as inv:
                inv.tool_call_id = call.id
                inv.arguments = arguments
                result = TOOLS[name](**arguments)
                inv.tool_result = result
        except LookupError as exc:
            result = f"Error: {exc}"
        return {"role": "tool", "tool_call_id": call.id, "content": result}


def run(driver: str, service_name: str, latest: bool) -> None:
    """Set the semconv mode, instrument, run every scenario and write the ground truth."""
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "span_only"
    if latest:
        os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
    else:
        os.environ.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    # Imported only now, with the mode set.
    from openai import InternalServerError, OpenAI
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    h = Harness(driver, service_name)
    OpenAIInstrumentor().instrument(tracer_provider=h.provider)
    handler = TelemetryHandler(tracer_provider=h.provider, instrumentation_scope_name="vigil.e2e.genai_loop")
    travel = TravelAgent(OpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0), handler)
    loop_scenarios(h, "gl", AGENT, travel.run, capped=MaxIterationsExceeded, errors=(InternalServerError,))
    h.finish()


def main() -> None:
    """The latest-experimental run."""
    run("genai_loop", "genai-travel-desk", latest=True)


if __name__ == "__main__":
    main()
