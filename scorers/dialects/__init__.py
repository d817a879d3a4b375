"""Trace dialects and framework quirks: one adapter module each, walked in one ordered list.

Vigil reads traces written by several instrumentation families; each names the same things
differently (conventions.md §1–§3, §8). Each family is one module here, an
:class:`~scorers.dialects.base.Adapter` holding its classification, attribute keys, message
reading and naming:

* :mod:`~scorers.dialects.genai`: OpenTelemetry GenAI semantic conventions (``gen_ai.*``);
* :mod:`~scorers.dialects.openinference`: Arize OpenInference (``openinference.span.kind``);
* :mod:`~scorers.dialects.traceloop`: Traceloop / OpenLLMetry (``traceloop.*``, legacy names);
* :mod:`~scorers.dialects.vercel`: the Vercel AI SDK (``ai.*``);
* :mod:`~scorers.dialects.langsmith`: LangSmith OTel export (``langsmith.span.kind``).

Frameworks whose instrumentors bend a dialect have an adapter for their quirks, selected
by the span's instrumentation scope: :mod:`~scorers.dialects.openai_agents`,
:mod:`~scorers.dialects.langchain`, :mod:`~scorers.dialects.crewai`,
:mod:`~scorers.dialects.llamaindex`, :mod:`~scorers.dialects.smolagents`,
:mod:`~scorers.dialects.dspy`, :mod:`~scorers.dialects.autogen`, :mod:`~scorers.dialects.google_adk`.

:data:`ADAPTERS` lists them in order (like structlog's processors); supporting a new
framework is adding one module to it (and its captured fixtures). The order decides which
dialect's key wins where one value is read ("first present"), and ties in the dialect vote.
Everything composed here is computed once at import; the per-span work is a few dictionary
look-ups. Nothing here raises on odd attribute types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from collector.model import Attributes, Span
from scorers.dialects.autogen import AutoGen
from scorers.dialects.base import (
    MAX_PARSE_CHARS,
    Adapter,
    Found,
    Naming,
    as_bool,
    as_int,
    as_json,
    as_str,
    first,
    first_str,
    overrides,
)
from scorers.dialects.crewai import CrewAI
from scorers.dialects.dspy import DSPy
from scorers.dialects.genai import GENAI, GenAI, History, lift_events
from scorers.dialects.genai import agent_attribute as _genai_agent
from scorers.dialects.genai import workflow_name as _genai_workflow
from scorers.dialects.google_adk import GoogleADK
from scorers.dialects.langchain import LangChain
from scorers.dialects.langsmith import LANGSMITH, LangSmith
from scorers.dialects.llamaindex import LlamaIndex
from scorers.dialects.openai_agents import OpenAIAgents
from scorers.dialects.openinference import OPENINFERENCE, OpenInference, is_chain
from scorers.dialects.openinference import agent_attribute as _oi_agent
from scorers.dialects.pydantic_ai import PydanticAI
from scorers.dialects.smolagents import Smolagents
from scorers.dialects.traceloop import TRACELOOP, Traceloop
from scorers.dialects.traceloop import agent_name as _traceloop_agent
from scorers.dialects.vercel import VERCEL, Vercel, function_id
from scorers.model import Message, StepKind

__all__ = [
    "ADAPTERS",
    "ANSWER_SCOPES",
    "ARGUMENT_KEYS",
    "DIALECTS",
    "FINAL_OUTPUT_KEYS",
    "GENAI",
    "INPUT_TOKEN_KEYS",
    "LANGSMITH",
    "MAX_AGENT_NAME",
    "MAX_PARSE_CHARS",
    "MODEL_KEYS",
    "OPENINFERENCE",
    "OUTPUT_TOKEN_KEYS",
    "RESULT_KEYS",
    "SESSION_KEYS",
    "TOOL_CALL_ID_KEYS",
    "TOOL_NAME_KEYS",
    "TRACELOOP",
    "UNKNOWN",
    "USER_KEYS",
    "VERCEL",
    "Adapter",
    "MessageHistory",
    "agent_name",
    "answer_tool",
    "as_bool",
    "as_int",
    "as_json",
    "as_str",
    "classify",
    "entity_name",
    "first",
    "first_str",
    "lift_events",
    "message_pairs",
    "messages_of",
    "raised_in",
    "service_name",
    "tool_name",
]

ADAPTERS: Final[tuple[Adapter, ...]] = (
    # Dialects: attribute vocabularies, in the order their evidence is trusted.
    GenAI(),
    OpenInference(),
    Traceloop(),
    Vercel(),
    LangSmith(),
    # Frameworks: quirks of one framework's instrumentors, selected by instrumentation scope.
    OpenAIAgents(),
    LangChain(),
    CrewAI(),
    LlamaIndex(),
    Smolagents(),
    DSPy(),
    AutoGen(),
    GoogleADK(),
    PydanticAI(),
)
"""Every adapter, in order."""

UNKNOWN: Final = "unknown"

DIALECTS: Final = tuple(a.name for a in ADAPTERS if not a.scopes)
"""Known dialects, in the order used to break a tie in the majority vote."""

_K = StepKind
_OTHER: Final = _K.OTHER  # a global: ``StepKind.X`` is an unspecialised EnumType.__getattr__ look-up on 3.11


def _keys(field: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(key for adapter in ADAPTERS for key in getattr(adapter, field)))


INPUT_TOKEN_KEYS: Final = _keys("input_token_keys")
OUTPUT_TOKEN_KEYS: Final = _keys("output_token_keys")
MODEL_KEYS: Final = _keys("model_keys")
FINISH_KEYS: Final = _keys("finish_keys")
EXTRA_FINISH_KEYS: Final = _keys("extra_finish_keys")
FALLBACK_FINISH_KEYS: Final = _keys("fallback_finish_keys")
TOOL_NAME_KEYS: Final = _keys("tool_name_keys")
TOOL_CALL_ID_KEYS: Final = _keys("tool_call_id_keys")
ARGUMENT_KEYS: Final = _keys("argument_keys") + _keys("last_resort_argument_keys")
RESULT_KEYS: Final = _keys("result_keys")
FINAL_OUTPUT_KEYS: Final = _keys("final_output_keys")
MESSAGE_KEYS: Final = frozenset(_keys("message_keys"))
SOFT_ERROR_PREFIXES: Final = _keys("soft_error_prefixes")
LANGFUSE_SESSION_KEYS: Final = ("langfuse.session.id",)
LANGFUSE_USER_KEYS: Final = ("langfuse.user.id",)
"""Langfuse's own trace attributes (its SDK's spans are otherwise GenAI spans; it also reads ``session.id``
and ``user.id``, which the dialects already hold)."""
SESSION_KEYS: Final = _keys("session_keys") + LANGFUSE_SESSION_KEYS
"""Attributes naming the conversation a run is a turn of, in order of trust (:mod:`scorers.session_ids`)."""
USER_KEYS: Final = _keys("user_keys") + LANGFUSE_USER_KEYS
"""Attributes naming the end user a run answered, in order of trust."""
GENERIC_AGENT_NAMES: Final = frozenset({""}).union(*(a.generic_agent_names for a in ADAPTERS))
"""Lower-case agent span names that never name an agent, whichever framework wrote them."""

FINISH_READERS: Final[tuple[Callable[[Attributes, list[str]], None], ...]] = tuple(
    a.finish_reasons for a in ADAPTERS if overrides(a, "finish_reasons")
)
"""Adapters' readers of finish reasons held in other shapes than :data:`FINISH_KEYS`, in order."""

