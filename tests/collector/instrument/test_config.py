"""Tests for collector.instrument.config: OTEL_* variables from an injected mapping."""

from __future__ import annotations

import pytest

from collector.errors import SettingsError
from collector.instrument.config import ExportSettings, resource_from_env


class TestEndpoint:
    """Explicit endpoint > OTEL_EXPORTER_OTLP_TRACES_ENDPOINT > OTEL_EXPORTER_OTLP_ENDPOINT > default."""

    @pytest.mark.parametrize(
        ("environ", "explicit", "protocol", "expected"),
        [
            ({}, None, None, "http://localhost:4318/v1/traces"),
            ({}, None, "grpc", "http://localhost:4317"),
            ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://vigil:4318/"}, None, None, "http://vigil:4318/v1/traces"),
            ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/custom"}, None, None, "http://c:9/custom"),
            (
                {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/t", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://b:1"},
                None,
                None,
                "http://c:9/t",
            ),
            ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:9/t"}, "http://x:1", None, "http://x:1/v1/traces"),
            ({}, "http://x:1/v1/traces", None, "http://x:1/v1/traces"),
            ({"OTEL_EXPORTER_OTLP_ENDPOINT": "vigil:4317"}, None, "grpc", "http://vigil:4317"),
            ({}, "https://vigil:4317", "grpc", "https://vigil:4317"),
        ],
        ids=[
            "http-default",
            "grpc-default",
            "base-url-gets-path",
            "signal-url-as-is",
            "signal-beats-base",
            "explicit-beats-env",
            "explicit-with-path",
            "grpc-scheme-added",
            "grpc-https-kept",
        ],
    )
    def test_precedence(
        self, environ: dict[str, str], explicit: str | None, protocol: str | None, expected: str
    ) -> None:
        """The endpoint is resolved as the OTLP exporter spec says."""
        assert expected == ExportSettings.from_env(environ, endpoint=explicit, protocol=protocol).endpoint


class TestProtocolAndTransport:
    """Protocol, headers, compression, timeout and TLS come from the standard variables."""

    def test_defaults(self) -> None:
        """An empty environment gives OTLP/HTTP protobuf with the SDK's batch defaults."""
        s = ExportSettings.from_env({})
        assert ("http/protobuf", {}, "none", 10.0, None) == (
            s.protocol,
            dict(s.headers),
            s.compression,
            s.timeout_s,
            s.insecure,
        )
        assert (2048, 5000, 512, 30000) == (
            s.max_queue_size,
            s.schedule_delay_ms,
            s.max_export_batch_size,
            s.export_timeout_ms,
        )

    def test_protocol_from_env_and_argument(self) -> None:
        """OTEL_EXPORTER_OTLP_TRACES_PROTOCOL beats the generic one; an argument beats both."""
        environ = {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}
        assert "grpc" == ExportSettings.from_env(environ).protocol
        assert "http/protobuf" == ExportSettings.from_env(environ, protocol="http/protobuf").protocol

    @pytest.mark.parametrize("bad", ["http/json", "udp"])
    def test_unsupported_protocol(self, bad: str) -> None:
        """http/json (unsupported by the Python exporters) and nonsense are refused, naming the variable."""
        with pytest.raises(SettingsError) as caught:
            ExportSettings.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": bad})
        assert ("OTEL_EXPORTER_OTLP_PROTOCOL", bad) == (caught.value.variable, caught.value.value)

    def test_headers(self) -> None:
        """Signal headers beat generic ones, values are URL-decoded; explicit headers replace both."""
        environ = {
            "OTEL_EXPORTER_OTLP_HEADERS": "x-generic=1",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%20t0ken,x-team=ai",
        }
        assert {"authorization": "Bearer t0ken", "x-team": "ai"} == dict(ExportSettings.from_env(environ).headers)
        assert {"x-mine": "2"} == dict(ExportSettings.from_env(environ, headers={"x-mine": "2"}).headers)

    def test_headers_not_in_repr(self) -> None:
        """Header values (tokens) never show in repr."""
        s = ExportSettings.from_env({"OTEL_EXPORTER_OTLP_HEADERS": "authorization=s3cret"})
        assert "s3cret" not in repr(s)

    def test_compression_timeout_insecure(self) -> None:
        """Compression, timeout (seconds) and insecure are read, signal variables first."""
        environ = {
            "OTEL_EXPORTER_OTLP_COMPRESSION": "deflate",
            "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "GZIP",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "2.5",
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
        }
        s = ExportSettings.from_env(environ)
        assert ("gzip", 2.5, True) == (s.compression, s.timeout_s, s.insecure)

    @pytest.mark.parametrize(
        ("variable", "value"),
        [
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1"),
        ],
    )
    def test_bad_values(self, variable: str, value: str) -> None:
        """Bad compression or timeout values are refused, naming the variable."""
        with pytest.raises(SettingsError) as caught:
            ExportSettings.from_env({variable: value})
        assert variable == caught.value.variable


class TestBatchProcessor:
    """OTEL_BSP_* configure the batch span processor."""

    def test_values_read(self) -> None:
        """All four variables are read."""
        environ = {
            "OTEL_BSP_MAX_QUEUE_SIZE": "100",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10",
            "OTEL_BSP_EXPORT_TIMEOUT": "1000",
        }
        s = ExportSettings.from_env(environ)
        assert (100, 50, 10, 1000) == (
            s.max_queue_size,
            s.schedule_delay_ms,
            s.max_export_batch_size,
            s.export_timeout_ms,
        )

    @pytest.mark.parametrize(
        "environ",
        [
            {"OTEL_BSP_MAX_QUEUE_SIZE": "0"},
            {"OTEL_BSP_SCHEDULE_DELAY": "fast"},
            {"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"},
        ],
        ids=["zero-queue", "not-a-number", "batch-over-queue"],
    )
    def test_bad_values(self, environ: dict[str, str]) -> None:
        """Non-positive, non-numeric and inconsistent values are refused."""
        with pytest.raises(SettingsError, match="OTEL_BSP_"):
            ExportSettings.from_env(environ)


class TestResource:
    """service.name: argument > OTEL_SERVICE_NAME > OTEL_RESOURCE_ATTRIBUTES > unknown_service."""

    def test_precedence(self) -> None:
        """Each source wins over the ones after it."""
        attrs = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,deployment.environment=prod"}
        named = {**attrs, "OTEL_SERVICE_NAME": "from-var"}
        assert "unknown_service" == resource_from_env({}).attributes["service.name"]
        assert "from-attrs" == resource_from_env(attrs).attributes["service.name"]
        assert "from-var" == resource_from_env(named).attributes["service.name"]
        assert "from-arg" == resource_from_env(named, "from-arg").attributes["service.name"]

    def test_attributes_decoded_and_sdk_kept(self) -> None:
        """Resource attributes are URL-decoded and the SDK's own attributes stay."""
        r = resource_from_env({"OTEL_RESOURCE_ATTRIBUTES": "team=agents%20core, region = eu "}).attributes
        assert ("agents core", "eu", "python") == (r["team"], r["region"], r["telemetry.sdk.language"])

    def test_malformed_item(self) -> None:
        """An item without '=' is refused, naming the variable."""
        with pytest.raises(SettingsError, match="OTEL_RESOURCE_ATTRIBUTES"):
            resource_from_env({"OTEL_RESOURCE_ATTRIBUTES": "team"})
