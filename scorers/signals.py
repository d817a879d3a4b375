"""Per-span readings: errors, token usage, model and finish reasons.

Every function reads one span and returns a plain value; none raises on odd attribute
types. Whether a span shows an iteration limit or a safety block is decided by
:mod:`scorers.detect` from these readings.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Final, NamedTuple

from collector.model import Attributes, Span, StatusCode
from scorers.dialects import (
    EXTRA_FINISH_KEYS,
    FALLBACK_FINISH_KEYS,
    FINISH_KEYS,
    FINISH_READERS,
    INPUT_TOKEN_KEYS,
    MODEL_KEYS,
    OUTPUT_TOKEN_KEYS,
    SOFT_ERROR_PREFIXES,
    as_int,
    as_json,
    as_str,
    first_str,
)
from scorers.dialects.base import MAX_REASONS, add_reasons
from scorers.dialects.genai import FINISH_REASONS

__all__ = [
    "INPUT_TOKEN_KEYS",
    "MODEL_KEYS",
    "NO_ERROR",
    "OUTPUT_TOKEN_KEYS",
    "ErrorInfo",
    "error_info",
    "finish_reasons",
    "leading_phrase",
    "model",
    "normalise_reason",
    "skipped_request",
    "skipped_type",
    "soft_error",
    "tokens",
]

_FINISH_ALL_KEYS: Final = frozenset((*FINISH_KEYS, *EXTRA_FINISH_KEYS))
_FINISH_OTHER_KEYS: Final = _FINISH_ALL_KEYS - {FINISH_REASONS, *FALLBACK_FINISH_KEYS}
"""Keys that can add to a one-reason ``gen_ai.response.finish_reasons`` (the fallback keys, such as the
GenAI output messages every instrumented chat span carries, are read only when no finish key said anything)."""
_ERROR: Final = StatusCode.ERROR  # a global: ``StatusCode.ERROR`` goes through the unspecialisable EnumType.__getattr__


class ErrorInfo(NamedTuple):
    """What a span says about its own failure.

    Attributes:
        error: status ERROR, ``error.type`` or an ``exception`` event.
        raised: status ERROR or ``error.type`` (an exception left the operation).
        type: ``error.type``, else ``exception.type``, else the leading phrase of the
            status description (``GraphRecursionError``, ``Max turns exceeded``).
        message: the first exception message, else the status description.
        types: every error/exception type seen on the span.
        messages: every exception message seen on the span.
    """

    error: bool
    raised: bool
    type: str | None
    message: str | None
    types: tuple[str, ...]
    messages: tuple[str, ...]


NO_ERROR: Final = ErrorInfo(False, False, None, None, (), ())


def error_info(span: Span) -> ErrorInfo:
    """Read status, ``error.type`` and ``exception`` events of ``span``."""
    if not span.events and span.status_code != _ERROR and "error.type" not in span.attributes:
        return NO_ERROR  # the common case, without a look at the values
    error_type = as_str(span.attributes.get("error.type"))
    status_error = span.status_code == _ERROR
    if error_type is None and not status_error and not span.events:
        return NO_ERROR
    types: list[str] = [error_type] if error_type else []
    messages: list[str] = []
    exception = False
    for event in span.events:
        if event.name != "exception":
            continue
        exception = True
        if (t := as_str(event.attributes.get("exception.type"))) is not None:
            types.append(t)
        if (m := as_str(event.attributes.get("exception.message"))) is not None:
            messages.append(m)
    raised = status_error or error_type is not None
    if not (raised or exception):
        return NO_ERROR
    status = span.status_message if isinstance(span.status_message, str) else ""
    named = [t for t in types if t != "_OTHER"]  # util-genai's fallback value says nothing
    kind = named[0] if named else leading_phrase(status) or (types[0] if types else None)
    message = messages[0] if messages else status or None
    return ErrorInfo(True, raised, kind, message, tuple(types), tuple(messages))


_SKIP_TYPE: Final = re.compile(r"skip_?(?:model_?|llm_?)?(?:request|call|completion|model)", re.IGNORECASE)


def skipped_request(err: ErrorInfo) -> bool:
    """Whether a model span ended with its framework's *skip* exception: a hook or input guard answered
    instead of the model and no request was made (PydanticAI's ``SkipModelRequest`` raised by a
    capability inside the instrumented ``wrap_model_request``). Such a span is no LLM call."""
    return any(skipped_type(t) for t in err.types)


def skipped_type(error_type: str | None) -> bool:
    """Whether ``error_type`` names a framework's skip-the-model-request exception (see :func:`skipped_request`)."""
    return error_type is not None and _SKIP_TYPE.search(error_type.rpartition(".")[2]) is not None


