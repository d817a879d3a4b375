"""OTLP trace bodies (protobuf and JSON) to :mod:`collector.model` spans, and back to protobuf.

Pure functions, no I/O; safe to call from any thread. Decoders validate each span on
its own: a span with a bad id or malformed attributes (a resource with malformed attributes:
its spans) is rejected (counted in :attr:`DecodeResult.rejected`,
reason in :attr:`DecodeResult.errors`) and never takes its neighbours down. Only a body
that cannot be parsed at all raises :class:`~collector.errors.DecodeError`.

Attribute values become plain Python values; ``array``/``kvlist`` values nested deeper
than :data:`MAX_DEPTH` become ``None``; string and bytes values (of span, event and resource
attributes, at any depth) longer than :data:`MAX_ATTRIBUTE_BYTES` are cut to it before they are
held, by every decoder alike (counted in :attr:`DecodeResult.truncated`). All spans of one resource share one resource
attribute dict. Accepted spans are split into one :class:`TraceBatch` per trace id, in
first-seen order. :func:`encode_batch` is the inverse used for stream/Kafka records.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import Any

from google.protobuf.message import DecodeError as _ProtobufError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from collector._otlp_common import (
    _CODES,
    _INT64,
    _KINDS,
    _QUICK_TEXT,
    _ZERO_SPAN,
    _ZERO_TRACE,
    MAX_ATTRIBUTE_BYTES,
    MAX_DEPTH,
    MAX_ERRORS,
    _Accumulator,
    _id_problem,
    count_cut,
    start_tally,
    tally,
    truncate_bytes,
    truncate_text,
)
from collector._otlp_json import decode as _decode_json
from collector._otlp_wire import WireRequest
from collector.errors import DecodeError
from collector.model import (
    Attributes,
    AttrValue,
    DecodeResult,
    Span,
    SpanEvent,
    SpanKind,
    StatusCode,
    TraceBatch,
    new_span,
)

__all__ = [
    "MAX_ATTRIBUTE_BYTES",
    "MAX_DEPTH",
    "MAX_ERRORS",
    "compiled_decoder",
    "decode_json",
    "decode_protobuf",
    "encode_batch",
    "truncate_bytes",
    "truncate_text",
]


def _load_compiled() -> ModuleType | None:
    """The compiled decoder (collector/_otlp_fast.c), built by ``pip install`` where a C compiler exists.

    One built from an older source (without ``VERSION`` 2: no ``max_value`` argument) is ignored
    until ``pip install`` rebuilds it: the Python decoder gives the same result, more slowly.
    """
    try:
        module = importlib.import_module("collector._otlp_fast")
    except ImportError:  # pragma: no cover - no compiler at install time: the Python decoder does it all
        return None
    return module if getattr(module, "VERSION", 1) >= 2 else None


_fast = _load_compiled()
_pair = getattr(_fast, "pair", None)  # (an extension built before it had one: every fallback pair in Python)


def compiled_decoder() -> bool:
    """Whether protobuf bodies are decoded by the compiled decoder (else only by Python)."""
    return _fast is not None


# --- protobuf -------------------------------------------------------------------------


def decode_protobuf(body: bytes | bytearray) -> DecodeResult:
    """Decode a binary ``ExportTraceServiceRequest`` (or ``TracesData``, same wire format).

    Args:
        body: the uncompressed request body.

    Returns:
        The accepted spans split by trace, plus the count and reasons of rejected spans.

    Ordinary bodies are decoded by the compiled decoder when it is installed (about 3.5×
    faster); it hands anything unusual (malformed data, bad UTF-8, merged messages, deep
    nesting…) back, and the Python decoder below decodes it. Both give the same result.

    Raises:
        DecodeError: (``reason="protobuf"``) when the body is not a parseable message.
    """
    if _fast is not None:
        acc = _Accumulator()
        cut = _fast.decode(
            body, acc.traces, acc.reject_ids, new_span, SpanEvent, _KINDS, _CODES, MAX_DEPTH, MAX_ATTRIBUTE_BYTES
        )
        if cut >= 0:
            acc.truncated = cut
            return acc.result(len(body))
        return _decode_protobuf_python(body, _fallback_pair)
    return _decode_protobuf_python(body)


PairReader = Callable[[bytes], tuple[str, AttrValue]]
"""Reads one serialized ``KeyValue`` (raises ``google.protobuf.message.DecodeError`` when malformed)."""


def _decode_protobuf_python(body: bytes | bytearray, read: PairReader | None = None) -> DecodeResult:
    """The Python decoder (the reference: every edge case, every error message).

    ``read``: how each attribute pair is read — the pure-Python :func:`_raw_pair` by default (the
    reference); :func:`_fallback_pair` where the compiled decoder handed the body back.
    """
    read = read or _raw_pair
    start_tally()
    try:
        request = WireRequest.FromString(body)
        acc = _Accumulator()
        for rs in request.resource_spans:
            try:
                resource = _raw_attrs(rs.resource.attributes, read)
            except _ProtobufError as exc:  # only this resource's spans are lost
                acc.reject(f"invalid resource attributes: {exc}", sum(len(ss.spans) for ss in rs.scope_spans))
                continue
            for ss in rs.scope_spans:
                _pb_scope_spans(ss, resource, acc, read)
    except _ProtobufError as exc:
        raise DecodeError("protobuf", f"invalid OTLP protobuf body: {exc}") from exc
    acc.truncated = tally()
    return acc.result(len(body))


def _pb_scope_spans(ss: Any, resource: Attributes, acc: _Accumulator, read: PairReader) -> None:
    """Decode the spans of one ``ScopeSpans`` (see :mod:`collector._otlp_wire`)."""
    scope = ss.scope.name
    traces = acc.traces
    kinds, codes = _KINDS, _CODES
    last_trace = b""
    hex_trace = ""
    spans: list[Span] = []
    for sp in ss.spans:
        trace_id, span_id, parent_id = sp.trace_id, sp.span_id, sp.parent_span_id
        if (
            len(trace_id) != 16
            or len(span_id) != 8
            or trace_id == _ZERO_TRACE
            or span_id == _ZERO_SPAN
            or (parent_id and len(parent_id) != 8)
        ):
            acc.reject(_id_problem(trace_id, span_id, parent_id) or "invalid ids")
            continue
        try:
            attributes = _raw_attrs(sp.attributes, read)
            events = tuple(_pb_event(e, read) for e in sp.events) if sp.events else ()
        except _ProtobufError as exc:  # one span's malformed attributes never take its neighbours down
            acc.reject(f"invalid attributes: {exc}")
            continue
        status = sp.status
        if trace_id != last_trace:  # spans of one trace usually come together: hex and look up once
            last_trace, hex_trace = trace_id, trace_id.hex()
            known = traces.get(hex_trace)
            spans = known if known is not None else traces.setdefault(hex_trace, [])
        span = new_span(
            hex_trace,
            span_id.hex(),
            parent_id.hex() if parent_id and parent_id != _ZERO_SPAN else None,
            sp.name,
            kinds.get(sp.kind, SpanKind.UNSPECIFIED),
            sp.start_time_unix_nano,
            sp.end_time_unix_nano,
            codes.get(status.code, StatusCode.UNSET),
            status.message,
            attributes,
            events,
            resource,
            scope,
        )
        spans.append(span)


def _pb_event(event: Any, read: PairReader) -> SpanEvent:
    return SpanEvent(event.name, event.time_unix_nano, _raw_attrs(event.attributes, read))


_PAIRS: dict[bytes, tuple[str, AttrValue]] = {}
"""Memo of serialized ``KeyValue`` → ``(key, value)`` for scalar values. Agent traces repeat
most attribute pairs verbatim (operation names, models, systems, span kinds, tool names,
token counts), and a dict look-up costs far less than parsing."""
_ARRAYS: dict[bytes, tuple[str, tuple[AttrValue, ...]]] = {}
"""The same for flat arrays, kept as tuples and copied into a fresh list for every span, so
no two spans share a mutable value."""
_SEEN: dict[bytes, None] = {}
"""Pairs seen once: a pair enters a memo on its second sighting, so unique values (call ids,
conversation ids) never crowd out the repeated ones."""
MEMO_MAX_PAIRS = 8192
"""Entries kept in each memo; a memo is emptied when full (bounds memory to a few MB)."""
MEMO_MAX_BYTES = 160
"""Longest serialized pair memoised: long values (content, arguments) rarely repeat."""


def _raw_attrs(raws: Iterable[bytes], read: PairReader) -> dict[str, AttrValue]:
    """Attribute dict of serialized ``KeyValue`` messages (later duplicates win, as in a dict)."""
    out: dict[str, AttrValue] = {}
    memo = _PAIRS
    for raw in raws:
        pair = memo.get(raw)
        if pair is not None:
            out[pair[0]] = pair[1]
            continue
        array = _ARRAYS.get(raw)
        if array is not None:
            out[array[0]] = list(array[1])
            continue
        key, value = read(raw)
        out[key] = value
    return out


def _short_pair(raw: bytes) -> tuple[str, AttrValue] | None:
    """Read a ``KeyValue`` whose key and value are a short string or a non-negative int by hand.

    That is the usual shape (``0A klen key 12 vlen (0A slen text | 18 varint)``, lengths
    < 128); anything else returns ``None`` for the generic parser.
    """
    size = len(raw)
    if size < 6 or raw[0] != 0x0A or raw[1] >= 0x80:
        return None
    at = raw[1] + 2
    if at + 3 >= size or raw[at] != 0x12 or raw[at + 1] != size - at - 2:
        return None
    tag = raw[at + 2]
    if tag == 0x0A:
        if raw[at + 3] != size - at - 4:
            return None
        return raw[2:at].decode(), raw[at + 4 :].decode()
    if tag == 0x18 and not raw[-1] & 0x80 and size - at - 3 <= 9:  # int64 < 2**63: at most 9 bytes
        number = 0
        for shift, byte in enumerate(raw[at + 3 :]):
            number |= (byte & 0x7F) << (7 * shift)
        return raw[2:at].decode(), number
    return None


def _fallback_pair(raw: bytes) -> tuple[str, AttrValue]:
    """:func:`_raw_pair` for a body the compiled decoder handed back: each pair it can read is read in C
    (one unusual pair — a bad UTF-8 key, say — no longer makes every pair of the body cost a Python
    walk); only the pairs it cannot are read in Python, within :data:`FALLBACK_VALUES_PER_BYTE`."""
    found = _pair(raw, MAX_DEPTH, MAX_ATTRIBUTE_BYTES) if _pair is not None else None
    if found is None:
        return _raw_pair(raw, max(FALLBACK_VALUES_MIN, len(raw) // FALLBACK_BYTES_PER_VALUE))
    key, value, cut = found
    if cut:
        count_cut(cut)
    if len(raw) <= MEMO_MAX_BYTES and not isinstance(value, dict):
        _remember(raw, key, value)
    return key, value


FALLBACK_BYTES_PER_VALUE = 64
"""A pair only the Python decoder can read (nesting past :data:`MAX_DEPTH`, a oneof or message given
twice, ``string_value_strindex``: no exporter writes these) may hold one value per this many bytes
(at least :data:`FALLBACK_VALUES_MIN`); past that its span is rejected as malformed, so such a pair
costs a few times an ordinary pair of its size instead of ~0.75 µs of Python per value (a 20 MiB
body of 4-byte values: 4 s of CPU, GIL held)."""
FALLBACK_VALUES_MIN = 4096


def _raw_pair(raw: bytes, budget: int = 0) -> tuple[str, AttrValue]:
    """Parse one serialized ``KeyValue`` and memoise it when it is short and immutable (or a flat array).

    Raises:
        google.protobuf.message.DecodeError: malformed pair, or text that is not UTF-8.
    """
    try:
        simple = _short_pair(raw)
    except UnicodeDecodeError as exc:
        raise _ProtobufError(f"attribute text is not valid UTF-8: {exc}") from exc
    if simple is not None:
        key, value = simple
    else:
        try:
            kv = KeyValue.FromString(raw)
        except _ProtobufError as exc:
            # Nesting past the protobuf runtime's recursion limit (~33 kvlist levels) fails the
            # generic parser; the wire reader cuts at MAX_DEPTH like the JSON decoder does. Any
            # other failure is malformed data, rejected at once: walking it in Python would cost
            # a hostile body seconds of CPU for nothing (a pair of 2-byte fields with a cut tag).
            if not _too_deep(exc):
                raise
            key, value = _wire_pair(memoryview(raw), 0, [WIRE_FIELDS_MIN + len(raw) // WIRE_BYTES_PER_FIELD])
        else:
            key = kv.key
            value = _pb_value(kv.value, 0) if not budget else _counted_value(kv.value, budget)
    if len(raw) <= MEMO_MAX_BYTES and not isinstance(value, dict):
        _remember(raw, key, value)
    return key, value


def _remember(raw: bytes, key: str, value: AttrValue) -> None:
    """Memoise a short pair the second time it is seen (flat arrays as tuples; nested ones never)."""
    if raw not in _SEEN:
        if len(_SEEN) >= MEMO_MAX_PAIRS:
            _SEEN.clear()
        _SEEN[raw] = None
        return
    if isinstance(value, list):
        if not any(isinstance(v, list | dict) for v in value):
            if len(_ARRAYS) >= MEMO_MAX_PAIRS:
                _ARRAYS.clear()
            _ARRAYS[raw] = (key, tuple(value))
        return
    if len(_PAIRS) >= MEMO_MAX_PAIRS:
        _PAIRS.clear()
    _PAIRS[raw] = (key, value)


def _pb_value(value: Any, depth: int) -> AttrValue:
    """Convert one ``AnyValue``; the common non-empty string costs a single field read."""
    text: str = value.string_value
    if text:
        return text if len(text) <= _QUICK_TEXT else truncate_text(text)
    which = value.WhichOneof("value")
    if which == "int_value":
        number: int = value.int_value
        return number
    if which == "double_value":
        real: float = value.double_value
        return real
    if which == "bool_value":
        flag: bool = value.bool_value
        return flag
    if which == "string_value":
        return ""
    if which == "bytes_value":
        data: bytes = value.bytes_value
        return truncate_bytes(data)
    if depth >= MAX_DEPTH:
        return None
    if which == "array_value":
        return [_pb_value(v, depth + 1) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _pb_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return None  # unset, or string_value_strindex (profiles only)


def _counted_value(value: Any, budget: int) -> AttrValue:
    """:func:`_pb_value`, refused (``google.protobuf.message.DecodeError``) when the value holds more than
    ``budget`` values: each array and kvlist is counted by its length before any member is looked at."""
    seen, todo = 0, [(value, 0)]
    while todo:
        item, depth = todo.pop()
        which = item.WhichOneof("value") if depth < MAX_DEPTH else None
        if which == "array_value":
            members = [(v, depth + 1) for v in _within(item.array_value.values, seen, budget)]
        elif which == "kvlist_value":
            members = [(kv.value, depth + 1) for kv in _within(item.kvlist_value.values, seen, budget)]
        else:
            continue
        seen += len(members)
        todo.extend(members)
    return _pb_value(value, 0)


def _within(members: Any, seen: int, budget: int) -> Any:
    if seen + len(members) > budget:
        raise _ProtobufError(f"attribute holds more than {budget} values for its size")
    return members


WIRE_BYTES_PER_FIELD = 64
"""The wire reader's budget: at most one field per this many bytes of a pair (plus
:data:`WIRE_FIELDS_MIN`), so a deeply nested pair padded with tiny fields costs a few times an ordinary
pair of its size, not seconds; a pair over budget is rejected as malformed (its span counted in
``vigil_spans_rejected_total``)."""

WIRE_FIELDS_MIN = 256
"""Fields every pair may have whatever its size."""


def _too_deep(exc: Exception) -> bool:
    """Whether the protobuf runtime refused a pair for its nesting alone (upb: ``…MaxDepth``)."""
    text = str(exc).lower()
    return "depth" in text or "recursion" in text or "too deep" in text


def _varint(data: memoryview, at: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise _ProtobufError("truncated varint")
        byte = data[at]
        result |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return result, at
        shift += 7


def _wire_fields(data: memoryview, budget: list[int]) -> Iterable[tuple[int, int, int | memoryview]]:
    """``(field, wire type, value)`` of a message's wire bytes (varints as ints, others as bytes);
    ``budget[0]``: the fields the walk may still read (shared by a pair's whole walk)."""
    at = 0
    while at < len(data):
        budget[0] -= 1
        if budget[0] < 0:
            raise _ProtobufError("attribute has too many wire fields for its size")
        tag, at = _varint(data, at)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            number, at = _varint(data, at)
            yield field, wire, number
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if at + size > len(data):
                raise _ProtobufError("truncated fixed field")
            yield field, wire, data[at : at + size]
            at += size
        elif wire == 2:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise _ProtobufError("truncated length-delimited field")
            yield field, wire, data[at : at + size]
            at += size
        else:
            raise _ProtobufError(f"unsupported wire type {wire}")


def _text(value: int | memoryview) -> str:
    if not isinstance(value, memoryview):
        raise _ProtobufError("string field with a numeric wire type")
    try:
        return bytes(value).decode()
    except UnicodeDecodeError as exc:
        raise _ProtobufError(f"attribute text is not valid UTF-8: {exc}") from exc


def _wire_pair(data: memoryview, depth: int, budget: list[int]) -> tuple[str, AttrValue]:
    """A ``KeyValue`` read straight from the wire (for nesting too deep for the protobuf runtime)."""
    key, value = "", None
    for field, _, raw in _wire_fields(data, budget):
        if field == 1:
            key = _text(raw)
        elif field == 2 and isinstance(raw, memoryview):
            value = _wire_value(raw, depth, budget)
        else:
            raise _unknown(field)
    return key, value


def _unknown(field: int) -> _ProtobufError:
    """A pair too deep for protobuf that also carries a field OTLP does not define: malformed (protobuf
    would skip it, but nothing sends one, and skipping tiny ones is the walk's whole cost)."""
    return _ProtobufError(f"deeply nested attribute has an unknown field {field}")


def _known(field: int) -> bool:
    """``values`` (1) is the one field of an ``ArrayValue`` or ``KeyValueList``; any other is malformed."""
    if field != 1:
        raise _unknown(field)
    return True


def _wire_value(data: memoryview, depth: int, budget: list[int]) -> AttrValue:
    """An ``AnyValue`` from the wire; ``array``/``kvlist`` at :data:`MAX_DEPTH` become ``None`` (as in JSON)."""
    value: AttrValue = None
    for field, wire, raw in _wire_fields(data, budget):
        if field == 1:
            value = truncate_text(_text(raw))
        elif field == 2 and wire == 0 and isinstance(raw, int):
            value = bool(raw)
        elif field == 3 and wire == 0 and isinstance(raw, int):
            value = raw - (1 << 64) if raw >= 1 << 63 else raw
        elif field == 4 and wire == 1 and isinstance(raw, memoryview):
            value = float(struct.unpack("<d", raw)[0])
        elif field == 7 and isinstance(raw, memoryview):
            value = truncate_bytes(bytes(raw))
        elif field in (5, 6) and isinstance(raw, memoryview):
            if depth >= MAX_DEPTH:
                value = None
            else:
                items = [v for f, _, v in _wire_fields(raw, budget) if _known(f) and isinstance(v, memoryview)]
                if field == 5:
                    value = [_wire_value(v, depth + 1, budget) for v in items]
                else:
                    value = dict(_wire_pair(v, depth + 1, budget) for v in items)
        elif not 1 <= field <= 8:  # 8: string_value_strindex (profiles), None as the protobuf path reads it
            raise _unknown(field)
    return value


def decode_json(body: bytes | bytearray) -> DecodeResult:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest``.

    Follows the OTLP deviations from proto3 JSON: ids are case-insensitive hex, enums are
    integers, 64-bit integers may be strings or numbers, keys are lowerCamelCase, unknown
    keys are ignored and absent keys mean defaults. ``bytesValue`` is base64.

    Args:
        body: the uncompressed request body (UTF-8 JSON).

    Returns:
        The accepted spans split by trace, plus the count and reasons of rejected spans.

    Raises:
        DecodeError: (``reason="json"``) when the body is not JSON, or its structure above
            the spans is wrong (e.g. ``resourceSpans`` is not a list, bad resource attributes).
    """
    return _decode_json(body)


# --- encoding -------------------------------------------------------------------------


def encode_batch(batch: TraceBatch) -> bytes:
    """Serialize one batch as an ``ExportTraceServiceRequest`` (the stream/Kafka record value).

    Spans are grouped into one ``ResourceSpans`` per distinct resource and one
    ``ScopeSpans`` per scope name within it, keeping span order inside each group, so
    ``decode_protobuf(encode_batch(b))`` yields the same spans for any batch produced by
    a decoder (``received_ns`` is not part of the wire format).

    Args:
        batch: the batch to encode.

    Returns:
        The serialized request, wire-compatible with ``TracesData``.
    """
    request = ExportTraceServiceRequest()
    seen: dict[int, tuple[Any, dict[str, Any]]] = {}
    distinct: list[tuple[Attributes, tuple[Any, dict[str, Any]]]] = []
    for span in batch.spans:
        group = seen.get(id(span.resource))
        if group is None:
            group = next((g for res, g in distinct if res == span.resource), None)
            if group is None:
                rs = request.resource_spans.add()
                _fill_attrs(rs.resource.attributes, span.resource)
                group = (rs, {})
                distinct.append((span.resource, group))
            seen[id(span.resource)] = group
        rs, scopes = group
        ss = scopes.get(span.scope)
        if ss is None:
            ss = scopes[span.scope] = rs.scope_spans.add()
            ss.scope.name = span.scope
        _fill_span(ss.spans.add(), span)
    return bytes(request.SerializeToString())


def _fill_span(pb: Any, span: Span) -> None:
    pb.trace_id = bytes.fromhex(span.trace_id)
    pb.span_id = bytes.fromhex(span.span_id)
    if span.parent_span_id is not None:
        pb.parent_span_id = bytes.fromhex(span.parent_span_id)
    pb.name = span.name
    pb.kind = int(span.kind)
    pb.start_time_unix_nano = span.start_ns
    pb.end_time_unix_nano = span.end_ns
    _fill_attrs(pb.attributes, span.attributes)
    for event in span.events:
        pe = pb.events.add(name=event.name, time_unix_nano=event.time_ns)
        _fill_attrs(pe.attributes, event.attributes)
    if span.status_code or span.status_message:
        pb.status.code = int(span.status_code)
        pb.status.message = span.status_message


def _fill_attrs(target: Any, attrs: Mapping[str, AttrValue], depth: int = 0) -> None:
    for key, value in attrs.items():
        kv = target.add()
        kv.key = key
        _fill_value(kv.value, value, depth)


def _fill_value(pb: Any, value: AttrValue, depth: int) -> None:
    if isinstance(value, str):
        pb.string_value = value
    elif isinstance(value, bool):
        pb.bool_value = value
    elif isinstance(value, int):
        if value in _INT64:
            pb.int_value = value
        else:
            pb.string_value = str(value)  # no lossless int64 form
    elif isinstance(value, float):
        pb.double_value = value
    elif isinstance(value, bytes):
        pb.bytes_value = value
    elif value is None or depth >= MAX_DEPTH:
        return
    elif isinstance(value, list):
        array = pb.array_value
        array.SetInParent()
        for item in value:
            _fill_value(array.values.add(), item, depth + 1)
    else:
        pb.kvlist_value.SetInParent()
        _fill_attrs(pb.kvlist_value.values, value, depth + 1)
