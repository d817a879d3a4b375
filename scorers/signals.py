"""Per-span signals: errors, token usage, finish reasons, iteration limits and safety blocks.

Every function reads one span and returns a plain value; none raises on odd attribute
types. The markers follow conventions.md §4 and §8. Text markers are plain substring
checks (no regular expressions) on the few attributes that hold outputs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Final, NamedTuple

from collector.model import Attributes, Span, StatusCode
from scorers.dialects import as_bool, as_int, as_json, as_str, first_str
from scorers.model import StepKind

INPUT_TOKEN_KEYS: Final = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
    "ai.usage.inputTokens",
    "ai.usage.promptTokens",
)
OUTPUT_TOKEN_KEYS: Final = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
    "ai.usage.outputTokens",
    "ai.usage.completionTokens",
)
MODEL_KEYS: Final = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.model_name",
    "ai.response.model",
    "ai.model.id",
)
_FINISH_KEYS: Final = (
    "gen_ai.response.finish_reasons",
    "gen_ai.response.finish_reason",
    "llm.finish_reason",
    "ai.response.finishReason",
)
_OUTPUT_KEYS: Final = ("output.value", "traceloop.entity.output", "gen_ai.output.messages", "ai.response.text")
_INPUT_KEYS: Final = (
    "input.value",
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "ai.prompt.messages",
    "traceloop.entity.input",
)
_INDEXED_INPUTS: Final = (("gen_ai.prompt.", ".content"), ("llm.input_messages.", ".message.content"))
_INDEXED_INPUT_MARKERS: Final = tuple(f"{p}{i}{s}" for p, s in _INDEXED_INPUTS for i in (0, 1))
_TEXT_KEYS: Final = frozenset((*_OUTPUT_KEYS, *_INPUT_KEYS, *_INDEXED_INPUT_MARKERS))
_FINISH_ALL_KEYS: Final = frozenset((*_FINISH_KEYS, "gen_ai.completion.0.finish_reason", "gen_ai.output.messages"))
_FINISH_OTHER_KEYS: Final = _FINISH_ALL_KEYS - {"gen_ai.response.finish_reasons"}
_GUARDRAIL_KEYS: Final = frozenset(
    {
        "gen_ai.guardrail.triggered",
        "gen_ai.guardrail.result.value",
        "gen_ai.guardrail.action.type",
        "gen_ai.guardrail.verdict.type",
        "gen_ai.guardrail.status",
        "vigil.safety_blocked",
        "vigil.guardrail.blocked",
    }
)
_VIGIL_LIMIT_KEYS: Final = frozenset({"vigil.max_iterations_hit", "vigil.iterations"})
_MARKER_KEYS: Final = _TEXT_KEYS | _VIGIL_LIMIT_KEYS | _GUARDRAIL_KEYS
"""Every attribute :func:`hit_limit` or :func:`blocked` can react to on a span without errors."""
_MAX_REASONS: Final = 16
_MAX_INDEXED: Final = 256

BLOCK_REASONS: Final = frozenset(
    {
        "content_filter",
        "refusal",
        "safety",
        "prohibited_content",
        "blocklist",
        "spii",
        "guardrail_intervened",
        "content_filtered",
    }
)
"""Normalised finish reasons that mean a content filter, refusal or guardrail stopped output."""

LIMIT_ERROR_SUFFIXES: Final = (
    "GraphRecursionError",
    "MaxTurnsExceeded",
    "ModelCallLimitExceededError",
    "ToolCallLimitExceededError",
)
BLOCK_ERROR_SUFFIXES: Final = (
    "GuardrailTripwireTriggered",
    "ModelRefusalError",
)
_LIMIT_STATUS_TEXTS: Final = ("Max turns exceeded", "Max turns (", "Recursion limit of", "GRAPH_RECURSION_LIMIT")
_LIMIT_OUTPUT_TEXTS: Final = (
    "Agent stopped due to iteration limit or time limit.",
    "Agent stopped due to max iterations.",
    "Sorry, need more steps to process this request.",
    "Model call limits exceeded",
    "tool call limit",
    "Tool call limit",
)
CREWAI_FORCE_FINAL_ANSWER: Final = "MUST give your absolute best final answer"
"""Distinctive part of CrewAI's ``errors.force_final_answer`` prompt (max_iter reached)."""

_SOFT_ERROR_PREFIXES: Final = ("Error:", "An error occurred while running the tool")


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
    if not span.events and span.status_code != StatusCode.ERROR and "error.type" not in span.attributes:
        return NO_ERROR  # the common case, without a look at the values
    error_type = as_str(span.attributes.get("error.type"))
    status_error = span.status_code == StatusCode.ERROR
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
    return _count(attributes, INPUT_TOKEN_KEYS), _count(attributes, OUTPUT_TOKEN_KEYS)


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
    return first_str(attributes, MODEL_KEYS)


