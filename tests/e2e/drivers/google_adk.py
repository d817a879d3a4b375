"""E2e driver: a Google ADK ``LlmAgent`` traced by ADK's own OpenTelemetry spans.

ADK's tracer (``gcp.vertex.agent``) uses the global tracer provider, so the driver sets it. The
model is ``LiteLlm(model="openai/gpt-4o-mini", api_base=fake, num_retries=0)``; each scenario
is one ``InMemoryRunner.run_async`` on a fresh session (one trace, root ``invoke_workflow
travel_agent``). ADK's default telemetry settings (no content capture, stable semconv).

Scenarios:

* ``ad_normal``: one weather tool call, then an answer.
* ``ad_parallel``: two weather tool calls in one turn; ADK runs them in parallel and records an
  ``execute_tool (merged)`` span beside the two ``execute_tool get_weather`` spans.
* ``ad_tool_error``: the order tool raises; ADK does not catch tool exceptions, so the run
  fails and ``ValueError`` reaches the caller.
* ``ad_tool_error_handled``: the same with an ``on_tool_error_callback`` that turns the
  exception into a ``{"error": ...}`` tool result; the model answers.
* ``ad_max_llm_calls``: the model keeps calling the tool; ``RunConfig(max_llm_calls=3)`` raises
  ``LlmCallsLimitExceededError`` before a fourth call.
* ``ad_guardrail``: a ``before_model_callback`` sees a card number in the prompt and returns its
  own ``LlmResponse``; the model is never called.
* ``ad_content_filter``: the only answer ends ``finish_reason=content_filter`` (ADK: ``SAFETY``).
* ``ad_http_500``: the model answers HTTP 500; ``litellm.InternalServerError`` reaches the caller.

Run: ``python tests/e2e/drivers/google_adk.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: use the bundled cost map

from typing import Any

import openai
from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import LlmCallsLimitExceededError
from google.adk.agents.run_config import RunConfig
from google.adk.models.lite_llm import LiteLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.tools.base_tool import BaseTool
from google.genai import types
from harness import API_KEY, SERVER_ERROR, Harness, RunTruth, drive, global_provider, tools

from collector.demo.fakeopenai import ContentFilterTurn, TextTurn, ToolCall, ToolCallTurn

MAX_LLM_CALLS = 3
APP = "travel_desk"
USER = "traveller-1"
BLOCKED_ANSWER = "I cannot help with requests that contain card numbers."

_current: dict[str, bool] = {}
"""What the driver's callbacks noticed during the scenario in progress."""
get_weather, lookup_order = tools()


def no_card_numbers(callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse | None:
    """Guardrail: answer for the model when the user's message mentions a credit card."""
    last = llm_request.contents[-1] if llm_request.contents else None
    text = " ".join(p.text or "" for p in (last.parts or [])) if last else ""
    if "credit card" in text:
        _current["blocked"] = True
        return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=BLOCKED_ANSWER)]))
    return None


def tool_error_as_result(
    tool: BaseTool, args: dict[str, Any], tool_context: Any, error: Exception
) -> dict[str, Any] | None:
    """Hand a tool's exception to the model as the tool's result."""
    return {"error": f"{type(error).__name__}: {error}"}


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario."""
    h.register("ad_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")])
    both = ToolCallTurn((ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Rome"})))
    h.register("ad_parallel", [both, TextTurn("Sunny in Paris and Rome.")])
    order = [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")]
    h.register("ad_tool_error", order)
    h.register("ad_tool_error_handled", order)
    h.register("ad_max_llm_calls", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("ad_guardrail", [TextTurn("This must never be served.")])
    h.register("ad_content_filter", [ContentFilterTurn("")])
    h.register("ad_http_500", [SERVER_ERROR])


async def run_agent(runner: InMemoryRunner, run: RunTruth, text: str, config: RunConfig) -> None:
    """One ``run_async`` on a fresh session, draining its events."""
    session = await runner.session_service.create_session(app_name=APP, user_id=USER)
    message = types.Content(role="user", parts=[types.Part(text=f"{run.marker} {text}")])
    async for _event in runner.run_async(user_id=USER, session_id=session.id, new_message=message, run_config=config):
        pass


async def scenarios(h: Harness) -> None:
    """Run every scenario."""
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=h.base_url, api_key=API_KEY, num_retries=0)

    def agent(**callbacks: Any) -> LlmAgent:
        return LlmAgent(
            name="travel_agent",
            model=model,
            instruction="You help travellers. Use the tools.",
            tools=[get_weather, lookup_order],
            before_model_callback=no_card_numbers,
            **callbacks,
        )

    plain = InMemoryRunner(agent=agent(), app_name=APP)
    handled = InMemoryRunner(agent=agent(on_tool_error_callback=tool_error_as_result), app_name=APP)
    default = RunConfig()
    plan: list[tuple[str, InMemoryRunner, str, RunConfig, tuple[type[BaseException], ...]]] = [
        ("ad_normal", plain, "What is the weather in Paris?", default, ()),
        ("ad_parallel", plain, "Weather in Paris and Rome?", default, ()),
        ("ad_tool_error", plain, "Where is my order A-404?", default, (ValueError,)),
        ("ad_tool_error_handled", handled, "Where is my order A-404?", default, ()),
        (
            "ad_max_llm_calls",
            plain,
            "Keep checking the weather in Oslo.",
            RunConfig(max_llm_calls=MAX_LLM_CALLS),
            (LlmCallsLimitExceededError,),
        ),
        ("ad_guardrail", plain, "My credit card is 4111 1111 1111 1111.", default, ()),
        ("ad_content_filter", plain, "Say something filtered.", default, ()),
        ("ad_http_500", plain, "What is the weather in Lima?", default, (openai.APIError,)),
    ]
    for name, runner, text, config, expected in plan:
        with h.scenario(name, agent="travel_agent", expected=expected) as run:
            _current["blocked"] = False
            try:
                await run_agent(runner, run, text, config)
            except LlmCallsLimitExceededError:
                run.hit_max_iterations = True
                raise
            finally:
                run.safety_blocked = bool(_current["blocked"])


def main() -> None:
    """Register the scripts, set the global provider for ADK, run, and write the ground truth."""
    drive("google_adk", "adk-travel-desk", global_provider, register, scenarios)


if __name__ == "__main__":
    main()
