"""Test helpers that ship with the package: span factories and small trace builders.

Users' tests and ours build spans the same way::

    from tests.support.spans import node, span, trace

    one = span(name="chat gpt-4o", attributes={"gen_ai.operation.name": "chat"})
    spans = trace(
        node("invoke_agent support", {"gen_ai.operation.name": "invoke_agent"},
             node("chat gpt-4o", {"gen_ai.operation.name": "chat"}),
             node("execute_tool search", {"gen_ai.operation.name": "execute_tool"})),
        resource={"service.name": "support-bot"},
    )

Ids are random but valid lowercase hex; times are deterministic (children run one after
another inside their parent) unless overridden.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from collector.model import AttrValue, Span, SpanKind, StatusCode

BASE_NS: Final = 1_700_000_000_000_000_000
"""Default start time of spans and traces (Unix ns)."""

LEAF_NS: Final = 10_000_000
"""Default duration of a leaf span built by :func:`trace` (10 ms)."""

GAP_NS: Final = 1_000_000
"""Gap between siblings, and between a parent's edges and its children (1 ms)."""

_rng = random.Random()


def hex_id(n_bytes: int) -> str:
    """Return a random non-zero id of ``n_bytes`` bytes as lowercase hex."""
    return f"{_rng.getrandbits(8 * n_bytes - 1) + 1:0{2 * n_bytes}x}"


def random_trace_id() -> str:
    """Return a random valid trace id (32 hex characters)."""
    return hex_id(16)


def random_span_id() -> str:
    """Return a random valid span id (16 hex characters)."""
    return hex_id(8)


def span(**overrides: Any) -> Span:
    """Build one :class:`Span` with sensible defaults; any field can be overridden.

    Defaults: random trace and span ids, no parent (a root), name ``"span"``, kind
    INTERNAL, a 1 s span starting at :data:`BASE_NS`, status UNSET, no attributes, events
    or resource.

    Raises:
        TypeError: an override names a field :class:`Span` does not have.
    """
    fields: dict[str, Any] = {
        "trace_id": random_trace_id(),
        "span_id": random_span_id(),
        "parent_span_id": None,
        "name": "span",
        "kind": SpanKind.INTERNAL,
        "start_ns": BASE_NS,
        "end_ns": BASE_NS + 1_000_000_000,
        "status_code": StatusCode.UNSET,
    }
    fields.update(overrides)
    return Span(**fields)


@dataclass(frozen=True, slots=True)
class Node:
    """The spec of one span in a tree built by :func:`trace` (see :func:`node`)."""

    name: str
    attributes: Mapping[str, AttrValue]
    children: tuple[Node, ...]
    overrides: Mapping[str, Any] = field(default_factory=dict)


def node(name: str, attributes: Mapping[str, Any] | None = None, *children: Node, **overrides: Any) -> Node:
    """Describe one span of a :func:`trace`: its name, attributes, children and overrides.

    Args:
        name: the span name.
        attributes: span attributes.
        *children: child spans, run one after another inside this span.
        **overrides: other :class:`Span` fields (``status_code``, ``status_message``,
            ``events``, ``span_id``, ``start_ns``, ``end_ns``, …). A leaf lasts
            :data:`LEAF_NS` unless ``duration_ns`` is given.
    """
    return Node(name, dict(attributes or {}), children, overrides)


def trace(
    *roots: Node,
    trace_id: str | None = None,
    start_ns: int = BASE_NS,
    resource: Mapping[str, Any] | None = None,
    scope: str = "",
) -> list[Span]:
    """Build the spans of one trace from :func:`node` specs, parents before children.

    The first root starts at ``start_ns``; further roots (rarely wanted) follow it. All
    spans share the trace id and resource.

    Returns:
        The spans in pre-order (parents before their children).
    """
    builder = _Builder(trace_id or random_trace_id(), dict(resource or {}), scope)
    spans: list[Span] = []
    at = start_ns
    for root in roots:
        subtree = builder.build(root, None, at)
        spans.extend(subtree)
        at = subtree[0].end_ns + GAP_NS
    return spans