ANSWER_READERS: Final[tuple[Callable[[Attributes], str | None], ...]] = tuple(
    a.final_answer for a in ADAPTERS if overrides(a, "final_answer")
)
"""Adapters' readers of a final answer held in structured attributes, in order."""

STATE_READERS: Final[tuple[Callable[[Mapping[str, object]], str | None], ...]] = tuple(
    a.answer_in_state for a in ADAPTERS if overrides(a, "answer_in_state")
)
"""Adapters' readers of the answer in a run's JSON output state, in order."""

_CLASSIFY: Final = tuple(a.classify for a in ADAPTERS if overrides(a, "classify"))
_FIRST_CLASSIFY: Final = _CLASSIFY[0]
_MORE_CLASSIFY: Final = _CLASSIFY[1:]
_CLASSIFY_NAME: Final = tuple(a.classify_name for a in ADAPTERS if overrides(a, "classify_name"))
_RECOGNISE: Final = tuple((a.name, a.recognises) for a in ADAPTERS if overrides(a, "recognises"))
_ENTITY: Final = tuple(a.entity_name for a in ADAPTERS if not a.scopes and overrides(a, "entity_name"))
_MESSAGES: Final = tuple(
    (frozenset(a.message_keys), a.messages) for a in ADAPTERS if overrides(a, "messages") and a.message_keys
)
_NOT_NAMING: Final = frozenset(a.name for a in ADAPTERS if not a.names_agents)
_GENAI: Final = next(a for a in ADAPTERS if isinstance(a, GenAI))
_GENAI_MESSAGE_KEYS: Final = frozenset(_GENAI.message_keys)
assert _MESSAGES[0][1] == _GENAI.messages, "message_pairs reads GenAI first, as messages_of does"


def _by_scope(wanted: Callable[[Adapter], bool]) -> dict[str, Adapter]:
    return {scope: a for a in ADAPTERS if a.scopes and wanted(a) for scope in a.scopes}


