"""Headline-signal detection with evidence: iteration-limit hits and safety blocks.

Detection reads the *structure* of a run first and a *vocabulary* second, and every
detection names the rule that decided it and the span, attribute or message that matched
(:class:`~scorers.model.Evidence`). The rules, by id:

Structure (no words involved)
    ``limit.cutoff``
        The run ended while the model's last turn still requested tool calls (finish reason
        ``tool_calls`` / ``tool-calls`` / ``tool_use`` / ``function_call``) and no later LLM
        call answered — the loop was stopped from outside. Not when an exception reached the
        caller (an error, not a limit, explains the end), nor when the last tool executed is
        an *answer tool* (``final_answer``, ``final_result`` …: smolagents and PydanticAI
        answer through a tool), nor on an incomplete run.
    ``limit.counter``
        An iteration/step/turn counter attribute reached its declared cap on an agent span
        (``vigil.iterations`` ≥ ``vigil.max_iterations``, ``agent.steps`` ≥ ``agent.max_steps`` …),
        or ``vigil.max_iterations_hit`` is true.
    ``block.finish_reason``
        A content-filter, safety, refusal, blocklist or guardrail finish reason, in any
        spelling (``content_filter``, ``content-filter``, ``CONTENT_FILTER``, ``content filter``,
        ``FinishReason.SAFETY``).
    ``block.refusal``
        A model output with a non-empty ``refusal`` field (OpenAI's structured refusal).
    ``block.guardrail``
        A guardrail span that failed, or a guardrail attribute that says it intervened
        (``gen_ai.guardrail.*``, ``vigil.safety_blocked``, ``vigil.guardrail.blocked``).

Vocabulary (exception types, exception messages and status descriptions of non-tool spans)
    ``limit.vocabulary`` / ``block.vocabulary``
        Matched by normalised tokens, not exact strings: ``MaxIterationsExceeded``, ``Max turns
        exceeded``, ``agent X stopped after 6 iterations``, ``Recursion limit of 6 reached``,
        ``UsageLimitExceeded``, ``LlmCallsLimitExceededError``; ``InputGuardrailTripwireTriggered``,
        ``Model refused to produce output``, ``content filter``/``policy``, ``PIIDetectionError``,
        ``moderation flagged`` …  Precision guards: rate limits and quotas, Python's own
        ``maximum recursion depth``, retries and connection refusals never match.
    ``block.output_check``
        An output check that gave up: the exception that reached the caller says output
        validation ran out of retries (PydanticAI's ``Exceeded maximum output retries (1)``,
        CrewAI's ``Task failed guardrail validation after 3 retries``), and the check's rejection
        — the rest of that message, or the feedback the framework sent the model before its last
        answer — names a policy (personal data, unsafe content, a denied topic; ``policy_words``
        less the user's ``safety_blocked.benign_rejections``, and the user's
        ``safety_blocked.rejections``). A rejection that names a format problem (``not valid
        JSON``) names no policy: the run stays an error.
    ``block.output_guard``
        An output guard that made the model answer again, whether or not a later answer passed:
        a model call answered (a text answer, or a call of the framework's answer tool; no tool ran
        after it) and the next model call of the same agent invocation extends its conversation
        with feedback (the messages after the answer, or in its place when the framework discarded
        it) whose rejection reason — the
        answer's own text taken out — names a safety reason (:func:`policy_words`: personal data
        such as a social security number, unsafe content, a policy — less what the user's
        ``safety_blocked.benign_rejections`` excuse; or the user's ``safety_blocked.rejections``).
        PydanticAI's ``ModelRetry`` retry feedback, Strands' ``Guide`` from an ``after_model_call``
        intervention, smolagents' failed ``final_answer_checks`` (tests/fixtures/traces/NOTES.md).
        The evidence names the check's own span when the framework recorded one between the two
        calls, else the call that carried the rejection.
    ``limit.output``
        The fixed texts frameworks answer with when they stop at their cap (LangChain's
        ``Agent stopped due to max iterations.``, LangGraph's ``Sorry, need more steps…``,
        CrewAI's forced final answer prompt), in outputs of non-tool spans.

User rules (``detection`` in ``vigil.yaml``, :class:`DetectionConfig`)
    ``user.limit.exception`` / ``user.limit.message`` / ``user.limit.attribute`` and the same
    under ``user.block.*``: the user's own exception types, message patterns (regular
    expressions, case-insensitive) and attribute values. ``disable`` switches built-in
    rules off by id.

Tool spans are never searched for vocabulary: a tool that returns or raises "rate limit"
or "blocked" is a tool result, not the agent's limit. The detector is pure and cheap on the
common path: spans without errors or markers are skipped by one set test.
"""

from __future__ import annotations

import functools
import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from collector.model import Attributes, Span
from scorers.dialects.base import as_json, dumps
from scorers.errors import DetectionConfigError
from scorers.model import Evidence, Message, StepKind

__all__ = [
    "BLOCK",
    "BUILTIN_RULES",
    "DEFAULT_DETECTOR",
    "ERRORED",
    "LIMIT",
    "DetectionConfig",
    "Detector",
    "Retry",
    "block_words",
    "limit_words",
    "output_check_spent",
    "policy_words",
    "rejection_feedback",
    "tokens_of",
]

LIMIT: Final = "hit_max_iterations"
BLOCK: Final = "safety_blocked"
ERRORED: Final = "errored"

BUILTIN_RULES: Final = (
    "limit.cutoff",
    "limit.counter",
    "limit.vocabulary",
    "limit.output",
    "block.finish_reason",
    "block.refusal",
    "block.guardrail",
    "block.vocabulary",
    "block.output_check",
    "block.output_guard",
)
"""Every built-in detection rule id (what ``detection.disable`` accepts)."""

MAX_EVIDENCE_TEXT: Final = 240
"""Characters of a matched value kept in evidence."""

TOOL_REQUEST_REASONS: Final = frozenset({"toolcalls", "toolcall", "tooluse", "functioncall", "functioncalls"})
"""Normalised finish reasons that mean "the model asked for tools" (OpenAI, Vercel, Anthropic, legacy)."""

_BLOCK_REASONS_COMPACT: Final = frozenset(
    {
        "contentfilter",
        "contentfiltered",
        "safety",
        "refusal",
        "refused",
        "prohibitedcontent",
        "blocklist",
        "spii",
        "guardrailintervened",
        "imagesafety",
        "contentpolicy",
        "moderation",
    }
)


def _is_answer_tool(name: str) -> bool:
    return bool(_ANSWER_TOOL.search(name))


