"""What every dialect adapter is made of: the :class:`Adapter` base and the attribute readers.

An adapter describes one trace dialect (an attribute vocabulary such as OTel GenAI or
OpenInference) or one framework's quirks inside a dialect (CrewAI, LlamaIndex …, keyed by
instrumentation scope). It declares data — the attribute keys its spans use for tokens,
model, finish reasons, tool names, arguments … — and overrides only the hooks it needs.
:mod:`scorers.dialects` composes every adapter's keys, in registry order, into the tuples
the normaliser reads, and calls the hooks at fixed points (see :class:`Adapter`).

Readers here never raise on odd attribute types: a value of the wrong type counts as absent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import ClassVar, Final

import orjson

from collector.model import Attributes, Span
from scorers.model import Message, StepKind

MAX_PARSE_CHARS: Final = 1 << 20
"""JSON strings longer than this are not parsed (bounds the work per attribute)."""

MAX_TEXT: Final = 8192
"""Characters kept of one message, argument, result or final output."""

MAX_MESSAGES: Final = 200
"""Messages kept of one run's conversation."""

_MAX_DEPTH: Final = 4

Found = tuple[StepKind, str]
"""A classification: the span's role and the dialect that said so."""


class Adapter:
    """One dialect or framework: its attribute keys and hooks. Subclass and override what applies.

    Key tuples are concatenated over the registry in order, so an earlier adapter's key wins
    where "first present" matters (tokens, model, tool name). Hooks left as defined here
    cost nothing: the registry only calls adapters that override them.

    Attributes:
        name: the dialect name recorded on ``Run.dialect`` (dialects) or the framework name.
        scopes: instrumentation scope names this adapter's quirks apply to (frameworks only);
            a span's scope selects at most one framework adapter.
        entry_methods: method names of the framework's entry points that instrumentors append
            to an agent or tool name (``<name>.run``, ``<role>._execute_core``): stripped from
            span names of this scope to give the entity name.
        answer_tools: the framework's built-in tools through which the agent gives its final
            answer (smolagents ``final_answer``): control flow, not tool calls.
        generic_agent_names: lower-case span names that never name an agent (a LangGraph
            ``agent`` node, the Agents SDK ``Agent workflow`` trace).
        soft_error_prefixes: tool results starting with these are errors reported to the model.
        names_agents: whether this dialect's agent span names name the agent (not Vercel's
            ``ai.generateText``).
        last_resort_argument_keys: read for tool arguments after every adapter's ``argument_keys``.
        message_keys: attributes whose presence means :meth:`messages` may find content.
        extra_finish_keys: attributes whose presence means :meth:`finish_reasons` may find some.
        fallback_finish_keys: those of :attr:`extra_finish_keys` that :meth:`finish_reasons` reads
            only when no finish key said anything (so a span whose finish keys did need not read them).
        session_keys: attributes holding the id of the conversation (session, thread) a run is a
            turn of (read by :mod:`scorers.session_ids`).
        user_keys: attributes holding the id of the end user the run answered.
    """

    name: ClassVar[str] = ""
    scopes: ClassVar[frozenset[str]] = frozenset()
    entry_methods: ClassVar[frozenset[str]] = frozenset()
    answer_tools: ClassVar[frozenset[str]] = frozenset()
    generic_agent_names: ClassVar[frozenset[str]] = frozenset()
    soft_error_prefixes: ClassVar[tuple[str, ...]] = ()
    names_agents: ClassVar[bool] = True

    input_token_keys: ClassVar[tuple[str, ...]] = ()
    output_token_keys: ClassVar[tuple[str, ...]] = ()
    model_keys: ClassVar[tuple[str, ...]] = ()
    finish_keys: ClassVar[tuple[str, ...]] = ()
    tool_name_keys: ClassVar[tuple[str, ...]] = ()
    tool_call_id_keys: ClassVar[tuple[str, ...]] = ()
    argument_keys: ClassVar[tuple[str, ...]] = ()
    last_resort_argument_keys: ClassVar[tuple[str, ...]] = ()
    result_keys: ClassVar[tuple[str, ...]] = ()
    final_output_keys: ClassVar[tuple[str, ...]] = ()
    message_keys: ClassVar[tuple[str, ...]] = ()
    extra_finish_keys: ClassVar[tuple[str, ...]] = ()
    fallback_finish_keys: ClassVar[tuple[str, ...]] = ()
    session_keys: ClassVar[tuple[str, ...]] = ()
    user_keys: ClassVar[tuple[str, ...]] = ()

    # Classification, three passes over the registry (see scorers.dialects.classify).
    def classify(self, span: Span) -> Found | None:
        """Pass 1: the role from this dialect's kind attributes (or exact span names)."""
        return None

    def classify_name(self, name: str) -> Found | None:
        """Pass 2, when no adapter's attributes decided: the role from a span-name pattern."""
        return None

    def recognises(self, span: Span) -> bool:
        """Pass 3, for a span no adapter classified: whether it is still of this dialect."""
        return False

    def refine(self, span: Span, found: Found) -> Found:
        """Framework adapters: correct the classification of a span of one of :attr:`scopes`."""
        return found

    # Names.
    def entity_name(self, span: Span, kind: StepKind) -> str | None:
        """The agent/tool/workflow a span stands for, from this dialect's span-name pattern.

        By default, a framework's ``<name>.<entry method>`` span names give ``<name>``.
        """
        if self.entry_methods:
            stripped = strip_method(span.name, self.entry_methods)
            if stripped is not span.name:
                return stripped
        return None

    def run_name(self, root: Span, spans: Sequence[Span]) -> str | None:
        """Framework adapters: the run's name when the framework states it for the whole run
        (an AutoGen team root), checked before any agent name. ``root`` is of :attr:`scopes`."""
        return None

    # Content and signals.
    def messages(self, attributes: Attributes) -> list[Message]:
        """The input then output messages captured on one LLM span in this dialect."""
        return []

    def final_answer(self, attributes: Attributes) -> str | None:
        """The agent's final answer held in this dialect's structured attributes on a root or
        agent span (read when no adapter's ``final_output_keys`` is present)."""
        return None

    def answer_in_state(self, state: Mapping[str, object]) -> str | None:
        """Frameworks whose runs output a JSON state (LangGraph ``{"messages": [...]}``): the
        answer text in it."""
        return None

    def finish_reasons(self, attributes: Attributes, found: list[str]) -> None:
        """Append (with :func:`add_reasons`) finish reasons held in shapes other than
        :attr:`finish_keys`; ``found`` holds those already read. Called when one of
        :attr:`finish_keys` or :attr:`extra_finish_keys` is on the span."""

    def raised(self, ordered: Sequence[Span], kinds: Mapping[str, Found]) -> Span | None:
        """Framework adapters whose root stays OK when the run raised: the span whose error
        reached the caller. Called only when the head span is of :attr:`scopes` and not in error."""
        return None