_REFINE: Final = {s: a.refine for s, a in _by_scope(lambda a: overrides(a, "refine")).items()}
_SCOPED_ENTITY: Final = {
    s: a.entity_name for s, a in _by_scope(lambda a: bool(a.entry_methods) or overrides(a, "entity_name")).items()
}
_ANSWER_TOOLS: Final = {s: a.answer_tools for s, a in _by_scope(lambda a: bool(a.answer_tools)).items()}
ANSWER_SCOPES: Final = frozenset(_ANSWER_TOOLS)
"""Instrumentation scopes whose framework has answer tools (a cheap pre-check for :func:`answer_tool`)."""
_RUN_NAME: Final = {s: a.run_name for s, a in _by_scope(lambda a: overrides(a, "run_name")).items()}
_RAISED: Final = {s: a.raised for s, a in _by_scope(lambda a: overrides(a, "raised")).items()}


def classify(span: Span) -> Found:
    """Classify one span into the role it plays in the run and the dialect that said so.

    Three passes over :data:`ADAPTERS`: each dialect's kind attributes
    (``gen_ai.operation.name``, ``openinference.span.kind``, ``traceloop.span.kind`` and legacy
    ``llm.request.type``, Traceloop guardrail attributes, Vercel operation ids,
    ``langsmith.span.kind``); then span-name patterns (``execute_tool X``, ``chat MODEL``,
    ``X.tool``, ``X.workflow``); then, for a span nothing classified, which dialect still
    recognises it. Finally the framework adapter of the span's scope may correct the result
    (a LlamaIndex helper that is no model call).

    Args:
        span: any span.

    Returns:
        ``(kind, dialect)``; ``(StepKind.OTHER, "unknown")`` when nothing matched.
    """
    found = _FIRST_CLASSIFY(span)  # GenAI: the commonest spans are decided by one call
    if found is None:
        for read in _MORE_CLASSIFY:
            found = read(span)
            if found is not None:
                break
        else:
            found = _by_name(span)
    if span.scope in _REFINE:
        return _REFINE[span.scope](span, found)
    return found


def _by_name(span: Span) -> Found:
    name = span.name
    for read in _CLASSIFY_NAME:
        found = read(name)
        if found is not None:
            return found
    for dialect, recognises in _RECOGNISE:
        if recognises(span):
            return _OTHER, dialect
    return _OTHER, UNKNOWN


def entity_name(span: Span, kind: StepKind) -> str:
    """Return the entity (agent, tool, workflow) a span stands for, derived from its name.

    ``execute_tool X`` / ``invoke_agent X`` / ``invoke_workflow X`` give ``X``, and so do
    Traceloop's ``X.tool`` / ``X.agent`` / ``X.workflow`` and a framework's
    ``X.<entry method>`` (``sa_travel_agent.run``); other names are returned as they are.
    """
    scoped = _SCOPED_ENTITY.get(span.scope)
    if scoped is not None and (name := scoped(span, kind)) is not None:
        return name
    for read in _ENTITY:
        if (name := read(span, kind)) is not None:
            return name
    return span.name


def tool_name(span: Span) -> str:
    """The tool a TOOL span called: :data:`TOOL_NAME_KEYS`, else from the span name."""
    return first_str(span.attributes, TOOL_NAME_KEYS) or entity_name(span, _K.TOOL)


def answer_tool(span: Span) -> str | None:
    """The name of a TOOL span's tool when it is its framework's answer tool (not a tool call)."""
    answers = _ANSWER_TOOLS.get(span.scope)
    if answers is None:
        return None
    name = tool_name(span)
    return name if name in answers else None


def raised_in(head: Span, ordered: Sequence[Span], kinds: Mapping[str, Found]) -> Span | None:
    """The span whose error reached the caller though the head is OK, for frameworks whose
    roots stay OK when the run raised (the OpenAI Agents SDK); else None."""
    raised = _RAISED.get(head.scope)
    return None if raised is None else raised(ordered, kinds)


def messages_of(attributes: Attributes) -> list[Message]:
    """Return the input messages followed by the output messages captured on one LLM span.

    The first adapter, in order, that finds any: ``gen_ai.input.messages`` /
    ``gen_ai.output.messages`` (JSON string or structured), OpenInference flattened
    ``llm.input_messages.{i}.message.*`` / ``llm.output_messages.{i}.message.*``, legacy
    ``gen_ai.prompt.{i}.*`` / ``gen_ai.completion.{i}.*``, and Vercel ``ai.prompt.messages`` +
    ``ai.response.text``.
    """
    if MESSAGE_KEYS.isdisjoint(attributes):
        return []
    for keys, read in _MESSAGES:
        if not keys.isdisjoint(attributes) and (found := read(attributes)):
            return found
    return []


