"""``vigil_setup``: a tracer provider exporting over OTLP to Vigil, in one call.

It builds a ``TracerProvider`` (or joins yours) with a ``BatchSpanProcessor`` and an
OTLP/HTTP (default) or OTLP/gRPC exporter configured by the standard ``OTEL_*`` variables
(see :mod:`collector.instrument.config`), makes it the helpers' default, and enables the
official OpenAI instrumentation (``opentelemetry-instrumentation-genai-openai``) on it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType

import structlog
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from collector.instrument import spans
from collector.instrument.config import GRPC, ExportSettings, resource_from_env
from collector.instrument.content import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, capture_from_env

log = structlog.get_logger(__name__)


class ExportCounts(SpanExporter):
    """Wraps an exporter and counts the spans it exported and the spans whose export failed.

    Attributes:
        exported: spans the wrapped exporter reported exported.
        failed: spans of failed exports (the SDK logs and drops them).
    """

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export through the wrapped exporter and count the outcome (an exception counts as a failure)."""
        result = SpanExportResult.FAILURE
        try:
            result = self._exporter.export(spans)
        finally:
            self._count(result, len(spans))
        return result

    def _count(self, result: SpanExportResult, spans: int) -> None:
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += spans
            else:
                self.failed += spans

    def shutdown(self) -> None:
        """Shut the wrapped exporter down."""
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the wrapped exporter."""
        return self._exporter.force_flush(timeout_millis)


class VigilTracing:
    """What :func:`vigil_setup` set up; ``shutdown()`` before the process exits.

    Also a context manager that shuts down on exit. Thread-safe as the SDK is.

    Attributes:
        tracer_provider: the provider the helpers and the OpenAI instrumentation use.
        settings: the resolved exporter and batch settings (the OTLP part unused when an
            exporter was passed in).
        capture_content: whether the helpers record content.
        export_counts: spans exported and spans whose export failed so far.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        processor: SpanProcessor,
        *,
        owns_provider: bool,
        settings: ExportSettings,
        capture_content: bool,
        previous: spans.Defaults | None,
        instrumented_openai: bool = False,
        export_counts: ExportCounts | None = None,
    ) -> None:
        self.tracer_provider = tracer_provider
        self.export_counts = export_counts
        self.settings = settings
        self.capture_content = capture_content
        self._processor = processor
        self._owns_provider = owns_provider
        self._previous = previous
        self._instrumented_openai = instrumented_openai
        self._shut = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export every ended span now; blocks up to ``timeout_millis``.

        Returns:
            True if everything was exported in time.
        """
        if self._owns_provider:
            return self.tracer_provider.force_flush(timeout_millis)
        return self._processor.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush, stop exporting and undo the setup; idempotent.

        Shuts down the provider it created (or only its own processor on a provider you
        passed), disables the OpenAI instrumentation it enabled, and restores the
        helpers' previous defaults. The global tracer provider cannot be unset; spans
        sent to it afterwards are dropped.
        """
        if self._shut:
            return
        self._shut = True
        if self._instrumented_openai:
            _uninstrument_openai()
            self._instrumented_openai = False
        spans.restore(self._previous, self.tracer_provider)
        if self._owns_provider:
            self.tracer_provider.shutdown()
        else:
            self._processor.shutdown()

    def __enter__(self) -> VigilTracing:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.shutdown()


_EVAL_PROVIDER: list[TracerProvider] = []
"""The provider of ``vigil eval run``'s in-process Vigil while it runs (see :func:`join_eval_harness`)."""


def join_eval_harness(provider: TracerProvider | None) -> None:
    """Make :func:`vigil_setup` join ``provider`` instead of exporting on its own (None: undo).

    ``vigil eval run`` installs a provider that already exports to its in-process Vigil and stamps
    each turn's spans with the eval case; an agent that calls ``vigil_setup()`` while it runs must use
    that provider, not a second one of its own.
    """
    _EVAL_PROVIDER[:] = [provider] if provider is not None else []


