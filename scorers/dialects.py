"""Span classification and attribute readers for every trace dialect.

Vigil reads traces from several instrumentation families. Each names the same things
differently (conventions.md §1–§3, §8):

* ``genai``: OpenTelemetry GenAI semantic conventions (``gen_ai.operation.name``),
  both the legacy (≤ v1.36) and the latest-experimental attribute names;
* ``openinference``: Arize OpenInference (``openinference.span.kind``);
* ``traceloop``: Traceloop / OpenLLMetry (``traceloop.span.kind``, legacy ``llm.request.type``);
* ``langsmith``: LangSmith OTel export (``langsmith.span.kind``);
* ``vercel``: the Vercel AI SDK (``ai.*`` span names and attributes).

Everything here is pure, never raises on odd attribute types (a value of the wrong type
counts as absent) and does at most a handful of dictionary look-ups per span.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from collector.model import Attributes, Span
from scorers.model import StepKind

GENAI: Final = "genai"
OPENINFERENCE: Final = "openinference"
TRACELOOP: Final = "traceloop"
VERCEL: Final = "vercel"
LANGSMITH: Final = "langsmith"
UNKNOWN: Final = "unknown"

DIALECTS: Final = (GENAI, OPENINFERENCE, TRACELOOP, VERCEL, LANGSMITH)
"""Known dialects, in the order used to break a tie in the majority vote."""

MAX_PARSE_CHARS: Final = 1 << 20
"""JSON strings longer than this are not parsed (bounds the work per attribute)."""

_K = StepKind

_GENAI_OPS: Final[Mapping[str, StepKind]] = {
    "chat": _K.LLM,
    "text_completion": _K.LLM,
    "generate_content": _K.LLM,
    "response": _K.LLM,  # OTel openai-agents-v2 bridge: one Responses API call
    "llm_request": _K.LLM,  # OpenLLMetry custom operation
    "execute_tool": _K.TOOL,
    "invoke_agent": _K.AGENT,
    "create_agent": _K.OTHER,
    "invoke_workflow": _K.CHAIN,
    "execute_task": _K.CHAIN,
    "retrieval": _K.RETRIEVAL,
    "vector_db_retrieve": _K.RETRIEVAL,
    "embeddings": _K.EMBEDDING,
    "apply_guardrail": _K.GUARDRAIL,
    "run_guardrail": _K.GUARDRAIL,
    "guardrail_check": _K.GUARDRAIL,
    "agent_handoff": _K.HANDOFF,
}

_OPENINFERENCE_KINDS: Final[Mapping[str, StepKind]] = {
    "LLM": _K.LLM,
    "TOOL": _K.TOOL,
    "AGENT": _K.AGENT,
    "CHAIN": _K.CHAIN,
    "RETRIEVER": _K.RETRIEVAL,
    "RERANKER": _K.RETRIEVAL,
    "EMBEDDING": _K.EMBEDDING,
    "GUARDRAIL": _K.GUARDRAIL,
    "EVALUATOR": _K.OTHER,
    "PROMPT": _K.OTHER,
    "UNKNOWN": _K.OTHER,
}

_TRACELOOP_KINDS: Final[Mapping[str, StepKind]] = {
    "workflow": _K.CHAIN,
    "task": _K.CHAIN,
    "agent": _K.AGENT,
    "tool": _K.TOOL,
    "handoff": _K.HANDOFF,
}

_LEGACY_REQUEST_TYPES: Final[Mapping[str, StepKind]] = {
    "chat": _K.LLM,
    "completion": _K.LLM,
    "embedding": _K.EMBEDDING,
    "rerank": _K.RETRIEVAL,
}

_LANGSMITH_KINDS: Final[Mapping[str, StepKind]] = {
    "llm": _K.LLM,
    "chain": _K.CHAIN,
    "tool": _K.TOOL,
    "agent": _K.AGENT,
    "retriever": _K.RETRIEVAL,
    "embedding": _K.EMBEDDING,
    "prompt": _K.OTHER,
    "parser": _K.OTHER,
}

_VERCEL_OPS: Final[Mapping[str, StepKind]] = {
    "ai.generateText": _K.AGENT,
    "ai.streamText": _K.AGENT,
    "ai.generateObject": _K.AGENT,
    "ai.streamObject": _K.AGENT,
    "ai.generateText.doGenerate": _K.LLM,
    "ai.streamText.doStream": _K.LLM,
    "ai.generateObject.doGenerate": _K.LLM,
    "ai.streamObject.doStream": _K.LLM,
    "ai.toolCall": _K.TOOL,
    "ai.embed": _K.EMBEDDING,
    "ai.embedMany": _K.EMBEDDING,
    "ai.embed.doEmbed": _K.EMBEDDING,
    "ai.embedMany.doEmbed": _K.EMBEDDING,
}

# Span-name fallbacks: "<operation> <target>" (GenAI, OpenLLMetry LangChain) ...
_NAME_PREFIXES: Final[Mapping[str, tuple[StepKind, str]]] = {
    "chat": (_K.LLM, GENAI),
    "text_completion": (_K.LLM, GENAI),
    "generate_content": (_K.LLM, GENAI),
    "execute_tool": (_K.TOOL, GENAI),
    "invoke_agent": (_K.AGENT, GENAI),
    "invoke_workflow": (_K.CHAIN, GENAI),
    "embeddings": (_K.EMBEDDING, GENAI),
    "retrieval": (_K.RETRIEVAL, GENAI),
    "apply_guardrail": (_K.GUARDRAIL, GENAI),
    "run_guardrail": (_K.GUARDRAIL, GENAI),
    "execute_task": (_K.CHAIN, TRACELOOP),
    "vector_db_retrieve": (_K.RETRIEVAL, TRACELOOP),
}

# ... and "<entity>.<kind>" (Traceloop decorators, OpenLLMetry LLM spans).
_NAME_SUFFIXES: Final[Mapping[str, StepKind]] = {
    "tool": _K.TOOL,
    "workflow": _K.CHAIN,
    "task": _K.CHAIN,
    "agent": _K.AGENT,
    "chat": _K.LLM,
    "completion": _K.LLM,
}


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
        decoded: object = json.loads(value)
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


def classify(span: Span) -> tuple[StepKind, str]:
    """Classify one span into the role it plays in the run and the dialect that said so.

    Evidence is checked in this order (conventions.md §8): ``gen_ai.operation.name``,
    ``openinference.span.kind``, ``traceloop.span.kind`` and legacy ``llm.request.type``,
    ``langsmith.span.kind``, Traceloop guardrail attributes, Vercel AI SDK operation ids
    (``ai.operationId`` or the span name), then span-name patterns such as
    ``execute_tool X``, ``chat MODEL``, ``X.tool`` or ``X.workflow``.

    Args:
        span: any span.

    Returns:
        ``(kind, dialect)``; ``(StepKind.OTHER, "unknown")`` when nothing matched.
    """
    attrs = span.attributes
    op = attrs.get("gen_ai.operation.name")
    if isinstance(op, str):
        kind = _GENAI_OPS.get(op) or _GENAI_OPS.get(op.strip().lower())  # exact spelling first: no new strings
        if kind is not None:
            # OpenLLMetry ≥ 0.5 emits GenAI names; its processor stamps the workflow on every span.
            return kind, TRACELOOP if "traceloop.workflow.name" in attrs else GENAI
    found = _by_kind_attribute(span)
    if found is not None:
        return found
    found = _by_vercel(span) or _by_name(span.name)
    if found is not None:
        return found
    return _K.OTHER, GENAI if isinstance(op, str) else UNKNOWN


def _by_kind_attribute(span: Span) -> tuple[StepKind, str] | None:
    attrs = span.attributes
    oi = attrs.get("openinference.span.kind")
    if isinstance(oi, str) and (kind := _OPENINFERENCE_KINDS.get(oi.upper())) is not None:
        if kind is _K.TOOL and span.name.startswith("handoff to "):
            return _K.HANDOFF, OPENINFERENCE  # OpenInference Agents SDK bridge handoffs
        return kind, OPENINFERENCE
    tl = attrs.get("traceloop.span.kind")
    if isinstance(tl, str) and (kind := _TRACELOOP_KINDS.get(tl.lower())) is not None:
        return kind, TRACELOOP
    legacy = attrs.get("llm.request.type")
    if isinstance(legacy, str) and (kind := _LEGACY_REQUEST_TYPES.get(legacy.lower())) is not None:
        return kind, TRACELOOP
    ls = attrs.get("langsmith.span.kind")
    if isinstance(ls, str) and (kind := _LANGSMITH_KINDS.get(ls.lower())) is not None:
        return kind, LANGSMITH
    if "gen_ai.guardrail.status" in attrs or "gen_ai.guardrail.name" in attrs:
        return _K.GUARDRAIL, TRACELOOP
    return None


def _by_vercel(span: Span) -> tuple[StepKind, str] | None:
    op = span.attributes.get("ai.operationId")
    key = op if isinstance(op, str) else span.name
    kind = _VERCEL_OPS.get(key)
    return (kind, VERCEL) if kind is not None else None


def _by_name(name: str) -> tuple[StepKind, str] | None:
    head, _, _ = name.partition(" ")
    found = _NAME_PREFIXES.get(head)
    if found is not None:
        return found
    stem, dot, suffix = name.rpartition(".")
    if dot and stem and (kind := _NAME_SUFFIXES.get(suffix)) is not None:
        return kind, TRACELOOP
    return None


def entity_name(span: Span, kind: StepKind) -> str:
    """Return the entity a span stands for, derived from its name.

    ``execute_tool X`` / ``invoke_agent X`` / ``invoke_workflow X`` give ``X``, and so do
    Traceloop's ``X.tool`` / ``X.agent`` / ``X.workflow``; other names are returned as is.
    """
    name = span.name
    head, space, rest = name.partition(" ")
    if space and head in _NAME_PREFIXES:
        return rest.strip()
    stem, dot, suffix = name.rpartition(".")
    if dot and stem and _NAME_SUFFIXES.get(suffix) is kind:
        return stem
    return name


_GENERIC_AGENT_NAMES: Final = frozenset({"", "agent", "agents", "invoke_agent", "agent workflow", "agent_workflow"})
MAX_AGENT_NAME: Final = 256
"""Characters kept of an agent name."""


def agent_name(root: Span | None, top_down: Callable[[], Sequence[tuple[Span, StepKind, str]]]) -> str:
    """Return the name the application gave the agent of a run.

    Checked in this order, the first non-empty value wins:

    1. ``gen_ai.agent.name`` on the root span, then on the topmost agent span;
    2. OpenInference ``agent.name`` (root first, then top down), then the name of the
       topmost agent span (``invoke_agent X`` and ``X.agent`` give ``X``), skipping
       generic names such as ``agent`` (a LangGraph node) or ``Agent workflow`` (the
       OpenAI Agents SDK default trace name) and Vercel AI SDK call spans;
    3. Traceloop ``traceloop.entity.name`` of the topmost Traceloop agent span, then
       ``traceloop.workflow.name`` / the workflow entity name (root first);
    4. ``gen_ai.workflow.name`` (root first);
    5. Vercel AI SDK ``ai.telemetry.functionId`` (root first);
    6. the root span's name when the root is an OpenInference CHAIN (the LangGraph graph
       name, e.g. ``LangGraph``);
    7. the ``service.name`` resource attribute (root first);
    8. ``"unknown"``.

    The name is clipped to :data:`MAX_AGENT_NAME` characters.

    Args:
        root: the root span, if the trace has one.
        top_down: returns every span with its kind and dialect, shallowest first, then by
            start; only called when the root alone does not name the agent.
    """
    if root is not None and (name := _attr_of((root,), "gen_ai.agent.name")):
        return name[:MAX_AGENT_NAME]
    spans = top_down()
    agents = [span for span, kind, _ in spans if kind is StepKind.AGENT]
    heads = [root, *agents] if root is not None else agents
    everyone = [span for span, _, _ in spans]
    name = (
        _attr_of(heads, "gen_ai.agent.name")
        or _attr_of(heads, "agent.name")
        or _top_agent_span_name(spans)
        or _traceloop_name(root, spans)
        or _attr_of(everyone, "gen_ai.workflow.name")
        or _attr_of(everyone, "ai.telemetry.functionId")
        or _chain_root_name(root)
        or _resource_service(root, everyone)
    )
    return name[:MAX_AGENT_NAME] if name else "unknown"


def _attr_of(spans: Sequence[Span | None], key: str) -> str | None:
    for span in spans:
        if span is not None and (value := as_str(span.attributes.get(key))) is not None:
            return value.strip() or None
    return None


def _top_agent_span_name(top_down: Sequence[tuple[Span, StepKind, str]]) -> str | None:
    for span, kind, dialect in top_down:
        if kind is not StepKind.AGENT or dialect == VERCEL:
            continue
        name = entity_name(span, kind).strip()
        if name.lower() not in _GENERIC_AGENT_NAMES:
            return name
    return None


def _traceloop_name(root: Span | None, top_down: Sequence[tuple[Span, StepKind, str]]) -> str | None:
    for span, kind, dialect in top_down:
        name = as_str(span.attributes.get("traceloop.entity.name"))
        if kind is StepKind.AGENT and dialect == TRACELOOP and name is not None:
            return name
    spans = [root] if root is not None else []
    spans.extend(span for span, _, _ in top_down)
    return _attr_of(spans, "traceloop.workflow.name") or _workflow_entity(spans)


def _workflow_entity(spans: Sequence[Span]) -> str | None:
    for span in spans:
        if span.attributes.get("traceloop.span.kind") == "workflow":
            return as_str(span.attributes.get("traceloop.entity.name"))
    return None


def _chain_root_name(root: Span | None) -> str | None:
    if root is None:
        return None
    kind = root.attributes.get("openinference.span.kind")
    is_chain = isinstance(kind, str) and kind.upper() == "CHAIN"
    return (root.name or None) if is_chain else None


def _resource_service(root: Span | None, spans: Sequence[Span]) -> str | None:
    return service_name(root) or next((n for s in spans if (n := service_name(s))), None)


def service_name(span: Span | None) -> str | None:
    """Return the ``service.name`` resource attribute of ``span``, if any."""
    return None if span is None else as_str(span.resource.get("service.name"))
