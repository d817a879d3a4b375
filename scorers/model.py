"""The normalised agent run, scores and flag decisions.

Every trace dialect (OTel GenAI, OpenInference, Traceloop, Vercel AI SDK) is
normalised into one :class:`Run`. Scorers are plain callables ``Run -> Score | None``.
This module imports only the standard library and :mod:`collector.model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, Protocol, TypeAlias

from collector.model import Attributes, SpanEvent

_NO_ATTRIBUTES: Attributes = {}


class StepKind(str, Enum):
    """The role a span plays in an agent run (see ARCHITECTURE.md and the dialect adapters in scorers/dialects/)."""

    AGENT = "agent"
    LLM = "llm"
    TOOL = "tool"
    RETRIEVAL = "retrieval"
    EMBEDDING = "embedding"
    GUARDRAIL = "guardrail"
    CHAIN = "chain"
    HANDOFF = "handoff"
    OTHER = "other"


class RunStatus(str, Enum):
    """Outcome of a run."""

    OK = "ok"
    ERROR = "error"
    LIMIT_HIT = "limit_hit"
    BLOCKED = "blocked"


class Priority(str, Enum):
    """Review priority. Compare with :attr:`rank` (higher is more urgent)."""

    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"

    @property
    def rank(self) -> int:
        """0 for low, 1 for normal, 2 for high."""
        return _RANK[self]


_RANK = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2}


@dataclass(frozen=True, slots=True)
class Step:
    """One classified span of a run, in start-time order.

    Attributes:
        span_id / parent_id: span ids (hex).
        name: span name.
        kind: the role (:class:`StepKind`).
        start_ns / end_ns: Unix epoch nanoseconds.
        error: whether the span ended in error (status ERROR, ``error.type`` or an exception event).
        error_type: ``error.type`` / ``exception.type`` when known.
        status_message: the span status description (free text).
        model: the model name of an LLM step.
        input_tokens / output_tokens: usage of an LLM step (0 otherwise).
        finish_reasons: normalised lower-case finish reasons of an LLM step.
        attributes / events: the span's own attributes and events, by reference (no copy on the
            scoring path; not compared). Only the run-details document reads them, off the hot
            path, and bounds and redacts them there (:mod:`review_queue.details`).
    """

    span_id: str
    parent_id: str | None
    name: str
    kind: StepKind
    start_ns: int = 0
    end_ns: int = 0
    error: bool = False
    error_type: str | None = None
    status_message: str = ""
    model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reasons: tuple[str, ...] = ()
    attributes: Attributes = field(default_factory=lambda: _NO_ATTRIBUTES, compare=False, repr=False)
    events: tuple[SpanEvent, ...] = field(default=(), compare=False, repr=False)

    @property
    def duration_s(self) -> float:
        """Span duration in seconds (0 when the end is unknown)."""
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One executed tool call.

    Attributes:
        span_id: the tool span.
        name: tool name.
        call_id: the model's tool-call id when known.
        arguments: arguments as canonical JSON text when captured.
        result: the result text when captured.
        error: the error text (type and message) when the call failed, else ``None``.
    """

    span_id: str
    name: str
    call_id: str | None = None
    arguments: str | None = None
    result: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation message, when content was captured."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Evidence:
    """Why a headline signal or a flag reason is set: the rule that decided and what it matched.

    Attributes:
        signal: what it supports: ``hit_max_iterations``, ``safety_blocked``, ``errored``, or a flag
            reason (rule name).
        rule: the detection rule id (``limit.cutoff``, ``block.vocabulary``, ``user.limit.exception``…,
            see :mod:`scorers.detect`) or ``rule:<name>`` for a flag rule.
        span_id / span_name: the span that shows it (empty for run-level evidence).
        source: where on the span: an attribute key, ``status.message``, ``exception.type``,
            ``exception.message``, ``finish_reason``, or a run field / score name.
        value: the matched text or value, cut at 240 characters.
    """

    signal: str
    rule: str
    span_id: str
    span_name: str
    source: str
    value: str

    def as_dict(self) -> dict[str, str]:
        """JSON form (API, store, ``vigil explain``)."""
        return {
            "signal": self.signal,
            "rule": self.rule,
            "span_id": self.span_id,
            "span_name": self.span_name,
            "source": self.source,
            "value": self.value,
        }


@dataclass(frozen=True, slots=True)
class Run:
    """One finished (or timed-out) agent run: the unit Vigil scores.

    A *step* is one LLM call (an LLM-role span after de-duplication); runs without
    LLM spans fall back to agent turns. ``llm_calls`` is therefore the step count.

    Attributes:
        trace_id: lowercase hex trace id.
        agent: the name the application gave the agent (``"unknown"`` if none).
        service: ``service.name`` of the root span's resource.
        dialect: the dominant dialect seen (``genai``, ``openinference``, ``traceloop``, ``vercel``, ``unknown``).
        status: the outcome.
        complete: False when the run was closed by the idle timeout or has no root span.
        start_ns / end_ns: root span bounds (or min/max of all spans without a root).
        llm_calls / tool_calls / tool_errors: counts.
        input_tokens / output_tokens: summed over LLM-role spans only.
        hit_max_iterations: an iteration/turn/recursion cap was reached (raised or graceful).
        safety_blocked: a content filter, refusal or guardrail blocked the run.
        errored: an exception reached the agent's caller (root span in error).
        error_type: the root's error type when errored.
        optimal_steps: the optimal step count declared on the root span, if any.
        final_output: the agent's final answer text when captured.
        steps: classified spans in start order.
        tools: executed tool calls in start order.
        messages: the conversation when captured.
        span_count: number of distinct spans in the trace.
        attributes: selected root-span attributes useful to rules (string/number/bool only).
        evidence: why each headline signal is set (:class:`Evidence`, see :mod:`scorers.detect`).
        session_id: the conversation this run is one turn of, read from the trace
            (``gen_ai.conversation.id``, ``session.id``, …); ``None`` makes the run a session of one.
        user_id: the end user the run served, read from the trace (``user.id``, ``enduser.id``, …).
    """

    trace_id: str
    agent: str = "unknown"
    service: str = ""
    dialect: str = "unknown"
    status: RunStatus = RunStatus.OK
    complete: bool = True
    start_ns: int = 0
    end_ns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    hit_max_iterations: bool = False
    safety_blocked: bool = False
    errored: bool = False
    error_type: str | None = None
    optimal_steps: int | None = None
    final_output: str | None = None
    steps: tuple[Step, ...] = ()
    tools: tuple[ToolCall, ...] = ()
    messages: tuple[Message, ...] = ()
    span_count: int = 0
    attributes: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    evidence: tuple[Evidence, ...] = ()
    session_id: str | None = None
    user_id: str | None = None

    @property
    def duration_s(self) -> float:
        """Root-span duration in seconds (0 when unknown)."""
        return max(0, self.end_ns - self.start_ns) / 1e9


