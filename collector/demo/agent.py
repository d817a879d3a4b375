"""One simulated agent run: a hand-written tool loop on the real ``openai`` client.

:class:`DemoAgent` plays a :class:`~collector.demo.plan.RunPlan` the way a production agent
would: an ``agent_run`` root span, an iteration tick before every LLM call, the tools the
model asks for inside ``tool_call`` spans, guardrails inside ``guardrail`` spans. The LLM
calls go through ``openai.OpenAI`` to the fleet's :class:`~collector.demo.fakeopenai.FakeOpenAI`,
so the official OpenAI instrumentation (enabled by ``vigil_setup``) emits the LLM spans.
The agent does not read the plan's ground truth; it only acts out what the world does to
it (slow or failing tool backends, a guardrail that trips) and tallies what it saw. Its tools
answer from :func:`collector.demo.world.lookup`. It names its script to the fake server in a
request header (:attr:`~collector.demo.plan.RunPlan.header`), so its messages hold nothing but
the conversation: the agent's system prompt, the user's words, the model's turns, tool results.
"""

from __future__ import annotations

import importlib
import json
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import openai
from openai.types.chat import ChatCompletion
from opentelemetry import trace
from opentelemetry.trace import SpanKind, TracerProvider
from opentelemetry.util.types import AttributeValue

from collector.demo.plan import AgentSpec, Fault, RunPlan, Scenario
from collector.demo.world import TOOLS, lookup
from collector.instrument import AgentRun, MaxIterationsExceeded, agent_run, guardrail, tool_call

__all__ = ["BackendBugError", "DemoAgent", "Observed", "latency_client", "openai_instrumented"]

SCOPE: Final = "vigil.demo"
"""Instrumentation scope of the fallback LLM spans."""

RECOVERABLE: Final = (TimeoutError, PermissionError, LookupError)
"""Tool errors the agents catch and report to the model."""

_RECOVERABLE_FAULTS: Final[tuple[tuple[type[Exception], str], ...]] = (
    (TimeoutError, "backend timed out after 10 s"),
    (PermissionError, "403 from backend: token lacks scope"),
    (LookupError, "no record with that id"),
)
REFUSAL: Final = "Sorry, I can't help with that request."
GAVE_UP: Final = "I could not finish this within my step budget."


class BackendBugError(ValueError):
    """A tool backend answered garbage; the agents do not handle it, so it reaches the caller."""


@dataclass(slots=True)
class Observed:
    """What the agent saw during one run (compared with the plan in the tests).

    Attributes:
        trace_id: the run's trace id (32 hex digits).
        llm_calls: LLM requests made (a failed request counts).
        tool_calls / tool_errors: tool executions and failed ones.
        hit_max_iterations: the iteration cap stopped the run.
        safety_blocked: a content filter or a guardrail stopped the run.
        errored: an exception left the run (reached the caller).
        exception: its type name.
        output: the final answer.
    """

    trace_id: str = ""
    llm_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    hit_max_iterations: bool = False
    safety_blocked: bool = False
    errored: bool = False
    exception: str | None = None
    output: str = ""


