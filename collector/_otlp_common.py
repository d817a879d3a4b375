"""What every OTLP decoder of :mod:`collector.otlp` shares: the limits, the cut-value tally, the id
checks and the accumulator of a body's spans and rejections.

The protobuf decoders (``collector/otlp.py``, ``collector/_otlp_fast.c``) and the JSON decoder
(``collector/_otlp_json.py``) build on it; the public names are re-exported by :mod:`collector.otlp`.
"""

from __future__ import annotations

import threading
import time

from collector.budget import span_bytes
from collector.model import DecodeResult, Span, SpanKind, StatusCode, TraceBatch, fast_constructor

MAX_DEPTH = 32
"""Deepest ``array``/``kvlist`` nesting kept in attribute values; deeper values become ``None``."""
MAX_ERRORS = 10
"""Most distinct rejection reasons kept in :attr:`DecodeResult.errors`."""
MAX_ATTRIBUTE_BYTES = 64 * 1024
"""Longest string (in UTF-8 bytes, cut on a character boundary) or bytes attribute value kept;
longer ones are cut to it. The OpenTelemetry SDKs have the same knob on the sending side
(``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``, unlimited by default:
https://opentelemetry.io/docs/specs/otel/common/#attribute-limits). 64 KiB keeps whole the
captured prompts and answers reviewers read (typically 1-20 KB a message) while bounding what one
value can pin in the stream, the runs in flight and the caches."""

_QUICK_TEXT = MAX_ATTRIBUTE_BYTES // 4  # a str of at most this many characters fits whatever its text
_tally = threading.local()  # values cut by the decode running on this thread


def truncate_text(text: str) -> str:
    """``text`` cut to :data:`MAX_ATTRIBUTE_BYTES` bytes of UTF-8 (a character cut in two is left out)."""
    if len(text) <= _QUICK_TEXT:
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_ATTRIBUTE_BYTES:
        return text
    _tally.cut = getattr(_tally, "cut", 0) + 1
    return data[:MAX_ATTRIBUTE_BYTES].decode("utf-8", "ignore")


def truncate_bytes(data: bytes) -> bytes:
    """``data`` cut to :data:`MAX_ATTRIBUTE_BYTES` bytes."""
    if len(data) <= MAX_ATTRIBUTE_BYTES:
        return data
    _tally.cut = getattr(_tally, "cut", 0) + 1
    return data[:MAX_ATTRIBUTE_BYTES]


def start_tally() -> None:
    """Start counting the values cut by the decode about to run on this thread."""
    _tally.cut = 0


def count_cut(values: int) -> None:
    """Count ``values`` cut by a decode running on this thread (the compiled pair reader's count)."""
    _tally.cut = getattr(_tally, "cut", 0) + values


def tally() -> int:
    """Values cut on this thread since :func:`start_tally`."""
    return int(getattr(_tally, "cut", 0))


_KINDS: dict[object, SpanKind] = {int(k): k for k in SpanKind}
_CODES: dict[object, StatusCode] = {int(c): c for c in StatusCode}
_ZERO_TRACE = bytes(16)
_ZERO_SPAN = bytes(8)
_INT64 = range(-(2**63), 2**63)


_new_batch = fast_constructor(TraceBatch)


class _Invalid(ValueError):
    """One span (or one resource) is malformed; its message is the rejection reason."""


class _Accumulator:
    """Collects accepted spans per trace and rejection reasons while a body is decoded."""

    __slots__ = ("errors", "rejected", "traces", "truncated")

    def __init__(self) -> None:
        self.traces: dict[str, list[Span]] = {}
        self.rejected = 0
        self.errors: dict[str, None] = {}
        self.truncated = 0

    def add(self, span: Span) -> None:
        self.traces.setdefault(span.trace_id, []).append(span)

    def reject_ids(self, trace_id: bytes, span_id: bytes, parent_id: bytes) -> None:
        """Reject a span for its ids (the compiled decoder's callback)."""
        self.reject(_id_problem(trace_id, span_id, parent_id) or "invalid ids")

    def reject(self, reason: str, count: int = 1) -> None:
        self.rejected += count
        if len(self.errors) < MAX_ERRORS:
            self.errors[reason] = None

    def result(self, body_bytes: int) -> DecodeResult:
        """The decoded batches, each with its memory estimate (its spans' share of ``body_bytes``)."""
        now = time.time_ns()
        traces = self.traces
        per_span = span_bytes(body_bytes, sum(len(spans) for spans in traces.values()))
        batches = tuple(_new_batch(tid, tuple(spans), now, per_span * len(spans)) for tid, spans in traces.items())
        return DecodeResult(batches, self.rejected, tuple(self.errors), self.truncated)


def _id_problem(trace_id: bytes, span_id: bytes, parent_id: bytes) -> str | None:
    """Why the ids of a span are unacceptable, or ``None`` when they are fine."""
    if len(trace_id) != 16:
        return f"invalid trace_id: expected 16 bytes, got {len(trace_id)}"
    if trace_id == _ZERO_TRACE:
        return "invalid trace_id: all zero"
    if len(span_id) != 8:
        return f"invalid span_id: expected 8 bytes, got {len(span_id)}"
    if span_id == _ZERO_SPAN:
        return "invalid span_id: all zero"
    if parent_id and len(parent_id) != 8:
        return f"invalid parent_span_id: expected 0 or 8 bytes, got {len(parent_id)}"
    return None