OUTCOME_FIELDS: Final = (
    "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens",
    "hit_max_iterations", "safety_blocked", "errored",
)  # fmt: skip
"""The fields of :class:`Run` that say what the agent did and how the run ended (its counts and
headline signals), in the class's order: what the rules see, the store's run views show and the
end-to-end ground truths compare, listed once."""


RUN_BASE_BYTES: Final = 2048
"""Estimated bytes of a held run beyond its texts (the run, scores, flag objects)."""
STEP_BYTES: Final = 256
"""Estimated bytes of each classified step of a held run."""


def run_bytes(run: Run) -> int:
    """The estimated memory of a scored ``run`` while a queue holds it (the judges', the run-details
    writer's): a base, each step, and every captured text."""
    texts = len(run.final_output or "") + sum(len(m.content) for m in run.messages)
    texts += sum(len(t.arguments or "") + len(t.result or "") for t in run.tools)
    return RUN_BASE_BYTES + STEP_BYTES * len(run.steps) + texts


@dataclass(frozen=True, slots=True)
class Score:
    """One scorer's judgement of a run.

    Attributes:
        name: the scorer name.
        value: the value; its range is documented by the scorer.
        detail: a short human-readable explanation.
        span_ids: spans that justify the value.
    """

    name: str
    value: float
    detail: str | None = None
    span_ids: tuple[str, ...] = ()


Scorer: TypeAlias = Callable[[Run], "Score | tuple[Score, ...] | None"]
"""A scorer: ``None`` for no opinion, a :class:`Score` (recorded under the scorer's chain name), or a
tuple of scores each recorded under its own :attr:`Score.name` (one pass producing several scores)."""


@dataclass(frozen=True, slots=True)
class Flag:
    """The one flag decision of a flagged run.

    Attributes:
        reasons: every matching reason (rule names, ``random_sample``), highest priority first.
        priority: the highest priority among the reasons.
        sample_rate: the random sample rate in force when the decision was made.
    """

    reasons: tuple[str, ...]
    priority: Priority
    sample_rate: float


@dataclass(frozen=True, slots=True)
class SampleDesign:
    """The run's place in the review sample's design, fixed when its flag is first decided.

    The random stratum is a Bernoulli sample of every run, independent of the rules: a run is in it
    when ``sample_point(trace_id) < rate`` (:func:`scorers.rules.sample_point`). The quality estimates
    (:mod:`scorers.quality`) weight each reviewed member by ``1 / rate``; runs decided while the queue
    shed its sample carry ``rate = 0`` and ``shed = True`` (the stratum was suspended for them, rule
    flags or not, so it stays independent of the rules).

    Attributes:
        rate: the run's probability of entering the random stratum (the rate in force; 0 when shed).
        drawn: whether it entered (``sample_point(trace_id) < rate``).
        rule_flagged: whether a rule other than ``random_sample`` flagged it at that decision.
        shed: whether shedding suspended the random stratum for this run.
    """

    rate: float
    drawn: bool
    rule_flagged: bool
    shed: bool = False


@dataclass(frozen=True, slots=True)
class ScoredRun:
    """A run with its scores and flag decision, ready to store.

    Attributes:
        run: the normalised run.
        scores: scorer name to value.
        flag: the flag decision, or ``None`` when not flagged.
        scorer_errors: names of scorers that crashed on this run.
        rescored: True when this is a re-score after late spans.
        evidence: why each flag reason matched (``Evidence.signal`` is the reason), see
            :func:`scorers.rules.reason_evidence`.
        design: the run's place in the review sample (``None`` where no decision recorded one).
    """

    run: Run
    scores: Mapping[str, float]
    flag: Flag | None
    scorer_errors: tuple[str, ...] = ()
    rescored: bool = False
    evidence: tuple[Evidence, ...] = ()
    design: SampleDesign | None = None


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What one idempotent run write changed.

    Attributes:
        trace_id: the run.
        new_run: the run was not in the index before (count it in run counters).
        new_flag: the run had no review item before and has one now (count it in flag counters).
    """

    trace_id: str
    new_run: bool
    new_flag: bool


class RunSink(Protocol):
    """Where scored runs go: the run index and the review queue.

    ``write`` is idempotent on trace id: writing the same run again updates the stored
    row and never creates a second run row or review item. All runs of one call are
    committed in one transaction; when it returns they are durable.
    """

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Upsert ``runs`` and return one outcome per run, in order.

        Raises:
            collector.errors.BackpressureError: (``review_queue.errors.StoreUnavailableError``)
                the database cannot be reached; nothing was written; retry later.
        """
        ...
