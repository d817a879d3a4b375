"""Isolation for the helper tests: a fresh OTel global tracer provider and fresh helper defaults per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from collector.instrument import spans
from collector.instrument.testing import capture_spans


@pytest.fixture(autouse=True)
def fresh_globals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset the global tracer provider (OTel allows setting it once per process) and the helpers' defaults."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(spans, "_defaults", None)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Every helper span of the test, content capture off."""
    with capture_spans() as captured:
        yield captured


@pytest.fixture
def capturing() -> Iterator[InMemorySpanExporter]:
    """Every helper span of the test, content capture on."""
    with capture_spans(capture_content=True) as captured:
        yield captured