BLOCK_REASON_FORMS: Final = frozenset(
    (
        *_BLOCK_REASONS_COMPACT,
        "content_filter", "content_filtered", "prohibited_content", "guardrail_intervened", "image_safety",
        "content_policy",
    )
)  # fmt: skip
"""Block reasons as :func:`scorers.signals.normalise_reason` spells them (``content filter`` → ``content_filter``),
plus the compacted forms (``ContentFilter`` → ``contentfilter``): one set test in the pre-check."""

_ANSWER_TOOL: Final = re.compile(
    r"final[_\-\s]?(answer|result|output|response)|^(answer|respond|finish|submit[_\-]?answer)$", re.I
)
"""Tools through which an agent gives its answer: a run that ends after one of them was not cut off."""

_LIMIT_OUTPUT_TEXTS: Final = (
    "agent stopped due to iteration limit or time limit",
    "agent stopped due to max iterations",
    "sorry, need more steps to process this request",
    "model call limits exceeded",
    "tool call limit",
)
CREWAI_FORCE_FINAL_ANSWER: Final = "must give your absolute best final answer"
"""Distinctive part of CrewAI's ``force_final_answer`` prompt, sent to the model once ``max_iter`` is reached."""

_OUTPUT_KEYS: Final = ("output.value", "traceloop.entity.output", "gen_ai.output.messages", "ai.response.text")
_INPUT_KEYS: Final = (
    "input.value",
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "ai.prompt.messages",
    "traceloop.entity.input",
)
_INDEXED_INPUTS: Final = (("gen_ai.prompt.", ".content"), ("llm.input_messages.", ".message.content"))
_MAX_INDEXED: Final = 64
_REFUSAL_KEYS: Final = (
    "llm.output_messages.0.message.refusal",
    "gen_ai.completion.0.refusal",
    "gen_ai.response.refusal",
    "ai.response.refusal",
)
_TEXT_KEYS: Final = frozenset(
    (*_OUTPUT_KEYS, *_INPUT_KEYS, *_REFUSAL_KEYS, "llm.input_messages.0.message.content", "gen_ai.prompt.0.content",
     "llm.input_messages.1.message.content", "gen_ai.prompt.1.content")
)  # fmt: skip

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

_OUTPUT_FINISH: Final = re.compile(r"""finish_?reason['"]?\s*[:=]\s*['"]([A-Za-z_\- ]{1,40})['"]""", re.I)
"""A finish reason written inside an output document (AutoGen's ``"finish_reason": "function_calls"``,
smolagents' raw ``ChatCompletion(... finish_reason='content_filter' ...)``)."""

_STOP_FIELD: Final = re.compile(
    r"""['"]?\b(stop_reason|termination_reason|stop_cause|finish_reason|state|status)['"]?\s*[:=]\s*['"]([^'"\n]{1,200})['"]""",
    re.I,
)
"""A run-outcome field inside an agent's output (AutoGen ``TaskResult.stop_reason``, smolagents
``RunResult.state``): the framework's own words for why the run stopped."""

_PAST: Final = frozenset({"reached", "exceeded", "exhausted", "hit", "stopped", "exceeds"})
_PAST_TEXT: Final = re.compile("|".join(sorted({w.removesuffix("ed").removesuffix("s") for w in _PAST})), re.I)
"""Where a :data:`_PAST` token can be: each is a substring of the lower-cased text (a cheap test run first)."""

_REFUSAL_JSON: Final = re.compile(r'"refusal"\s*:\s*"(?!")((?:[^"\\]|\\.){1,240})')
"""A JSON ``"refusal": "<non-empty>"`` (OpenAI messages carry ``"refusal": null`` when there is none)."""

# --- the vocabulary -------------------------------------------------------------------------

_LIMIT_NOUNS: Final = frozenset(
    {
        "iteration", "iterations", "iter", "iters", "step", "steps", "turn", "turns", "round", "rounds",
        "request", "requests", "call", "calls", "loop", "loops", "usage", "recursion", "llm", "message", "messages",
        "attempt", "attempts", "cycle", "cycles",
    }
)  # fmt: skip
_LIMIT_MARKS: Final = frozenset(
    {"max", "maximum", "limit", "limits", "cap", "capped", "exceeded", "exceeds", "exceed", "reached", "reach",
     "hit", "exhausted"}
)  # fmt: skip
_LIMIT_STRONG: Final = frozenset({"max", "maximum", "limit", "limits", "cap", "capped", "exceeded", "exceed", "exceeds",
                                  "reached", "exhausted"})  # fmt: skip
_LIMIT_STOPS: Final = frozenset({"stopped", "stopping", "halted", "terminated", "aborted"})
_WEAK_NOUNS: Final = frozenset({"message", "messages", "llm", "request", "requests", "usage", "attempt", "attempts"})
"""Limit nouns that count only with a strong mark (max, limit, exceeded …): alone they are retries or traffic."""
_LIMIT_FAILS: Final = frozenset({"unable", "able", "couldn", "could", "failed", "cannot"})
"""With a number and a limit noun: "was not able to resolve the task in 10 iterations" (BeeAI)."""
_LIMIT_VETO: Final = frozenset(
    {"rate", "ratelimit", "quota", "rpm", "tpm", "depth", "retries", "retry", "timeout", "timed", "context",
     "length", "size", "bytes", "payload", "concurrency", "concurrent", "connection", "connections"}
)  # fmt: skip
_BLOCK_VETO: Final = frozenset({"connection", "connect", "socket", "port", "permission", "refused_stream"})
_GUARD_WORDS: Final = frozenset({"guardrail", "guardrails", "guard"})
_GUARD_ACTS: Final = frozenset(
    {"tripwire", "triggered", "blocked", "block", "violation", "violated", "intervened", "intervention", "failed",
     "denied", "rejected", "fired", "tripped"}
)  # fmt: skip
_WINDOW: Final = 6

_CAMEL: Final = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
_WORDS: Final = re.compile(r"[A-Za-z0-9]+")


@functools.lru_cache(maxsize=2048)
def tokens_of(text: str) -> tuple[str, ...]:
    """Lower-case word tokens of ``text``, CamelCase and snake_case split.

    ``"MaxIterationsExceeded"`` → ``("max", "iterations", "exceeded")``;
    ``"GRAPH_RECURSION_LIMIT"`` → ``("graph", "recursion", "limit")``.
    """
    out: list[str] = []
    for word in _WORDS.findall(text[:4096]):
        out.extend(part.lower() for part in _CAMEL.findall(word))
    return tuple(out)


def _windows(tokens: Sequence[str], size: int = _WINDOW) -> Iterable[Sequence[str]]:
    if len(tokens) <= size:
        yield tokens
        return
    for i in range(len(tokens) - size + 1):
        yield tokens[i : i + size]