def finish_reasons(attributes: Attributes) -> tuple[str, ...]:
    """Return the span's finish reasons, normalised (lower case, ``-`` → ``_``), de-duplicated.

    Read from ``gen_ai.response.finish_reasons`` (array or JSON string), Traceloop's
    singular ``gen_ai.response.finish_reason``, ``llm.finish_reason``,
    ``ai.response.finishReason``, legacy ``gen_ai.completion.{i}.finish_reason`` and, only
    when none of those is present, ``finish_reason`` inside ``gen_ai.output.messages``.
    """
    array = attributes.get("gen_ai.response.finish_reasons")
    if isinstance(array, list) and len(array) == 1 and _FINISH_OTHER_KEYS.isdisjoint(attributes):
        only = array[0]
        if isinstance(only, str):
            return _one_reason(only)  # the usual GenAI shape, one memoised look-up
    if _FINISH_ALL_KEYS.isdisjoint(attributes):
        return ()
    found: list[str] = []
    for key in _FINISH_KEYS:
        value = attributes.get(key)
        if value is not None:
            _add_reasons(as_json(value), found)
    if "gen_ai.completion.0.finish_reason" in attributes:
        for i in range(_MAX_INDEXED):
            value = attributes.get(f"gen_ai.completion.{i}.finish_reason")
            if value is None:
                break
            _add_reasons(value, found)
    if not found and (messages := attributes.get("gen_ai.output.messages")) is not None:
        decoded = as_json(messages)
        for message in decoded if isinstance(decoded, list) else ():
            if isinstance(message, Mapping):
                _add_reasons(message.get("finish_reason"), found)
    if len(found) < 2:
        return tuple(found)
    return tuple(dict.fromkeys(found[:_MAX_REASONS]))


def _add_reasons(value: object, found: list[str]) -> None:
    if isinstance(value, str):
        found.append(normalise_reason(value))
    elif isinstance(value, (list, tuple)):  # a tuple: faster than a union
        for reason in value[:_MAX_REASONS]:
            if isinstance(reason, str):
                found.append(normalise_reason(reason))


@functools.lru_cache(maxsize=512)
def _one_reason(reason: str) -> tuple[str]:
    return (normalise_reason(reason),)


@functools.lru_cache(maxsize=512)
def normalise_reason(reason: str) -> str:
    """Normalise one finish reason: ``FinishReason.SAFETY`` / ``content-filter`` → ``safety`` / ``content_filter``."""
    text = reason.strip().lower().replace("-", "_")
    if "." in text:
        text = text.rsplit(".", 1)[1]
    return text.removeprefix("finish_reason_")


def unremarkable(attributes: Attributes, err: ErrorInfo, reasons: tuple[str, ...]) -> bool:
    """Whether neither :func:`hit_limit` nor :func:`blocked` can be true for a span — a cheap pre-check.

    True when the span has no error, no blocking finish reason and none of the attributes
    those two read without an error (output/input texts, ``vigil.*`` limit and guardrail
    markers). Most spans of most runs are unremarkable.
    """
    return not err.error and _MARKER_KEYS.isdisjoint(attributes) and (not reasons or BLOCK_REASONS.isdisjoint(reasons))


def hit_limit(span: Span, kind: StepKind, err: ErrorInfo) -> bool:
    """Whether ``span`` shows an iteration / turn / recursion / call limit being reached.

    Error types and status descriptions are read on every span, output texts on every
    span but tools, the CrewAI force-final-answer prompt on LLM inputs, and Vigil's own
    ``vigil.max_iterations_hit`` / ``vigil.iterations`` ≥ ``vigil.max_iterations`` on
    agent, chain and other spans.
    """
    if err.error and _limit_error(span, err):
        return True
    if kind is StepKind.TOOL:
        return False
    attrs = span.attributes
    if not _TEXT_KEYS.isdisjoint(attrs):  # content captured: look at the texts
        if _outputs_contain(attrs, _OUTPUT_KEYS, _LIMIT_OUTPUT_TEXTS):
            return True
        if kind is StepKind.LLM and _inputs_contain_force_final(attrs):
            return True
    return kind is not StepKind.LLM and not _VIGIL_LIMIT_KEYS.isdisjoint(attrs) and _vigil_limit(attrs)


def _limit_error(span: Span, err: ErrorInfo) -> bool:
    if any(t.endswith(LIMIT_ERROR_SUFFIXES) for t in err.types):
        return True
    status = span.status_message
    if isinstance(status, str) and status and _contains_any(status, _LIMIT_STATUS_TEXTS):
        return True
    return any(_contains_any(m, _LIMIT_STATUS_TEXTS + _LIMIT_OUTPUT_TEXTS) for m in err.messages)