@dataclass(frozen=True, slots=True)
class _Builder:
    trace_id: str
    resource: Mapping[str, AttrValue]
    scope: str

    def build(self, spec: Node, parent: str | None, start: int) -> list[Span]:
        """Return the span of ``spec`` followed by its subtree, in pre-order."""
        overrides = dict(spec.overrides)
        duration = overrides.pop("duration_ns", None)
        sid = overrides.pop("span_id", None) or random_span_id()
        below: list[Span] = []
        at = start + GAP_NS
        for child in spec.children:
            subtree = self.build(child, sid, at)
            below.extend(subtree)
            at = subtree[0].end_ns + GAP_NS
        end = start + (duration if isinstance(duration, int) else max(LEAF_NS, at - start))
        built = Span(
            trace_id=self.trace_id,
            span_id=sid,
            parent_span_id=parent,
            name=spec.name,
            start_ns=start,
            end_ns=end,
            attributes=spec.attributes,
            resource=self.resource,
            scope=self.scope,
        )
        return [replace(built, **overrides), *below]


def agent_run(
    *,
    llm_calls: int = 3,
    tools_per_call: int = 2,
    agent: str = "support-bot",
    model: str = "gpt-4o",
    input_tokens: int = 100,
    output_tokens: int = 20,
    content: bool = False,
    resource: Mapping[str, Any] | None = None,
) -> list[Span]:
    """Build a realistic OTel GenAI agent run (latest-experimental names).

    ``invoke_agent {agent}`` holds ``llm_calls`` rounds of ``chat {model}`` each followed
    by ``tools_per_call`` ``execute_tool`` spans, then one last ``chat`` that answers.
    The agent span carries aggregate usage, as many instrumentations do. With
    ``content=True`` the chat spans carry ``gen_ai.input.messages`` /
    ``gen_ai.output.messages`` (JSON strings) and the tool spans their arguments and results,
    as with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY``.
    """
    children: list[Node] = []
    rounds = max(llm_calls - 1, 0)
    history: list[dict[str, Any]] = [_text("user", "What is the weather in Paris and in Rome?")]
    for i in range(llm_calls):
        calls = [(f"tool_{j}", f"call_{i}_{j}") for j in range(tools_per_call)] if i < rounds else []
        answer = _answer(calls)
        chat = _chat(model, input_tokens, output_tokens, "tool_call" if calls else "stop")
        if content:
            chat = _with(
                chat, {"gen_ai.input.messages": json.dumps(history), "gen_ai.output.messages": json.dumps([answer])}
            )
        children.append(chat)
        history = [*history, answer]
        for name, call_id in calls:
            tool = _tool(name, call_id)
            if content:
                tool = _with(
                    tool, {"gen_ai.tool.call.arguments": '{"city": "Paris"}', "gen_ai.tool.call.result": "18C"}
                )
                history = [*history, _tool_result(call_id)]
            children.append(tool)
    agent_attrs: dict[str, AttrValue] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": agent,
        "gen_ai.provider.name": "openai",
        "gen_ai.usage.input_tokens": input_tokens * llm_calls,
        "gen_ai.usage.output_tokens": output_tokens * llm_calls,
    }
    root = node(f"invoke_agent {agent}", agent_attrs, *children)
    return trace(root, resource=resource or {"service.name": agent, "deployment.environment.name": "test"})


def _chat(model: str, input_tokens: int, output_tokens: int, finish: str) -> Node:
    return node(
        f"chat {model}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
            "gen_ai.response.model": f"{model}-2024-08-06",
            "gen_ai.response.id": f"chatcmpl-{random_span_id()}",
            "gen_ai.response.finish_reasons": [finish],
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
        },
        kind=SpanKind.CLIENT,
    )


def _tool(name: str, call_id: str) -> Node:
    return node(
        f"execute_tool {name}",
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        },
    )


def _with(spec: Node, attributes: Mapping[str, AttrValue]) -> Node:
    return replace(spec, attributes={**spec.attributes, **attributes})


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def _answer(calls: list[tuple[str, str]]) -> dict[str, Any]:
    if not calls:
        return {**_text("assistant", "Paris 18C, Rome 24C."), "finish_reason": "stop"}
    parts = [{"type": "tool_call", "id": cid, "name": name, "arguments": {"city": "Paris"}} for name, cid in calls]
    return {"role": "assistant", "parts": parts, "finish_reason": "tool_call"}


def _tool_result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": call_id, "result": "18C"}]}


def capped_run(seed: int) -> tuple[str, bytes]:
    """A synthetic run (``vigil bench``'s generator) whose root reports an iteration-cap hit, so
    Vigil flags it high by default: its trace id and its OTLP/protobuf body."""
    from vigil.bench.synth import _kv, body, make_run

    run = make_run(random.Random(seed))
    for one in run.spans:
        if not one.parent_span_id:
            one.attributes.append(_kv("vigil.max_iterations_hit", True))
    return run.trace_id, body(list(run.spans))
