"""E2e driver: a Strands Agents output guard, an ``InterventionHandler`` whose ``after_model_call`` guides.

The same agent setup as ``strands_agents.py`` (Strands' own tracer on the global provider, the
event-based GenAI form, ``OpenAIModel`` on the fake server, no client retries), plus one output
guard: an ``InterventionHandler`` (``strands.interventions``) whose ``after_model_call`` returns
``Guide(feedback=...)`` when the model's answer breaks the app's rule. Strands then discards the
answer (it never enters the conversation), appends the feedback as a user message
(``[<handler name>] <feedback>``) and calls the model again (Strands' ``InterventionRegistry._apply_after_model_call``
sets ``AfterModelCallEvent.retry``; see tests/fixtures/traces/strands_output_guard.md).

Scenarios (the scripts are sequential: a discarded answer leaves no assistant turn to count):

* ``so_normal``: one weather tool call, then an answer; the guard proceeds.
* ``so_pii_guided``: the first answer holds a social security number; the PII guard guides
  ("personal data"), the second answer passes. Truth: blocked (the output safety check triggered),
  not errored.
* ``so_style_guided``: the first answer lacks the source the style guard asks for; it guides,
  the second answer passes. Truth: not blocked (the rejection is about form, not safety).
* ``so_pii_hook``: the same PII rule as a plain hook (``HookProvider`` on ``AfterModelCallEvent``)
  that sets ``event.retry`` and appends its own user message, as Strands' hooks allow without
  interventions. Truth: blocked, not errored.

Run: ``python tests/e2e/drivers/strands_output_guard.py --capture F.json --out F.truth.json``.
"""

from __future__ import annotations

import re
from typing import Any

from harness import API_KEY, Harness, current, drive, global_provider, tools
from strands import Agent, tool
from strands.hooks import AfterModelCallEvent, HookProvider, HookRegistry
from strands.interventions import Guide, InterventionHandler, Proceed
from strands.models.openai import OpenAIModel

from collector.demo.fakeopenai import TextTurn, ToolCallTurn

AGENT = "travel_agent"
SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
get_weather, lookup_order = tools()


def _answer_text(event: AfterModelCallEvent) -> str:
    """The text of the model's answer (empty for a tool-use turn or a failed call)."""
    response = event.stop_response
    if response is None or response.stop_reason == "tool_use":
        return ""
    return "".join(block.get("text", "") for block in response.message.get("content", []))


class NoPersonalData(InterventionHandler):
    """Output guard: an answer holding a social security number is sent back with guidance."""

    name = "pii-guard"

    def after_model_call(self, event: AfterModelCallEvent, **kwargs: Any) -> Proceed | Guide:
        """Guide on an SSN in the answer (driver truth: the output safety check triggered)."""
        if SSN.search(_answer_text(event)):
            current().safety_blocked = True
            return Guide(
                feedback="Your answer exposed a social security number. Do not reveal it; answer again.",
                reason="personal data in output",
            )
        return Proceed()


class CiteSource(InterventionHandler):
    """Output guard on form: an answer must name its source in brackets."""

    name = "style-guard"

    def after_model_call(self, event: AfterModelCallEvent, **kwargs: Any) -> Proceed | Guide:
        """Guide when a text answer has no ``[source]`` (a style rule, not a safety one)."""
        text = _answer_text(event)
        if text and "[" not in text:
            return Guide(feedback="Name your source in square brackets at the end.", reason="style")
        return Proceed()


class PersonalDataHook(HookProvider):
    """The PII rule as a plain hook: discard the answer, tell the model why, and call it again."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Check every model answer."""
        registry.add_callback(AfterModelCallEvent, self.after_model)

    def after_model(self, event: AfterModelCallEvent) -> None:
        """On an SSN in the answer, retry with a note (driver truth: the output safety check triggered)."""
        if SSN.search(_answer_text(event)):
            current().safety_blocked = True
            event.retry = True
            note = "Company policy: never disclose personal data such as a social security number. Answer again."
            event.agent.messages.append({"role": "user", "content": [{"text": note}]})


def register(h: Harness) -> None:
    """The fake model's scripts, one per scenario (sequential: the n-th request plays turn n)."""
    weather = ToolCallTurn.of("get_weather", city="Paris")
    h.register("so_normal", [weather, TextTurn("Sunny, 21 C in Paris.")], sequential=True)
    h.register(
        "so_pii_guided",
        [TextTurn("Your booking is under SSN 078-05-1120."), TextTurn("Your booking is confirmed.")],
        sequential=True,
    )
    h.register(
        "so_pii_hook",
        [TextTurn("Your booking is under SSN 078-05-1120."), TextTurn("Your booking is confirmed.")],
        sequential=True,
    )
    h.register(
        "so_style_guided",
        [TextTurn("Sunny in Paris."), TextTurn("Sunny in Paris [weather service].")],
        sequential=True,
    )


def scenarios(h: Harness) -> None:
    """Run every scenario, each on a fresh agent with both output guards."""
    model = OpenAIModel(
        client_args={"api_key": API_KEY, "base_url": h.base_url, "max_retries": 0}, model_id="gpt-4o-mini"
    )
    plan = [
        ("so_normal", "What is the weather in Paris?"),
        ("so_pii_guided", "Which booking do I have?"),
        ("so_style_guided", "What is the weather in Paris?"),
        ("so_pii_hook", "Which booking do I have?"),
    ]
    for name, prompt in plan:
        guards: list[InterventionHandler] = [] if name == "so_pii_hook" else [NoPersonalData()]
        if name == "so_style_guided":
            guards.append(CiteSource())
        agent = Agent(
            model=model,
            name=AGENT,
            system_prompt="You help travellers.",
            tools=[tool(get_weather), tool(lookup_order)],
            interventions=guards,
            hooks=[PersonalDataHook()] if name == "so_pii_hook" else [],
            callback_handler=None,
        )
        with h.scenario(name, agent=AGENT) as run:
            agent(f"{run.marker} {prompt}")


def main(driver: str = "strands_output_guard") -> None:
    """Register the scripts, set the global provider for Strands, run, and write the ground truth."""
    drive(driver, "strands-guarded-desk", global_provider, register, scenarios)


if __name__ == "__main__":
    main()
