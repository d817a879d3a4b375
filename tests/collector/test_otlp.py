"""Tests for collector.otlp: protobuf decoding, validation, splitting by trace, re-encoding."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind as OtelSpanKind
from opentelemetry.trace import Status as OtelStatus
from opentelemetry.trace import StatusCode as OtelStatusCode
from opentelemetry.util.types import AttributeValue

from collector import otlp
from collector.errors import DecodeError
from collector.model import Span, SpanKind, StatusCode, TraceBatch
from collector.otlp import MAX_DEPTH, MAX_ERRORS, decode_protobuf, encode_batch
from tests.support.decoders import compiled_decode

TRACE = bytes(range(1, 17))
SPAN = bytes(range(1, 9))
PARENT = bytes(range(11, 19))
SDK_ATTRIBUTES: dict[str, AttributeValue] = {
    "s": "text",
    "b": True,
    "i": 42,
    "f": 0.5,
    "ss": ["a", "b"],
    "bs": [True],
    "is": [1, 2],
    "fs": [1.5],
}


def _any(value: Any) -> AnyValue:
    """An OTLP AnyValue for a Python value (independent of the code under test)."""
    if value is None:
        return AnyValue()
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, Mapping):
        out = AnyValue()
        out.kvlist_value.values.extend(_kvs(value))
        return out
    out = AnyValue()
    out.array_value.SetInParent()
    out.array_value.values.extend(_any(v) for v in value)
    return out


def _kvs(attrs: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in attrs.items()]


def _request(*spans: dict[str, Any], resource: Mapping[str, Any] | None = None) -> ExportTraceServiceRequest:
    """A one-resource, one-scope request; each dict holds protobuf Span fields."""
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(_kvs(resource or {"service.name": "agent"}))
    ss = rs.scope_spans.add()
    ss.scope.name = "test.scope"
    for overrides in spans:
        fields = {"trace_id": TRACE, "span_id": SPAN, "name": "op", **overrides}
        attrs = fields.pop("attributes", {})
        pb = ss.spans.add(**fields)
        pb.attributes.extend(_kvs(attrs))
    return request


def _decode(*spans: dict[str, Any]) -> Sequence[Span]:
    result = decode_protobuf(_request(*spans).SerializeToString())
    return [s for b in result.batches for s in b.spans]


@pytest.fixture(autouse=True, params=["compiled", "python"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the compiled decoder and with the Python one (memo tests: Python only)."""
    if request.param == "python" or request.node.get_closest_marker("python_decoder"):
        monkeypatch.setattr(otlp, "_fast", None)
        return "python"
    assert otlp.compiled_decoder(), "collector._otlp_fast was not built by the install"
    return str(request.param)


