"""Normalise the spans of one trace, in any dialect, into one :class:`~scorers.model.Run`.

A *step* is one classified span of the run (:class:`~scorers.model.Step`). The steps that
count as the run's step count are its LLM calls: LLM-role spans after de-duplicating
nested instrumentation of the same call. When an LLM span has an LLM ancestor (LangChain
and the OpenAI SDK both instrumented, say), only the outermost is an LLM step; the nested
one is kept in ``Run.steps`` with kind ``OTHER`` and its model and token usage fill in
what the outer span lacks. So ``Run.llm_calls`` equals the number of ``StepKind.LLM``
steps and ``Run.input_tokens`` / ``output_tokens`` equal the sums over those steps.
Agent and chain spans never contribute tokens: they repeat totals.

The run's *head* is its root span (no parent); without a root it is the topmost agent
span, else the topmost span. Run-level facts (errored, final output, declared optimal
steps, rule attributes) are read from the head.

``normalise`` is pure and makes three linear passes over the spans (classify, walk the
tree, tally) plus a sort; it never raises on well-formed spans whatever their attribute
values are.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Final

from collector.model import Span, StatusCode, fast_constructor
from scorers import content, session_ids, signals
from scorers.detect import (
    BLOCK,
    BLOCK_REASON_FORMS,
    DEFAULT_DETECTOR,
    ERRORED,
    LIMIT,
    Detector,
    Retry,
    SpanFacts,
    is_tool_request,
    tokens_of,
)
from scorers.dialects import (
    ANSWER_SCOPES,
    DIALECTS,
    RESULT_KEYS,
    TOOL_CALL_ID_KEYS,
    UNKNOWN,
    agent_name,
    answer_tool,
    as_int,
    as_str,
    classify,
    first_str,
    lift_events,
    messages_of,
    raised_in,
    service_name,
    tool_name,
)
from scorers.model import Evidence, Message, Run, RunStatus, Step, StepKind, ToolCall
from scorers.session_ids import DEFAULT_SESSION_KEYS, METADATA_KEY, SessionKeys
from scorers.steps import to_step, to_tool_call

RULE_RESOURCE_KEYS: Final = ("service.name", "deployment.environment", "deployment.environment.name")
_MAX_RULE_ATTRIBUTES: Final = 64
_MAX_RULE_TEXT: Final = 1024
_START: Final = attrgetter("start_ns")
_DIALECT_OF: Final = itemgetter(1)
_new_run: Final = fast_constructor(Run)  # every field must be given (no defaults): see _assemble
# The kinds as module constants for the per-span code: on CPython 3.11 ``StepKind.LLM`` is a look-up
# through ``EnumType.__getattr__`` that the interpreter cannot specialise, a global is not (together
# with the same in scorers.signals: -79,000 instructions per bench run, BENCHMARKS.md issue 13).
_LLM: Final = StepKind.LLM
_TOOL: Final = StepKind.TOOL
_OTHER: Final = StepKind.OTHER


def normalise(
    spans: Sequence[Span],
    *,
    complete: bool = True,
    detector: Detector = DEFAULT_DETECTOR,
    sessions: SessionKeys = DEFAULT_SESSION_KEYS,
) -> Run:
    """Turn all spans of one trace into one :class:`Run`.

    Spans may come in any order and repeat: they are de-duplicated by ``span_id``, keeping
    the last copy that has an end time. Each span is classified (see
    :func:`scorers.dialects.classify`), then counted, summed and searched for error,
    iteration-limit and safety-block markers (see :mod:`scorers.signals` and
    :mod:`scorers.detect`). One call recorded by two instrumentations counts once: nested
    LLM spans, and tool spans nested in a tool span of the same name or sharing its call id
    while it ran; a framework's answer tool (smolagents ``final_answer``) is no tool call.

    Args:
        spans: the spans of one trace.
        complete: False when the caller closed the run early (idle timeout). The run is
            also incomplete when no span is a root.
        detector: the limit/block detection rules (:mod:`scorers.detect`; the built-ins by default).
        sessions: the attribute keys of the session and user ids (:mod:`scorers.session_ids`; the
            built-ins by default).

    Returns:
        The normalised run. An empty ``spans`` gives an incomplete, empty run.

    Status precedence: ``LIMIT_HIT`` if an iteration limit was hit, else ``BLOCKED`` if a
    safety block was seen, else ``ERROR`` if an exception reached the caller (the head
    span has status ERROR or ``error.type``), else ``OK``. Limit and block win over error
    because they explain it.
    """
    unique = _dedupe(spans)
    if not unique:
        return Run(trace_id=spans[0].trace_id if spans else "", complete=False)
    tree = _Tree.build(unique)
    tally = _Tally.for_tree(tree, detector, sessions)
    for span in tree.ordered:
        tally.visit(span, tree)
    return _assemble(tree, tally, complete=complete)


def _dedupe(spans: Sequence[Span]) -> dict[str, Span]:
    unique: dict[str, Span] = {}
    for given in spans:
        # the event-based GenAI form, read into the attribute form (most spans have no events)
        span = lift_events(given) if given.events else given
        seen = unique.get(span.span_id)
        if seen is None or span.end_ns or not seen.end_ns:
            unique[span.span_id] = span
    return unique


@dataclass(slots=True)
class _Tree:
    """The classified span tree of one trace.

    ``owners`` maps each nested duplicate LLM span to the outermost LLM span above it (two
    instrumentations of one model call); ``tool_twins`` maps each duplicate TOOL span to the
    tool span recording the same call: nested in it with the same tool name, or carrying the
    same call id while both ran (one tool call, two instrumentations).
    """

    spans: dict[str, Span]
    kinds: dict[str, tuple[StepKind, str]]
    ordered: list[Span]
    depth: dict[str, int]
    owners: dict[str, str]
    tool_twins: Mapping[str, str]
    root: Span | None
    _top_down: list[tuple[Span, StepKind, str]] | None = None

    @classmethod
    def build(cls, spans: dict[str, Span]) -> _Tree:
        kinds = {sid: classify(span) for sid, span in spans.items()}
        # Stable sort: spans that start at the same time keep their arrival order. Walking
        # in start order finds most parents already visited.
        ordered = sorted(spans.values(), key=_START)
        depth, outer = _walk(ordered, spans, kinds)
        owners = {sid: top for sid, top in outer.items() if top != sid and kinds[sid][0] is _LLM}
        root = next((s for s in ordered if not s.parent_span_id), None)
        return cls(spans, kinds, ordered, depth, owners, _tool_twins(ordered, spans, kinds), root)

    def top_down(self) -> list[tuple[Span, StepKind, str]]:
        """Every span with its kind and dialect, shallowest first, then by start (computed once)."""
        if self._top_down is None:
            by_depth = sorted(self.ordered, key=lambda s: self.depth[s.span_id])
            self._top_down = [(s, *self.kinds[s.span_id]) for s in by_depth]
        return self._top_down

    def head(self) -> Span:
        """The root span, else the topmost agent span, else the topmost span."""
        if self.root is not None:
            return self.root
        top = self.top_down()
        return next((s for s, kind, _ in top if kind is StepKind.AGENT), top[0][0])


def _walk(
    ordered: Sequence[Span], spans: Mapping[str, Span], kinds: Mapping[str, tuple[StepKind, str]]
) -> tuple[dict[str, int], dict[str, str]]:
    """Depth of every span and, for spans inside an LLM span, the outermost LLM span above.

    Spans whose parent is missing have depth 0; a parent cycle is cut where it closes.
    """
    depth: dict[str, int] = {}
    outer: dict[str, str] = {}
    limit = len(spans)
    llm = _LLM
    for span in ordered:
        sid = span.span_id
        parent = span.parent_span_id
        if parent in depth:  # the common case: parents start before their children
            depth[sid] = depth[parent] + 1
            top = outer.get(parent) or (sid if kinds[sid][0] is llm else None)
            if top is not None:
                outer[sid] = top
            continue
        if sid in depth:
            continue
        path = [sid]
        while parent is not None and parent in spans and parent not in depth and len(path) <= limit:
            path.append(parent)
            parent = spans[parent].parent_span_id
        base = depth.get(parent, -1) if parent is not None else -1
        top = outer.get(parent) if parent is not None else None
        for node in reversed(path):
            base += 1
            depth[node] = base
            if top is None and kinds[node][0] is llm:
                top = node
            if top is not None:
                outer[node] = top
    return depth, outer


_NO_TWINS: Final[Mapping[str, str]] = MappingProxyType({})


def _tool_twins(
    ordered: Sequence[Span], spans: Mapping[str, Span], kinds: Mapping[str, tuple[StepKind, str]]
) -> Mapping[str, str]:
    """Duplicate TOOL spans mapped to the first span of the same call (see :class:`_Tree`).

    A twin is another instrumentation's record (another scope or dialect), so a run whose
    tool spans all come from one instrumentation has none (the common case: one loop, no
    allocation).
    """
    tool = _TOOL
    scope = dialect = None
    for span in ordered:
        found = kinds[span.span_id]
        if found[0] is tool:
            if scope is None:
                scope, dialect = span.scope, found[1]
            elif span.scope != scope or found[1] != dialect:
                break
    else:
        return _NO_TWINS
    twins: dict[str, str] = {}
    by_call: dict[str, Span] = {}
    limit = len(spans)
    for span in ordered:
        sid = span.span_id
        if kinds[sid][0] is not tool:
            continue
        parent, hops = span.parent_span_id, 0
        while parent is not None and hops < limit:  # the nearest TOOL ancestor, if any
            above = spans.get(parent)
            if above is None:
                break
            if kinds[parent][0] is tool:
                if _other_record(above, span, kinds) and tool_name(above) == tool_name(span):
                    twins[sid] = twins.get(parent, parent)
                break
            parent, hops = above.parent_span_id, hops + 1
        call_id = first_str(span.attributes, TOOL_CALL_ID_KEYS)
        if call_id is None or sid in twins:
            continue
        seen = by_call.get(call_id)
        if seen is None:
            by_call[call_id] = span
        elif _other_record(seen, span, kinds) and (
            span.start_ns < (seen.end_ns or seen.start_ns) or seen.start_ns == span.start_ns
        ):
            twins[sid] = twins.get(seen.span_id, seen.span_id)  # the same call id while both ran
    return twins


def _other_record(one: Span, other: Span, kinds: Mapping[str, tuple[StepKind, str]]) -> bool:
    """Whether two spans were written by different instrumentations (scope or dialect)."""
    return one.scope != other.scope or kinds[one.span_id][1] != kinds[other.span_id][1]


@dataclass(slots=True)
class _Tally:
    """Counters and collections filled by one pass over the spans in start order."""

    steps: list[Step] = field(default_factory=list)
    tools: list[ToolCall] = field(default_factory=list)
    llm_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    detector: Detector = DEFAULT_DETECTOR
    evidence: list[Evidence] = field(default_factory=list)
    last_llm: tuple[Span, tuple[str, ...]] | None = None
    tools_after: list[str] = field(default_factory=list)
    answered: Span | None = None
    """The last LLM call, while it stands as an answer (a text answer, or a call of an answer tool)."""
    answer_texts: list[str] | None = None
    """What the answer tools run after :attr:`answered` returned (the answer as they recorded it)."""
    retried: list[tuple[Span, Span, tuple[str, ...]]] | None = None
    """(answering call, next call, answer texts): every answer another model call followed (see
    :meth:`Detector.output_guard`); None in the common run, whose answer is its last call."""
    requested: tuple[str, list[tuple[str, str | None]]] | None = None
    fills: dict[str, tuple[int, int, str | None]] = field(default_factory=dict)
    tool_fills: dict[str, tuple[signals.ErrorInfo, str | None]] | None = None  # only when there are tool twins
    sessions: SessionKeys = DEFAULT_SESSION_KEYS
    session_id: str | None = None
    user_id: str | None = None
    ids_pending: bool = False
    missing: frozenset[str] = frozenset()
    """The keys of the ids still missing (what :meth:`watch_missing` added to ``watched``)."""
    watched: frozenset[str] = frozenset()
    """The keys that send a span to the slow path: the detector's, plus the id keys while an id is missing."""

    @classmethod
    def for_tree(
        cls, tree: _Tree, detector: Detector = DEFAULT_DETECTOR, sessions: SessionKeys = DEFAULT_SESSION_KEYS
    ) -> _Tally:
        """A tally primed with what duplicate spans know that their first record may lack, keyed
        by that first record: usage and model of nested LLM spans, error and call id of tool twins;
        and with the session and user ids of the root span (it comes first, :mod:`scorers.session_ids`)."""
        tally = cls(detector=detector, sessions=sessions)
        if tree.root is not None:
            tally.session_id, tally.user_id = sessions.read(tree.root.attributes)
        tally.watch_missing()
        for sid, owner in tree.owners.items():
            attrs = tree.spans[sid].attributes
            tokens_in, tokens_out = signals.tokens(attrs)
            have_in, have_out, have_model = tally.fills.get(owner, (0, 0, None))
            tally.fills[owner] = (have_in or tokens_in, have_out or tokens_out, have_model or signals.model(attrs))
        if tree.tool_twins:
            tool_fills: dict[str, tuple[signals.ErrorInfo, str | None]] = {}
            tally.tool_fills = tool_fills
            for sid, owner in tree.tool_twins.items():
                twin = tree.spans[sid]
                err = signals.error_info(twin)
                have_err, have_id = tool_fills.get(owner, (signals.NO_ERROR, None))
                call_id = have_id or first_str(twin.attributes, TOOL_CALL_ID_KEYS)
                tool_fills[owner] = (have_err if have_err.error else err, call_id)
        return tally

    def visit(self, span: Span, tree: _Tree) -> None:
        """Classify-dependent handling of one span; call in start order."""
        kind = tree.kinds[span.span_id][0]
        err = signals.error_info(span)
        reasons = () if kind is _TOOL else signals.finish_reasons(span.attributes)
        detector = self.detector
        # detector.quiet, inlined: the common span has no error, no watched key and no blocking reason.
        # While an id is missing, self.watched also holds the id keys (one set test for both).
        if (
            err.error
            or not self.watched.isdisjoint(span.attributes)
            or (reasons and not BLOCK_REASON_FORMS.isdisjoint(reasons))
        ) and (not self.ids_pending or self._ids(span, err.error, reasons)):
            detector.span(SpanFacts(span, kind, err.error, err.types, err.messages, reasons), self.evidence)
        if kind is _LLM:
            step = self._llm_step(span, tree, err, reasons)
            if step.kind is _LLM:
                if self.answered is not None:
                    self._answer_followed(self.answered, span)
                self.last_llm = (span, reasons)
                self.tools_after.clear()
                self.answered = None if not reasons or is_tool_request(reasons) else span
                self.answer_texts = None
            self.steps.append(step)
            return
        if kind is _TOOL:
            sid = span.span_id
            if sid in tree.tool_twins:
                kind = _OTHER  # another record of a call counted on its first
            elif span.scope in ANSWER_SCOPES and (answer := answer_tool(span)) is not None:
                kind = _OTHER  # how the agent answered: no tool call, still its last act
                self.tools_after.append(answer)
                self._answer_tool(span)
            else:
                fills = self.tool_fills
                call, failed = to_tool_call(span, err, None if fills is None else fills.get(sid))
                if call.arguments is not None and not call.arguments.startswith("{") and self.last_llm is not None:
                    call = self._requested_arguments(call)
                self.tools.append(call)
                self.tool_errors += failed
                self.tools_after.append(call.name)
                self.answered = None  # the call asked for a tool (ReAct prose, a finish reason that does not say)
        elif kind in _SCANNED_IN_VISIT:
            detector.agent_counters(span, self.evidence, kind)
        self.steps.append(to_step(span, kind, err, None, 0, 0, reasons))

    def _answer_followed(self, answered: Span, span: Span) -> None:
        """Note that LLM call ``span`` followed the answer of ``answered`` (where an output guard's rejection
        can show)."""
        if self.retried is None:
            self.retried = []
        if len(self.retried) < _MAX_RETRIES:
            self.retried.append((answered, span, tuple(self.answer_texts or ())))

    def _answer_tool(self, span: Span) -> None:
        """An answer tool ran: the last LLM call answered through it (its result is the answer's text)."""
        if self.last_llm is None:
            return
        self.answered = self.last_llm[0]
        result = first_str(span.attributes, RESULT_KEYS)
        if result is not None:
            if self.answer_texts is None:
                self.answer_texts = []
            self.answer_texts.append(result)

    def watch_missing(self) -> None:
        """Add the keys of the ids still missing to the span pass's set test (none once both are known),
        so spans carrying only an id already found (and the root, read first) stay on the fast path."""
        sessions = self.sessions
        if self.session_id is None:
            missing = sessions.every if self.user_id is None else sessions.session_set
        elif self.user_id is None:
            missing = sessions.user_set
        else:
            self.watched, self.missing, self.ids_pending = self.detector.watched, frozenset(), False
            return
        self.watched, self.missing, self.ids_pending = _watched(self.detector.watched, missing), missing, True

    def _ids(self, span: Span, error: bool, reasons: tuple[str, ...]) -> bool:
        """Take the ids this span carries that are still missing (the root was read first); then
        whether the detector has to look at it (an id key alone is no reason)."""
        attrs = span.attributes
        if not self.missing.isdisjoint(attrs):  # else it came for the detector alone (the root, often)
            self.session_id, self.user_id = session_ids.fill(self.sessions, attrs, self.session_id, self.user_id)
            self.watch_missing()
        return (
            error
            or not self.detector.watched.isdisjoint(attrs)
            or bool(reasons and not BLOCK_REASON_FORMS.isdisjoint(reasons))
        )

    def _requested_arguments(self, call: ToolCall) -> ToolCall:
        """The arguments the last LLM call asked this tool for, when the tool span kept only a bare value
        (LangChain hands a one-argument tool the value alone); each request is used once, in order."""
        if self.last_llm is None:
            return call
        span = self.last_llm[0]
        if self.requested is None or self.requested[0] != span.span_id:
            self.requested = (span.span_id, content.requested_tool_calls(span.attributes))
        pending = self.requested[1]
        for i, (name, arguments) in enumerate(pending):
            if name == call.name:
                del pending[i]
                if arguments is not None and arguments.startswith("{"):
                    return dataclasses.replace(call, arguments=arguments)
                break
        return call

    def _llm_step(self, span: Span, tree: _Tree, err: signals.ErrorInfo, reasons: tuple[str, ...]) -> Step:
        tokens_in, tokens_out = signals.tokens(span.attributes)
        model = signals.model(span.attributes)
        # a nested record of a call counted on its owner, or a request a hook skipped: no LLM call
        kind = _OTHER if span.span_id in tree.owners or (err.error and signals.skipped_request(err)) else _LLM
        fill = self.fills.get(span.span_id)
        if fill is not None:
            tokens_in, tokens_out, model = tokens_in or fill[0], tokens_out or fill[1], model or fill[2]
        if kind is _LLM:
            self.llm_calls += 1
            self.input_tokens += tokens_in
            self.output_tokens += tokens_out
        return to_step(span, kind, err, model, tokens_in, tokens_out, reasons)


