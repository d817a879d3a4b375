"""Build the :class:`~scorers.model.Step` of a span and the :class:`~scorers.model.ToolCall` of a tool span.

``normalise`` builds one ``Step`` per span, so construction cost matters: both are built
positionally with :func:`collector.model.fast_constructor` (0.8 µs instead of 2.2 µs for a
``Step``).
The expected field orders are :data:`STEP_FIELDS` and :data:`TOOL_CALL_FIELDS`, pinned by
a test so a change to the model cannot silently shift values.
"""

from __future__ import annotations

from typing import Final

from collector.model import Span, fast_constructor
from scorers import content, signals
from scorers.dialects import TOOL_CALL_ID_KEYS, TOOL_NAME_KEYS, entity_name, first, first_str
from scorers.model import Step, StepKind, ToolCall

__all__ = [
    "STEP_FIELDS",
    "TOOL_CALL_FIELDS",
    "TOOL_CALL_ID_KEYS",
    "TOOL_NAME_KEYS",
    "error_text",
    "to_step",
    "to_tool_call",
]

STEP_FIELDS: Final = (
    "span_id",
    "parent_id",
    "name",
    "kind",
    "start_ns",
    "end_ns",
    "error",
    "error_type",
    "status_message",
    "model",
    "input_tokens",
    "output_tokens",
    "finish_reasons",
    "attributes",
    "events",
)
TOOL_CALL_FIELDS: Final = ("span_id", "name", "call_id", "arguments", "result", "error")

_new_step: Final = fast_constructor(Step)
_new_tool_call: Final = fast_constructor(ToolCall)


def to_step(  # noqa: PLR0917 - called once per span: positional arguments are cheaper
    span: Span,
    kind: StepKind,
    err: signals.ErrorInfo,
    model: str | None = None,
    tokens_in: int = 0,
    tokens_out: int = 0,
    reasons: tuple[str, ...] = (),
) -> Step:
    """Return the step of ``span`` in role ``kind`` (the status description is clipped).

    The step keeps references to the span's attributes and events (no copy) for the run-details document.
    """
    status = span.status_message
    status_text = "" if not status else status[: content.MAX_TEXT] if isinstance(status, str) else ""
    return _new_step(
        span.span_id,
        span.parent_span_id,
        span.name,
        kind,
        span.start_ns,
        span.end_ns,
        err.error,
        err.type,
        status_text,
        model,
        tokens_in,
        tokens_out,
        reasons,
        span.attributes,
        span.events,
    )


def to_tool_call(
    span: Span, err: signals.ErrorInfo, twin: tuple[signals.ErrorInfo, str | None] | None = None
) -> tuple[ToolCall, bool]:
    """Return the tool call of a TOOL span and whether it failed (hard or soft error).

    Name from the dialects' tool-name attributes (``gen_ai.tool.name`` / ``tool.name`` /
    ``traceloop.entity.name`` / ``ai.toolCall.name``, :data:`TOOL_NAME_KEYS`) or the span name;
    call id from ``gen_ai.tool.call.id`` / ``tool.id`` / ``ai.toolCall.id``; arguments as
    canonical JSON and the result text when content was captured (see
    :data:`scorers.content.ARGUMENT_KEYS` and :data:`scorers.content.RESULT_KEYS`).

    ``twin`` is the error and call id of another instrumentation's record of the same call:
    the call failed if either record says so, and its id fills a missing one.
    """
    attrs = span.attributes
    captured = not content.TOOL_CONTENT_KEYS.isdisjoint(attrs)
    # A set test first: the common tool span captured its arguments but no result, and reading the
    # result keys one by one cost 14,000 instructions per bench run (BENCHMARKS.md issue 13).
    found = first(attrs, content.RESULT_KEYS) if captured and not content.RESULT_KEY_SET.isdisjoint(attrs) else None
    result = None if found is None else content.as_text(found)
    call_id = first_str(attrs, TOOL_CALL_ID_KEYS)
    if twin is not None:
        if not err.error and twin[0].error:
            err = twin[0]
        call_id = call_id or twin[1]
    soft = result is not None and not err.error and signals.soft_error(result)
    call = _new_tool_call(
        span.span_id,
        first_str(attrs, TOOL_NAME_KEYS) or entity_name(span, StepKind.TOOL),  # dialects.tool_name, inlined
        call_id,
        content.canonical_json(first(attrs, content.ARGUMENT_KEYS)) if captured else None,
        result,
        error_text(err) if err.error else result if soft else None,
    )
    return call, err.error or soft


def error_text(err: signals.ErrorInfo) -> str:
    """``"{type}: {message}"`` of a failed span, without repeating a type the message starts with."""
    parts = [p for p in (err.type, err.message) if p]
    if len(parts) == 2 and parts[1].startswith(parts[0]):
        parts = parts[1:]
    return content.clip(": ".join(parts) or "error")
