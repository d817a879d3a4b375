"""Where the agent's spans go: the standard ``OTEL_*`` variables, read from an injected mapping.

:meth:`ExportSettings.from_env` and :func:`resource_from_env` are the only code of the
helpers that read the environment; ``vigil_setup`` passes them ``os.environ`` unless a
test hands it a dict. Precedence: explicit argument > ``OTEL_EXPORTER_OTLP_TRACES_*`` >
``OTEL_EXPORTER_OTLP_*`` > default (the OTLP exporter specification:
https://opentelemetry.io/docs/specs/otel/protocol/exporter/). A bad value raises
:class:`~collector.errors.SettingsError` naming the variable.

TLS files (``OTEL_EXPORTER_OTLP_*CERTIFICATE``/``*CLIENT_KEY``), the sampler and span
limits are left to the SDK, which reads them from the process environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import unquote

from opentelemetry.sdk import environment_variables as env
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.version import __version__ as sdk_version
from opentelemetry.util.re import parse_env_headers

from collector.errors import SettingsError

HTTP_PROTOBUF: Final = "http/protobuf"
GRPC: Final = "grpc"
PROTOCOLS: Final = (HTTP_PROTOBUF, GRPC)
DEFAULT_HTTP_ENDPOINT: Final = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT: Final = "http://localhost:4317"
COMPRESSIONS: Final = ("none", "gzip", "deflate")
_TRACES_PATH: Final = "/v1/traces"
_BSP_DEFAULTS: Final = {
    env.OTEL_BSP_MAX_QUEUE_SIZE: 2048,
    env.OTEL_BSP_SCHEDULE_DELAY: 5000,
    env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 512,
    env.OTEL_BSP_EXPORT_TIMEOUT: 30000,
}


@dataclass(frozen=True, slots=True)
class ExportSettings:
    """The OTLP exporter and batch processor settings ``vigil_setup`` uses.

    Attributes:
        protocol: ``http/protobuf`` or ``grpc``.
        endpoint: full traces URL for HTTP (``.../v1/traces``), ``scheme://host:port`` for gRPC.
        headers: extra request headers (e.g. an auth token); not shown in ``repr``.
        compression: ``none``, ``gzip`` or ``deflate``.
        timeout_s: export request timeout in seconds (the unit the Python exporters use).
        insecure: gRPC without TLS (None: decided by the endpoint's scheme).
        max_queue_size / schedule_delay_ms / max_export_batch_size / export_timeout_ms:
            the ``BatchSpanProcessor`` settings (``OTEL_BSP_*``).
    """

    protocol: str = HTTP_PROTOBUF
    endpoint: str = DEFAULT_HTTP_ENDPOINT + _TRACES_PATH
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    compression: str = "none"
    timeout_s: float = 10.0
    insecure: bool | None = None
    max_queue_size: int = 2048
    schedule_delay_ms: int = 5000
    max_export_batch_size: int = 512
    export_timeout_ms: int = 30000

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str],
        *,
        endpoint: str | None = None,
        protocol: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> ExportSettings:
        """Resolve the settings from arguments, then ``environ``, then the defaults.

        Args:
            environ: the environment (``os.environ`` or a test's dict).
            endpoint: OTLP base URL (``http://vigil:4318``; HTTP appends ``/v1/traces``
                unless present); None reads ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (used as
                is), then ``OTEL_EXPORTER_OTLP_ENDPOINT``, else localhost:4318 / :4317.
            protocol: ``http/protobuf`` or ``grpc``; None reads
                ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL``,
                else ``http/protobuf``.
            headers: request headers; None reads ``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` /
                ``OTEL_EXPORTER_OTLP_HEADERS`` (``k=v,k2=v2``, URL-encoded values).

        Raises:
            SettingsError: an unsupported protocol or compression, or a bad number.
        """
        chosen = _protocol(environ, protocol)
        bsp = {name: _positive_int(environ, name, default) for name, default in _BSP_DEFAULTS.items()}
        if bsp[env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE] > bsp[env.OTEL_BSP_MAX_QUEUE_SIZE]:
            raise SettingsError(
                "max_export_batch_size",
                env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE,
                f"must be <= {env.OTEL_BSP_MAX_QUEUE_SIZE} ({bsp[env.OTEL_BSP_MAX_QUEUE_SIZE]})",
                bsp[env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE],
            )
        return cls(
            protocol=chosen,
            endpoint=_endpoint(environ, endpoint, chosen),
            headers=dict(headers) if headers is not None else _headers(environ),
            compression=_compression(environ),
            timeout_s=_timeout(environ),
            insecure=_insecure(environ),
            max_queue_size=bsp[env.OTEL_BSP_MAX_QUEUE_SIZE],
            schedule_delay_ms=bsp[env.OTEL_BSP_SCHEDULE_DELAY],
            max_export_batch_size=bsp[env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE],
            export_timeout_ms=bsp[env.OTEL_BSP_EXPORT_TIMEOUT],
        )


def _first(environ: Mapping[str, str], *names: str) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-blank value, with that value."""
    for name in names:
        value = environ.get(name, "").strip()
        if value:
            return name, value
    return None


def _protocol(environ: Mapping[str, str], explicit: str | None) -> str:
    found = ("protocol", explicit) if explicit is not None else None
    found = found or _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, env.OTEL_EXPORTER_OTLP_PROTOCOL)
    if found is None:
        return HTTP_PROTOBUF
    name, value = found
    if value.strip().lower() not in PROTOCOLS:
        raise SettingsError("protocol", name, f"use one of {', '.join(PROTOCOLS)}", value)
    return value.strip().lower()


def _endpoint(environ: Mapping[str, str], explicit: str | None, protocol: str) -> str:
    if explicit is None:
        signal = _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
        if signal is not None:
            return _with_scheme(signal[1]) if protocol == GRPC else signal[1]
        base = _first(environ, env.OTEL_EXPORTER_OTLP_ENDPOINT)
        explicit = base[1] if base is not None else None
    if protocol == GRPC:
        return _with_scheme(explicit or DEFAULT_GRPC_ENDPOINT)
    url = (explicit or DEFAULT_HTTP_ENDPOINT).rstrip("/")
    return url if url.endswith(_TRACES_PATH) else url + _TRACES_PATH


def _with_scheme(endpoint: str) -> str:
    """``host:port`` → ``http://host:port``: gRPC exporters read TLS from the scheme."""
    return endpoint if "://" in endpoint else f"http://{endpoint}"


def _headers(environ: Mapping[str, str]) -> dict[str, str]:
    found = _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_HEADERS, env.OTEL_EXPORTER_OTLP_HEADERS)
    return dict(parse_env_headers(found[1], liberal=True)) if found is not None else {}


def _compression(environ: Mapping[str, str]) -> str:
    found = _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, env.OTEL_EXPORTER_OTLP_COMPRESSION)
    if found is None:
        return "none"
    name, value = found
    if value.lower() not in COMPRESSIONS:
        raise SettingsError("compression", name, f"use one of {', '.join(COMPRESSIONS)}", value)
    return value.lower()


def _timeout(environ: Mapping[str, str]) -> float:
    found = _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, env.OTEL_EXPORTER_OTLP_TIMEOUT)
    if found is None:
        return 10.0
    name, value = found
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise SettingsError("timeout", name, "must be a number of seconds > 0", value)
    return seconds


def _insecure(environ: Mapping[str, str]) -> bool | None:
    found = _first(environ, env.OTEL_EXPORTER_OTLP_TRACES_INSECURE, env.OTEL_EXPORTER_OTLP_INSECURE)
    return None if found is None else found[1].lower() == "true"


def _positive_int(environ: Mapping[str, str], name: str, default: int) -> int:
    value = environ.get(name, "").strip()
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise SettingsError(name.removeprefix("OTEL_BSP_").lower(), name, "must be an integer >= 1", value)
    return number


def resource_from_env(environ: Mapping[str, str], service_name: str | None = None) -> Resource:
    """The resource of the agent's spans: SDK attributes, ``OTEL_RESOURCE_ATTRIBUTES``, service name.

    ``service.name`` is ``service_name`` if given, else ``OTEL_SERVICE_NAME``, else the one in
    ``OTEL_RESOURCE_ATTRIBUTES``, else ``unknown_service`` (the SDK's default).

    Raises:
        SettingsError: an ``OTEL_RESOURCE_ATTRIBUTES`` item is not ``key=value``.
    """
    attributes: dict[str, str] = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.sdk.version": sdk_version,
        SERVICE_NAME: "unknown_service",
    }
    for item in environ.get(env.OTEL_RESOURCE_ATTRIBUTES, "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError("resource_attributes", env.OTEL_RESOURCE_ATTRIBUTES, "items are key=value", item)
        attributes[key.strip()] = unquote(value.strip())
    named = service_name or environ.get(env.OTEL_SERVICE_NAME, "").strip()
    if named:
        attributes[SERVICE_NAME] = named
    return Resource(attributes)