@functools.lru_cache(maxsize=16)
def _watched(detector: frozenset[str], ids: frozenset[str]) -> frozenset[str]:
    """The detector's watched keys and the id keys, as one set (built once per configuration)."""
    return detector | ids


def _raised(tree: _Tree) -> Span | None:
    """The span whose error reached the agent's caller, or None.

    Normally that is the head (root) span. Frameworks whose roots stay OK even when the run
    raised (the OpenAI Agents SDK bridges) say which span it was
    (:func:`scorers.dialects.raised_in`).
    """
    head = tree.head()
    if head.status_code == StatusCode.ERROR or as_str(head.attributes.get("error.type")) is not None:
        return head
    return raised_in(head, tree.ordered, tree.kinds)


def _assemble(tree: _Tree, tally: _Tally, *, complete: bool) -> Run:
    head = tree.head()
    culprit = _raised(tree)
    raised = culprit is not None
    complete = complete and tree.root is not None
    evidence = tally.evidence
    error_type = signals.error_info(culprit).type if culprit is not None else None
    if culprit is not None:
        evidence.append(_raised_evidence(culprit, error_type))
    root_kind = tree.kinds[tree.root.span_id][0] if tree.root is not None else None
    if tree.root is not None and root_kind not in _SCANNED_IN_VISIT:  # the span pass scanned those already
        tally.detector.agent_counters(tree.root, evidence, tree.kinds[tree.root.span_id][0])
    tally.detector.cutoff(tally.last_llm, tally.tools_after, raised=raised, complete=complete, out=evidence)
    messages = _conversation(tree)
    if tally.last_llm is not None:
        tally.detector.injected_prompt(messages, tally.last_llm[0], evidence, (t.result for t in tally.tools))
    if culprit is not None:
        tally.detector.output_check(culprit, messages, evidence)
    if tally.retried:
        tally.detector.output_guard(_retries(tree, tally.retried), evidence, functools.partial(_check_span, tree))
    found = _dedupe_evidence(evidence) if evidence else ()
    limit = blocked = False
    for e in found:
        limit = limit or e.signal == LIMIT
        blocked = blocked or e.signal == BLOCK
    start_ns, end_ns = _bounds(tree)
    session_id, user_id = tally.session_id, tally.user_id
    if tally.ids_pending and tree.root is not None and METADATA_KEY in tree.root.attributes:
        session_id, user_id = session_ids.from_metadata(tree.root.attributes, session_id, user_id)
    return _new_run(
        trace_id=head.trace_id,
        agent=agent_name(tree.root, tree.top_down),
        service=service_name(head) or next((n for s in tree.ordered if (n := service_name(s))), ""),
        dialect=_dialect(tree.kinds),
        status=_status(raised, limit, blocked),
        complete=complete,
        start_ns=start_ns,
        end_ns=end_ns,
        llm_calls=tally.llm_calls,
        tool_calls=len(tally.tools),
        tool_errors=tally.tool_errors,
        input_tokens=tally.input_tokens,
        output_tokens=tally.output_tokens,
        hit_max_iterations=limit,
        safety_blocked=blocked,
        errored=raised,
        error_type=error_type,
        optimal_steps=_optimal_steps(head),
        final_output=_final_output(head, messages),
        steps=tuple(tally.steps),
        tools=tuple(tally.tools),
        messages=messages,
        span_count=len(tree.spans),
        attributes=_rule_attributes(head),
        evidence=found,
        session_id=session_id,
        user_id=user_id,
    )


