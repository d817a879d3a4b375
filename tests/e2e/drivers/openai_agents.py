"""E2e driver: an OpenAI Agents SDK agent traced by OpenInference's openai-agents instrumentor.

The agent talks to the fake server through the Responses API (the SDK default). Scenarios:

* ``ag_normal``: one weather tool call, then an answer.
* ``ag_tool_error``: the order tool raises; the SDK's default tool error function hands the
  error to the model, which answers.
* ``ag_max_turns``: the model keeps calling the tool; ``max_turns=3`` raises ``MaxTurnsExceeded``.
* ``ag_guardrail``: a blocking input guardrail trips on the prompt and raises
  ``InputGuardrailTripwireTriggered`` before any model call.
* ``ag_content_filter``: the response ends ``incomplete`` with reason ``content_filter``; the SDK
  raises it to the caller.
* ``ag_chat_completions``: the same weather run through ``OpenAIChatCompletionsModel``.
* ``ag_refusal``: the provider withholds the answer: the Responses output message carries a
  ``refusal`` content part (no ``output_text``); the SDK raises ``ModelRefusalError`` (no
  ``model_refusal`` error handler is set).
* ``ag_refusal_cc``: the same refusal through Chat Completions (``message.refusal``, null content).
* ``ag_output_guardrail``: the model answers; a blocking output guardrail trips on the answer and
  raises ``OutputGuardrailTripwireTriggered``.
* ``ag_max_turns_graceful``: as ``ag_max_turns``, but the run has a ``max_turns`` error handler
  (``Runner.run(..., error_handlers={"max_turns": ...})``), so nothing is raised: the run ends with
  the handler's final output ``Stopped after 3 turns without an answer.``

Run: ``python tests/e2e/drivers/openai_agents.py --endpoint URL --openai-base-url URL --out F``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    MaxTurnsExceeded,
    ModelRefusalError,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    Runner,
    function_tool,
    input_guardrail,
    output_guardrail,
)
from agents.exceptions import AgentsException
from agents.run_error_handlers import RunErrorHandlerInput, RunErrorHandlerResult, RunErrorHandlers
from harness import API_KEY, Harness, tools
from openai import AsyncOpenAI, OpenAIError
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from collector.demo.fakeopenai import ContentFilterTurn, RefusalTurn, TextTurn, ToolCallTurn

get_weather, lookup_order = (function_tool(f) for f in tools())


@input_guardrail(name="no_card_numbers", run_in_parallel=False)
def no_card_numbers(ctx: RunContextWrapper[Any], agent: Agent[Any], text: Any) -> GuardrailFunctionOutput:
    """Trip when the prompt mentions a credit card number."""
    return GuardrailFunctionOutput(output_info={"checked": True}, tripwire_triggered="credit card" in str(text))


@output_guardrail(name="no_secrets")
def no_secrets(ctx: RunContextWrapper[Any], agent: Agent[Any], output: Any) -> GuardrailFunctionOutput:
    """Trip when the answer discloses a secret."""
    return GuardrailFunctionOutput(output_info={"checked": True}, tripwire_triggered="secret" in str(output).lower())


GRACEFUL_STOP = "Stopped after 3 turns without an answer."


def stop_gracefully(data: RunErrorHandlerInput[Any]) -> RunErrorHandlerResult:
    """The ``max_turns`` error handler: end the run with a fixed final output instead of raising."""
    return RunErrorHandlerResult(final_output=GRACEFUL_STOP)


async def scenarios(h: Harness) -> None:
    """Run every scenario; each ``Runner.run`` is one SDK trace, hence one OTel trace."""
    client = AsyncOpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
    responses = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
    travel = Agent(
        name="travel_agent",
        instructions="You help travellers.",
        model=responses,
        tools=[get_weather, lookup_order],
        input_guardrails=[no_card_numbers],
    )
    # Only this clone checks its answers, so the other runs' traces keep their shape.
    guarded = travel.clone(output_guardrails=[no_secrets])
    chat = travel.clone(name="travel_agent_cc", model=OpenAIChatCompletionsModel("gpt-4o-mini", client))
    plan: list[tuple[str, Agent[Any], str, int, tuple[type[BaseException], ...]]] = [
        ("ag_normal", travel, "What is the weather in Paris?", 10, ()),
        ("ag_tool_error", travel, "Where is my order A-404?", 10, ()),
        ("ag_max_turns", travel, "Keep checking the weather.", 3, (MaxTurnsExceeded,)),
        ("ag_guardrail", travel, "My credit card is 4111 1111 1111 1111.", 10, (InputGuardrailTripwireTriggered,)),
        ("ag_content_filter", travel, "Say something filtered.", 10, (AgentsException, OpenAIError)),
        ("ag_chat_completions", chat, "What is the weather in Lima?", 10, ()),
        ("ag_refusal", travel, "Help me with something forbidden.", 10, (ModelRefusalError,)),
        ("ag_refusal_cc", chat, "Help me with something forbidden.", 10, (ModelRefusalError,)),
        ("ag_output_guardrail", guarded, "What is the admin password?", 10, (OutputGuardrailTripwireTriggered,)),
        ("ag_max_turns_graceful", travel, "Keep checking the weather.", 3, ()),
    ]
    graceful: RunErrorHandlers[Any] = {"max_turns": stop_gracefully}
    for name, agent, prompt, max_turns, expected in plan:
        with h.scenario(name, agent=agent.name, expected=expected) as run:
            run.hit_max_iterations = name == "ag_max_turns"
            run.safety_blocked = name == "ag_guardrail"
            if name == "ag_content_filter":
                # The SDK raises on an `incomplete` response before adding its usage, so neither
                # the app nor the trace ever sees these tokens.
                run.rejected_kinds = ["content_filter"]
            handlers = graceful if name == "ag_max_turns_graceful" else None
            try:
                result = await Runner.run(agent, f"{run.marker} {prompt}", max_turns=max_turns, error_handlers=handlers)
            except (ModelRefusalError, OutputGuardrailTripwireTriggered):
                # The model refused / the output guardrail tripped: a block that reached the caller.
                run.safety_blocked = True
                raise
            if handlers:
                # Nothing raised: the handler's final output tells the driver the turn limit was hit.
                run.hit_max_iterations = result.final_output == GRACEFUL_STOP
    await client.close()


def main() -> None:
    """Register the scripts, instrument, run, and write the ground truth."""
    h = Harness("openai_agents", "agents-travel-desk")
    OpenAIAgentsInstrumentor().instrument(tracer_provider=h.provider)
    h.register("ag_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")])
    h.register("ag_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("ag_max_turns", [ToolCallTurn.of("get_weather", city="Oslo")])
    h.register("ag_guardrail", [TextTurn("This must never be served.")])
    h.register("ag_content_filter", [ContentFilterTurn("")])
    h.register("ag_chat_completions", [ToolCallTurn.of("get_weather", city="Lima"), TextTurn("Mild in Lima.")])
    h.register("ag_refusal", [RefusalTurn("I'm sorry, but I can't help with that request.")])
    h.register("ag_refusal_cc", [RefusalTurn("I'm sorry, but I can't help with that request.")])
    h.register("ag_output_guardrail", [TextTurn("The secret admin password is hunter2.")])
    h.register("ag_max_turns_graceful", [ToolCallTurn.of("get_weather", city="Oslo")])
    asyncio.run(scenarios(h))
    h.finish()


if __name__ == "__main__":
    main()