@functools.lru_cache(maxsize=2048)
def limit_words(text: str) -> bool:
    """Whether ``text`` (an exception type, message or status) says an iteration/step/turn/call limit was hit.

    A window of six tokens must hold a limit noun (iteration, step, turn, round, request, call,
    loop, usage, recursion …) and a limit mark (max, limit, exceeded, reached, exhausted …), or a
    stop word (stopped, halted …) with a number and a noun ("stopped after 6 iterations").
    Never when the text speaks of rates, quotas, retries, timeouts, context length or depth.
    """
    tokens = tokens_of(text)
    if not tokens or not _LIMIT_VETO.isdisjoint(tokens):
        return False
    if "graph" in tokens and "recursion" in tokens:
        return True  # LangGraph's GraphRecursionError / GRAPH_RECURSION_LIMIT
    for window in _windows(tokens):
        nouns = _LIMIT_NOUNS.intersection(window)
        if not nouns:
            continue
        if nouns == {"recursion"} and "limit" not in window:
            continue  # Python's own RecursionError is a crash, not an agent limit
        if nouns <= _WEAK_NOUNS and not _LIMIT_STRONG.intersection(window):
            continue
        if not _LIMIT_MARKS.isdisjoint(window):
            return True
    # "stopped after 6 iterations", "was not able to resolve the task in 10 iterations": a stop or
    # failure word, a number and a loop noun within ten tokens ("failed after 2 attempts" is a retry
    # budget, not the agent's loop, so the weak nouns do not count here)
    for window in _windows(tokens, 10):
        if _LIMIT_STOPS.isdisjoint(window) and _LIMIT_FAILS.isdisjoint(window):
            continue
        strong_nouns = _LIMIT_NOUNS.intersection(window) - _WEAK_NOUNS - {"recursion"}
        if strong_nouns and any(t.isdigit() for t in window):
            return True
    return False


@functools.lru_cache(maxsize=2048)
def block_words(text: str) -> bool:
    """Whether ``text`` says a guardrail, content filter, moderation, refusal or PII check blocked the run."""
    tokens = tokens_of(text)
    if not tokens or not _BLOCK_VETO.isdisjoint(tokens):
        return False
    words = set(tokens)
    if "tripwire" in words:
        return True
    if words & _GUARD_WORDS and words & _GUARD_ACTS:
        return True
    if words & {"refusal", "refused", "refuses", "refuse"}:
        return True
    if "content" in words and words & {"filter", "filtered", "filtering", "policy", "management", "moderation"}:
        return True
    if "moderation" in words and words & {"flagged", "blocked", "violation", "rejected", "failed", "denied"}:
        return True
    if words & {"pii", "sensitive", "phi"} and words & {"detected", "detection", "blocked", "found", "violation"}:
        return True
    if "safety" in words and words & {"blocked", "filter", "filtered", "violation", "settings", "block"}:
        return True
    if "policy" in words and words & {"violation", "violated", "violates"}:
        return True
    if "responsible" in words and "ai" in words:
        return True  # Azure's ResponsibleAIPolicyViolation
    return bool(words & {"jailbreak", "injection"} and words & {"detected", "blocked", "attempt"})


_CHECK_NOUNS: Final = frozenset({"output", "validation", "validator", "validators", "guardrail", "result", "answer"})
_CHECK_SPENT: Final = frozenset({"retries", "retry", "attempts"})
_CHECK_MARKS: Final = frozenset({"exceeded", "maximum", "max", "exhausted", "after", "failed"})


@functools.lru_cache(maxsize=1024)
def output_check_spent(text: str) -> bool:
    """Whether ``text`` (an exception message or type) says an output check ran out of retries."""
    words = set(tokens_of(text))
    return bool(words & _CHECK_NOUNS and words & _CHECK_SPENT and words & _CHECK_MARKS)


_POLICY_SINGLE: Final = frozenset(
    {"pii", "phi", "ssn", "ssns", "iban", "privacy", "gdpr", "hipaa", "confidential", "unsafe", "harmful", "harm",
     "toxic", "toxicity", "hate", "hateful", "violence", "violent", "sexual", "nsfw", "profanity", "profane",
     "offensive", "harassment", "jailbreak", "disallowed", "prohibited", "forbidden", "moderation", "moderated",
     "unsafety"}
)  # fmt: skip
_POLICY_ACTS: Final = frozenset({"violates", "violated", "violation", "against", "breach", "breaches"})


@functools.lru_cache(maxsize=1024)
def policy_words(text: str) -> bool:
    """Whether an output check's rejection names a policy: personal data, unsafe content, a denied topic.

    ``"contains personal data"``, ``"PII detected"``, ``"harmful content"``, ``"the topic is not
    allowed"``, ``"violates the privacy policy"``; never a format problem (``"not valid JSON"``,
    ``"missing field 'summary'"``), which names none of these.
    """
    tokens = tokens_of(text)
    words = set(tokens)
    if words & _POLICY_SINGLE:
        return True
    if "personal" in words and words & {"data", "information", "info", "details"}:
        return True
    if "sensitive" in words and words & {"data", "information", "content"}:
        return True
    if words & {"topic", "topics", "subject"} and words & {"denied", "banned", "restricted", "allowed", "off"}:
        return True
    if "policy" in words and bool(words & _POLICY_ACTS):
        return True
    pairs = _bigrams(tokens)
    return not pairs.isdisjoint(_PII_TERMS) or not pairs.isdisjoint(_POLICY_TERMS)


_PII_TERMS: Final = frozenset(
    {("social", "security"), ("security", "number"), ("credit", "card"), ("card", "number"), ("card", "numbers"),
     ("phone", "number"), ("telephone", "number"), ("mail", "address"), ("email", "address"), ("home", "address"),
     ("date", "birth"), ("bank", "account"), ("account", "number"), ("tax", "id"), ("national", "insurance"),
     ("national", "id"), ("driver", "license"), ("driver", "licence"), ("passport", "number"),
     ("personally", "identifiable"), ("medical", "record"), ("medical", "records"), ("health", "information")}
)  # fmt: skip
"""Personal data named by two adjacent words (after :data:`_FILLER`): ``social security number``, ``card
number``, ``e-mail address``, ``date of birth`` … (single words such as ``SSN`` and ``PII`` are in
:data:`_POLICY_SINGLE`)."""
_POLICY_TERMS: Final = frozenset(
    {("content", "policy"), ("usage", "policy"), ("safety", "policy"), ("acceptable", "use"), ("privacy", "rules"),
     ("data", "protection"), ("not", "safe"), ("policy", "forbids"), ("policy", "prohibits")}
)  # fmt: skip
"""Policies named by two adjacent words (``content policy``, ``acceptable use``, ``data protection``)."""
_FILLER: Final = frozenset({"of", "the", "a", "an", "s", "your", "their", "his", "her", "my", "our"})


