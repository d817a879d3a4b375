"""The compiled OTLP decoder (collector/_otlp_fast.c) against the Python decoder, the reference.

Properties: on any body the compiled decoder either hands the body back (returns -1) or
produces exactly what the Python decoder produces (same spans, same order, same rejections);
on ordinary traffic (synthetic agent runs, real SDK exports, real instrumentors' traces) it
never hands a body back, so the fast path is the one production traffic takes.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import HealthCheck, given, settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from collector import otlp
from collector.errors import DecodeError
from collector.model import DecodeResult
from collector.otlp import decode_json, encode_batch
from tests.support.decoders import assert_same as _same
from tests.support.decoders import compiled_decode as _compiled
from tests.support.decoders import python_decode as _python
from tests.support.fuzzing import otlp_requests, protobuf_bodies
from vigil.bench.synth import bodies

FIXTURES = Path(__file__).parents[1] / "fixtures" / "traces"
EXAMPLES = int(os.environ.get("VIGIL_FUZZ_EXAMPLES", "80"))  # raised on demand, as in test_fuzz.py
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def test_installed() -> None:
    """The install built the extension (a C compiler is part of the test machine)."""
    assert otlp.compiled_decoder()


@FUZZ
@given(otlp_requests())
def test_hostile_requests_same_as_python(request: ExportTraceServiceRequest) -> None:
    """Bad ids, huge strings, deep nesting, odd timestamps: same result, or handed back."""
    body = request.SerializeToString()
    compiled = _compiled(body)
    if compiled is not None:
        _same(compiled, _python(body))


@FUZZ
@given(protobuf_bodies())
def test_corrupt_bodies_same_as_python_or_handed_back(body: bytes) -> None:
    """Truncated, corrupted and random bytes never produce a result Python would not."""
    compiled = _compiled(body)
    if compiled is not None:
        _same(compiled, _python(body))


@FUZZ
@given(otlp_requests())
def test_the_fallback_reads_hostile_requests_as_the_reference_does(request: ExportTraceServiceRequest) -> None:
    """A handed-back body's pairs read by the compiled pair reader where it can (otlp._fallback_pair): the
    same result as the pure-Python reference."""
    body = request.SerializeToString()
    _same_fallback(body)


@FUZZ
@given(protobuf_bodies())
def test_the_fallback_reads_corrupt_bodies_as_the_reference_does(body: bytes) -> None:
    _same_fallback(body)


def _same_fallback(body: bytes) -> None:
    reference = _python(body)
    if isinstance(reference, DecodeError):
        with pytest.raises(DecodeError):
            otlp._decode_protobuf_python(body, otlp._fallback_pair)
        return
    _same(otlp._decode_protobuf_python(body, otlp._fallback_pair), reference)


def test_nan_attribute_same_as_python() -> None:
    """A NaN double decodes to NaN in both decoders (the comparison above must not trip on NaN != NaN)."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\1" * 8)
    span.attributes.append(KeyValue(key="n", value=AnyValue(double_value=float("nan"))))
    body = request.SerializeToString()
    compiled = _compiled(body)
    assert compiled is not None
    _same(compiled, _python(body))
    value = compiled.batches[0].spans[0].attributes["n"]
    assert isinstance(value, float)
    assert math.isnan(value)


def test_synthetic_agent_runs_take_the_fast_path() -> None:
    """The benchmark's agent runs (OTel GenAI, 10-29 spans, tool errors, events)."""
    for body, _, _ in bodies(300, seed=3):
        compiled = _compiled(body)
        assert compiled is not None
        _same(compiled, _python(body))