def _vigil_limit(attrs: Attributes) -> bool:
    if as_bool(attrs.get("vigil.max_iterations_hit")):
        return True
    iterations = as_int(attrs.get("vigil.iterations"))
    limit = as_int(attrs.get("vigil.max_iterations"))
    return iterations is not None and limit is not None and limit > 0 and iterations >= limit


def _inputs_contain_force_final(attrs: Attributes) -> bool:
    markers = (CREWAI_FORCE_FINAL_ANSWER,)
    if _outputs_contain(attrs, _INPUT_KEYS, markers):
        return True
    if not any(key in attrs for key in _INDEXED_INPUT_MARKERS):
        return False
    for prefix, suffix in _INDEXED_INPUTS:
        if f"{prefix}0{suffix}" not in attrs and f"{prefix}1{suffix}" not in attrs:
            continue
        for i in range(_MAX_INDEXED):
            value = attrs.get(f"{prefix}{i}{suffix}")
            if isinstance(value, str) and CREWAI_FORCE_FINAL_ANSWER in value:
                return True
    return False


def _outputs_contain(attrs: Attributes, keys: tuple[str, ...], markers: tuple[str, ...]) -> bool:
    for key in keys:
        value = attrs.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else _dump(value)
        if text and _contains_any(text, markers):
            return True
    return False


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, default=str)


def _dump(value: object) -> str:
    try:
        return _ENCODER.encode(value)
    except (TypeError, ValueError, RecursionError):
        return ""


def _contains_any(text: str, markers: tuple[str, ...]) -> bool:
    return any(marker in text for marker in markers)


def blocked(span: Span, kind: StepKind, err: ErrorInfo, reasons: tuple[str, ...]) -> bool:
    """Whether ``span`` shows a content filter, refusal or guardrail blocking the run (§4.5).

    Finish reasons, error types and status descriptions are read on every span; guardrail
    attributes (``gen_ai.guardrail.*``, ``vigil.safety_blocked``, ``vigil.guardrail.blocked``)
    on every span but LLM calls and tools.
    """
    if reasons and not BLOCK_REASONS.isdisjoint(reasons):
        return True
    if err.error and _block_error(span, err):
        return True
    if kind is StepKind.LLM or kind is StepKind.TOOL:
        return False
    attrs = span.attributes
    if err.error and _lower(attrs.get("openinference.span.kind")) == "guardrail":
        return True
    return not _GUARDRAIL_KEYS.isdisjoint(attrs) and _guardrail_attributes(attrs)


def _block_error(span: Span, err: ErrorInfo) -> bool:
    if any(t.endswith(BLOCK_ERROR_SUFFIXES) for t in err.types):
        return True
    status = span.status_message if isinstance(span.status_message, str) else ""
    if status.startswith("Guardrail tripwire triggered") or "'Guardrail tripwire triggered'" in status:
        return True
    # Azure OpenAI prompt filter: HTTP 400 whose error code is content_filter.
    return "content_filter" in status or any("content_filter" in m for m in err.messages)


def _guardrail_attributes(attrs: Attributes) -> bool:
    if as_bool(attrs.get("gen_ai.guardrail.triggered")):
        return True
    result = attrs.get("gen_ai.guardrail.result.value")
    if result is True or (isinstance(result, str) and result.lower() in ("guardrail_intervened", "true")):
        return True
    if _lower(attrs.get("gen_ai.guardrail.action.type")) == "block":
        return True
    if _lower(attrs.get("gen_ai.guardrail.verdict.type")) == "deny":
        return True
    if _lower(attrs.get("gen_ai.guardrail.status")) in ("failed", "blocked"):
        return True
    return as_bool(attrs.get("vigil.safety_blocked")) or as_bool(attrs.get("vigil.guardrail.blocked"))


def _lower(value: object) -> str | None:
    return value.strip().lower() if isinstance(value, str) else None


def soft_error(result: str | None) -> bool:
    """Whether a tool result text is an error reported back to the model instead of raised.

    LangGraph's ToolNode answers ``Error: …`` and the OpenAI Agents SDK ``An error
    occurred while running the tool…``; a serialised ToolMessage (JSON with ``content``
    or ``status: "error"``) is looked into.
    """
    if not result:
        return False
    text = result.lstrip()
    if text.startswith(_SOFT_ERROR_PREFIXES):
        return True
    if not text.startswith("{"):
        return False
    decoded = as_json(text)
    if not isinstance(decoded, Mapping):
        return False
    if decoded.get("status") == "error":
        return True
    content = decoded.get("content")
    return isinstance(content, str) and content.lstrip().startswith(_SOFT_ERROR_PREFIXES)