def leading_phrase(text: str) -> str | None:
    """Return the words before the first ``:``, ``(``, ``{``, ``[`` or newline, at most 64 characters.

    ``"GraphRecursionError('Recursion…')"`` gives ``GraphRecursionError`` and
    ``"Max turns exceeded: {'max_turns': 10}"`` gives ``Max turns exceeded``.
    """
    end = len(text)
    for stop in (":", "(", "\n", "{", "["):
        index = text.find(stop, 0, end)
        if index != -1:
            end = index
    phrase = text[:end].strip()
    return phrase[:64] or None


def tokens(attributes: Attributes) -> tuple[int, int]:
    """Return ``(input, output)`` token usage of an LLM span (0 when absent or invalid)."""
    # The usual span holds both counts as ints under the first keys: two look-ups instead of two
    # calls of _count (-13,500 instructions per bench run, BENCHMARKS.md issue 13). Same result.
    tokens_in, tokens_out = attributes.get(_INPUT_FIRST), attributes.get(_OUTPUT_FIRST)
    if tokens_in.__class__ is int and tokens_out.__class__ is int and tokens_in >= 0 and tokens_out >= 0:
        return tokens_in, tokens_out
    return _count(attributes, INPUT_TOKEN_KEYS), _count(attributes, OUTPUT_TOKEN_KEYS)


_INPUT_FIRST: Final = INPUT_TOKEN_KEYS[0]
_OUTPUT_FIRST: Final = OUTPUT_TOKEN_KEYS[0]


def _count(attributes: Attributes, keys: tuple[str, ...]) -> int:
    for key in keys:
        value = attributes.get(key)
        if value is None:
            continue
        number = value if value.__class__ is int else as_int(value)  # the usual int skips as_int
        if number is not None and number >= 0:
            return number
    return 0


def model(attributes: Attributes) -> str | None:
    """Return the model name of an LLM span (response model first)."""
    # The usual span: one look-up instead of a first_str call, same result (-6,400 instructions per bench run).
    found = attributes.get(_MODEL_FIRST)
    return found if found.__class__ is str and found else first_str(attributes, MODEL_KEYS)


_MODEL_FIRST: Final = MODEL_KEYS[0]


def finish_reasons(attributes: Attributes) -> tuple[str, ...]:
    """Return the span's finish reasons, normalised (lower case, ``-`` → ``_``), de-duplicated.

    Read from every dialect's finish-reason attributes (``gen_ai.response.finish_reasons``
    array or JSON string, Traceloop's singular ``gen_ai.response.finish_reason``,
    ``llm.finish_reason``, ``ai.response.finishReason``), then from the shapes adapters read
    themselves: legacy ``gen_ai.completion.{i}.finish_reason`` and, only when nothing else
    said, ``finish_reason`` inside ``gen_ai.output.messages``.
    """
    array = attributes.get(FINISH_REASONS)
    if isinstance(array, list) and len(array) == 1 and _FINISH_OTHER_KEYS.isdisjoint(attributes):
        only = array[0]
        if isinstance(only, str):
            return _one_reason(only)  # the usual GenAI shape, one memoised look-up
    if _FINISH_ALL_KEYS.isdisjoint(attributes):
        return ()
    raw: list[str] = []
    for key in FINISH_KEYS:
        value = attributes.get(key)
        if value is not None:
            add_reasons(as_json(value), raw)
    for read in FINISH_READERS:
        read(attributes, raw)
    found = [normalise_reason(reason) for reason in raw[:MAX_REASONS]]
    if len(found) < 2:
        return tuple(found)
    return tuple(dict.fromkeys(found))


@functools.lru_cache(maxsize=512)
def _one_reason(reason: str) -> tuple[str]:
    return (normalise_reason(reason),)


@functools.lru_cache(maxsize=512)
def normalise_reason(reason: str) -> str:
    """Normalise one finish reason: ``FinishReason.SAFETY`` / ``content-filter`` → ``safety`` / ``content_filter``."""
    text = "_".join(reason.strip().lower().replace("-", " ").split())
    if "." in text:
        text = text.rsplit(".", 1)[1]
    return text.removeprefix("finish_reason_")


def soft_error(result: str | None) -> bool:
    """Whether a tool result text is an error reported back to the model instead of raised.

    The prefixes are the adapters' (:data:`scorers.dialects.SOFT_ERROR_PREFIXES`): LangGraph's
    ToolNode answers ``Error: …`` and the OpenAI Agents SDK ``An error occurred while running
    the tool…``; a serialised ToolMessage (JSON with ``content`` or ``status: "error"``) is
    looked into.
    """
    if not result:
        return False
    text = result.lstrip()
    if text.startswith(SOFT_ERROR_PREFIXES):
        return True
    if not text.startswith("{") or ('"status"' not in text and '"content"' not in text and "\\u" not in text):
        return False  # (a key spelled with escapes, "\u0073tatus", is still read)
    decoded = as_json(text)
    if not isinstance(decoded, Mapping):
        return False
    if decoded.get("status") == "error":
        return True
    content = decoded.get("content")
    return isinstance(content, str) and content.lstrip().startswith(SOFT_ERROR_PREFIXES)
