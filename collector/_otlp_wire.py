"""A decode-only view of the OTLP trace wire format, for :func:`collector.otlp.decode_protobuf`.

``ExportTraceServiceRequest`` (and ``TracesData``, same wire format) parsed with a schema
that keeps the field numbers and wire types of ``opentelemetry/proto/trace/v1/trace.proto``
but declares every ``KeyValue`` list (span, event and resource attributes) as
``repeated bytes``: the upb parser then hands out each attribute as one raw ``bytes``
object instead of a ``KeyValue`` wrapper holding an ``AnyValue`` wrapper — materialising
those wrappers was most of the decoder's cost. :func:`collector.otlp.decode_protobuf` turns
the raw pairs into Python values, memoising the frequent ones.

Only the fields Vigil reads are declared; the others are skipped as unknown fields. Enums
are declared as ``int32`` (same varint encoding; unknown values stay numbers).
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["WireRequest"]

_F = descriptor_pb2.FieldDescriptorProto
_PACKAGE = "vigil.otlp_wire"
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message name -> (field name, number, type, label, message type or "")
_SCHEMA: dict[str, tuple[tuple[str, int, int, int, str], ...]] = {
    "Request": (("resource_spans", 1, _F.TYPE_MESSAGE, _MANY, "ResourceSpans"),),
    "ResourceSpans": (
        ("resource", 1, _F.TYPE_MESSAGE, _ONE, "Resource"),
        ("scope_spans", 2, _F.TYPE_MESSAGE, _MANY, "ScopeSpans"),
    ),
    "Resource": (("attributes", 1, _F.TYPE_BYTES, _MANY, ""),),
    "ScopeSpans": (
        ("scope", 1, _F.TYPE_MESSAGE, _ONE, "Scope"),
        ("spans", 2, _F.TYPE_MESSAGE, _MANY, "Span"),
    ),
    "Scope": (("name", 1, _F.TYPE_STRING, _ONE, ""),),
    "Span": (
        ("trace_id", 1, _F.TYPE_BYTES, _ONE, ""),
        ("span_id", 2, _F.TYPE_BYTES, _ONE, ""),
        ("parent_span_id", 4, _F.TYPE_BYTES, _ONE, ""),
        ("name", 5, _F.TYPE_STRING, _ONE, ""),
        ("kind", 6, _F.TYPE_INT32, _ONE, ""),
        ("start_time_unix_nano", 7, _F.TYPE_FIXED64, _ONE, ""),
        ("end_time_unix_nano", 8, _F.TYPE_FIXED64, _ONE, ""),
        ("attributes", 9, _F.TYPE_BYTES, _MANY, ""),
        ("events", 11, _F.TYPE_MESSAGE, _MANY, "Event"),
        ("status", 15, _F.TYPE_MESSAGE, _ONE, "Status"),
    ),
    "Event": (
        ("time_unix_nano", 1, _F.TYPE_FIXED64, _ONE, ""),
        ("name", 2, _F.TYPE_STRING, _ONE, ""),
        ("attributes", 3, _F.TYPE_BYTES, _MANY, ""),
    ),
    "Status": (
        ("message", 2, _F.TYPE_STRING, _ONE, ""),
        ("code", 3, _F.TYPE_INT32, _ONE, ""),
    ),
}


def _build() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(name="vigil/otlp_wire.proto", package=_PACKAGE, syntax="proto3")
    for message, declared in _SCHEMA.items():
        desc = proto.message_type.add(name=message)
        for name, number, kind, label, type_name in declared:
            field = desc.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Request"))


WireRequest: Any = _build()
"""The message class: ``WireRequest.FromString(body)``."""
