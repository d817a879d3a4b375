"""Wire-level data model shared by every Vigil role.

A :class:`Span` is one decoded OTLP span, dialect-agnostic: ids are lowercase hex
strings, attributes are plain Python values (``str``, ``bool``, ``int``, ``float``,
``bytes``, ``list`` or ``dict`` for OTLP array/kvlist values). A :class:`TraceBatch`
is one record on the stream: the spans of exactly one trace, keyed by trace id, the
same shape as a Kafka record written by the OpenTelemetry Collector's kafka exporter
with ``partition_traces_by_id: true``.

This module imports only the standard library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TypeAlias

AttrValue: TypeAlias = "str | bool | int | float | bytes | list[AttrValue] | dict[str, AttrValue] | None"
Attributes: TypeAlias = Mapping[str, AttrValue]

_EMPTY: Mapping[str, AttrValue] = {}


class SpanKind(IntEnum):
    """OTLP ``Span.SpanKind`` values."""

    UNSPECIFIED = 0
    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(IntEnum):
    """OTLP ``Status.StatusCode`` values."""

    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True, slots=True)
class SpanEvent:
    """A span event (``exception`` events matter most to Vigil)."""

    name: str
    time_ns: int = 0
    attributes: Attributes = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True, slots=True)
class Span:
    """One decoded span.

    Attributes:
        trace_id: 32 lowercase hex characters.
        span_id: 16 lowercase hex characters.
        parent_span_id: 16 lowercase hex characters, or ``None`` for a root span.
        name: the span name.
        kind: the OTLP span kind.
        start_ns / end_ns: Unix epoch nanoseconds (``end_ns`` may be 0 if unknown).
        status_code / status_message: the span status.
        attributes: span attributes.
        events: span events in wire order.
        resource: attributes of the resource that emitted the span.
        scope: instrumentation scope name.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    kind: SpanKind = SpanKind.INTERNAL
    start_ns: int = 0
    end_ns: int = 0
    status_code: StatusCode = StatusCode.UNSET
    status_message: str = ""
    attributes: Attributes = field(default_factory=lambda: _EMPTY)
    events: tuple[SpanEvent, ...] = ()
    resource: Attributes = field(default_factory=lambda: _EMPTY)
    scope: str = ""

    @property
    def is_root(self) -> bool:
        """Whether the span has no parent."""
        return self.parent_span_id is None


@dataclass(frozen=True, slots=True)
class TraceBatch:
    """The spans of one trace that arrived together: one stream record.

    Attributes:
        trace_id: the record key, lowercase hex.
        spans: the spans, all with ``trace_id`` equal to the key.
        received_ns: wall-clock receive time (Unix ns), used for flag-latency figures.
    """

    trace_id: str
    spans: tuple[Span, ...]
    received_ns: int = 0


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """What an OTLP decoder produced from one request body.

    Attributes:
        batches: the accepted spans, split into one batch per trace.
        rejected: number of spans rejected (bad ids and the like).
        errors: human-readable reasons for the rejections (deduplicated, bounded).
    """

    batches: tuple[TraceBatch, ...]
    rejected: int = 0
    errors: tuple[str, ...] = ()

    @property
    def accepted(self) -> int:
        """Number of spans accepted."""
        return sum(len(b.spans) for b in self.batches)