def message_pairs(attributes: Attributes) -> list[tuple[str, str]]:
    """:func:`messages_of` as ``(role, content)`` pairs: the same messages, the GenAI ones read without a
    :class:`~scorers.model.Message` each (the run details read every model call's, the repeated history
    included)."""
    return _message_pairs(attributes, _GENAI.message_pairs)


def _message_pairs(
    attributes: Attributes, genai: Callable[[Attributes], list[tuple[str, str]]]
) -> list[tuple[str, str]]:
    if MESSAGE_KEYS.isdisjoint(attributes):
        return []
    if not _GENAI_MESSAGE_KEYS.isdisjoint(attributes) and (found := genai(attributes)):
        return found  # GenAI's reader comes first in messages_of
    return [(m.role, m.content) for m in messages_of(attributes)]


class MessageHistory:
    """:func:`message_pairs` of one run's model calls read in start order: the GenAI input messages
    each call resends are parsed only where they add to the previous call's (:class:`~scorers.dialects.genai.History`).
    One per run; not thread-safe."""

    __slots__ = ("_genai",)

    def __init__(self) -> None:
        self._genai = History()

    def __call__(self, attributes: Attributes) -> list[tuple[str, str]]:
        """What :func:`message_pairs` gives for ``attributes``."""
        return _message_pairs(attributes, self._genai.pairs)


MAX_AGENT_NAME: Final = 256
"""Characters kept of an agent name."""


def agent_name(root: Span | None, top_down: Callable[[], Sequence[tuple[Span, StepKind, str]]]) -> str:
    """Return the name the application gave the agent of a run.

    Checked in this order (:data:`NAME_SOURCES`), the first non-empty value wins:

    0. the run's name as its framework states it on the root (an AutoGen team, the
       LlamaIndex agent named in its workflow events);
    1. ``gen_ai.agent.name`` on the root span, then on the agent spans top down;
    2. OpenInference ``agent.name`` (root first, then top down);
    3. the name of the topmost agent span (``invoke_agent X``, ``X.agent`` and a framework's
       ``X.run`` / ``X._execute_core`` give ``X``), skipping generic names such as ``agent``
       (a LangGraph node) or ``Agent workflow`` (the OpenAI Agents SDK default trace name) and
       Vercel AI SDK call spans;
    4. Traceloop ``traceloop.entity.name`` of the topmost Traceloop agent span, then
       ``traceloop.workflow.name`` / the workflow entity name (root first);
    5. ``gen_ai.workflow.name`` (root first);
    6. Vercel AI SDK ``ai.telemetry.functionId`` (root first);
    7. the root span's entity name when the root is an OpenInference CHAIN (the LangGraph
       graph name, e.g. ``LangGraph``; a DSPy module's class);
    8. the ``service.name`` resource attribute (root first);
    9. ``"unknown"``.

    The name is clipped to :data:`MAX_AGENT_NAME` characters.

    Args:
        root: the root span, if the trace has one.
        top_down: returns every span with its kind and dialect, shallowest first, then by
            start; only called when the root alone does not name the agent.
    """
    if root is not None and root.scope not in _RUN_NAME:
        value = root.attributes.get("gen_ai.agent.name")
        if isinstance(value, str) and (stated := value.strip()):
            return stated[:MAX_AGENT_NAME]
    run = Naming(root, top_down())
    for source in NAME_SOURCES:
        if name := source(run):
            return name[:MAX_AGENT_NAME]
    return "unknown"


def _framework_run_name(run: Naming) -> str | None:
    if run.root is None or (named := _RUN_NAME.get(run.root.scope)) is None:
        return None
    return named(run.root, run.spans)


def _top_agent_span_name(run: Naming) -> str | None:
    agent = _K.AGENT
    for span, kind, dialect in run.top:
        if kind is not agent or dialect in _NOT_NAMING:
            continue
        name = entity_name(span, kind).strip()
        if name.lower() not in GENERIC_AGENT_NAMES:
            return name
    return None


def _chain_root_name(run: Naming) -> str | None:
    root = run.root
    return (entity_name(root, _K.CHAIN) or None) if root is not None and is_chain(root) else None


def _service(run: Naming) -> str | None:
    return service_name(run.root) or _first_service(run.spans)


NAME_SOURCES: Final[tuple[Callable[[Naming], str | None], ...]] = (
    _framework_run_name,
    _genai_agent,
    _oi_agent,
    _top_agent_span_name,
    _traceloop_agent,
    _genai_workflow,
    function_id,
    _chain_root_name,
    _service,
)
"""Where the agent's name is read, in order (see :func:`agent_name`)."""


def service_name(span: Span | None) -> str | None:
    """Return the ``service.name`` resource attribute of ``span``, if any."""
    return None if span is None else as_str(span.resource.get("service.name"))


def _first_service(spans: Iterable[Span]) -> str | None:
    return next((n for s in spans if (n := service_name(s))), None)