@pytest.mark.parametrize(
    "fixture", sorted(p.name for p in FIXTURES.glob("*.json") if ".truth." not in p.name and p.stem != "unobservable")
)
def test_real_instrumentor_traces_take_the_fast_path(fixture: str) -> None:
    """Traces captured from LangGraph/OpenInference, the OpenAI Agents SDK and openai-v2."""
    raw = (FIXTURES / fixture).read_bytes()
    batches = decode_json(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).batches
    assert batches
    for batch in batches:
        body = encode_batch(batch)
        compiled = _compiled(body)
        assert compiled is not None
        _same(compiled, _python(body))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"\x0a\x05\x12\x03\x12\x01", "truncated"),
        (b"\x0b", "group wire type"),
        (b"\x0a\x02\x08\x01", "a known message field with a varint"),
        (bytes.fromhex("0a0c12") + bytes([10]) + bytes.fromhex("12082a06") + b"\xff\xfe\xfd\xfc\xfb\xfa", "bad UTF-8"),
    ],
)
def test_unusual_bodies_are_handed_back(body: bytes, why: str) -> None:
    """What the compiled decoder does not own, the Python decoder decides (here: a 400)."""
    assert _compiled(body) is None, why
    assert isinstance(_python(body), DecodeError | DecodeResult)


def _long_values_request() -> ExportTraceServiceRequest:
    """Span, event and resource attributes over the limit: ASCII, a 3-byte character across the cut,
    bytes, and a long string inside a kvlist; plus one exactly at the limit (kept whole)."""
    limit = otlp.MAX_ATTRIBUTE_BYTES
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.add(key="resource.long", value={"string_value": "r" * (limit + 1)})
    span = rs.scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat")
    span.attributes.add(key="ascii", value={"string_value": "a" * (limit + 100)})
    span.attributes.add(key="euro", value={"string_value": "x" * (limit - 1) + "€" * 3})
    span.attributes.add(key="exact", value={"string_value": "e" * limit})
    span.attributes.add(key="blob", value={"bytes_value": b"\xff" * (limit + 5)})
    nested = span.attributes.add(key="nested").value.kvlist_value.values.add(key="inner")
    nested.value.string_value = "n" * (limit * 2)
    span.events.add(name="e").attributes.add(key="event.long", value={"string_value": "v" * (limit + 1)})
    return request


def test_long_attribute_values_cut_alike_by_every_decoder() -> None:
    """Values over MAX_ATTRIBUTE_BYTES are cut to it (strings on a character boundary) in span,
    event, resource and nested attributes, identically by the compiled, Python and JSON decoders,
    and counted; a value exactly at the limit is kept whole."""
    limit = otlp.MAX_ATTRIBUTE_BYTES
    body = _long_values_request().SerializeToString()
    compiled = _compiled(body)
    assert compiled is not None, "the compiled decoder handed an ordinary body back"
    _same(compiled, _python(body))
    (span,) = compiled.batches[0].spans
    assert "a" * limit == span.attributes["ascii"]
    assert "x" * (limit - 1) == span.attributes["euro"]  # the euro sign across the cut is left out whole
    assert "e" * limit == span.attributes["exact"]
    assert b"\xff" * limit == span.attributes["blob"]
    assert {"inner": "n" * limit} == span.attributes["nested"]
    assert "r" * limit == span.resource["resource.long"]
    assert "v" * limit == span.events[0].attributes["event.long"]
    assert 6 == compiled.truncated
    as_json = decode_json(_to_json(body))
    assert [b.spans for b in compiled.batches] == [b.spans for b in as_json.batches]
    assert 6 == as_json.truncated