def _bigrams(tokens: Sequence[str]) -> set[tuple[str, str]]:
    """Adjacent word pairs of ``tokens``, filler words (``of``, ``the``, possessives) skipped."""
    words = [t for t in tokens if t not in _FILLER]
    return set(itertools.pairwise(words))


def _guard_type(exception_type: str) -> bool:
    words = set(tokens_of(exception_type))
    return ("tripwire" in words or bool(words & _GUARD_WORDS)) and block_words(exception_type)


def output_finish_reasons(attrs: Attributes) -> tuple[str, ...]:
    """Finish reasons written inside an LLM span's output document, when no attribute carries one."""
    for key in ("output.value", "gen_ai.output.messages"):
        value = attrs.get(key)
        if isinstance(value, str) and "inish" in value:
            found = tuple(dict.fromkeys(m.group(1).strip().lower() for m in _OUTPUT_FINISH.finditer(value[:65536])))
            if found:
                return found[:8]
    return ()


def is_block_reason(reason: str) -> bool:
    """Whether a normalised finish reason means output was blocked (any spelling, compacted)."""
    return _compact(reason) in _BLOCK_REASONS_COMPACT


def is_tool_request(reasons: Sequence[str]) -> bool:
    """Whether finish reasons say the model asked for tool calls."""
    return any(_compact(r) in TOOL_REQUEST_REASONS for r in reasons)


@functools.lru_cache(maxsize=512)
def _compact(reason: str) -> str:
    return "".join(ch for ch in reason.lower() if ch.isalnum())


# --- user configuration ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _UserSignal:
    exception_types: frozenset[str] = frozenset()
    messages: tuple[re.Pattern[str], ...] = ()
    attributes: Mapping[str, frozenset[str]] = field(default_factory=dict)
    rejections: tuple[re.Pattern[str], ...] = ()
    benign_rejections: tuple[re.Pattern[str], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exception_types or self.messages or self.attributes or self.rejections)


@dataclass(frozen=True, slots=True)
class DetectionConfig:
    """The ``detection`` section of ``vigil.yaml``: users' own limit/block markers and switches.

    Example::

        detection:
          hit_max_iterations:
            exception_types: [BudgetExhausted]          # class name, or its qualified name
            messages: ["budget of \\\\d+ steps (used|spent)"]  # regular expressions, case-insensitive
            attributes: {myapp.stop_reason: [max_steps, budget]}
          safety_blocked:
            exception_types: [ContentRejected]
            attributes: {myapp.moderation: [blocked]}
            rejections: ["brand guidelines"]   # an output check that rejected on these is a block
            benign_rejections: ["phone number format"]  # never a block, whatever built-in term they hold
          disable: [limit.cutoff]

    Attribute values compare as lower-cased strings (``true`` matches a boolean true).
    """

    limit: _UserSignal = _UserSignal()
    block: _UserSignal = _UserSignal()
    disabled: frozenset[str] = frozenset()

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> DetectionConfig:
        """Validate and compile a ``detection`` mapping.

        Raises:
            DetectionConfigError: one line naming the field (an unknown key, a bad regular
                expression, an unknown rule id in ``disable``).
        """
        if not data:
            return cls()
        if not isinstance(data, Mapping):
            raise DetectionConfigError("detection: expected a mapping")
        unknown = set(data) - {LIMIT, BLOCK, "disable"}
        if unknown:
            raise DetectionConfigError(
                f"detection: unknown key {sorted(unknown)[0]!r} (expected {LIMIT}, {BLOCK}, disable)"
            )
        disabled = data.get("disable") or []
        if not isinstance(disabled, list) or not all(isinstance(d, str) for d in disabled):
            raise DetectionConfigError("detection.disable: expected a list of rule ids")
        bad = [d for d in disabled if d not in BUILTIN_RULES]
        if bad:
            raise DetectionConfigError(
                f"detection.disable: unknown rule {bad[0]!r} (known: {', '.join(BUILTIN_RULES)})"
            )
        return cls(
            _user_signal(data.get(LIMIT), f"detection.{LIMIT}"),
            _user_signal(data.get(BLOCK), f"detection.{BLOCK}"),
            frozenset(disabled),
        )


def _user_signal(data: object, where: str) -> _UserSignal:
    if data is None:
        return _UserSignal()
    if not isinstance(data, Mapping):
        raise DetectionConfigError(f"{where}: expected a mapping")
    known = {"exception_types", "messages", "attributes", "rejections", "benign_rejections"}
    unknown = set(data) - known
    if unknown:
        raise DetectionConfigError(
            f"{where}: unknown key {sorted(unknown)[0]!r} (expected exception_types, messages, attributes, rejections, "
            "benign_rejections)"
        )
    types = data.get("exception_types") or []
    if not isinstance(types, list) or not all(isinstance(t, str) and t for t in types):
        raise DetectionConfigError(f"{where}.exception_types: expected a list of exception class names")
    compiled = _patterns(data.get("messages"), f"{where}.messages")
    rejections = _patterns(data.get("rejections"), f"{where}.rejections")
    benign = _patterns(data.get("benign_rejections"), f"{where}.benign_rejections")
    attrs = data.get("attributes") or {}
    if not isinstance(attrs, Mapping):
        raise DetectionConfigError(f"{where}.attributes: expected a mapping of attribute key to values")
    values: dict[str, frozenset[str]] = {}
    for key, wanted in attrs.items():
        items = wanted if isinstance(wanted, list) else [wanted]
        if not isinstance(key, str) or not key or not items:
            raise DetectionConfigError(f"{where}.attributes: expected attribute key: [values]")
        values[key] = frozenset(_attr_text(v) for v in items)
    return _UserSignal(frozenset(types), compiled, values, rejections, benign)


def _patterns(patterns: object, where: str) -> tuple[re.Pattern[str], ...]:
    """A list of regular expressions, compiled case-insensitive; a one-line error naming the bad one."""
    patterns = patterns or []
    if not isinstance(patterns, list) or not all(isinstance(p, str) and p for p in patterns):
        raise DetectionConfigError(f"{where}: expected a list of regular expressions")
    compiled: list[re.Pattern[str]] = []
    for i, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern, re.IGNORECASE))
        except re.error as exc:
            raise DetectionConfigError(f"{where}[{i}]: invalid regular expression {pattern!r}: {exc}") from None
    return tuple(compiled)


