"""OTLP/JSON trace decoding; the public entry point is :func:`collector.otlp.decode_json`.

Parsed by hand from :func:`json.loads` output (``json_format`` would read the hex ids as
base64). Span-level problems reject the span only; structural problems above the spans
raise :class:`~collector.errors.DecodeError` with ``reason="json"``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any

from collector._otlp_common import (
    _CODES,
    _INT64,
    _KINDS,
    _ZERO_SPAN,
    MAX_DEPTH,
    _Accumulator,
    _id_problem,
    _Invalid,
    start_tally,
    tally,
    truncate_bytes,
    truncate_text,
)
from collector.errors import DecodeError
from collector.model import Attributes, AttrValue, DecodeResult, Span, SpanEvent, SpanKind, StatusCode

_UINT64 = range(2**64)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def decode(body: bytes | bytearray) -> DecodeResult:
    """Decode an OTLP/JSON body; see :func:`collector.otlp.decode_json` for the contract."""
    try:
        text = body.decode("utf-8-sig")  # strict: json.loads(bytes) would let encoded surrogates through
        doc = json.loads(text)
        if _SURROGATE_ESCAPE.search(text):
            doc = _without_lone_surrogates(doc)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DecodeError("json", f"invalid JSON body: {exc}") from exc
    if not isinstance(doc, dict):
        raise DecodeError("json", "OTLP/JSON body must be an object with a 'resourceSpans' list")
    acc = _Accumulator()
    start_tally()
    for i, rs in enumerate(_json_field(doc, "resourceSpans", list, "")):
        path = f"resourceSpans[{i}]"
        try:
            resource = _json_attrs(_json_field(rs, "resource", dict, path).get("attributes"))
        except _Invalid as exc:
            raise DecodeError("json", f"{path}.resource: {exc}") from exc
        for j, ss in enumerate(_json_field(rs, "scopeSpans", list, path)):
            spath = f"{path}.scopeSpans[{j}]"
            scope = _json_field(ss, "scope", dict, spath).get("name") or ""
            if not isinstance(scope, str):
                raise DecodeError("json", f"{spath}.scope.name must be a string")
            for sp in _json_field(ss, "spans", list, spath):
                try:
                    acc.add(_json_span(sp, resource, scope))
                except _Invalid as exc:
                    acc.reject(str(exc))
    acc.truncated = tally()
    return acc.result(len(body))


def _without_lone_surrogates(node: Any) -> Any:
    """Replace lone UTF-16 surrogates (legal as JSON escapes, not encodable in protobuf) by ``?``."""
    if isinstance(node, str):
        return node.encode("utf-8", "replace").decode("utf-8")
    if isinstance(node, list):
        return [_without_lone_surrogates(v) for v in node]
    if isinstance(node, dict):
        return {_without_lone_surrogates(k): _without_lone_surrogates(v) for k, v in node.items()}
    return node


def _json_field(obj: object, key: str, kind: type[Any], path: str) -> Any:
    """``obj[key]`` checked to be a ``kind`` (``list`` or ``dict``); absent or null → empty."""
    if not isinstance(obj, dict):
        raise DecodeError("json", f"{path or 'body'} must be a JSON object")
    value = obj.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise DecodeError("json", f"{path}.{key} must be a {'list' if kind is list else 'object'}")
    return value


def _json_span(sp: object, resource: Attributes, scope: str) -> Span:
    if not isinstance(sp, dict):
        raise _Invalid("span must be a JSON object")
    trace_id = _hex_id(sp.get("traceId"), "traceId")
    span_id = _hex_id(sp.get("spanId"), "spanId")
    parent_id = _hex_id(sp.get("parentSpanId"), "parentSpanId")
    problem = _id_problem(trace_id, span_id, parent_id)
    if problem is not None:
        raise _Invalid(problem)
    status = sp.get("status") or {}
    events = sp.get("events") or []
    if not isinstance(status, dict) or not isinstance(events, list):
        raise _Invalid("status must be an object and events a list")
    return Span(
        trace_id.hex(),
        span_id.hex(),
        parent_id.hex() if parent_id and parent_id != _ZERO_SPAN else None,
        _json_str(sp.get("name"), "name"),
        _json_enum(sp.get("kind"), _KINDS, SpanKind.UNSPECIFIED, "SPAN_KIND_"),
        _json_int(sp.get("startTimeUnixNano"), "startTimeUnixNano", _UINT64),
        _json_int(sp.get("endTimeUnixNano"), "endTimeUnixNano", _UINT64),
        _json_enum(status.get("code"), _CODES, StatusCode.UNSET, "STATUS_CODE_"),
        _json_str(status.get("message"), "status.message"),
        _json_attrs(sp.get("attributes")),
        tuple(_json_event(e) for e in events),
        resource,
        scope,
    )


def _json_event(event: object) -> SpanEvent:
    if not isinstance(event, dict):
        raise _Invalid("event must be a JSON object")
    return SpanEvent(
        _json_str(event.get("name"), "event.name"),
        _json_int(event.get("timeUnixNano"), "event.timeUnixNano", _UINT64),
        _json_attrs(event.get("attributes")),
    )


def _hex_id(value: object, name: str) -> bytes:
    if value is None or value == "":
        return b""
    try:
        return binascii.unhexlify(value)  # type: ignore[arg-type]  # non-str raises TypeError
    except (binascii.Error, ValueError, TypeError) as exc:
        raise _Invalid(f"invalid {name}: not a hex string") from exc


def _json_str(value: object, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Invalid(f"{name} must be a string")
    return value


def _json_int(value: object, name: str, bounds: range = _INT64) -> int:
    number: int | None = None
    if value is None:
        number = 0
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            number = None
    if number is None or number not in bounds:
        raise _Invalid(f"{name} must be an integer (or a decimal string) in [{bounds.start}, {bounds.stop})")
    return number


def _json_float(value: object, name: str) -> float:
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        try:
            return float(value)  # strings also "NaN", "Infinity", "-Infinity" (proto3 JSON)
        except (ValueError, OverflowError):
            pass
    raise _Invalid(f"{name} must be a number")


def _json_enum(value: object, known: dict[object, Any], default: Any, prefix: str) -> Any:
    """Integer enums per OTLP; names like ``SPAN_KIND_SERVER`` are tolerated; unknown → default."""
    if isinstance(value, str):
        member = type(default).__members__.get(value.removeprefix(prefix))
        return member or known.get(int(value) if value.isdecimal() else None, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default  # lists, objects, null: not an enum value
    return known.get(value, default)


def _json_attrs(items: object, depth: int = 0) -> dict[str, AttrValue]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise _Invalid("attributes must be a list of key/value objects")
    out: dict[str, AttrValue] = {}
    for kv in items:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise _Invalid("attribute must be an object with a string 'key'")
        out[kv["key"]] = _json_value(kv.get("value"), depth)
    return out


def _json_value(value: object, depth: int) -> AttrValue:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _Invalid("attribute value must be an AnyValue object")
    for key, inner in value.items():  # the first known key wins; unknown keys are ignored
        if key == "stringValue":
            return truncate_text(_json_str(inner, key))
        if key == "intValue":
            return _json_int(inner, key)
        if key == "doubleValue":
            return _json_float(inner, key)
        if key == "boolValue":
            if not isinstance(inner, bool):
                raise _Invalid("boolValue must be true or false")
            return inner
        if key == "bytesValue":
            return truncate_bytes(_json_bytes(inner))
        if key in ("arrayValue", "kvlistValue"):
            return _json_composite(key, inner, depth)
    return None


def _json_bytes(value: object) -> bytes:
    if not isinstance(value, str):
        raise _Invalid("bytesValue must be a base64 string")
    text = value.replace("-", "+").replace("_", "/")  # proto3 JSON accepts URL-safe base64 too
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise _Invalid("bytesValue is not valid base64") from exc


def _json_composite(key: str, inner: object, depth: int) -> AttrValue:
    if depth >= MAX_DEPTH:
        return None
    values = (inner.get("values") if isinstance(inner, dict) else inner) or []
    if not isinstance(values, list):
        raise _Invalid(f"{key}.values must be a list")
    if key == "kvlistValue":
        return _json_attrs(values, depth + 1)
    return [_json_value(v, depth + 1) for v in values]