_MAX_RETRIES: Final = 16
"""Answers followed by another model call kept per run (the first ones: a guard rejects early)."""
_CHECK_WORDS: Final = frozenset(
    {"guard", "guardrail", "guardrails", "validator", "validators", "validation", "validate", "check", "checks",
     "moderation"}
)  # fmt: skip


def _retries(tree: _Tree, retried: Sequence[tuple[Span, Span, tuple[str, ...]]]) -> Iterator[Retry]:
    """The :class:`~scorers.detect.Retry` of each answer another call of the same agent invocation followed
    (another invocation's call is another turn, not a retry), with both calls' messages (read as they are
    asked for: the first retry that names a safety reason ends the search)."""
    read: dict[str, list[Message]] = {}
    for answered, carrier, answers in retried:
        if _invocation(tree, answered) != _invocation(tree, carrier):
            continue
        before = read.get(answered.span_id)
        if before is None:
            before = read[answered.span_id] = messages_of(answered.attributes)
        if not before:
            continue
        after = read[carrier.span_id] = messages_of(carrier.attributes)
        yield Retry(answered, carrier, before, after, answers)


def _invocation(tree: _Tree, span: Span) -> str | None:
    """The id of the nearest agent span above ``span`` (None when no agent span is above it)."""
    parent, hops = span.parent_span_id, 0
    while parent is not None and parent in tree.spans and hops < len(tree.spans):
        if tree.kinds[parent][0] is StepKind.AGENT:
            return parent
        parent, hops = tree.spans[parent].parent_span_id, hops + 1
    return None


