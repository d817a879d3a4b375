# ruff: noqa: E402
"""E2e driver: PydanticAI guards — an input guard that skips the model request, output checks that give up.

The same agent setup as ``pydantic_ai.py`` (PydanticAI's own ``Instrumentation`` capability, no
logfire, ``OpenAIChatModel`` on the fake server, no client retries), plus:

* an input guard, a capability whose ``wrap_model_request`` raises ``SkipModelRequest`` with its own
  refusal when the prompt holds a card number (PydanticAI's documented way for a capability to
  answer instead of the model): the model is never called;
* output validators that reject the answer with ``ModelRetry`` until PydanticAI gives up after
  ``retries={"output": 1}`` (``UnexpectedModelBehavior: Exceeded maximum output retries (1)``).

Scenarios:

* ``pg_normal``: one weather tool call, then an answer (the guard and validators pass).
* ``pg_input_guard``: the prompt holds a card number; the guard answers, 0 LLM calls.
* ``pg_output_policy``: every answer holds an e-mail address; the validator rejects it as personal
  data twice and the run raises (a block: the rejection names a policy).
* ``pg_output_format``: every answer is not JSON; the validator rejects it as malformed twice and
  the run raises (an error, not a block: the rejection names a format problem).

Run: ``python tests/e2e/drivers/pydantic_ai_guards.py --capture F --out F`` (see scripts/capture_traces.sh).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# This file is named like the package it drives: put its own folder (harness.py) last on the
# path, or `import pydantic_ai` would import this script.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != Path(_HERE)] + [_HERE]

from harness import API_KEY, Harness, current, tools
from openai import AsyncOpenAI
from pydantic_ai import Agent, ModelRetry, RunContext
from pydantic_ai.capabilities import AbstractCapability, Instrumentation
from pydantic_ai.exceptions import AgentRunError, SkipModelRequest
from pydantic_ai.messages import ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from collector.demo.fakeopenai import TextTurn, ToolCallTurn

AGENT = "pg_travel_agent"
REFUSAL = "I cannot help with requests that contain card numbers."
PERSONAL_DATA = "The answer contains personal data (an e-mail address). Remove it; it violates the privacy policy."
NOT_JSON = "The answer is not valid JSON. Reply with a JSON object with a 'summary' key."
get_weather, lookup_order = tools(ModelRetry)


@dataclass
class NoCardNumbers(AbstractCapability[Any]):
    """Input guard: answer for the model when the user's prompt mentions a card number."""

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: Any
    ) -> ModelResponse:
        """Skip the request (SkipModelRequest with the refusal) on a card number; else call the model."""
        prompts = [p.content for m in request_context.messages for p in m.parts if isinstance(p, UserPromptPart)]
        if any(isinstance(text, str) and "card number" in text for text in prompts):
            current().safety_blocked = True
            raise SkipModelRequest(ModelResponse(parts=[TextPart(REFUSAL)]))
        response: ModelResponse = await handler(request_context)
        return response


def json_summary(output: str) -> str:
    """Output validator: reject answers that are not a JSON object."""
    try:
        json.loads(output)
    except ValueError:
        raise ModelRetry(NOT_JSON) from None
    return output


def travel_agents(h: Harness, name: str) -> Callable[..., Agent[None, str]]:
    """A factory of the guarded drivers' agents (here and pydantic_ai_output_validator.py): PydanticAI's own
    ``Instrumentation`` into ``h``'s provider, ``OpenAIChatModel`` on the fake server with no client
    retries, the two tools, one retry each for tools and output. ``agent(*capabilities, **options)``."""
    client = AsyncOpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))
    instrumentation = Instrumentation(settings=InstrumentationSettings(tracer_provider=h.provider))

    def agent(*capabilities: AbstractCapability[Any], **options: Any) -> Agent[None, str]:
        return Agent(
            model,
            name=name,
            instructions="You help travellers.",
            tools=[get_weather, lookup_order],
            capabilities=[instrumentation, *capabilities],
            retries={"tools": 1, "output": 1},
            **options,
        )

    return agent


def main() -> None:
    """Register the scripts, build the instrumented agents, run every scenario."""
    h = Harness("pydantic_ai_guards", "pa-guarded-travel-desk")
    agent = travel_agents(h, AGENT)
    guarded = agent(NoCardNumbers())
    private = agent(NoCardNumbers())
    formatted = agent(NoCardNumbers())

    @private.output_validator
    def no_personal_data(output: str) -> str:
        """Reject answers that hold an e-mail address."""
        if "@" in output:
            raise ModelRetry(PERSONAL_DATA)
        return output

    formatted.output_validator(json_summary)

    h.register("pg_normal", [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny in Paris.")])
    h.register("pg_input_guard", [TextTurn("This must never be served.")])
    h.register("pg_output_policy", [TextTurn("Write to the agent at jane.doe@example.com.")])
    h.register("pg_output_format", [TextTurn("Sunny in Paris, no JSON here.")])
    plan: list[tuple[str, Agent[None, str], str, bool]] = [
        ("pg_normal", guarded, "What is the weather in Paris?", False),
        ("pg_input_guard", guarded, "My card number is 4111 1111 1111 1111, book me a flight.", False),
        ("pg_output_policy", private, "Who do I write to about my booking?", True),
        ("pg_output_format", formatted, "Summarise the weather in Paris.", False),
    ]
    for name, app, prompt, policy in plan:
        with h.scenario(name, agent=AGENT, expected=(AgentRunError,)) as run:
            try:
                app.run_sync(f"{run.marker} {prompt}")
            except AgentRunError:
                run.safety_blocked = policy  # the output check gave up on a policy (else a format problem)
                raise
    h.finish()


if __name__ == "__main__":
    main()