class Naming:
    """What agent-name sources read: the root and every span with its role, top down.

    Attributes:
        root: the root span, if the trace has one.
        top: every span with its kind and dialect, shallowest first, then by start.
        heads: the root, then the agent spans top down.
        spans: every span top down (the root first).
    """

    __slots__ = ("heads", "root", "spans", "top")

    def __init__(self, root: Span | None, top: Sequence[tuple[Span, StepKind, str]]) -> None:
        self.root = root
        self.top = top
        agent = StepKind.AGENT
        agents = [span for span, kind, _ in top if kind is agent]
        self.heads: list[Span] = [root, *agents] if root is not None else agents
        self.spans: list[Span] = [span for span, _, _ in top]


def overrides(adapter: Adapter, hook: str) -> bool:
    """Whether ``adapter`` overrides the :class:`Adapter` hook ``hook``."""
    return getattr(type(adapter), hook) is not getattr(Adapter, hook)


def strip_method(name: str, methods: frozenset[str]) -> str:
    """``"travel_agent._execute_core"`` → ``"travel_agent"`` when ``_execute_core`` is in ``methods``."""
    stem, dot, method = name.rpartition(".")
    return stem if dot and stem and method in methods else name


def as_str(value: object) -> str | None:
    """Return ``value`` if it is a non-empty string, else ``None``."""
    return value if isinstance(value, str) and value else None