def _check_span(tree: _Tree, answered: Span, carrier: Span) -> Span | None:
    """A span that ran between two model calls and recorded a check: a guardrail span, a span named for a
    guard, validator or check, or one carrying a framework's retry cause (PydanticAI's
    ``pydantic_ai.tool.retry.cause`` / ``pydantic_ai.output.retry.cause``,
    tests/fixtures/traces/pydantic_ai_output_validator.md)."""
    for span in tree.ordered:
        if span.start_ns < answered.end_ns or span is carrier:
            continue
        if span.start_ns > carrier.start_ns:
            break
        if span.end_ns and span.end_ns > carrier.start_ns:
            continue
        kind = tree.kinds[span.span_id][0]
        if kind is StepKind.GUARDRAIL or not _CHECK_WORDS.isdisjoint(tokens_of(span.name)):
            return span
        if any(key.endswith("retry.cause") for key in span.attributes):
            return span
    return None


def _raised_evidence(culprit: Span, error_type: str | None) -> Evidence:
    if culprit.status_message:
        source, value = "status.message", culprit.status_message
    else:
        source, value = "error.type", error_type or "error"
    rule = "errored.root" if not culprit.parent_span_id else "errored.agent_span"
    return Evidence(ERRORED, rule, culprit.span_id, culprit.name[:256], source, value[:240])