def _attr_text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip().lower()


# --- the detector -----------------------------------------------------------------------------


# Globals rather than ``StepKind.X`` in the per-span code: on CPython 3.11 a look-up through
# ``EnumType.__getattr__`` is not specialised (see scorers/normalise.py).
_AGENT_KIND: Final = StepKind.AGENT
_LLM_KIND: Final = StepKind.LLM
_TOOL_KIND: Final = StepKind.TOOL
_GUARDRAIL_KIND: Final = StepKind.GUARDRAIL


@dataclass(frozen=True, slots=True)
class SpanFacts:
    """What the normaliser already read off one span, handed to :meth:`Detector.span`."""

    span: Span
    kind: StepKind
    error: bool
    types: tuple[str, ...]
    messages: tuple[str, ...]
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Retry:
    """A model call that answered, and the next model call of the run: where an output guard's rejection
    shows (:meth:`Detector.output_guard`).

    Attributes:
        answered: the call that gave the answer.
        carrier: the next call, whose conversation may carry the rejection.
        before: ``answered``'s messages (input, then output), as :func:`scorers.dialects.messages_of` reads them.
        after: ``carrier``'s messages.
        answers: the answer's text as the answer tool recorded it (its result), when it answered through one.
    """

    answered: Span
    carrier: Span
    before: Sequence[Message]
    after: Sequence[Message]
    answers: tuple[str, ...] = ()


class GrowingText:
    """Whether a marker is in a text, lower-cased, where each text may extend the last one looked at.

    A model call's input is the conversation so far: the next call's text is the last one with
    messages appended (a JSON array's text grows past its closing ``]``). When a text starts with the
    last text (or, when the last ended with ``]``, with all of it but that), only the part after it —
    and the marker's length before it, for a match across the join — is lower-cased and searched; the
    rest is the last answer. Anything else is searched whole. Lower-casing works character by character
    (a character never lowers to fewer than one), so the answer is exactly ``marker in text.lower()``
    for an ASCII marker without ``]``. Safe to share between threads (a text of another run is searched
    whole); remembers one text (any prefix remembered is a right answer for the texts that extend it).
    """

    __slots__ = ("_last", "_marker", "_short")

    def __init__(self, marker: str, short: int = 4096) -> None:
        """``short``: texts shorter than this are searched whole and not remembered (remembering costs
        more than it saves on them)."""
        if not marker.isascii() or "]" in marker or marker != marker.lower():
            raise ValueError(f"marker must be lower-case ASCII without ']': {marker!r}")
        self._marker = marker
        self._short = short
        self._last: tuple[str, bool] | None = None  # a prefix of the last text, and whether it holds the marker

    def __call__(self, text: str) -> bool:
        """``marker in text.lower()``."""
        marker = self._marker
        if len(text) < self._short:
            return marker in text.lower()
        last = self._last
        if last is not None and text.startswith(last[0]):
            joined = len(last[0]) - len(marker) + 1
            found = last[1] or marker in text[max(0, joined) :].lower()
        else:
            found = marker in text.lower()
        self._last = (text[:-1] if text.endswith("]") else text, found)
        return found


