"""Tests for collector._otlp_json (via collector.otlp.decode_json): OTLP/JSON quirks and robustness."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as OtelSpanKind
from opentelemetry.trace import Status as OtelStatus
from opentelemetry.trace import StatusCode as OtelStatusCode

from collector.errors import DecodeError
from collector.model import Span, SpanKind, StatusCode, TraceBatch
from collector.otlp import decode_json, decode_protobuf, encode_batch

TRACE = bytes(range(1, 17))
SPAN = bytes(range(1, 9))
PARENT = bytes(range(11, 19))


def _sdk_request() -> Any:
    """An ExportTraceServiceRequest encoded by the OTel SDK from two real spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "support-bot"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vigil.tests", "1.0")
    with (
        tracer.start_as_current_span("invoke_agent support", attributes={"i": 42, "f": 0.5, "ss": ["a"]}),
        tracer.start_as_current_span("execute_tool search", kind=OtelSpanKind.CLIENT) as child,
    ):
        child.add_event("exception", {"exception.type": "ValueError"})
        child.set_status(OtelStatus(OtelStatusCode.ERROR, "tool failed"))
    provider.shutdown()
    return encode_spans(exporter.get_finished_spans())


def _encodes_back(batches: Sequence[TraceBatch]) -> None:
    for batch in batches:
        assert batch.spans == decode_protobuf(encode_batch(batch)).batches[0].spans


def _json_span(**fields: Any) -> dict[str, Any]:
    return {"traceId": TRACE.hex().upper(), "spanId": SPAN.hex(), "name": "op", **fields}


def _json_body(*spans: object, resource: list[dict[str, Any]] | None = None) -> bytes:
    resource = resource if resource is not None else [{"key": "service.name", "value": {"stringValue": "agent"}}]
    scope_spans = [{"scope": {"name": "s"}, "spans": spans}]
    doc = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": scope_spans}]}
    return json.dumps(doc).encode()


def _json_spans(*spans: dict[str, Any]) -> list[Span]:
    return [s for b in decode_json(_json_body(*spans)).batches for s in b.spans]