_MAX_EVIDENCE: Final = 32
_SCANNED_IN_VISIT: Final = (StepKind.AGENT, StepKind.GUARDRAIL, StepKind.OTHER)
"""Kinds whose spans the span pass hands to ``Detector.agent_counters`` (decision and counter attributes).
A tuple: membership by identity, where a set would hash the member with the Python-level ``Enum.__hash__``."""


def _dedupe_evidence(evidence: list[Evidence]) -> tuple[Evidence, ...]:
    """One evidence per (signal, rule, span), in detection order, at most 32."""
    if len(evidence) < 2:
        return tuple(evidence)
    seen: set[tuple[str, str, str]] = set()
    out: list[Evidence] = []
    for e in evidence:
        key = (e.signal, e.rule, e.span_id)
        if key not in seen:
            seen.add(key)
            out.append(e)
    return tuple(out[:_MAX_EVIDENCE])


def _status(raised: bool, limit: bool, blocked: bool) -> RunStatus:
    if limit:
        return RunStatus.LIMIT_HIT
    if blocked:
        return RunStatus.BLOCKED
    return RunStatus.ERROR if raised else RunStatus.OK


def _bounds(tree: _Tree) -> tuple[int, int]:
    if tree.root is not None:
        return tree.root.start_ns, tree.root.end_ns
    return min(s.start_ns for s in tree.ordered), max(s.end_ns for s in tree.ordered)