class Detector:
    """Applies the built-in and user rules; one per process, built from :class:`DetectionConfig`."""

    def __init__(self, config: DetectionConfig | None = None) -> None:
        self.config = config or DetectionConfig()
        off = self.config.disabled
        self._on = {rule: rule not in off for rule in BUILTIN_RULES}
        self._user_keys = frozenset((*self.config.limit.attributes, *self.config.block.attributes))
        self._user_any = bool(self.config.limit or self.config.block)
        self.marker_keys: frozenset[str] = frozenset(
            (*_GUARDRAIL_KEYS, "vigil.max_iterations_hit", "vigil.iterations", *self._user_keys)
        )
        self.watched: frozenset[str] = self.marker_keys | _TEXT_KEYS
        self._grown = {key: GrowingText(CREWAI_FORCE_FINAL_ANSWER) for key in _INPUT_KEYS}

    def quiet(self, attrs: Attributes, error: bool, reasons: Sequence[str]) -> bool:
        """Whether no per-span rule can fire on a span — the cheap pre-check of the common case.

        True when the span has no error, none of the attributes the rules read (outputs,
        inputs, refusals, guardrail and counter markers, the user's attribute keys) and no
        blocking finish reason.
        """
        if error or not self.watched.isdisjoint(attrs):
            return False
        return not reasons or BLOCK_REASON_FORMS.isdisjoint(reasons)

    def enabled(self, rule: str) -> bool:
        """Whether built-in rule ``rule`` is on."""
        return self._on.get(rule, True)

    # per span ------------------------------------------------------------------------------

    def span(self, facts: SpanFacts, out: list[Evidence]) -> None:
        """Append the evidence one span gives (cheap when the span has no error and no marker)."""
        span, kind = facts.span, facts.kind
        attrs = span.attributes
        reasons = facts.reasons
        if not reasons and kind is _LLM_KIND:
            reasons = output_finish_reasons(attrs)
        if reasons and self._on["block.finish_reason"]:
            for reason in reasons:
                if is_block_reason(reason):
                    out.append(_ev(BLOCK, "block.finish_reason", span, "finish_reason", reason))
                    break
        if facts.error:
            self._errors(facts, out)
        if kind is not _TOOL_KIND and self._on["limit.output"]:
            self._limit_output(span, out)
        if kind is _LLM_KIND:
            if self._on["block.refusal"]:
                self._refusal(span, out)
            if self._on["limit.output"] and _has_inputs(attrs) and _inputs_contain(attrs, self._grown):
                out.append(_ev(LIMIT, "limit.output", span, "input", "CrewAI forced final answer (max_iter reached)"))
        elif kind is not _TOOL_KIND:
            if not self.marker_keys.isdisjoint(attrs):
                self._markers(span, kind, out)
            if self._on["limit.output"]:
                self._stop_fields(span, out)
            if self._on["limit.cutoff"]:
                self._open_trajectory(span, out)
        if self._user_keys and not self._user_keys.isdisjoint(attrs):
            self._user_attributes(span, out)

    def _errors(self, facts: SpanFacts, out: list[Evidence]) -> None:
        span, kind = facts.span, facts.kind
        status = span.status_message if isinstance(span.status_message, str) else ""
        texts: list[tuple[str, str]] = [("exception.type", t) for t in facts.types if t != "_OTHER"]
        texts += [("exception.message", m) for m in facts.messages]
        if status:
            texts.append(("status.message", status))
        if kind is not _TOOL_KIND:
            for key in ("output.value", "traceloop.entity.output"):
                value = span.attributes.get(key)
                if isinstance(value, str) and value and len(value) <= 2000:
                    texts.append((key, value))  # a failed agent's output is its error report (Agno)
        if self._user_any:
            self._user_errors(span, facts.types, texts, out)
        if kind is _TOOL_KIND:
            # A tool's own failure is a tool error, whatever it says; only a guardrail raised
            # around the tool (a tool guardrail's tripwire) blocks the run.
            if self._on["block.vocabulary"]:
                hit = next((t for t in facts.types if _guard_type(t)), None)
                if hit is not None:
                    out.append(_ev(BLOCK, "block.vocabulary", span, "exception.type", hit))
            return
        if kind is _GUARDRAIL_KIND and self._on["block.guardrail"]:
            out.append(_ev(BLOCK, "block.guardrail", span, "status", status or "guardrail span failed"))
        limit_on, block_on = self._on["limit.vocabulary"], self._on["block.vocabulary"]
        for source, text in texts:
            if limit_on and limit_words(text):
                out.append(_ev(LIMIT, "limit.vocabulary", span, source, text))
                limit_on = False
            if block_on and block_words(text):
                out.append(_ev(BLOCK, "block.vocabulary", span, source, text))
                block_on = False

    def _user_errors(
        self, span: Span, types: Sequence[str], texts: Sequence[tuple[str, str]], out: list[Evidence]
    ) -> None:
        for signal, user, prefix in (
            (LIMIT, self.config.limit, "user.limit"),
            (BLOCK, self.config.block, "user.block"),
        ):
            if user.exception_types:
                for t in types:
                    if t in user.exception_types or t.rsplit(".", 1)[-1] in user.exception_types:
                        out.append(_ev(signal, f"{prefix}.exception", span, "exception.type", t))
                        break
            for pattern in user.messages:
                hit = next(((s, t) for s, t in texts if pattern.search(t)), None)
                if hit is not None:
                    out.append(_ev(signal, f"{prefix}.message", span, hit[0], hit[1]))
                    break

    def _user_attributes(self, span: Span, out: list[Evidence]) -> None:
        attrs = span.attributes
        for signal, user, prefix in (
            (LIMIT, self.config.limit, "user.limit"),
            (BLOCK, self.config.block, "user.block"),
        ):
            for key, wanted in user.attributes.items():
                value = attrs.get(key)
                if value is not None and _attr_text(value) in wanted:
                    out.append(_ev(signal, f"{prefix}.attribute", span, key, _attr_text(value)))

    def _stop_fields(self, span: Span, out: list[Evidence]) -> None:
        """``limit.output`` from a run-outcome field an agent/chain span outputs (``stop_reason``, ``state``)."""
        for key in _OUTPUT_KEYS:
            value = span.attributes.get(key)
            if not isinstance(value, str) or len(value) > 1 << 20:
                continue
            for m in _STOP_FIELD.finditer(value):
                if m.group(1).lower() == "finish_reason":
                    continue
                if limit_words(m.group(2)):
                    out.append(_ev(LIMIT, "limit.output", span, f"{key}:{m.group(1)}", m.group(2)))
                    return

    def _open_trajectory(self, span: Span, out: list[Evidence]) -> None:
        """``limit.cutoff`` for ReAct trajectories in an agent's output (DSPy ``ReAct``): the loop
        ended while its last step still chose a tool other than its ``finish`` tool."""
        value = span.attributes.get("output.value")
        if not isinstance(value, str) or '"trajectory"' not in value or '"tool_name_' not in value:
            return
        decoded = as_json(value)
        trajectory = decoded.get("trajectory") if isinstance(decoded, Mapping) else None
        if not isinstance(trajectory, Mapping):
            return
        steps = sorted(
            (int(k.removeprefix("tool_name_")), v)
            for k, v in trajectory.items()
            if k.startswith("tool_name_") and k.removeprefix("tool_name_").isdigit()
        )
        if steps and isinstance(steps[-1][1], str) and not _is_answer_tool(steps[-1][1]):
            detail = f"trajectory ended after {len(steps)} steps with tool {steps[-1][1]!r}, never finish"
            out.append(_ev(LIMIT, "limit.cutoff", span, "output.value:trajectory", detail))

    def injected_prompt(
        self, messages: Sequence[Message], span: Span, out: list[Evidence], tool_results: Iterable[str | None] = ()
    ) -> None:
        """``limit.output`` from a message the framework injected into the last LLM call's conversation
        to say a limit was reached: a system message after the first (LlamaIndex's early-stopping
        prompt), or a tool message that no executed tool returned (Agno's ``Tool call limit reached.
        Tool call X not executed.``).

        The first message (the agent's own system prompt, which may well mention its caps) is never
        read, and a tool message that some tool really returned is that tool's result, not a limit.
        """
        if not self._on["limit.output"] or len(messages) < 2:
            return
        returned: set[str] | None = None
        for message in messages[1:]:
            if message.role not in ("system", "developer", "tool"):
                continue
            text = message.content[:2000]
            if not _PAST_TEXT.search(text) or not (limit_words(text) and not _PAST.isdisjoint(tokens_of(text))):
                continue
            if message.role == "tool":
                if returned is None:
                    returned = {r.strip() for r in tool_results if r}
                if text.strip() in returned:
                    continue
            out.append(_ev(LIMIT, "limit.output", span, f"input.{message.role}_message", text))
            return

    def _refusal(self, span: Span, out: list[Evidence]) -> None:
        for key in _REFUSAL_KEYS:
            value = span.attributes.get(key)
            if isinstance(value, str) and value.strip():
                out.append(_ev(BLOCK, "block.refusal", span, key, value))
                return
        for key in _OUTPUT_KEYS:
            value = span.attributes.get(key)
            if isinstance(value, str) and "refusal" in value and (m := _REFUSAL_JSON.search(value)):
                out.append(_ev(BLOCK, "block.refusal", span, key, m.group(1)))
                return

    def _limit_output(self, span: Span, out: list[Evidence]) -> None:
        for key in _OUTPUT_KEYS:
            value = span.attributes.get(key)
            if value is None:
                continue
            text = value if isinstance(value, str) else dumps(value) or ""
            if text:
                low = text[-8192:].lower()
                for phrase in _LIMIT_OUTPUT_TEXTS:
                    if phrase in low:
                        out.append(_ev(LIMIT, "limit.output", span, key, phrase))
                        return

    def _markers(self, span: Span, kind: StepKind, out: list[Evidence]) -> None:
        attrs = span.attributes
        if self._on["block.guardrail"] and not _GUARDRAIL_KEYS.isdisjoint(attrs):
            hit = _guard_decision(attrs, guardrail_span=False)
            if hit is not None:
                out.append(_ev(BLOCK, "block.guardrail", span, hit[0], hit[1]))
        if self._on["limit.counter"]:
            hit = _counter(attrs)
            if hit is not None:
                out.append(_ev(LIMIT, "limit.counter", span, hit[0], hit[1]))

    def agent_counters(self, span: Span, out: list[Evidence], kind: StepKind = _AGENT_KIND) -> None:
        """Agent, guardrail and root spans: ``limit.counter`` (any ``<x>.<noun>`` ≥ ``<x>.max_<noun>`` pair)
        and ``block.guardrail`` from any guardrail/moderation/security decision attribute that says it
        blocked (``gen_ai.guardrail.tripwire_triggered``, ``*.security.decision.type = deny``, an
        OpenInference GUARDRAIL span whose output is ``BLOCKED``/``FLAGGED``)."""
        attrs = span.attributes
        keys = tuple(attrs)
        may_count, may_decide = _key_profile(keys) if len(keys) <= _MEMO_KEYS else _profile(keys)
        if may_count and self._on["limit.counter"]:
            hit = _generic_counter(attrs)
            if hit is not None:
                out.append(_ev(LIMIT, "limit.counter", span, hit[0], hit[1]))
        guardrail_span = kind is _GUARDRAIL_KIND
        if (may_decide or guardrail_span) and self._on["block.guardrail"]:
            found = _guard_decision(attrs, guardrail_span=guardrail_span)
            if found is not None:
                out.append(_ev(BLOCK, "block.guardrail", span, found[0], found[1]))

    # per run ---------------------------------------------------------------------------------

    def output_check(self, culprit: Span, messages: Sequence[Message], out: list[Evidence]) -> None:
        """``block.output_check``: the exception that reached the caller says an output check ran out of
        retries, and its rejection names a policy (see the module doc).

        The rejection is read from the rest of the exception message and from the feedback sent to
        the model before its last answer: the non-assistant messages between the last call's earlier
        answer and its output.
        """
        if not self._on["block.output_check"] and not self.config.block.rejections:
            return
        texts = [culprit.status_message] if culprit.status_message else []
        for event in culprit.events:
            if event.name == "exception":
                texts.extend(
                    t for key in ("exception.type", "exception.message") if (t := _str(event.attributes.get(key)))
                )
        if not any(output_check_spent(text) for text in texts):
            return
        for source, whole in (*(("exception", t) for t in texts), *_feedback(messages)):
            text = whole[:2000]
            rule = self._rejection_rule(text, "block.output_check")
            if rule is not None:
                out.append(_ev(BLOCK, rule, culprit, source, text))
                return

    def _rejection_rule(self, text: str, rule: str) -> str | None:
        """Which rule a check's rejection ``text`` blocks the run by: ``rule`` (when on) if it names a built-in
        safety reason (:func:`policy_words`) that none of the user's ``safety_blocked.benign_rejections``
        excuses, else ``user.block.rejection`` if one of the user's ``safety_blocked.rejections`` matches."""
        block = self.config.block
        if self._on[rule] and policy_words(text) and not any(p.search(text) for p in block.benign_rejections):
            return rule
        if any(p.search(text) for p in block.rejections):
            return "user.block.rejection"
        return None

    def output_guard(
        self,
        retries: Iterable[Retry],
        out: list[Evidence],
        check_of: Callable[[Span, Span], Span | None] | None = None,
    ) -> None:
        """``block.output_guard``: a model call's answer was sent back with feedback that names a safety reason
        (see the module doc); one evidence per run, on the first such retry.

        ``check_of(answered, carrier)``: the span that recorded the check between the two calls, if any (the
        span the evidence names; else the carrier). Asked only for the retry that matched.
        """
        if not self._on["block.output_guard"] and not self.config.block.rejections:
            return
        for retry in retries:
            for source, whole in rejection_feedback(retry.before, retry.after, retry.answers):
                text = whole[:2000]
                rule = self._rejection_rule(text, "block.output_guard")
                if rule is not None:
                    check = check_of(retry.answered, retry.carrier) if check_of is not None else None
                    out.append(_ev(BLOCK, rule, check or retry.carrier, source, text))
                    return

    def cutoff(
        self,
        last_llm: tuple[Span, tuple[str, ...]] | None,
        tools_after: Sequence[str],
        *,
        raised: bool,
        complete: bool,
        out: list[Evidence],
    ) -> None:
        """``limit.cutoff``: the last LLM turn asked for tools and nothing answered after it."""
        if not self._on["limit.cutoff"] or last_llm is None or raised or not complete:
            return
        span, reasons = last_llm
        if not reasons:
            reasons = output_finish_reasons(span.attributes)
        if not is_tool_request(reasons):
            return
        if any(_is_answer_tool(name) for name in tools_after):
            return
        detail = f"last LLM call finished with {'/'.join(reasons)} and no later LLM call answered"
        out.append(_ev(LIMIT, "limit.cutoff", span, "finish_reason", detail))