def vigil_setup(
    service_name: str | None = None,
    endpoint: str | None = None,
    *,
    protocol: str | None = None,
    capture_content: bool | None = None,
    instrument_openai: bool = True,
    headers: Mapping[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
    exporter: SpanExporter | None = None,
    environ: Mapping[str, str] | None = None,
    set_global: bool = True,
) -> VigilTracing:
    """Send this process's agent spans to Vigil over OTLP.

    Three lines instrument an agent::

        tracing = vigil_setup(service_name="support-bot")
        with agent_run("support", max_iterations=8) as run: ...
        tracing.shutdown()

    Args:
        service_name: ``service.name`` of the spans; None reads ``OTEL_SERVICE_NAME``
            (then ``OTEL_RESOURCE_ATTRIBUTES``). Ignored when ``tracer_provider`` is given.
        endpoint: OTLP base URL; None reads ``OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT``, else
            ``http://localhost:4318`` (HTTP) or ``http://localhost:4317`` (gRPC).
        protocol: ``"http/protobuf"`` or ``"grpc"``; None reads
            ``OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL``, else ``http/protobuf``.
        capture_content: record tool arguments/results and outputs on the helpers' spans;
            None reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (``true``,
            ``span_only``, ``span_and_event`` = on); off by default. The OpenAI
            instrumentation reads that variable itself.
        instrument_openai: enable the official OpenAI instrumentation on this provider
            when it is installed and not already enabled.
        headers: OTLP request headers; None reads ``OTEL_EXPORTER_OTLP_(TRACES_)HEADERS``.
        tracer_provider: add Vigil's exporter to this SDK provider instead of creating one
            (its resource is kept; ``shutdown`` then stops only Vigil's processor).
        exporter: export with this exporter instead of OTLP (tests, a console exporter);
            still behind the batch processor.
        environ: the environment to read (default ``os.environ``); tests pass a dict.
        set_global: make the new provider the global one when none is set yet (so third-party
            instrumentors pick it up). ``vigil run --demo`` passes False: in Vigil's own process a
            global provider would let libraries that trace by default (FastAPI's telemetry) send
            Vigil's own requests to its receiver.

    Returns:
        The set-up tracing, with ``tracer_provider``, ``force_flush()`` and ``shutdown()``.

    Raises:
        SettingsError: an ``OTEL_*`` variable or argument has an unsupported value.

    The global tracer provider is set to the new provider only if none is set yet and
    ``set_global`` (so third-party instrumentors pick it up); the helpers use it either way. The
    ``BatchSpanProcessor`` honours ``OTEL_BSP_*``; the SDK registers an ``atexit`` flush.
    """
    environ = os.environ if environ is None else environ
    capture = capture_from_env(environ) if capture_content is None else capture_content
    if environ.get(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "").strip().lower() == "true":
        log.warning(
            "capture_content_true_ignored_by_openai_instrumentation",
            hint=f"set {OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT}=span_only: the OpenAI "
            "instrumentation records no prompt or answer with 'true'",
        )
    settings = ExportSettings.from_env(environ, endpoint=endpoint, protocol=protocol, headers=headers)
    processor: SpanProcessor
    counts: ExportCounts | None = None
    if tracer_provider is None and exporter is None and _EVAL_PROVIDER:
        tracer_provider, processor = _EVAL_PROVIDER[0], SpanProcessor()  # it already exports (vigil eval run)
    else:
        counts = ExportCounts(exporter if exporter is not None else _otlp_exporter(settings))
        processor = _batch_processor(counts, settings)
    owns = tracer_provider is None
    provider = tracer_provider or TracerProvider(resource=resource_from_env(environ, service_name))
    provider.add_span_processor(processor)
    if set_global and isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)
    previous = spans.configure(provider, capture)
    instrumented = _instrument_openai(provider) if instrument_openai else False
    tracing = VigilTracing(
        provider,
        processor,
        owns_provider=owns,
        settings=settings,
        capture_content=capture,
        previous=previous,
        instrumented_openai=instrumented,
        export_counts=counts,
    )
    log.debug("vigil_tracing_set_up", settings=repr(settings), capture_content=capture)
    return tracing


def _batch_processor(exporter: SpanExporter, settings: ExportSettings) -> BatchSpanProcessor:
    return BatchSpanProcessor(
        exporter,
        max_queue_size=settings.max_queue_size,
        schedule_delay_millis=settings.schedule_delay_ms,
        max_export_batch_size=settings.max_export_batch_size,
        export_timeout_millis=settings.export_timeout_ms,
    )


def _otlp_exporter(settings: ExportSettings) -> SpanExporter:
    if settings.protocol == GRPC:
        import grpc
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        grpc_compression = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}
        insecure = settings.insecure if settings.insecure is not None else settings.endpoint.startswith("http://")
        return GrpcExporter(
            endpoint=settings.endpoint,
            insecure=insecure,
            headers=dict(settings.headers) or None,
            timeout=settings.timeout_s,
            compression=grpc_compression.get(settings.compression, grpc.Compression.NoCompression),
        )
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter(
        endpoint=settings.endpoint,
        headers=dict(settings.headers),
        timeout=settings.timeout_s,
        compression=Compression(settings.compression),
    )


def _instrument_openai(provider: TracerProvider) -> bool:
    """Enable the official OpenAI instrumentation on ``provider``; True if this call enabled it."""
    try:
        from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor
    except ImportError as exc:  # the package is a dependency, but a trimmed install may lack it
        log.warning("openai_instrumentation_unavailable", error=str(exc))
        return False
    instrumentor = OpenAIInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        log.info("openai_instrumentation_already_enabled")
        return False
    instrumentor.instrument(tracer_provider=provider)
    return bool(instrumentor.is_instrumented_by_opentelemetry)


def _uninstrument_openai() -> None:
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    OpenAIInstrumentor().uninstrument()