class TestDecodeJson:
    def test_otlp_json_quirks(self) -> None:
        """Uppercase hex ids, string int64, integer enums and unknown fields are handled."""
        span = _json_span(
            parentSpanId=PARENT.hex().upper(),
            kind=3,
            startTimeUnixNano="1700000000000000001",
            endTimeUnixNano=1700000000000000002,
            status={"code": 2, "message": "bad"},
            flags=257,
            droppedAttributesCount=0,
            someFutureField={"x": 1},
            events=[{"timeUnixNano": "5", "name": "exception", "attributes": [], "unknown": 1}],
        )
        (decoded,) = _json_spans(span)
        assert (TRACE.hex(), SPAN.hex(), PARENT.hex()) == (decoded.trace_id, decoded.span_id, decoded.parent_span_id)
        assert (SpanKind.CLIENT, StatusCode.ERROR, "bad") == (decoded.kind, decoded.status_code, decoded.status_message)
        assert (1700000000000000001, 1700000000000000002) == (decoded.start_ns, decoded.end_ns)
        assert ("exception", 5) == (decoded.events[0].name, decoded.events[0].time_ns)
        assert ({"service.name": "agent"}, "s") == (decoded.resource, decoded.scope)

    def test_every_attribute_type(self) -> None:
        """Each AnyValue form becomes its Python value; bytesValue is base64."""
        attrs = [
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "b", "value": {"boolValue": True}},
            {"key": "i", "value": {"intValue": "-9223372036854775808"}},
            {"key": "n", "value": {"intValue": 7}},
            {"key": "d", "value": {"doubleValue": 2.5}},
            {"key": "nan", "value": {"doubleValue": "Infinity"}},
            {"key": "raw", "value": {"bytesValue": base64.b64encode(b"\x00\xfe").decode()}},
            {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "a"}, {"intValue": "1"}, {}]}}},
            {"key": "kv", "value": {"kvlistValue": {"values": [{"key": "k", "value": {"boolValue": False}}]}}},
            {"key": "empty", "value": {}},
            {"key": "missing"},
            {"key": "future", "value": {"someNewValue": 1}},
        ]
        (span,) = _json_spans(_json_span(attributes=attrs))
        expected = {
            "s": "x",
            "b": True,
            "i": -(2**63),
            "n": 7,
            "d": 2.5,
            "nan": math.inf,
            "raw": b"\x00\xfe",
            "a": ["a", 1, None],
            "kv": {"k": False},
            "empty": None,
            "missing": None,
            "future": None,
        }
        assert expected == span.attributes

    def test_absent_fields_are_defaults(self) -> None:
        """A minimal span gets proto3 defaults and is a root; empty parentSpanId is a root too."""
        minimal, empty_parent = _json_spans({"traceId": TRACE.hex(), "spanId": SPAN.hex()}, _json_span(parentSpanId=""))
        assert ("", SpanKind.UNSPECIFIED, 0, StatusCode.UNSET, {}, ()) == (
            minimal.name,
            minimal.kind,
            minimal.start_ns,
            minimal.status_code,
            minimal.attributes,
            minimal.events,
        )
        assert minimal.is_root
        assert empty_parent.is_root

    def test_matches_protobuf_decoding(self) -> None:
        """The JSON form of a request (hex ids, integer enums) decodes to the same spans as its protobuf form."""
        request = _sdk_request()
        doc = json_format.MessageToDict(request, use_integers_for_enums=True)
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in sp:
                            sp[key] = base64.b64decode(sp[key]).hex().upper()
        from_json = decode_json(json.dumps(doc).encode()).batches
        from_proto = decode_protobuf(request.SerializeToString()).batches
        assert [b.spans for b in from_proto] == [b.spans for b in from_json]

    def test_enum_edge_cases(self) -> None:
        """Enum names are tolerated and unknown values map to UNSPECIFIED/UNSET without failing."""
        named, unknown = _json_spans(
            _json_span(kind="SPAN_KIND_SERVER", status={"code": "STATUS_CODE_OK"}),
            _json_span(kind=99, status={"code": "weird"}),
        )
        assert (SpanKind.SERVER, StatusCode.OK) == (named.kind, named.status_code)
        assert (SpanKind.UNSPECIFIED, StatusCode.UNSET) == (unknown.kind, unknown.status_code)

    def test_unhashable_enum_values(self) -> None:
        """A list or object where an enum belongs maps to the default instead of crashing the decoder."""
        listed, nested = _json_spans(
            _json_span(kind=[], status={"code": [1]}),
            _json_span(kind={"a": 1}, status={"code": {}}),
        )
        assert (SpanKind.UNSPECIFIED, StatusCode.UNSET) == (listed.kind, listed.status_code)
        assert (SpanKind.UNSPECIFIED, StatusCode.UNSET) == (nested.kind, nested.status_code)

    @pytest.mark.parametrize(
        "bad",
        [
            {"traceId": "zz" * 16},
            {"traceId": TRACE.hex()[:-2]},
            {"traceId": "0" * 32},
            {"spanId": None},
            {"spanId": "00" * 8},
            {"spanId": 12},
            {"parentSpanId": "abc"},
            {"attributes": [{"key": "i", "value": {"intValue": "abc"}}]},
            {"attributes": [{"value": {"stringValue": "no key"}}]},
            {"attributes": {"not": "a list"}},
            {"startTimeUnixNano": "soon"},
            {"events": [17]},
        ],
    )
    def test_bad_span_rejected_neighbours_kept(self, bad: dict[str, Any]) -> None:
        """A malformed span is rejected with a reason; its neighbours are kept."""
        result = decode_json(_json_body(_json_span(), _json_span(**bad), "not an object", _json_span()))
        assert (2, 2) == (result.accepted, result.rejected)
        assert result.errors

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            (b"{not json", "invalid JSON body"),
            (b"\xff\xfe\x00", "invalid JSON body"),
            (b"[]", "must be an object"),
            (b'{"resourceSpans": {}}', "resourceSpans must be a list"),
            (b'{"resourceSpans": [{"scopeSpans": [{"spans": 3}]}]}', "spans must be a list"),
            (b"[" * 100_000, "invalid JSON body"),
        ],
    )
    def test_wrong_shape_raises(self, body: bytes, message: str) -> None:
        """Invalid JSON or a wrong structure above the spans raises DecodeError('json') with a clear message."""
        with pytest.raises(DecodeError, match=message) as info:
            decode_json(body)
        assert "json" == info.value.reason

    def test_empty_request(self) -> None:
        """An empty object is a request without spans."""
        assert () == decode_json(b"{}").batches