DEFAULT_DETECTOR: Final = Detector()


def _ev(signal: str, rule: str, span: Span, source: str, value: str) -> Evidence:
    text = value if len(value) <= MAX_EVIDENCE_TEXT else value[: MAX_EVIDENCE_TEXT - 1] + "…"
    return Evidence(signal, rule, span.span_id, span.name[:256], source, text)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _feedback(messages: Sequence[Message]) -> list[tuple[str, str]]:
    """The non-assistant messages between the last call's earlier answer and its output (the feedback a
    framework sends the model when a check rejects its answer), latest first."""
    found: list[tuple[str, str]] = []
    i = len(messages) - 1
    while i >= 0 and messages[i].role in _ANSWER_ROLES:
        i -= 1  # the call's own output
    while i >= 0 and messages[i].role not in _ANSWER_ROLES:
        if messages[i].content:
            found.append((f"input.{messages[i].role}_message", messages[i].content))
        i -= 1
    return found if i >= 0 else []  # no earlier answer: the input is the user's prompt, not feedback


_ANSWER_ROLES: Final = frozenset({"assistant", "ai", "model"})
_OWN_ROLES: Final = frozenset({*_ANSWER_ROLES, "tool-call", "tool_call"})
"""Roles of what the model itself said (smolagents replays its tool calls as ``tool-call`` messages)."""


def _split_output(messages: Sequence[Message]) -> int:
    """Where a call's output starts in its messages (input then output): after the last message that
    is not the model's own."""
    i = len(messages)
    while i > 0 and messages[i - 1].role in _OWN_ROLES:
        i -= 1
    return i


