"""Errors of the collector package (one root: :class:`CollectorError`)."""

from __future__ import annotations


class CollectorError(Exception):
    """Root of every error raised by :mod:`collector`."""


class SettingsError(CollectorError, ValueError):
    """A configuration value is invalid; Vigil refuses to start.

    Attributes:
        key: the settings key (YAML name).
        variable: the environment variable that sets it.
        reason: what is wrong.
        value: the offending value, if any.
    """

    def __init__(self, key: str, variable: str, reason: str, value: object = None) -> None:
        self.key = key
        self.variable = variable
        self.reason = reason
        self.value = value
        super().__init__(f"invalid setting {key!r} ({variable}={value!r}): {reason}")


class ListenError(CollectorError, OSError):
    """A listener could not bind its address (port in use, not permitted); Vigil refuses to start.

    The one error of every listener (OTLP/HTTP, OTLP/gRPC, the API, the probes): ``what`` names the
    listener, ``reason`` what went wrong (by default: the port is in use or not permitted).
    """

    def __init__(
        self,
        what: str,
        host: str,
        port: int,
        reason: str = "the port is in use or not permitted; stop what holds it or choose another port",
    ) -> None:
        super().__init__(f"cannot listen on {host}:{port} ({what}): {reason}")


class DecodeError(CollectorError, ValueError):
    """An OTLP body could not be decoded at all.

    Attributes:
        reason: a short metric label (``protobuf``, ``json``, ``gzip``...).
    """

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class BodyTooLargeError(CollectorError):
    """The request body exceeds the limit after decompression."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"request body exceeds {limit} bytes after decompression")


class BackpressureError(CollectorError):
    """The downstream stream is full; the sender should retry after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, message: str | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message or f"downstream full, retry after {retry_after}s")


class StreamFullError(BackpressureError):
    """The in-process stream has no room (records, bytes, or the assembler's pressure): the body is
    refused for the pipeline's room, not for memory or disk, and its retry will come back."""
