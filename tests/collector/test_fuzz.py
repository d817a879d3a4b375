"""Fuzzing of the OTLP decoders and the OTLP/HTTP receiver with hostile input.

Properties: a decoder either returns a result that accounts for every span (accepted +
rejected = sent) with only well-formed ids, or raises :class:`DecodeError`; nothing else
escapes. The receiver answers every body with 200, 400, 413 or 415 (never 500), counts
every rejection by reason, and a good request afterwards still works.

``VIGIL_FUZZ_EXAMPLES`` raises the number of examples for a run on demand.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from collector.errors import DecodeError
from collector.metrics import CollectorMetrics
from collector.model import DecodeResult
from collector.otlp import MAX_DEPTH, decode_json, decode_protobuf, encode_batch
from collector.receiver import create_otlp_app
from collector.stream import InProcessStream
from tests.support.fuzzing import json_bodies, otlp_requests, protobuf_bodies

EXAMPLES = int(os.environ.get("VIGIL_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
HEX32 = re.compile(r"^[0-9a-f]{32}$")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def _sent(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


def _check_result(result: DecodeResult) -> int:
    """Every accepted span is well-formed and filed under its own trace; returns the accepted count."""
    accepted = 0
    for batch in result.batches:
        assert HEX32.match(batch.trace_id)
        assert batch.trace_id != "0" * 32
        for span in batch.spans:
            assert span.trace_id == batch.trace_id
            assert HEX16.match(span.span_id)
            assert span.span_id != "0" * 16
            assert span.parent_span_id is None or HEX16.match(span.parent_span_id)
            accepted += 1
        # A record re-encodes (the stream/Kafka contract) and decodes to the same spans.
        again = decode_protobuf(encode_batch(batch))
        assert 0 == again.rejected
        assert [s.span_id for s in batch.spans] == [s.span_id for b in again.batches for s in b.spans]
    assert result.rejected >= 0
    assert len(result.errors) <= 10
    return accepted


def _decode(decoder: Callable[[bytes], DecodeResult], body: bytes) -> DecodeResult | DecodeError:
    """The decoder's result, or the DecodeError it raised (any other exception propagates)."""
    try:
        return decoder(body)
    except DecodeError as exc:
        return exc


@FUZZ
@given(otlp_requests())
def test_protobuf_requests_account_for_every_span(request: ExportTraceServiceRequest) -> None:
    """Structured hostile requests: accepted + rejected == sent, and accepted spans are valid."""
    result = decode_protobuf(request.SerializeToString())
    assert _sent(request) == _check_result(result) + result.rejected


@FUZZ
@given(protobuf_bodies())
def test_protobuf_bodies_decode_or_raise_decode_error(body: bytes) -> None:
    """Truncated, corrupted and random bytes: a result or a DecodeError, nothing else."""
    outcome = _decode(decode_protobuf, body)
    if isinstance(outcome, DecodeError):
        assert "protobuf" == outcome.reason
    else:
        _check_result(outcome)


@FUZZ
@given(json_bodies())
def test_json_bodies_decode_or_raise_decode_error(body: bytes) -> None:
    """Wrong types in every OTLP/JSON field: a result or a DecodeError, nothing else."""
    outcome = _decode(decode_json, body)
    if isinstance(outcome, DecodeError):
        assert outcome.reason in {"json", "encoding"}, outcome.reason
        assert str(outcome)
    else:
        _check_result(outcome)


class _Receiver:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        metrics = CollectorMetrics(self.registry)
        self.stream = InProcessStream(10_000, 1.0, metrics)
        app = create_otlp_app(self.stream, metrics, max_body_bytes=64 * 1024, retry_after_s=1)
        self.client = TestClient(app)

    def total(self, name: str) -> float:
        return sum(s.value for m in self.registry.collect() for s in m.samples if s.name == name)


_RECEIVERS: list[_Receiver] = []


def _shared() -> _Receiver:
    """One receiver for every example (a new app per example would dominate the run time)."""
    if not _RECEIVERS:
        _RECEIVERS.append(_Receiver())
    r = _RECEIVERS[0]
    r.stream.get_many(100_000, 0)
    return r


_CONTENT_TYPES = st.sampled_from(
    [
        "application/x-protobuf",
        "application/json",
        "application/json; charset=utf-8",
        "text/plain",
        "",
        "application/x-protobuf; x=\x7f",
    ]
)


@FUZZ
@given(
    st.one_of(protobuf_bodies(), json_bodies()),
    _CONTENT_TYPES,
    st.sampled_from(["", "gzip", "deflate", "br", "gzip, gzip"]),
    st.booleans(),
)
def test_receiver_never_fails_with_500(body: bytes, content_type: str, encoding: str, compress: bool) -> None:
    """Any body, content type and encoding gets 200/400/413/415, and each rejection is counted."""
    r = _shared()
    rejected = r.total("vigil_otlp_rejected_requests_total")
    if compress and encoding == "gzip":
        body = gzip.compress(body)
    headers = {"Content-Type": content_type}
    if encoding:
        headers["Content-Encoding"] = encoding
    response = r.client.post("/v1/traces", content=body, headers=headers)
    assert response.status_code in {200, 400, 413, 415}, (response.status_code, response.text)
    if response.status_code != 200:
        assert rejected + 1.0 == r.total("vigil_otlp_rejected_requests_total")
        assert response.text
    good = ExportTraceServiceRequest()
    good.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="chat")
    after = r.client.post(
        "/v1/traces", content=good.SerializeToString(), headers={"Content-Type": "application/x-protobuf"}
    )
    assert 200 == after.status_code


def test_nesting_beyond_the_parser_limit_is_cut_as_in_json() -> None:
    """A value nested deeper than the protobuf runtime parses keeps its span, cut to None at MAX_DEPTH
    like the same body in OTLP/JSON; its neighbours are kept too (no 400 for the batch)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    sp = spans.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    spans.add(trace_id=b"\x01" * 16, span_id=b"\x03" * 8)
    target = sp.attributes.add(key="deep").value
    for _ in range(150):
        target = target.array_value.values.add()
    body = request.SerializeToString()
    result = decode_protobuf(body)
    assert (0, 2) == (result.rejected, len(result.batches[0].spans))
    value = result.batches[0].spans[0].attributes["deep"]
    depth = 0
    while isinstance(value, list):
        value, depth = value[0], depth + 1
    assert (MAX_DEPTH, None) == (depth, value)
    nested: dict[str, object] = {}
    node = nested
    for _ in range(150):
        inner: dict[str, object] = {}
        node["arrayValue"] = {"values": [inner]}
        node = inner
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "01" * 16, "spanId": "02" * 8, "attributes": [{"key": "deep", "value": nested}]},
        {"traceId": "01" * 16, "spanId": "03" * 8},
    ]}]}]}  # fmt: skip
    as_json = decode_json(json.dumps(doc).encode())
    assert result.batches[0].spans[0].attributes == as_json.batches[0].spans[0].attributes
    r = _Receiver()
    response = r.client.post("/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"})
    assert 200 == response.status_code
    assert 0.0 == r.total("vigil_otlp_rejected_requests_total")
