"""Getting traces in: OTLP decoding, receivers, the in-process stream, settings.

Public surface: the span model. Everything else is imported from its module.
"""

from __future__ import annotations

from collector.model import DecodeResult, Span, SpanEvent, TraceBatch

__all__ = ["DecodeResult", "Span", "SpanEvent", "TraceBatch"]