def rejection_feedback(
    before: Sequence[Message], after: Sequence[Message], answers: Sequence[str] = ()
) -> list[tuple[str, str]]:
    """The feedback a check sent back with a rejected answer: ``(source, text)`` of each message the
    next call's input adds after the answering call's input, the model's own messages (its answer,
    re-sent) left out, the answer's text taken out of the rest (a tool result that repeats it).

    Empty unless the next call's input extends the answering call's input (same roles and texts, and
    more of them): a call of another agent, or with another history, carries no feedback on this answer.
    """
    start = _split_output(before)
    if start == 0 or start == len(before):
        return []  # no input captured, or no answer
    end = _split_output(after)
    if end <= start:
        return []
    for old, new in zip(before[:start], after[:start], strict=True):
        if old.role != new.role or old.content != new.content:
            return []
    quoted = [t for t in (*(m.content for m in before[start:]), *answers) if len(t.strip()) >= 3]
    found: list[tuple[str, str]] = []
    for message in after[start:end]:
        if message.role in _OWN_ROLES or not message.content:
            continue
        text = message.content
        for answer in quoted:
            text = text.replace(answer, " ")
        if text.strip():
            found.append((f"input.{message.role}_message", text))
    return found


def _has_inputs(attrs: Attributes) -> bool:
    return (
        any(k in attrs for k in _INPUT_KEYS)
        or "llm.input_messages.0.message.content" in attrs
        or ("gen_ai.prompt.0.content" in attrs)
    )


def _inputs_contain(attrs: Attributes, grown: Mapping[str, GrowingText]) -> bool:
    """Whether an input of the span holds :data:`CREWAI_FORCE_FINAL_ANSWER`, lower-cased (``grown``:
    a :class:`GrowingText` of it per key of :data:`_INPUT_KEYS`)."""
    marker = CREWAI_FORCE_FINAL_ANSWER
    for key in _INPUT_KEYS:
        value = attrs.get(key)
        if isinstance(value, str) and grown[key](value):
            return True
    for prefix, suffix in _INDEXED_INPUTS:
        for i in range(_MAX_INDEXED):
            value = attrs.get(f"{prefix}{i}{suffix}")
            if value is None:
                break
            if isinstance(value, str) and marker in value.lower():
                return True
    return False


def _lower(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value.strip().lower() if isinstance(value, str) else None


_GUARD_KEY_WORDS: Final = ("guardrail", "guardian", "moderation", "security.decision", "tripwire", "safety", "rail.")
"""Attribute keys that can carry a guardrail/moderation decision (lower-cased substrings)."""
_GUARD_BLOCK_VALUES: Final = frozenset(
    {"deny", "denied", "block", "blocked", "intervened", "guardrail_intervened", "flagged", "rejected", "reject",
     "unsafe", "tripped", "triggered", "violation"}
)  # fmt: skip
_GUARD_TRUE_SUFFIXES: Final = (
    "triggered", "tripped", "blocked", "flagged", "intervened", "violated", "denied", "rail.stop",
)  # fmt: skip
"""Boolean decision attributes that mean "blocked" when true (NeMo Guardrails' ``rail.stop`` included)."""


def _has_guard_key(keys: str) -> bool:
    for word in _GUARD_KEY_WORDS:  # noqa: SIM110 - a plain loop: cheaper than any() or a regex here
        if word in keys:
            return True
    return False


def _profile(keys: tuple[str, ...]) -> tuple[bool, bool]:
    """Whether attribute keys can hold a counter cap (``"max"`` in a key, see :func:`_generic_counter`)
    and a guardrail decision (see :func:`_guard_decision`)."""
    return any("max" in key for key in keys), _has_guard_key("\n".join(keys).lower())


_MEMO_KEYS: Final = 64
_key_profile: Final = functools.lru_cache(maxsize=1024)(_profile)
""":func:`_profile` memoised on the key tuple (of spans with at most :data:`_MEMO_KEYS` keys): one
instrumentation writes the same keys in the same order on every agent span, so
:meth:`Detector.agent_counters` usually costs one cache hit on a span with neither
(-7,800 instructions per bench run, BENCHMARKS.md issue 13)."""


def _guard_decision(attrs: Attributes, *, guardrail_span: bool) -> tuple[str, str] | None:
    """A guardrail decision attribute that says the content was blocked, or a guardrail span's blocking output."""
    if _has_guard_key("\n".join(attrs).lower()):  # one scan of all keys; most spans have none
        for key, value in attrs.items():
            low = key.lower()
            if not _has_guard_key(low):
                continue
            text = _lower(value)  # booleans read as "true"/"false"
            if text is None or low.endswith(("config", "policy", "on_fail")):
                continue
            if text == "true":
                if low.endswith(_GUARD_TRUE_SUFFIXES) or low.endswith("result.value"):
                    return key, text
            elif not isinstance(value, bool) and (
                text in _GUARD_BLOCK_VALUES or (text == "failed" and low.endswith(".status"))
            ):
                return key, text
    if guardrail_span:
        out = _lower(attrs.get("output.value"))
        if out is not None and out.strip('"') in _GUARD_BLOCK_VALUES:
            return "output.value", out
    return None


def _counter(attrs: Attributes) -> tuple[str, str] | None:
    if _lower(attrs.get("vigil.max_iterations_hit")) == "true":
        return "vigil.max_iterations_hit", "true"
    return _generic_counter(attrs)


_MAX_KEY: Final = re.compile(r"^(?P<pre>.*?)(?:max[_\-]?|maximum[_\-]?)(?P<noun>[a-z_]+?)s?$", re.I)
_COUNTER_NOUNS: Final = frozenset(
    {"iteration", "step", "turn", "round", "llm_call", "tool_call", "request", "call", "iter"}
)


def _generic_counter(attrs: Attributes) -> tuple[str, str] | None:
    """A ``<prefix>max_<noun>`` cap and a ``<prefix><noun>`` counter (plural or ``_count``) that reached it."""
    for key, cap_value in attrs.items():
        if "max" not in key:
            continue
        m = _MAX_KEY.match(key)
        if m is None or m.group("noun").lower() not in _COUNTER_NOUNS:
            continue
        cap = _number(cap_value)
        if cap is None or cap <= 0:
            continue
        pre, noun = m.group("pre"), m.group("noun")
        for name in (f"{pre}{noun}s", f"{pre}{noun}", f"{pre}{noun}_count", f"{pre}{noun}s_count", f"{pre}num_{noun}s"):
            count = _number(attrs.get(name))
            if count is not None and count >= cap:
                return name, f"{name}={count:g} >= {key}={cap:g}"
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None
