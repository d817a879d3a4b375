"""Test doubles for code instrumented with the helpers (ours and users').

:func:`capture_spans` routes every helper span into an ``InMemorySpanExporter`` at once
(``SimpleSpanProcessor``), without touching the global tracer provider::

    with capture_spans(capture_content=True) as exporter:
        with agent_run("support"):
            ...
    [span] = exporter.get_finished_spans()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from collector.instrument import spans


@contextmanager
def capture_spans(*, capture_content: bool = False) -> Iterator[InMemorySpanExporter]:
    """Make a fresh in-memory provider the helpers' default for the block.

    Args:
        capture_content: whether the helpers record content inside the block.

    Yields:
        The exporter holding every ended span (``get_finished_spans()``).
    """
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = spans.configure(provider, capture_content)
    try:
        yield exporter
    finally:
        spans.restore(previous, provider)
        provider.shutdown()