@pytest.fixture
def sdk_spans() -> Iterator[tuple[ReadableSpan, ...]]:
    """Two finished SDK spans (a root and a child with an exception event)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "support-bot", "deployment.environment": "test"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("vigil.tests", "1.0")
    with (
        tracer.start_as_current_span("invoke_agent support", attributes=SDK_ATTRIBUTES),
        tracer.start_as_current_span("execute_tool search", kind=OtelSpanKind.CLIENT) as child,
    ):
        child.add_event("exception", {"exception.type": "ValueError", "exception.message": "boom"})
        child.set_status(OtelStatus(OtelStatusCode.ERROR, "tool failed"))
    yield tuple(exporter.get_finished_spans())
    provider.shutdown()


class TestDecodeProtobuf:
    def test_sdk_spans(self, sdk_spans: tuple[ReadableSpan, ...]) -> None:
        """Spans encoded by the OTel SDK exporter decode with ids, kind, status, attributes and events."""
        child_sdk, root_sdk = sdk_spans
        result = decode_protobuf(encode_spans(sdk_spans).SerializeToString())
        (batch,) = result.batches
        child, root = batch.spans
        assert format(root_sdk.context.trace_id, "032x") == batch.trace_id == root.trace_id
        assert format(root_sdk.context.span_id, "016x") == root.span_id == child.parent_span_id
        assert root.is_root
        assert SDK_ATTRIBUTES == root.attributes
        assert ("execute_tool search", SpanKind.CLIENT, StatusCode.ERROR, "tool failed") == (
            child.name,
            child.kind,
            child.status_code,
            child.status_message,
        )
        assert ("exception", {"exception.type": "ValueError", "exception.message": "boom"}) == (
            child.events[0].name,
            child.events[0].attributes,
        )
        assert child_sdk.events[0].timestamp == child.events[0].time_ns
        assert (root_sdk.start_time, root_sdk.end_time) == (root.start_ns, root.end_ns)
        assert "support-bot" == root.resource["service.name"]
        assert root.resource is child.resource
        assert "vigil.tests" == root.scope
        assert (2, 0, ()) == (result.accepted, result.rejected, result.errors)

    def test_every_attribute_type(self) -> None:
        """Strings, bools, ints, doubles, bytes, arrays, kvlists and empty values become Python values."""
        attrs = {
            "str": "x",
            "empty": "",
            "bool": False,
            "int": -(2**63),
            "double": 1e-3,
            "bytes": b"\x00\xff",
            "array": ["a", 1, [2.5, None]],
            "kvlist": {"k": {"nested": True}, "n": None},
            "unset": None,
        }
        (span,) = _decode({"attributes": attrs})
        assert attrs == span.attributes

    def test_deep_values_are_capped(self) -> None:
        """Arrays nested deeper than MAX_DEPTH are replaced by None instead of recursing."""
        value: Any = "leaf"
        for _ in range(MAX_DEPTH + 5):
            value = [value]
        (span,) = _decode({"attributes": {"deep": value}})
        kept = span.attributes["deep"]
        for _ in range(MAX_DEPTH):
            assert isinstance(kept, list)
            kept = kept[0]
        assert kept is None

    def test_traces_data_bytes(self) -> None:
        """TracesData bytes (the Collector's Kafka payload) decode like a request."""
        data = TracesData()
        data.resource_spans.extend(_request({}).resource_spans)
        assert 1 == decode_protobuf(data.SerializeToString()).accepted

    def test_split_by_trace_in_first_seen_order(self) -> None:
        """Spans are grouped into one batch per trace, in the order traces first appear."""
        other = bytes(range(2, 18))
        spans = [{"trace_id": t, "span_id": bytes([i + 1]) * 8} for i, t in enumerate([other, TRACE, other])]
        result = decode_protobuf(_request(*spans).SerializeToString())
        assert [other.hex(), TRACE.hex()] == [b.trace_id for b in result.batches]
        assert [2, 1] == [len(b.spans) for b in result.batches]
        assert all(b.received_ns > 0 and all(s.trace_id == b.trace_id for s in b.spans) for b in result.batches)

    @pytest.mark.parametrize(
        ("fields", "reason"),
        [
            ({"trace_id": b""}, "invalid trace_id: expected 16 bytes, got 0"),
            ({"trace_id": TRACE[:15]}, "invalid trace_id: expected 16 bytes, got 15"),
            ({"trace_id": bytes(16)}, "invalid trace_id: all zero"),
            ({"span_id": b""}, "invalid span_id: expected 8 bytes, got 0"),
            ({"span_id": SPAN * 2}, "invalid span_id: expected 8 bytes, got 16"),
            ({"span_id": bytes(8)}, "invalid span_id: all zero"),
            ({"parent_span_id": b"\x01" * 5}, "invalid parent_span_id: expected 0 or 8 bytes, got 5"),
        ],
    )
    def test_bad_span_rejected_neighbours_kept(self, fields: dict[str, Any], reason: str) -> None:
        """A span with a bad id is rejected with a reason; the spans around it are kept."""
        good = {"span_id": PARENT}
        result = decode_protobuf(_request(good, {"name": "bad", **fields}, good).SerializeToString())
        assert (2, 1, (reason,)) == (result.accepted, result.rejected, result.errors)

    def test_errors_are_bounded(self) -> None:
        """Many distinct rejection reasons keep at most MAX_ERRORS messages but count every span."""
        bad = [{"trace_id": b"\x01" * n} for n in range(1, 16)]
        result = decode_protobuf(_request(*bad, *bad).SerializeToString())
        assert (30, MAX_ERRORS) == (result.rejected, len(result.errors))

    def test_zero_parent_is_root(self) -> None:
        """An all-zero parent span id means the span is a root."""
        (span,) = _decode({"parent_span_id": bytes(8)})
        assert span.parent_span_id is None

    def test_parent_and_times(self) -> None:
        """Parent ids become lowercase hex and times are kept in nanoseconds."""
        (span,) = _decode({"parent_span_id": PARENT, "start_time_unix_nano": 2**63, "end_time_unix_nano": 2**64 - 1})
        assert (PARENT.hex(), 2**63, 2**64 - 1) == (span.parent_span_id, span.start_ns, span.end_ns)

    def test_unknown_enums_map_to_unspecified(self) -> None:
        """Kind and status values outside the known range become UNSPECIFIED and UNSET."""
        request = _request({})
        pb = request.resource_spans[0].scope_spans[0].spans[0]
        pb.kind = 9
        pb.status.code = 7
        (batch,) = decode_protobuf(request.SerializeToString()).batches
        assert (SpanKind.UNSPECIFIED, StatusCode.UNSET) == (batch.spans[0].kind, batch.spans[0].status_code)

    @pytest.mark.parametrize("body", [b"\xff\xff\xff", b"not a protobuf at all", b"\x0a\x80\x01"])
    def test_garbage_raises(self, body: bytes) -> None:
        """A body that does not parse raises DecodeError with reason 'protobuf'."""
        with pytest.raises(DecodeError) as info:
            decode_protobuf(body)
        assert "protobuf" == info.value.reason

    def test_truncated_raises(self, sdk_spans: tuple[ReadableSpan, ...]) -> None:
        """A truncated request raises DecodeError."""
        body = encode_spans(sdk_spans).SerializeToString()
        with pytest.raises(DecodeError):
            decode_protobuf(body[: len(body) // 2])

    def test_empty_body(self) -> None:
        """An empty body is an empty request."""
        assert () == decode_protobuf(b"").batches


_scalars = st.one_of(
    st.none(),
    st.text(max_size=20),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=20),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


class TestEncodeBatch:
    def test_round_trip_sdk_spans(self, sdk_spans: tuple[ReadableSpan, ...]) -> None:
        """Decoding an encoded batch gives the same spans back."""
        (batch,) = decode_protobuf(encode_spans(sdk_spans).SerializeToString()).batches
        assert batch.spans == decode_protobuf(encode_batch(batch)).batches[0].spans

    @settings(max_examples=60, deadline=None)
    @given(attrs=st.dictionaries(st.text(max_size=10), _values, max_size=6))
    def test_round_trip_any_attributes(self, attrs: dict[str, Any]) -> None:
        """Any attribute value a decoder can produce survives encode then decode."""
        span = Span(TRACE.hex(), SPAN.hex(), PARENT.hex(), "op", attributes=attrs, resource={"r": 1}, scope="s")
        (batch,) = decode_protobuf(encode_batch(TraceBatch(span.trace_id, (span,)))).batches
        assert (span,) == batch.spans

    def test_groups_resources_and_scopes(self) -> None:
        """One ResourceSpans per distinct resource and one ScopeSpans per scope name."""
        res_a, res_b = {"service.name": "a"}, {"service.name": "b"}
        spans = tuple(
            Span(TRACE.hex(), f"{i + 1:016x}", None, f"s{i}", resource=res, scope=scope)
            for i, (res, scope) in enumerate([(res_a, "x"), (dict(res_a), "y"), (res_b, "x"), (res_a, "x")])
        )
        request = ExportTraceServiceRequest.FromString(encode_batch(TraceBatch(TRACE.hex(), spans)))
        shape = [[(ss.scope.name, len(ss.spans)) for ss in rs.scope_spans] for rs in request.resource_spans]
        assert [[("x", 2), ("y", 1)], [("x", 1)]] == shape


def _official(body: bytes) -> list[dict[str, Any]]:
    """Span attributes of a body parsed with the official OTLP classes (independent of the memo)."""
    request = ExportTraceServiceRequest.FromString(body)
    return [
        {kv.key: otlp._pb_value(kv.value, 0) for kv in span.attributes}
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


class TestAttributeMemo:
    """Attribute pairs are parsed from raw bytes, by hand when simple, and memoised."""

    @settings(max_examples=80, deadline=None)
    @given(attrs=st.dictionaries(st.text(max_size=150), _values, max_size=6))
    def test_same_values_as_the_official_classes(self, attrs: dict[str, Any]) -> None:
        """Hand parser, generic parser and memo hits all give what the official classes give."""
        body = _request({"attributes": attrs}).SerializeToString()
        for _ in range(2):  # the second decode is served from the memo
            (span,) = [s for b in decode_protobuf(body).batches for s in b.spans]
            assert _official(body) == [dict(span.attributes)]
            assert list(attrs) == list(span.attributes)  # wire order kept

    def test_arrays_are_fresh_lists(self) -> None:
        """A memoised array value is a new list for every span: mutating one leaks nowhere."""
        body = _request({"attributes": {"reasons": ["stop"]}}).SerializeToString()
        (first,) = _decode({"attributes": {"reasons": ["stop"]}})
        value = first.attributes["reasons"]
        assert isinstance(value, list)
        value.append("mutated")
        (again,) = [s for b in decode_protobuf(body).batches for s in b.spans]
        assert ["stop"] == again.attributes["reasons"]

    @pytest.mark.python_decoder
    def test_memo_is_bounded(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The memo never holds more than MEMO_MAX_PAIRS entries, and long pairs are never kept."""
        monkeypatch.setattr(otlp, "MEMO_MAX_PAIRS", 10)
        memos = (otlp._PAIRS, otlp._ARRAYS, otlp._SEEN)
        for memo in memos:
            memo.clear()
        for i in range(25):
            for _ in range(2):  # a pair is memoised on its second sighting
                _decode({"attributes": {"n": i, "a": [i], "long": "x" * (otlp.MEMO_MAX_BYTES + i)}})
            assert all(len(memo) <= 10 for memo in memos)
        assert all(not any(b"xxxx" in raw for raw in memo) for memo in memos)
        assert otlp._PAIRS
        assert otlp._ARRAYS

    @pytest.mark.python_decoder
    def test_unique_values_do_not_enter_the_memo(self) -> None:
        """A pair seen once (an id) stays out of the memo; a repeated one gets in."""
        otlp._PAIRS.clear()
        otlp._SEEN.clear()
        _decode({"attributes": {"id": "call_1"}})
        assert ("id", "call_1") not in otlp._PAIRS.values()
        _decode({"attributes": {"id": "call_1"}})
        assert ("id", "call_1") in otlp._PAIRS.values()

    @pytest.mark.parametrize("tag", [b"\x0a", b"\x3a"])
    def test_bad_utf8_rejects_the_span(self, tag: bytes) -> None:
        """Invalid UTF-8 in an attribute string rejects that span, with the reason (OTLP partial success)."""
        body = _request({"attributes": {"k": b"\xff\xfe"}}).SerializeToString()
        body = body.replace(b"\x3a\x02\xff\xfe", tag + b"\x02\xff\xfe")
        result = decode_protobuf(body)
        if tag == b"\x3a":  # bytes values may hold anything
            assert [{"k": b"\xff\xfe"}] == [dict(s.attributes) for b in result.batches for s in b.spans]
            return
        assert (0, 1) == (len(result.batches), result.rejected)
        assert "not valid UTF-8" in result.errors[0]


def _encodes_back(batches: Sequence[TraceBatch]) -> None:
    for batch in batches:
        assert batch.spans == decode_protobuf(encode_batch(batch)).batches[0].spans


class TestRobustness:
    @settings(max_examples=200, deadline=None)
    @given(data=st.data())
    def test_protobuf_mutations_raise_only_decode_error(self, data: st.DataObject) -> None:
        """A valid body with random bytes overwritten either decodes or raises DecodeError."""
        body = bytearray(
            _request({"attributes": {"a": [1, "x"], "b": {"c": b"d"}}}, {"span_id": PARENT}).SerializeToString()
        )
        for _ in range(data.draw(st.integers(1, 4))):
            body[data.draw(st.integers(0, len(body) - 1))] = data.draw(st.integers(0, 255))
        try:
            result = decode_protobuf(bytes(body))
        except DecodeError:
            return
        _encodes_back(result.batches)


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    size, out = len(payload), bytearray([field << 3 | 2])
    while True:
        out.append(size & 0x7F | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            return bytes(out) + payload


def _body_with_raw_attribute(*raws: bytes) -> bytes:
    """A one-span request whose attributes are the given serialized ``KeyValue`` bytes, as sent."""
    from collector._otlp_wire import WireRequest

    request = WireRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = TRACE, SPAN, "s"
    span.attributes.extend(raws)
    return bytes(request.SerializeToString())


def _nested(levels: int) -> bytes:
    """A ``KeyValue`` whose value nests ``levels`` kvlists (past the protobuf runtime's ~33 at 40)."""
    value = _ld(1, b"x")
    for _ in range(levels):
        value = _ld(6, _ld(1, _ld(1, b"k") + _ld(2, value)))
    return _ld(1, b"deep") + _ld(2, value)


class TestHostileAttributes:
    """The Python decoder's wire reader (for nesting too deep for protobuf) cannot be made to walk junk."""

    @pytest.mark.python_decoder
    def test_a_malformed_pair_is_rejected_without_walking_it(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """2-byte unknown fields ending in a cut-off tag: protobuf refuses the pair as corrupt, and the
        span is rejected at once — the field-by-field Python walk (seconds of CPU for a 20 MiB body)
        is never started."""
        walked: list[int] = []
        real = otlp._wire_pair
        monkeypatch.setattr(otlp, "_wire_pair", lambda *a: walked.append(1) or real(*a))
        raw = _ld(1, b"a") + b"\x78\x00" * 50_000 + b"\x80"
        result = decode_protobuf(_body_with_raw_attribute(raw))
        assert (0, 1, []) == (len(result.batches), result.rejected, walked)
        assert "invalid attributes" in result.errors[0]

    @pytest.mark.python_decoder
    def test_nesting_too_deep_for_protobuf_is_still_read_and_cut(self) -> None:
        (span,) = [s for b in decode_protobuf(_body_with_raw_attribute(_nested(40))).batches for s in b.spans]
        value = span.attributes["deep"]
        for _ in range(MAX_DEPTH):
            assert isinstance(value, dict)
            value = value["k"]
        assert value is None

    @pytest.mark.python_decoder
    def test_a_deep_pair_with_an_unknown_field_is_malformed(self) -> None:
        """Deep enough for the wire reader, padded with 2-byte unknown fields: rejected at the first."""
        result = decode_protobuf(_body_with_raw_attribute(_nested(40) + b"\x78\x00" * 50_000))
        assert (0, 1) == (len(result.batches), result.rejected)
        assert "unknown field 15" in result.errors[0]

    @pytest.mark.python_decoder
    def test_a_deep_pair_padded_with_repeated_fields_is_over_the_walks_budget(self) -> None:
        """Deep, padded with 2-byte copies of its own key field (legal protobuf, the last one wins): more
        fields than one per WIRE_BYTES_PER_FIELD bytes, rejected as malformed rather than walked to the end."""
        result = decode_protobuf(_body_with_raw_attribute(_nested(40) + b"\x0a\x00" * 50_000))
        assert (0, 1) == (len(result.batches), result.rejected)
        assert "too many wire fields" in result.errors[0]


def _dense_pair(members: int, *, unusual: bool = False) -> bytes:
    """A ``KeyValue`` holding an array of ``members`` ints (``int_value: 1``); ``unusual``: plus one member
    that gives its oneof twice (legal protobuf, the last wins), which only the Python decoder reads."""
    values = _ld(1, b"\x18\x01") * members + (_ld(1, b"\x18\x01\x18\x02") if unusual else b"")
    return _ld(1, b"dense") + _ld(2, _ld(5, values))


def _two_spans(first: bytes, second: bytes) -> bytes:
    from collector._otlp_wire import WireRequest

    request = WireRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for i, raw in enumerate((first, second), 1):
        span = spans.add()
        span.trace_id, span.span_id, span.name = TRACE, i.to_bytes(8, "big"), "s"
        span.attributes.append(raw)
    return bytes(request.SerializeToString())


class TestFallbackPairs:
    """A body the compiled decoder hands back is decoded in Python, but each attribute pair the compiled
    reader can read is read in C (otlp._fallback_pair): one unusual pair no longer makes a whole body of
    ordinary pairs cost a Python walk (a 20 MiB body: 3.9 s of CPU before, 0.25 s after)."""

    BAD_KEY = _ld(1, b"\xff") + _ld(2, _ld(1, b"v"))

    def test_only_the_pair_the_compiled_reader_refuses_is_read_in_python(self, monkeypatch: pytest.MonkeyPatch) -> None:
        assert otlp._pair is not None, "collector._otlp_fast was not built by the install"
        body = _two_spans(_dense_pair(500), self.BAD_KEY)
        walked: list[bytes] = []
        real = otlp._raw_pair
        monkeypatch.setattr(otlp, "_raw_pair", lambda raw, *a: walked.append(raw) or real(raw, *a))
        fallback = otlp._decode_protobuf_python(body, otlp._fallback_pair)
        assert [self.BAD_KEY] == walked
        monkeypatch.setattr(otlp, "_raw_pair", real)
        reference = otlp._decode_protobuf_python(body)
        assert repr(fallback.batches[0].spans) == repr(reference.batches[0].spans)
        assert (1, 1) == (fallback.rejected, reference.rejected)
        assert [1] * 500 == fallback.batches[0].spans[0].attributes["dense"]

    def test_the_production_path_hands_such_a_body_back_and_gives_the_reference_result(self) -> None:
        body = _two_spans(_dense_pair(300, unusual=True), self.BAD_KEY)
        assert compiled_decode(body, otlp._load_compiled()) is None  # (the compiled decoder hands it back)
        production, reference = decode_protobuf(body), otlp._decode_protobuf_python(body)
        assert repr(production.batches[0].spans) == repr(reference.batches[0].spans)
        assert (production.rejected, production.errors) == (reference.rejected, reference.errors)
        assert [1] * 300 + [2] == production.batches[0].spans[0].attributes["dense"]

    def test_a_pair_only_python_reads_is_refused_past_its_value_budget(self) -> None:
        """An unusual pair of 4-byte values is over one value per FALLBACK_BYTES_PER_VALUE bytes: its span is
        rejected as malformed (counted), not walked value by value; the pure reference still reads it."""
        members = otlp.FALLBACK_VALUES_MIN + 10
        body = _two_spans(_dense_pair(members, unusual=True), self.BAD_KEY)
        fallback = otlp._decode_protobuf_python(body, otlp._fallback_pair)
        assert (0, 2) == (len(fallback.batches), fallback.rejected)
        assert any("more than 4096 values for its size" in e for e in fallback.errors)
        reference = otlp._decode_protobuf_python(body)
        assert members + 1 == len(reference.batches[0].spans[0].attributes["dense"])

    def test_values_cut_by_the_compiled_reader_are_counted(self) -> None:
        long = "x" * (otlp.MAX_ATTRIBUTE_BYTES + 10)
        pair = _ld(1, b"long") + _ld(2, _ld(1, long.encode()))
        body = _two_spans(pair, self.BAD_KEY)
        fallback = otlp._decode_protobuf_python(body, otlp._fallback_pair)
        assert (1, otlp.MAX_ATTRIBUTE_BYTES) == (
            fallback.truncated,
            len(fallback.batches[0].spans[0].attributes["long"]),
        )
        assert fallback.truncated == otlp._decode_protobuf_python(body).truncated