def as_int(value: object) -> int | None:
    """Return ``value`` as an int if it is an int (not a bool) or an integral finite float."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def loads(text: str) -> object:
    """``json.loads(text)``, through orjson where it can (several times faster on message arrays).

    What orjson refuses and the standard library accepts (``NaN``, ``Infinity``, lone surrogates)
    goes to ``json.loads``; the one difference left: an integer beyond 64 bits comes back as a float
    (as JavaScript and most parsers read it), not as a Python ``int``.

    Raises:
        ValueError: not JSON. RecursionError: nested too deep.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def as_bool(value: object) -> bool:
    """Return True for ``True`` or the string ``"true"`` (any case); False for anything else."""
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() == "true"


def as_json(value: object) -> object:
    """Decode a JSON array/object string; return any other value unchanged.

    OTLP carries structured GenAI attributes either as a JSON string or as an
    ``arrayValue``/``kvlistValue`` (already a list/dict here). Undecodable or oversized
    strings are returned as they are.
    """
    if not isinstance(value, str) or len(value) > MAX_PARSE_CHARS:
        return value
    head = value.lstrip()[:1]
    if head not in ("[", "{"):
        return value
    try:
        decoded: object = loads(value)
    except (ValueError, RecursionError):
        return value
    return decoded


def first(attributes: Attributes, keys: Sequence[str]) -> object:
    """Return the first present (not ``None``) value among ``keys``, else ``None``."""
    for key in keys:
        value = attributes.get(key)
        if value is not None:
            return value
    return None


def first_str(attributes: Attributes, keys: Sequence[str]) -> str | None:
    """Return the first non-empty string value among ``keys``, else ``None``."""
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def attr_of(spans: Sequence[Span | None], key: str) -> str | None:
    """The first non-blank string value of ``key`` over ``spans``, stripped."""
    for span in spans:
        if span is not None and (value := as_str(span.attributes.get(key))) is not None:
            return value.strip() or None
    return None


MAX_REASONS: Final = 16


def add_reasons(value: object, found: list[str]) -> None:
    """Append a finish-reason string, or the strings of a list of them, as they are (raw)."""
    if isinstance(value, str):
        found.append(value)
    elif isinstance(value, (list, tuple)):  # a tuple: faster than a union
        found.extend(reason for reason in value[:MAX_REASONS] if isinstance(reason, str))


def clip(text: str) -> str:
    """Truncate ``text`` to :data:`MAX_TEXT` characters."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT]


# One shared encoder: ``json.dumps`` with non-default options builds a new one per call.
_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


_NOT_ORJSON: Final = re.compile(rb"|".join([b"%d[.eE]" % digit for digit in range(10)] + [b"null", b"\x7f"]))
"""Where orjson's text may differ from the standard library's: floats (``6.1e-05`` / ``0.000061``,
``1e16`` / ``1e+16``; matched wherever a digit meets a point or an exponent, strings included), NaN and
infinities (``null`` / ``NaN``), DEL (escaped by ``ensure_ascii``). Spelled ``0[.eE]|1[.eE]|…|null|\x7f``
(what ``[0-9][.eE]|null|\x7f`` matches): every branch opens with a literal, so the search skips to the
characters that can begin a match instead of trying every position (half the time on message JSON)."""


def dumps(obj: object) -> str | None:
    """Canonical JSON text of ``obj`` (sorted keys, no spaces, ASCII), or ``None`` if it cannot be encoded.

    The standard library's text (``json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)``),
    made by orjson when its text is the same (ASCII, string keys, no float, NaN or DEL), several
    times faster on the tool-call arguments of every captured message.
    """
    try:
        fast = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # a non-string key, an integer beyond 64 bits, another type: the standard library
        pass
    else:
        if fast.isascii() and _NOT_ORJSON.search(fast) is None:
            return fast.decode()
    try:
        return _CANONICAL.encode(obj)
    except (TypeError, ValueError, RecursionError):
        return None


def as_text(value: object) -> str | None:
    """Return a string as is, structured values as JSON text, clipped; ``None`` for nothing."""
    if isinstance(value, str):
        return clip(value)
    if value is None or isinstance(value, bytes):
        return None
    text = dumps(value)
    return clip(text) if text is not None else None


def content_text(value: object, depth: int = 0) -> str | None:
    """Text of a message content: a string, or text parts (``text``/``content`` keys) joined."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return as_str(value.get("text")) or as_str(value.get("content"))
    if isinstance(value, list) and depth < _MAX_DEPTH:
        texts = [t for item in value[:MAX_MESSAGES] if (t := content_text(item, depth + 1))]
        return "\n".join(texts) if texts else None
    return None
