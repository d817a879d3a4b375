"""Captured content: the opt-in switch, size caps and the JSON text put on spans.

Content (tool arguments and results, the agent's final answer) is off by default, as the
GenAI semantic conventions ask (content is opt-in:
https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/), and switched on by the standard
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` variable or ``vigil_setup``'s
``capture_content``. Every string the helpers record is clipped to
:data:`MAX_ATTRIBUTE_CHARS`, so a huge tool result cannot bloat a span.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any, Final

from collector.errors import SettingsError

OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: Final = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""Content capture switch shared with the official GenAI instrumentations.

``true``, ``span_only`` and ``span_and_event`` (any case) turn capture on for the helpers'
spans; unset, ``false``, ``no_content`` and ``event_only`` leave it off (default off).
"""

MAX_ATTRIBUTE_CHARS: Final = 8192
"""Characters kept of any string the helpers put on a span (arguments, results, reasons...)."""

_CAPTURE_ON: Final = frozenset({"true", "span_only", "span_and_event"})
_CAPTURE_OFF: Final = frozenset({"", "false", "no_content", "event_only"})
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, default=repr)
_SKIPPED_PARAMETERS: Final = frozenset({"self", "cls"})


def capture_from_env(environ: Mapping[str, str]) -> bool:
    """Whether ``environ`` turns content capture on.

    Args:
        environ: the environment to read (``os.environ`` or a test's dict).

    Returns:
        True for ``true`` / ``span_only`` / ``span_and_event``, False when unset or off.

    Raises:
        SettingsError: the variable holds a value none of the GenAI instrumentations know.
    """
    raw = environ.get(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "")
    value = raw.strip().lower()
    if value in _CAPTURE_ON:
        return True
    if value in _CAPTURE_OFF:
        return False
    known = "true, false, span_only, event_only, span_and_event, no_content"
    raise SettingsError("capture_content", OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, f"use {known}", raw)


def clip(text: str, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """Return ``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[:limit]


def json_text(value: object, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """The attribute text of a captured value, at most ``limit`` characters.

    A string is kept as it is (so a result such as ``"Error: not found"`` stays readable
    to Vigil's soft-error check); anything else becomes JSON, with objects JSON cannot
    encode written as their ``repr``. A text over the limit is cut, which can leave
    JSON unterminated: consumers must treat it as text.
    """
    if isinstance(value, str):
        return clip(value, limit)
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):  # circular or otherwise unencodable
        text = repr(value)
    return clip(text, limit)


def input_messages(value: object, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """``gen_ai.input.messages`` JSON for what the user asked the agent (one user text part), clipped like
    :func:`output_messages`."""
    message = {"role": "user", "parts": [{"type": "text", "content": json_text(value, limit)}]}
    return _ENCODER.encode([message])


def output_messages(value: object, limit: int = MAX_ATTRIBUTE_CHARS) -> str:
    """``gen_ai.output.messages`` JSON for an agent's final answer (one assistant text part).

    The answer text is clipped before encoding, so the JSON stays valid.
    """
    text = json_text(value, limit)
    message = {"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}
    return _ENCODER.encode([message])


def call_arguments(signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    """The arguments of one call of a decorated tool, by parameter name.

    ``self`` and ``cls`` are left out. Without a signature, or when the call does not
    match it, the raw ``{"args": [...], "kwargs": {...}}`` is returned instead.
    """
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            pass
        else:
            return {k: v for k, v in bound.arguments.items() if k not in _SKIPPED_PARAMETERS}
    return {"args": list(args), "kwargs": kwargs}


def signature_of(fn: Any) -> inspect.Signature | None:
    """``inspect.signature(fn)``, or None for callables without one (some builtins)."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None
