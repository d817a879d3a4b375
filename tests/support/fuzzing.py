"""Hypothesis strategies for hostile OTLP input, shared by the fuzz tests of every layer.

Each strategy produces what a broken or malicious exporter could send: ids of the wrong
length or all zero, duplicate span ids, parent links that form cycles, timestamps at zero,
in the far past or future or reversed, unknown enum values, invalid UTF-8 in strings,
huge strings, many attributes, deeply nested ``array``/``kvlist`` values, and JSON bodies
with wrong types everywhere. Hypothesis is a test dependency: import this module from
tests and from ``vigil`` tooling that runs fuzzing on demand, never from the data path.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["json_bodies", "otlp_requests", "protobuf_bodies"]

_U64 = 2**64 - 1
_IDS16 = st.one_of(
    st.binary(min_size=16, max_size=16),
    st.just(bytes(16)),
    st.binary(max_size=24),
)
_IDS8 = st.one_of(st.binary(min_size=8, max_size=8), st.just(bytes(8)), st.binary(max_size=12))
_TIMES = st.one_of(
    st.just(0),
    st.integers(min_value=0, max_value=_U64),
    st.integers(min_value=1_600_000_000 * 10**9, max_value=1_900_000_000 * 10**9),
)
_KEYS = st.one_of(
    st.sampled_from(
        [
            "gen_ai.operation.name",
            "gen_ai.agent.name",
            "gen_ai.tool.name",
            "gen_ai.tool.call.id",
            "gen_ai.tool.call.arguments",
            "gen_ai.response.finish_reasons",
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.output_tokens",
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "openinference.span.kind",
            "llm.token_count.prompt",
            "tool.name",
            "input.value",
            "output.value",
            "traceloop.span.kind",
            "ai.response.finishReason",
            "error.type",
            "exception.message",
            "vigil.max_iterations",
            "vigil.optimal_steps",
            "vigil.safety_blocked",
        ]
    ),
    st.text(max_size=40),
)
_SPAN_NAMES = st.one_of(
    st.sampled_from(
        ["invoke_agent bot", "chat gpt-4o", "execute_tool search", "LangGraph", "agent", "turn", "ai.generateText"]
    ),
    st.text(max_size=60),
)


def _any_value(depth: int) -> st.SearchStrategy[AnyValue]:
    """An ``AnyValue`` of every kind, nesting arrays and kvlists up to ``depth`` levels."""
    scalars: list[st.SearchStrategy[AnyValue]] = [
        st.text(max_size=200).map(lambda s: AnyValue(string_value=s)),
        st.booleans().map(lambda b: AnyValue(bool_value=b)),
        st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda i: AnyValue(int_value=i)),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: AnyValue(double_value=f)),
        st.binary(max_size=64).map(lambda b: AnyValue(bytes_value=b)),
        st.just(AnyValue()),
        st.sampled_from(['{"a": 1}', "[", '[{"role": "user", "content": "hi"}]', "null", "\x00"]).map(
            lambda s: AnyValue(string_value=s)
        ),
    ]
    if depth <= 0:
        return st.one_of(*scalars)
    inner = _any_value(depth - 1)
    return st.one_of(
        *scalars,
        st.lists(inner, max_size=4).map(_array),
        st.lists(st.tuples(_KEYS, inner), max_size=4).map(_kvlist),
    )


def _array(values: list[AnyValue]) -> AnyValue:
    out = AnyValue()
    out.array_value.values.extend(values)
    return out


def _kvlist(pairs: list[tuple[str, AnyValue]]) -> AnyValue:
    out = AnyValue()
    for key, value in pairs:
        kv = out.kvlist_value.values.add(key=key)
        kv.value.CopyFrom(value)
    return out


def _nest(target: AnyValue, depth: int) -> None:
    """Fill ``target`` with an array nested ``depth`` levels deep, built in place."""
    for _ in range(depth):
        target = target.array_value.values.add()
    target.string_value = "bottom"


@st.composite
def otlp_requests(draw: st.DrawFn, max_spans: int = 12, max_depth: int = 40) -> ExportTraceServiceRequest:
    """A hostile ``ExportTraceServiceRequest``: mostly plausible agent spans, some broken.

    Spans of one request share a small pool of trace and span ids, so duplicates and parent
    cycles (a span's parent is its own descendant, or itself) are common. Attribute values
    nest up to ``max_depth`` levels: the protobuf runtime refuses to parse a message nested
    deeper than 100 messages (an array level is two: about 47 levels), so a deeper body is
    rejected as a whole (tested separately).
    """
    request = ExportTraceServiceRequest()
    trace_ids = draw(st.lists(_IDS16, min_size=1, max_size=3))
    span_ids = draw(st.lists(_IDS8, min_size=1, max_size=max_spans))
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        rs = request.resource_spans.add()
        for key, value in draw(st.lists(st.tuples(_KEYS, _any_value(1)), max_size=3)):
            rs.resource.attributes.add(key=key).value.CopyFrom(value)
        ss = rs.scope_spans.add()
        ss.scope.name = draw(st.text(max_size=30))
        for _ in range(draw(st.integers(min_value=0, max_value=max_spans))):
            sp = ss.spans.add()
            sp.trace_id = draw(st.sampled_from(trace_ids))
            sp.span_id = draw(st.sampled_from(span_ids))
            if draw(st.booleans()):
                sp.parent_span_id = draw(st.one_of(st.sampled_from(span_ids), _IDS8))
            sp.name = draw(_SPAN_NAMES)
            sp.kind = draw(st.integers(min_value=0, max_value=9))
            sp.start_time_unix_nano = draw(_TIMES)
            sp.end_time_unix_nano = draw(st.one_of(_TIMES, st.just(min(_U64, sp.start_time_unix_nano + 10**6))))
            sp.status.code = draw(st.integers(min_value=0, max_value=5))
            sp.status.message = draw(st.text(max_size=40))
            for key, value in draw(st.lists(st.tuples(_KEYS, _any_value(2)), max_size=8)):
                sp.attributes.add(key=key).value.CopyFrom(value)
            if draw(st.integers(min_value=0, max_value=20)) == 0:
                _nest(sp.attributes.add(key="deep").value, draw(st.integers(min_value=30, max_value=max_depth)))
            if draw(st.integers(min_value=0, max_value=20)) == 0:
                sp.attributes.add(key="gen_ai.output.messages").value.string_value = "x" * draw(
                    st.integers(min_value=10_000, max_value=200_000)
                )
            for _ in range(draw(st.integers(min_value=0, max_value=2))):
                ev = sp.events.add(name=draw(st.sampled_from(["exception", "gen_ai.choice", "x"])))
                ev.time_unix_nano = draw(_TIMES)
                for key, value in draw(st.lists(st.tuples(_KEYS, _any_value(1)), max_size=3)):
                    ev.attributes.add(key=key).value.CopyFrom(value)
    return request


@st.composite
def protobuf_bodies(draw: st.DrawFn) -> bytes:
    """Bytes a receiver may get as ``application/x-protobuf``: valid, truncated, corrupted or random."""
    body: bytes = draw(otlp_requests()).SerializeToString()
    mode = draw(st.sampled_from(["valid", "truncated", "flipped", "random", "spliced"]))
    if mode == "truncated" and body:
        return body[: draw(st.integers(min_value=0, max_value=len(body) - 1))]
    if mode == "flipped" and body:
        i = draw(st.integers(min_value=0, max_value=len(body) - 1))
        return body[:i] + bytes([body[i] ^ draw(st.integers(min_value=1, max_value=255))]) + body[i + 1 :]
    if mode == "random":
        return draw(st.binary(max_size=512))
    if mode == "spliced":
        return body + draw(st.binary(max_size=64))
    return body


_JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(["01" * 16, "00" * 16, "01" * 8, "zz", "", "-1", "18446744073709551616"]),
)
_JSON_ANY = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=20,
)


def _json_span(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON span whose every field may have the wrong type."""
    fields: dict[str, st.SearchStrategy[Any]] = {
        "traceId": st.one_of(st.sampled_from(["0123456789abcdef" * 2, "00" * 16, "AB" * 16, "xyz"]), _JSON_ANY),
        "spanId": st.one_of(st.sampled_from(["0123456789abcdef", "00" * 8, "12"]), _JSON_ANY),
        "parentSpanId": st.one_of(st.sampled_from(["0123456789abcdef", ""]), _JSON_ANY),
        "name": st.one_of(_SPAN_NAMES, _JSON_ANY),
        "kind": st.one_of(
            st.integers(min_value=-1, max_value=9), st.sampled_from(["SPAN_KIND_CLIENT", "BOGUS"]), _JSON_ANY
        ),
        "startTimeUnixNano": st.one_of(st.integers(min_value=0, max_value=_U64).map(str), _JSON_ANY),
        "endTimeUnixNano": st.one_of(st.integers(min_value=0, max_value=_U64 + 5).map(str), _JSON_ANY),
        "attributes": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"key": st.one_of(_KEYS, _JSON_ANY)},
                    optional={
                        "value": st.one_of(
                            st.fixed_dictionaries({"stringValue": st.one_of(st.text(max_size=40), _JSON_ANY)}),
                            st.fixed_dictionaries({"intValue": st.one_of(st.integers().map(str), _JSON_ANY)}),
                            st.fixed_dictionaries({"arrayValue": st.fixed_dictionaries({"values": _JSON_ANY})}),
                            st.fixed_dictionaries({"kvlistValue": _JSON_ANY}),
                            _JSON_ANY,
                        )
                    },
                ),
                max_size=5,
            ),
            _JSON_ANY,
        ),
        "status": st.one_of(
            st.fixed_dictionaries({"code": st.one_of(st.integers(min_value=-1, max_value=5), _JSON_ANY)}), _JSON_ANY
        ),
        "events": st.one_of(st.lists(st.fixed_dictionaries({"name": _JSON_ANY, "timeUnixNano": _JSON_ANY})), _JSON_ANY),
    }
    chosen = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=len(fields)))
    return {key: draw(fields[key]) for key in chosen}


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    """Bytes a receiver may get as ``application/json``: shaped like OTLP/JSON, with wrong types."""
    mode = draw(st.sampled_from(["shaped", "shaped", "any", "bytes", "truncated"]))
    if mode == "bytes":
        return draw(st.binary(max_size=256))
    if mode == "any":
        return json.dumps(draw(_JSON_ANY)).encode()
    spans = [_json_span(draw) for _ in range(draw(st.integers(min_value=0, max_value=6)))]
    doc = {"resourceSpans": [{"resource": {"attributes": draw(_JSON_ANY)}, "scopeSpans": [{"spans": spans}]}]}
    body = json.dumps(doc).encode()
    if mode == "truncated" and body:
        return body[: draw(st.integers(min_value=0, max_value=len(body) - 1))]
    if draw(st.integers(min_value=0, max_value=10)) == 0:
        body = body.replace(b'"name"', b'"name\xff\xfe"', 1)
    return body
