"""Span plumbing shared by the helpers: defaults, tracers, open/close, errors, decorators.

The helpers use, in this order: the ``tracer_provider`` passed to them, the provider of
the enclosing :func:`~collector.instrument.agent_run`, the provider of the last
:func:`~collector.instrument.vigil_setup` (until its ``shutdown``), else the global one.
Whether content is captured is process-wide: ``vigil_setup``'s choice, else
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` read on first use.

A helper span is started with ``Tracer.start_span`` and made current with one
``context.attach`` (what ``start_as_current_span`` does, without its generator), so a
helper costs about what a bare SDK span costs (``vigil bench``).
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, TypeVar, cast

import structlog
from opentelemetry import context, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.util.types import AttributeValue

from collector.errors import SettingsError
from collector.instrument.content import MAX_ATTRIBUTE_CHARS, capture_from_env, clip

log = structlog.get_logger(__name__)

SCOPE_NAME: Final = "vigil.instrument"
"""Instrumentation scope of every helper span."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Defaults:
    """What helpers use when not told otherwise.

    Attributes:
        provider: tracer provider for spans outside any run (None: the global provider).
        capture: whether content (arguments, results, outputs) is recorded.
    """

    provider: TracerProvider | None
    capture: bool


_defaults: Defaults | None = None


def configure(provider: TracerProvider | None, capture: bool) -> Defaults | None:
    """Make ``provider`` and ``capture`` the helpers' defaults; returns the previous ones.

    Called by ``vigil_setup`` and :func:`collector.instrument.testing.capture_spans`.
    """
    global _defaults  # one process-wide default, like OTel's global tracer provider
    previous, _defaults = _defaults, Defaults(provider, capture)
    return previous


def restore(previous: Defaults | None, provider: TracerProvider | None = None) -> None:
    """Put ``previous`` defaults back (only while ``provider``'s are current, when given)."""
    global _defaults  # noqa: PLW0603 - see configure
    if provider is None or (_defaults is not None and _defaults.provider is provider):
        _defaults = previous


def defaults() -> Defaults:
    """The current defaults; without ``vigil_setup``, the global provider and the capture variable."""
    global _defaults  # noqa: PLW0603 - see configure
    if _defaults is None:
        try:
            capture = capture_from_env(os.environ)
        except SettingsError as exc:
            log.warning("content_capture_variable_invalid", variable=exc.variable, value=exc.value)
            capture = False
        _defaults = Defaults(None, capture)
    return _defaults


@functools.lru_cache(maxsize=32)
def _tracer_of(provider: TracerProvider) -> Tracer:
    return provider.get_tracer(SCOPE_NAME)


def tracer_for(provider: TracerProvider | None) -> Tracer:
    """The helpers' tracer on ``provider`` (cached), or on the global provider for None."""
    return _tracer_of(provider) if provider is not None else trace.get_tracer(SCOPE_NAME)


def error_type(exc: BaseException) -> str:
    """``module.QualName`` of the exception's class (no module for builtins), as the SDK writes it."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class Scope:
    """One helper span: started and made current on enter, ended on exit.

    On exit with an exception the span gets status ERROR with ``"{Type}: {message}"``,
    ``error.type`` and an ``exception`` event; the exception propagates.
    """

    __slots__ = ("_span", "_token")

    def __init__(self) -> None:
        self._span: Span | None = None
        self._token: object = None

    def _open(self, tracer: Tracer, name: str, attributes: Mapping[str, AttributeValue]) -> Span:
        if self._span is not None:
            raise RuntimeError(f"{type(self).__name__} is already entered; create one per use")
        span = tracer.start_span(name, kind=SpanKind.INTERNAL, attributes=attributes)
        self._span = span
        self._token = context.attach(trace.set_span_in_context(span))
        return span

    def _close(self, exc: BaseException | None) -> None:
        span = self._span
        if span is None:
            return
        if exc is not None:
            record_error(span, exc)
        context.detach(cast(Any, self._token))
        span.end()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._close(exc)

    def _active_span(self, method: str) -> Span:
        if self._span is None:
            raise RuntimeError(f"{type(self).__name__}.{method}() called outside its with block")
        return self._span

    def _record_content(
        self, method: str, key: str, value: object, capture: bool, text: Callable[[object], str]
    ) -> None:
        """Set ``key`` to ``text(value)`` when ``capture`` is on (``AgentRun.set_output``, ``ToolCall.set_result``).

        Raises:
            RuntimeError: called outside the ``with`` block.
        """
        span = self._active_span(method)
        if capture:
            span.set_attribute(key, text(value))


def record_error(span: Span, exc: BaseException) -> None:
    """Mark ``span`` failed by ``exc``: ``error.type``, status ERROR, ``exception`` event."""
    span.set_attribute("error.type", error_type(exc))
    span.record_exception(exc, escaped=True)
    span.set_status(Status(StatusCode.ERROR, clip(f"{type(exc).__name__}: {exc}", MAX_ATTRIBUTE_CHARS)))


ExitArgs = tuple[type[BaseException] | None, BaseException | None, TracebackType | None]


def wrap(fn: F, enter: Callable[[tuple[Any, ...], dict[str, Any]], Any], on_result: bool = False) -> F:
    """Decorate ``fn`` so every call runs inside the scope ``enter(args, kwargs)`` returns.

    Sync and ``async def`` functions are supported (generators are not). With
    ``on_result`` the return value is handed to the scope's ``set_result``.

    Args:
        fn: the function to decorate.
        enter: builds a fresh, not yet entered scope for one call.
        on_result: pass the return value to ``scope.set_result``.

    Returns:
        The wrapper, with ``fn``'s name, docstring and signature.
    """
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            with enter(args, kwargs) as scope:
                result = await fn(*args, **kwargs)
                if on_result:
                    scope.set_result(result)
                return result

        return cast(F, run_async)

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with enter(args, kwargs) as scope:
            result = fn(*args, **kwargs)
            if on_result:
                scope.set_result(result)
            return result

    return cast(F, run)