def latency_client(
    base_url: str, pace: float, seed: int = 0, sleep: Callable[[float], object] = time.sleep
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for the fake server whose requests take 0.2–1.2 s × ``pace``.

    The delay is a request hook of the HTTP client, so it falls inside the instrumentation's
    LLM spans. Retries are off: an API error reaches the agent, as the scenarios intend.
    ``sleep`` is how the delay is waited (the fleet passes an interruptible wait). Proxy
    variables are ignored: the fake server is local.

    One connection per request: on a kept-alive connection the fake's two-write responses
    meet Nagle's algorithm and the client's delayed ACK, adding 40 ms to every call. And at
    most :data:`FAKE_CONCURRENCY` requests wait for their response at once: the fake's
    listen backlog is the standard library's 5, and connections beyond it are reset.
    """
    rng = random.Random(seed)
    gate = _Gate(FAKE_CONCURRENCY)

    def model_latency(request: object) -> None:
        if pace > 0:
            sleep(rng.uniform(0.2, 1.2) * pace)
        gate.enter()

    http = openai.DefaultHttpxClient(
        event_hooks={"request": [model_latency], "response": [gate.leave]},
        headers={"Connection": "close"},
        trust_env=False,
        timeout=30.0,
    )
    return openai.OpenAI(base_url=base_url, api_key="demo", max_retries=0, http_client=http)


FAKE_CONCURRENCY: Final = 4
"""Requests to the fake server between send and response at any time (below its backlog of 5)."""


class _Gate:
    """A per-thread slot held from a request hook to the response hook.

    A request that fails without a response keeps its thread's slot; the thread's next
    request reuses it, so a slot is never taken twice nor lost for good.
    """

    def __init__(self, slots: int) -> None:
        self._slots = threading.BoundedSemaphore(slots)
        self._held = threading.local()

    def enter(self) -> None:
        """Take this thread's slot (waits while all are taken)."""
        if not getattr(self._held, "slot", False):
            self._slots.acquire()
            self._held.slot = True

    def leave(self, _response: object = None) -> None:
        """Give this thread's slot back."""
        if getattr(self._held, "slot", False):
            self._held.slot = False
            self._slots.release()


class DemoAgent:
    """Plays runs of the demo scenarios; safe to share between threads.

    Args:
        client: the OpenAI client (see :func:`latency_client`).
        pace: multiplier on simulated tool latencies and slow backends (0 = no sleeping).
        tracer_provider: passed to the helpers (the global provider when None).
        llm_spans: emit a GenAI ``chat {model}`` span around each LLM call; for when the
            official OpenAI instrumentation is not installed (see :func:`openai_instrumented`).
        sleep: injected for tests.
    """

    def __init__(
        self,
        client: openai.OpenAI,
        *,
        pace: float = 1.0,
        tracer_provider: TracerProvider | None = None,
        llm_spans: bool = False,
        capture_content: bool = False,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._client = client
        self._pace = pace
        self._tp = tracer_provider
        self._sleep = sleep
        self._capture = capture_content
        self._chat_tracer = (tracer_provider or trace.get_tracer_provider()).get_tracer(SCOPE) if llm_spans else None

    def run(self, plan: RunPlan, history: Sequence[Mapping[str, Any]] = ()) -> Observed:
        """Play one run to the end. Never raises: an exception that left the run is recorded.

        ``history``: the chat so far when the run is a later turn of a conversation (the user's
        messages and the answers they got), sent before the turn's user message as chat apps do.
        """
        s = plan.scenario
        seen = Observed()
        try:
            with agent_run(
                s.agent.name,
                max_iterations=s.agent.max_iterations,
                optimal_steps=s.agent.optimal_steps,
                conversation_id=plan.session_id,
                raise_on_max=s.raise_on_max,
                tracer_provider=self._tp,
            ) as run:
                seen.trace_id = run.trace_id
                run.set_input(plan.user_message)  # on the agent span: an input guardrail's block shows what it stopped
                seen.output = self._converse(run, plan, seen, history)
                run.set_output(seen.output)
        except Exception as exc:  # noqa: BLE001 - reaching the caller is the scenario; the worker must survive it
            seen.errored = True
            seen.exception = type(exc).__name__
            seen.hit_max_iterations = seen.hit_max_iterations or isinstance(exc, MaxIterationsExceeded)
        return seen

    def _converse(self, run: AgentRun, plan: RunPlan, seen: Observed, history: Sequence[Mapping[str, Any]]) -> str:
        s = plan.scenario
        if s.guardrail == "input":
            return self._block(seen, "input_policy", "request asks for another customer's personal data")
        # the script's name travels in a request header (plan.header), never in what a reviewer reads
        system = s.system or f"You are the {s.agent.name} assistant. Use the tools."
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            *(dict(m) for m in history),
            {"role": "user", "content": plan.user_message},
        ]
        while True:
            if not run.tick():  # the tick reaching the cap marks the hit (and raises when asked)
                seen.hit_max_iterations = True
                return GAVE_UP
            seen.llm_calls += 1
            choice = self._complete(s.agent, messages, plan.header).choices[0]
            if choice.finish_reason == "content_filter":
                seen.safety_blocked = True
                return REFUSAL
            message = choice.message
            if not message.tool_calls:
                if s.guardrail == "output":
                    return self._block(seen, "output_policy", "answer quotes an internal code")
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            for call in message.tool_calls:
                if call.type == "function":
                    messages.append(self._tool(s, call.id, call.function.name, call.function.arguments, seen))

    def _complete(self, agent: AgentSpec, messages: list[dict[str, Any]], header: Mapping[str, str]) -> ChatCompletion:
        """One chat completion; in a GenAI ``chat`` span of our own when asked to (``llm_spans``).

        ``header`` names the fake server's script out of band (:attr:`~collector.demo.plan.RunPlan.header`).
        """

        def create() -> ChatCompletion:
            return self._client.chat.completions.create(
                model=agent.model,
                messages=messages,  # type: ignore[arg-type]
                tools=_tool_specs(agent),  # type: ignore[arg-type]
                extra_headers=dict(header),
            )

        if self._chat_tracer is None:
            return create()
        request = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": agent.model,
        }
        if self._capture:
            request["gen_ai.input.messages"] = json.dumps(input_messages(messages))
        with self._chat_tracer.start_as_current_span(
            f"chat {agent.model}", kind=SpanKind.CLIENT, attributes=request
        ) as span:
            try:
                reply = create()
            except openai.APIError as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise
            span.set_attributes(_response_attributes(reply))
            if self._capture:
                span.set_attribute("gen_ai.output.messages", json.dumps(output_messages(reply)))
            return reply

    def _block(self, seen: Observed, name: str, reason: str) -> str:
        with guardrail(name, tracer_provider=self._tp) as g:
            g.block(reason)
        seen.safety_blocked = True
        return REFUSAL

    def _tool(self, s: Scenario, call_id: str, name: str, arguments: str, seen: Observed) -> dict[str, Any]:
        fault = s.fault_of(seen.tool_calls)
        seen.tool_calls += 1
        parsed = json.loads(arguments or "{}")
        try:
            with tool_call(name, call_id=call_id, arguments=parsed, tracer_provider=self._tp) as call:
                result = self._backend(s, name, parsed, fault)
                call.set_result(result)
        except RECOVERABLE as exc:
            seen.tool_errors += 1
            result = f"The {name} tool failed: {exc}"
        except BackendBugError:
            seen.tool_errors += 1
            raise
        return {"role": "tool", "tool_call_id": call_id, "content": result}

    def _backend(self, s: Scenario, name: str, arguments: Mapping[str, Any], fault: Fault | None) -> str:
        """The simulated tool backend: waits, then answers (:func:`collector.demo.world.lookup`, as JSON) or
        fails as the scenario says."""
        extra = s.slow_s / max(1, s.tool_call_count)
        self._sleep((random.uniform(0.05, 0.3) + extra) * self._pace)
        if fault is Fault.FATAL:
            raise BackendBugError(f"{name} backend returned malformed JSON")
        if fault is Fault.RECOVERABLE:
            error, message = _RECOVERABLE_FAULTS[len(name) % len(_RECOVERABLE_FAULTS)]
            raise error(f"{name}: {message}")
        return json.dumps(lookup(name, arguments))