def _dialect(kinds: Mapping[str, tuple[StepKind, str]]) -> str:
    """The dialect most spans were classified by; ties go to the earlier of :data:`DIALECTS`.

    Counted in C (``map``, ``set``, ``list.count``) and only when two dialects are present: a
    Python loop over the spans cost 22,000 instructions per bench run, this 9,000
    (BENCHMARKS.md issue 13).
    """
    names = list(map(_DIALECT_OF, kinds.values()))
    present = set(names)
    present.discard(UNKNOWN)
    if len(present) < 2:  # the common case: one dialect (or none)
        return present.pop() if present else UNKNOWN
    return max((d for d in DIALECTS if d in present), key=names.count)  # max keeps the first of equal counts


def _conversation(tree: _Tree) -> tuple[Message, ...]:
    """Input plus output messages of the last LLM call that captured any.

    Only the last two LLM spans are looked at: the last call and, when two instrumentations
    recorded it, its nested twin. Content capture is a process-wide switch, so an earlier
    call has content only if the last one has.
    """
    looked = 0
    for span in reversed(tree.ordered):
        if tree.kinds[span.span_id][0] is _LLM:
            found = content.messages_of(span.attributes)
            if found:
                return content.bound(found)
            looked += 1
            if looked == 2:
                break
    return ()


def _final_output(head: Span, messages: Sequence[Message]) -> str | None:
    """The answer captured on the root span, even empty; else the last assistant message's content.

    A captured empty (or blank) answer is the answer: text from elsewhere in the run never stands in
    for it (see :func:`scorers.content.last_assistant`).
    """
    captured = content.final_output(head.attributes)
    return captured if captured is not None else content.last_assistant(messages)


def _optimal_steps(head: Span) -> int | None:
    value = as_int(head.attributes.get("vigil.optimal_steps"))
    return value if value is not None and value > 0 else None


def _rule_attributes(head: Span) -> dict[str, str | int | float | bool]:
    """Scalar ``vigil.*`` root attributes plus service and deployment environment names."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in head.attributes.items():
        if key.startswith("vigil.") and isinstance(value, str | int | float | bool):
            out[key] = value[:_MAX_RULE_TEXT] if isinstance(value, str) else value
            if len(out) >= _MAX_RULE_ATTRIBUTES:
                break
    for key in RULE_RESOURCE_KEYS:
        value = head.resource.get(key, head.attributes.get(key))
        if isinstance(value, str) and value:
            out[key] = value[:_MAX_RULE_TEXT]
    return out