def test_cut_values_of_a_rejected_span_are_not_counted() -> None:
    """A span rejected for its ids is never held, so its long values count as no cut, in every decoder
    (the compiled one reads attributes before it checks the ids)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    big = otlp.MAX_ATTRIBUTE_BYTES + 10
    for trace_id, fill in ((b"\0" * 16, "r"), (b"\2" * 16, "k")):  # all-zero trace id: rejected
        span = spans.add(trace_id=trace_id, span_id=b"\1" * 8, name="s")
        span.attributes.append(KeyValue(key="long", value=AnyValue(string_value=fill * big)))
    body = request.SerializeToString()
    compiled = _compiled(body)
    assert compiled is not None
    _same(compiled, _python(body))
    assert (1, 1) == (compiled.rejected, compiled.truncated)
    as_json = decode_json(_to_json(body))
    assert (1, 1) == (as_json.rejected, as_json.truncated)


def _to_json(body: bytes) -> bytes:
    """OTLP/JSON of a protobuf body: ``MessageToDict`` with the ids in hex, as OTLP/JSON wants."""
    doc = MessageToDict(ExportTraceServiceRequest.FromString(body))
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId"):
                    sp[key] = base64.b64decode(sp[key]).hex()
    return json.dumps(doc).encode()


def test_repeated_ids_and_names_are_one_object_each() -> None:
    """Memory: the spans of a body hold one str per distinct id, and names mostly shared, not one per span.
    The heavy workload interleaves 16 runs a body: a trace's spans are not consecutive, siblings
    carry their parent's id and a parent's own id is the one its children point to."""
    from vigil.bench.heavy import heavy_bodies, heavy_runs

    body = next(iter(heavy_bodies(heavy_runs(40))))
    result = _compiled(body)
    assert result is not None
    spans = [s for b in result.batches for s in b.spans]
    assert len({id(s.trace_id) for s in spans}) == len({s.trace_id for s in spans}) < len(spans) // 4
    ids = [s.span_id for s in spans] + [s.parent_span_id for s in spans if s.parent_span_id is not None]
    assert len({id(i) for i in ids}) == len(set(ids)) < len(ids) * 2 // 3
    assert len({id(s.name) for s in spans}) < len(spans) // 4  # names: the short-text cache (direct mapped)
    for batch in result.batches:  # the record key is the spans' own trace id object
        assert all(s.trace_id is batch.trace_id for s in batch.spans)
    _same(result, _python(body))


def test_fuzz_examples_follow_vigil_fuzz_examples() -> None:
    """Issue 42: the hypothesis fuzz tests here honour VIGIL_FUZZ_EXAMPLES like the others."""
    assert FUZZ.max_examples == int(os.environ.get("VIGIL_FUZZ_EXAMPLES", "80"))


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (payloads under 128 bytes)."""
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload


def test_an_earlier_bad_utf8_copy_of_a_repeated_key_is_rejected_like_protobuf() -> None:
    """Issue 42 (2): the C decoder kept the last copy of a repeated text field and checked only it."""
    kv = _ld(1, b"\xff") + _ld(1, b"k") + _ld(2, _ld(1, b"v"))  # key given twice: first copy not UTF-8
    span = _ld(1, b"\x01" * 16) + _ld(2, b"\x02" * 8) + _ld(5, b"s") + _ld(9, kv)
    body = _ld(1, _ld(2, _ld(2, span)))  # resource_spans / scope_spans / spans
    with pytest.raises(Exception, match=r"(?i)utf-?8|pars"):
        ExportTraceServiceRequest.FromString(body)  # the reference rejects the body
    assert _compiled(body) is None  # the C decoder hands it back (it accepted it before the fix)


# Bodies the fuzz harnesses (scripts/fuzz/) found where the decoders disagreed, kept as regressions.
FOUND_BY_FUZZING = {
    # a 6-byte (over-long) tag: protobuf reads a tag in at most 5 bytes and refuses the body
    "overlong tag": base64.b64decode("CgqNjY2NjQAKAAqNjY2NjQAKAAoA"),
}
# A status message given twice, the first copy not UTF-8 (protobuf refuses the body; the compiled decoder
# kept the last copy and took it): issue 42, defect 2, the case the first fix left out.
_STATUS = bytes([0x7A, 0x05, 0x12, 0x01, 0xFF, 0x12, 0x00])  # Status {message: "\xff", message: ""}
_SPAN = b"\x0a\x10" + bytes(range(1, 17)) + b"\x12\x08" + b"\x01" * 8 + _STATUS
_SCOPE = b"\x12" + bytes([len(_SPAN)]) + _SPAN
_RESOURCE = b"\x12" + bytes([len(_SCOPE)]) + _SCOPE
FOUND_BY_FUZZING["status message copies"] = b"\x0a" + bytes([len(_RESOURCE)]) + _RESOURCE


@pytest.mark.parametrize("name", sorted(FOUND_BY_FUZZING))
def test_found_by_fuzzing_same_as_python_or_handed_back(name: str) -> None:
    body = FOUND_BY_FUZZING[name]
    compiled = _compiled(body)
    if compiled is not None:
        _same(compiled, _python(body))
