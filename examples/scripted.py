"""What the example agents share: the scripted model's client, set up once per process with Vigil's
tracing, and a plain chat-completions tool loop traced with Vigil's helpers."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import openai

from collector.demo.fakeopenai import FakeOpenAI, Turn
from collector.instrument import agent_run, vigil_setup

__all__ = ["MODEL", "ScriptedModel", "tool_loop"]

os.environ.setdefault("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")

MODEL = "gpt-4o-mini"


class ScriptedModel:
    """An example agent's OpenAI client: the first :meth:`client` sets Vigil's tracing up
    (``vigil_setup``, content captured) and, unless ``OPENAI_BASE_URL`` names a server, starts the
    scripted server (:class:`FakeOpenAI`) with ``scripts`` in-process."""

    def __init__(self, service_name: str, scripts: Mapping[str, Sequence[Turn]]) -> None:
        self.service_name = service_name
        self.scripts = scripts
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {}

    def client(self) -> openai.OpenAI:
        """The client (and, the first time, the tracing and the scripted server)."""
        with self._lock:
            if "client" not in self._state:
                self._state["tracing"] = vigil_setup(service_name=self.service_name, capture_content=True)
                base_url = os.environ.get("OPENAI_BASE_URL")
                if not base_url:
                    self._state["fake"] = FakeOpenAI(self.scripts).start()
                    base_url = self._state["fake"].base_url
                key = os.environ.get("OPENAI_API_KEY", "unused")
                self._state["client"] = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
            client: openai.OpenAI = self._state["client"]
            return client

    def reset(self) -> None:
        """Shut the tracing and the scripted server down and forget the client (tests, after the agent ran)."""
        with self._lock:
            tracing = self._state.pop("tracing", None)
            if tracing is not None:
                tracing.shutdown()
            fake = self._state.pop("fake", None)
            if fake is not None:
                fake.shutdown()
            self._state.pop("client", None)


def tool_loop(
    model: ScriptedModel,
    agent: str,
    messages: list[Any],
    tools: list[dict[str, Any]],
    act: Callable[[str, str, dict[str, Any]], str],
    *,
    max_iterations: int,
) -> str:
    """One traced run of ``agent`` (``agent_run``): ask the model, run the tools it calls
    (``act(name, call_id, arguments)``, which traces each with ``tool_call``), give their results back,
    until it answers or ``max_iterations`` model calls are spent ("I ran out of steps.")."""
    client = model.client()
    with agent_run(agent, max_iterations=max_iterations) as run:
        while run.tick():
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)  # type: ignore[arg-type]
            choice = reply.choices[0].message
            if not choice.tool_calls:
                text = choice.content or ""
                run.set_output(text)
                return text
            messages.append(choice)
            for call in choice.tool_calls:
                args = json.loads(call.function.arguments)  # type: ignore[union-attr]
                result = act(call.function.name, call.id, args)  # type: ignore[union-attr]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return "I ran out of steps."
