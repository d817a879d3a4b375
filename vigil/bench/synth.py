"""Synthetic OTel GenAI agent traces as OTLP protobuf bodies, for ``vigil bench``.

Runs look like real agent runs: an ``invoke_agent`` root, 5–10 ``chat`` LLM calls with
token usage and finish reasons, one or two tool calls (``execute_tool``) with arguments
between consecutive LLM calls, occasional tool errors, loops, iteration-cap hits and
content filters — 10–29 spans per run (16.6 on average), the 10–30-span agent runs the
performance target of issue 2 is stated for.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

AGENTS = ("support", "research", "billing", "triage")
TOOLS = ("search", "lookup_order", "refund", "calculator", "fetch_url")


@dataclass(frozen=True, slots=True)
class SynthRun:
    """One generated run: its trace id and the spans (protobuf) it consists of."""

    trace_id: str
    spans: tuple[Span, ...]


def _kv(key: str, value: str | int | bool | list[str]) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, list):
        arr = AnyValue()
        arr.array_value.values.extend(AnyValue(string_value=v) for v in value)
        return KeyValue(key=key, value=arr)
    return KeyValue(key=key, value=AnyValue(string_value=value))


_FILLER = "Please look up the order and tell me where my parcel is, and whether the refund was issued. " * 40


def _messages(rng: random.Random, content_bytes: int) -> str:
    """Captured chat messages (``gen_ai.input.messages``) of ``content_bytes`` to twice that, each one distinct."""
    size = rng.randint(content_bytes, 2 * content_bytes)
    tag = f"{rng.getrandbits(64):016x} "
    text = (tag + _FILLER * (1 + size // len(_FILLER)))[: max(0, size - 60)]
    return '[{"role": "user", "parts": [{"type": "text", "content": "' + text + '"}]}]'


def make_run(
    rng: random.Random,
    end_ns: int | None = None,
    answer: str | None = None,
    content_bytes: int = 0,
    conversation: str | None = None,
) -> SynthRun:
    """Generate one agent run whose root ends at ``end_ns`` (default: now).

    With ``answer`` the root span also carries the captured final answer (``output.value``),
    followed by a per-run number so that no two answers are the same (what an LLM judge reads).
    With ``content_bytes`` every LLM span carries captured messages (``gen_ai.input.messages``) of
    ``content_bytes`` to twice that (content capture on); without it the random sequence is the same
    as before the option existed. ``conversation`` is the root's ``gen_ai.conversation.id`` (runs sharing
    one are turns of one session); without it each run gets its own.
    """
    trace_id = rng.randbytes(16)
    root_id = rng.randbytes(8)
    end = end_ns or time.time_ns()
    agent = rng.choice(AGENTS)
    steps = rng.randint(5, 10)  # 2*steps .. 3*steps-1 spans: 10..29
    capped = rng.random() < 0.03
    filtered = rng.random() < 0.02
    t = end - (steps * 3 + 1) * 100_000_000
    spans: list[Span] = []
    for i in range(steps):
        llm_id = rng.randbytes(8)
        reason = "content_filter" if filtered and i == steps - 1 else ("stop" if i == steps - 1 else "tool_calls")
        spans.append(
            Span(
                trace_id=trace_id, span_id=llm_id, parent_span_id=root_id, name="chat gpt-4o-mini",
                kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=t, end_time_unix_nano=t + 80_000_000,
                attributes=[
                    _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.system", "openai"),
                    _kv("gen_ai.request.model", "gpt-4o-mini"), _kv("gen_ai.response.model", "gpt-4o-mini-2024"),
                    _kv("gen_ai.usage.input_tokens", rng.randint(200, 2000)),
                    _kv("gen_ai.usage.output_tokens", rng.randint(20, 300)),
                    _kv("gen_ai.response.finish_reasons", [reason]), _kv("server.address", "api.openai.com"),
                ] + ([_kv("gen_ai.input.messages", _messages(rng, content_bytes))] if content_bytes else []),
            )
        )  # fmt: skip
        t += 100_000_000
        if i == steps - 1:
            break
        for _ in range(rng.choice((1, 1, 1, 2))):
            tool = rng.choice(TOOLS)
            failed = rng.random() < 0.05
            spans.append(
                Span(
                    trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=root_id, name=f"execute_tool {tool}",
                    kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=t, end_time_unix_nano=t + 50_000_000,
                    attributes=[
                        _kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", tool),
                        _kv("gen_ai.tool.call.id", f"call_{rng.getrandbits(48):x}"),
                        _kv("gen_ai.tool.call.arguments", f'{{"q": "item {rng.randint(1, 3)}"}}'),
                    ] + ([_kv("error.type", "TimeoutError")] if failed else []),
                    status=Status(code=Status.STATUS_CODE_ERROR, message="timed out") if failed else None,
                )
            )  # fmt: skip
        t += 100_000_000
    own = f"conv-{rng.getrandbits(32):x}"  # drawn either way: the rest of the random sequence is the same
    root_attrs = [
        _kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", agent),
        _kv("gen_ai.conversation.id", conversation or own), _kv("vigil.optimal_steps", 3),
    ]  # fmt: skip
    if capped:
        root_attrs.append(_kv("vigil.max_iterations_hit", True))
    if answer is not None:
        root_attrs.append(_kv("output.value", f"{answer} #{rng.getrandbits(32):x}"))
    spans.append(
        Span(
            trace_id=trace_id, span_id=root_id, name=f"invoke_agent {agent}", kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=end - (steps * 3 + 1) * 100_000_000, end_time_unix_nano=end, attributes=root_attrs,
        )
    )  # fmt: skip
    return SynthRun(trace_id.hex(), tuple(spans))


def body(spans: list[Span], service: str = "bench-agent") -> bytes:
    """Serialize spans as one ``ExportTraceServiceRequest`` from one resource."""
    rs = ResourceSpans()
    rs.resource.attributes.append(_kv("service.name", service))
    scope = rs.scope_spans.add()
    scope.scope.name = "vigil.bench"
    scope.spans.extend(spans)
    data: bytes = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    return data


def bodies(
    n_runs: int, spans_per_body: int = 512, seed: int = 7, answer: str | None = None
) -> Iterator[tuple[bytes, int, int]]:
    """Yield ``(body, spans, runs_completed)`` batches like an SDK's BatchSpanProcessor would send.

    Spans of a run may be split across bodies; a run's root is always its last span. With
    ``answer`` every run carries a captured final answer (see :func:`make_run`).
    """
    rng = random.Random(seed or int.from_bytes(os.urandom(4), "big"))
    batch: list[Span] = []
    runs = 0
    for _ in range(n_runs):
        batch.extend(make_run(rng, answer=answer).spans)
        runs += 1
        if len(batch) >= spans_per_body:
            yield body(batch), len(batch), runs
            batch, runs = [], 0
    if batch:
        yield body(batch), len(batch), runs