def openai_instrumented() -> bool:
    """Whether the official OpenAI instrumentation is installed and enabled in this process."""
    try:
        module = importlib.import_module("opentelemetry.instrumentation.genai.openai")
    except ImportError:
        return False
    return bool(module.OpenAIInstrumentor().is_instrumented_by_opentelemetry)


def input_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat Completions ``messages`` in the GenAI semantic conventions' ``gen_ai.input.messages`` form.

    https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/ (input messages JSON schema): each
    message a role and parts (``text``, ``tool_call``, ``tool_call_response``).
    """
    out = []
    for message in messages:
        parts: list[dict[str, Any]] = []
        if message.get("role") == "tool":
            parts.append(
                {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}
            )
        elif message.get("content"):
            parts.append({"type": "text", "content": message["content"]})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": function.get("name"),
                    "arguments": function.get("arguments"),
                }
            )
        out.append({"role": message.get("role"), "parts": parts})
    return out


def output_messages(reply: ChatCompletion) -> list[dict[str, Any]]:
    """The choices of ``reply`` in the GenAI semantic conventions' ``gen_ai.output.messages`` form."""
    out = []
    for choice in reply.choices:
        (message,) = input_messages(
            [choice.message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"})]
        )
        out.append({**message, "finish_reason": str(choice.finish_reason)})
    return out


def _response_attributes(reply: ChatCompletion) -> dict[str, AttributeValue]:
    """GenAI response attributes of ``reply``: model, id, finish reasons and token usage."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.response.model": reply.model,
        "gen_ai.response.id": reply.id,
        "gen_ai.response.finish_reasons": [str(c.finish_reason) for c in reply.choices],
    }
    if reply.usage is not None:
        attributes["gen_ai.usage.input_tokens"] = reply.usage.prompt_tokens
        attributes["gen_ai.usage.output_tokens"] = reply.usage.completion_tokens
    return attributes


def _tool_specs(agent: AgentSpec) -> list[dict[str, Any]]:
    """The OpenAI ``tools`` parameter for ``agent`` (:data:`collector.demo.world.TOOLS`, string parameters)."""
    specs = []
    for name in agent.tools:
        tool = TOOLS[name]
        params = list(tool.parameters)
        schema = {"type": "object", "properties": {p: {"type": "string"} for p in params}, "required": params}
        function = {"name": name, "description": tool.description, "parameters": schema}
        specs.append({"type": "function", "function": function})
    return specs
