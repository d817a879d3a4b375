"""E2e driver: a hand-rolled tool loop on the plain ``openai`` client, OTel GenAI instrumentation.

LLM spans come from ``opentelemetry-instrumentation-genai-openai``; the agent and tool spans
from ``opentelemetry-util-genai``'s ``TelemetryHandler`` (``invoke_agent`` / ``execute_tool``),
the way an app without a framework is expected to add them. Scenarios:

* ``oa_normal``: one weather tool call, then an answer.
* ``oa_stream``: the same, streamed (SSE, ``include_usage``).
* ``oa_tool_error``: the tool raises; the app reports the error to the model, which answers.
* ``oa_content_filter``: the answer ends with ``finish_reason=content_filter``.
* ``oa_api_error``: the API answers HTTP 400; ``openai.BadRequestError`` reaches the caller.

The agent span also carries the run's aggregate token usage, as the semconv allows, so a
consumer that sums every span double-counts.

Run: ``python tests/e2e/drivers/openai_plain.py --endpoint URL --openai-base-url URL --out F``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from harness import API_KEY, TOOL_SPECS, Harness, RunTruth, tools
from openai import BadRequestError, OpenAI
from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
from opentelemetry.util.genai.handler import TelemetryHandler

from collector.demo.fakeopenai import ContentFilterTurn, ErrorTurn, TextTurn, ToolCallTurn, Turn

AGENT = "support_agent"
MODEL = "gpt-4o-mini"


get_weather, lookup_order = tools(LookupError)
TOOLS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "lookup_order": lookup_order}


class SupportAgent:
    """A minimal chat-completions tool loop with GenAI agent and tool spans."""

    def __init__(self, client: OpenAI, handler: TelemetryHandler, stream: bool = False) -> None:
        self.client = client
        self.handler = handler
        self.stream = stream

    def run(self, prompt: str, truth: RunTruth, max_steps: int = 5) -> str:
        """Answer ``prompt``, executing requested tools; records tool outcomes in ``truth``."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        with self.handler.invoke_local_agent(agent_name=AGENT, request_model=MODEL) as agent:
            agent.input_tokens, agent.output_tokens = 0, 0
            for _ in range(max_steps):
                message, finish, usage = self._complete(messages)
                agent.input_tokens += usage[0]
                agent.output_tokens += usage[1]
                agent.finish_reasons = [finish]
                messages.append(message)
                if finish != "tool_calls":
                    return str(message.get("content") or "")
                for call in message["tool_calls"]:
                    messages.append(self._execute(call, truth))
        return ""

    def _complete(self, messages: list[dict[str, Any]]) -> tuple[dict[str, Any], str, tuple[int, int]]:
        kwargs: dict[str, Any] = {"model": MODEL, "messages": messages, "tools": TOOL_SPECS}
        if not self.stream:
            r = self.client.chat.completions.create(**kwargs)
            usage = (r.usage.prompt_tokens, r.usage.completion_tokens) if r.usage else (0, 0)
            message = r.choices[0].message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})
            return message, str(r.choices[0].finish_reason), usage
        content, finish, usage = "", "", (0, 0)
        calls: dict[int, dict[str, Any]] = {}
        for chunk in self.client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
            if chunk.usage:
                usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
            for choice in chunk.choices:
                content += choice.delta.content or ""
                finish = choice.finish_reason or finish
                for d in choice.delta.tool_calls or []:
                    slot = calls.setdefault(
                        d.index, {"id": d.id, "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    slot["function"]["name"] += (d.function.name or "") if d.function else ""
                    slot["function"]["arguments"] += (d.function.arguments or "") if d.function else ""
        streamed: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            streamed["tool_calls"] = [calls[i] for i in sorted(calls)]
        return streamed, finish, usage

    def _execute(self, call: dict[str, Any], truth: RunTruth) -> dict[str, Any]:
        name = call["function"]["name"]
        try:
            with self.handler.tool(name, tool_type="function", agent_name=AGENT) as inv:
                inv.tool_call_id = call["id"]
                result = TOOLS[name](**json.loads(call["function"]["arguments"]))
        except LookupError as exc:
            result = f"Error: {exc}"
        return {"role": "tool", "tool_call_id": call["id"], "content": result}


def main() -> None:
    """Register the scripts, instrument, run every scenario and write the ground truth."""
    h = Harness("openai_plain", "oa-support-agent")
    OpenAIInstrumentor().instrument(tracer_provider=h.provider)
    handler = TelemetryHandler(tracer_provider=h.provider, instrumentation_scope_name="vigil.e2e.support_agent")
    weather: list[Turn] = [ToolCallTurn.of("get_weather", city="Paris"), TextTurn("Sunny, 21 C in Paris.")]
    h.register("oa_normal", weather)
    h.register("oa_stream", weather)
    h.register("oa_tool_error", [ToolCallTurn.of("lookup_order", order_id="A-404"), TextTurn("No such order.")])
    h.register("oa_content_filter", [ContentFilterTurn("I can")])
    h.register("oa_api_error", [ErrorTurn(400, "Invalid 'messages[0].content': too long.", "invalid_request")])
    client = OpenAI(base_url=h.base_url, api_key=API_KEY, max_retries=0)
    plain, streamed = SupportAgent(client, handler), SupportAgent(client, handler, stream=True)
    for name, agent in (
        ("oa_normal", plain),
        ("oa_stream", streamed),
        ("oa_tool_error", plain),
        ("oa_content_filter", streamed),
        ("oa_api_error", plain),
    ):
        with h.scenario(name, agent=AGENT, expected=(BadRequestError,)) as run:
            agent.run(f"{run.marker} Please help.", run)
    h.finish()


if __name__ == "__main__":
    main()