_OTLP_KEYS = st.sampled_from(
    [
        "resourceSpans",
        "scopeSpans",
        "spans",
        "resource",
        "scope",
        "attributes",
        "key",
        "value",
        "stringValue",
        "intValue",
        "doubleValue",
        "boolValue",
        "bytesValue",
        "arrayValue",
        "kvlistValue",
        "values",
        "traceId",
        "spanId",
        "parentSpanId",
        "name",
        "kind",
        "status",
        "code",
        "message",
        "events",
        "timeUnixNano",
        "startTimeUnixNano",
        "endTimeUnixNano",
    ]
)
_json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_OTLP_KEYS | st.text(max_size=4), inner, max_size=4),
    max_leaves=25,
)
_ids = st.sampled_from([TRACE.hex(), SPAN.hex(), PARENT.hex().upper(), "", "0" * 32, "zz", None, 7])
_json_spans_st = st.fixed_dictionaries(
    {"traceId": _ids, "spanId": _ids},
    optional={
        "parentSpanId": _ids,
        "name": _json_junk,
        "kind": _json_junk,
        "status": _json_junk,
        "startTimeUnixNano": _json_junk,
        "attributes": st.lists(st.fixed_dictionaries({"key": st.text(max_size=3), "value": _json_junk}), max_size=3),
        "events": _json_junk,
    },
)


class TestJsonRobustness:
    @settings(max_examples=150, deadline=None)
    @given(doc=_json_junk | st.fixed_dictionaries({"resourceSpans": st.lists(_json_junk, max_size=3)}))
    def test_json_junk_raises_only_decode_error(self, doc: Any) -> None:
        """Arbitrary JSON either decodes or raises DecodeError, never anything else."""
        try:
            result = decode_json(json.dumps(doc).encode())
        except DecodeError:
            return
        _encodes_back(result.batches)

    @settings(max_examples=150, deadline=None)
    @given(spans=st.lists(_json_spans_st, max_size=4))
    def test_json_spans_reject_or_round_trip(self, spans: list[dict[str, Any]]) -> None:
        """Every span of a well-formed envelope is accepted or rejected, and accepted ones encode back."""
        result = decode_json(_json_body(*spans))
        assert len(spans) == result.accepted + result.rejected
        _encodes_back(result.batches)

    def test_json_surrogates(self) -> None:
        """Lone surrogate escapes are replaced (protobuf strings must be UTF-8); raw ones are a DecodeError."""
        (span,) = _json_spans(_json_span(name="\ud800x\U0001f600"))
        assert "?x\U0001f600" == span.name
        _encodes_back(decode_json(_json_body(_json_span(name="\ud800"))).batches)
        with pytest.raises(DecodeError):
            decode_json(b'{"resourceSpans": [], "x": "\xed\xa0\x80"}')


@pytest.mark.parametrize("kind", [[], {}, [1], None, True, "BOGUS"])
def test_enum_of_the_wrong_type_falls_back_to_default(kind: object) -> None:
    """A kind that is a list or object (unhashable) is the default kind, not a crash."""
    body = json.dumps(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "01" * 16, "spanId": "02" * 8, "kind": kind}]}]}]}
    ).encode()
    (batch,) = decode_json(body).batches
    assert SpanKind.UNSPECIFIED == batch.spans[0].kind
