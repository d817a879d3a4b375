"""The run shapes the REST API's routers share (:mod:`review_queue.api`, :mod:`review_queue.api_sessions`).

A run as listed (:class:`RunOut`), its flag and evidence, and an LLM judge's verdict on it: the session
routes show a session's turns in the same shapes as the run routes. Every time of every route is a
:data:`UtcTime` (ISO 8601 UTC with milliseconds, ``2026-12-02T19:45:03.123Z``), but the spans' own
``*_ns`` (Unix nanoseconds, as OTLP carries them).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, Field, PlainSerializer, WithJsonSchema

from scorers.model import Priority, RunStatus

__all__ = ["EvidenceOut", "FlagOut", "JudgeResultOut", "QueryTime", "RunOut", "UtcTime", "iso_time"]


def _from_epoch(value: Any) -> Any:
    """A stored time (Unix seconds) as an aware datetime; anything else as it is (pydantic checks it)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    return value


def iso_time(value: datetime) -> str:
    """``value`` as the API writes times: ISO 8601 in UTC, milliseconds, ``Z`` (``2026-12-02T19:45:03.123Z``)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


UtcTime = Annotated[
    datetime,
    BeforeValidator(_from_epoch),
    PlainSerializer(iso_time, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time", "examples": ["2026-12-02T19:45:03.123Z"]}),
]
"""A time field of the REST API: stored as Unix seconds or a datetime, written as ISO 8601 UTC (:func:`iso_time`)."""


def _to_epoch(value: Any) -> Any:
    """A query's time as Unix seconds: an ISO 8601 text (what the API writes; no zone: UTC) or a number."""
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value  # pydantic refuses it (422)
        return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp()
    return value


QueryTime = Annotated[float, BeforeValidator(_to_epoch)]
"""A time query parameter: ISO 8601 (``2026-12-02T19:45:03.123Z``, as the API writes times) or Unix seconds."""


class FlagOut(BaseModel):
    """The flag decision of a flagged run."""

    reasons: list[str] = Field(description="Every matching reason, highest priority first.")
    priority: Priority
    sample_rate: float = Field(description="Random sample rate in force when the run was flagged.")


class EvidenceOut(BaseModel):
    """One piece of evidence: which rule decided a signal or flag reason, on which span, from what."""

    signal: str = Field(description="hit_max_iterations, safety_blocked, errored, or a flag reason.")
    rule: str = Field(description="The detection rule id (limit.cutoff, block.vocabulary, ...) or rule:<name>.")
    span_id: str
    span_name: str
    source: str = Field(description="Attribute key, status.message, exception.type/message, finish_reason ...")
    value: str


class RunOut(BaseModel):
    """One run of the index, as listed."""

    trace_id: str
    agent: str
    service: str
    dialect: str
    status: RunStatus
    complete: bool = Field(description="False when closed by the idle timeout or without a root span.")
    start_ns: int
    end_ns: int
    duration_s: float
    llm_calls: int
    tool_calls: int
    tool_errors: int
    input_tokens: int
    output_tokens: int
    hit_max_iterations: bool
    safety_blocked: bool
    errored: bool
    error_type: str | None
    scores: dict[str, float]
    scorer_errors: list[str]
    flag: FlagOut | None
    evidence: list[EvidenceOut] = Field(
        default_factory=list,
        description="Why each headline signal and flag reason is set: the detection rule, span and matched value.",
    )
    version: int = Field(description="1 on first write, +1 per re-score.")
    session_id: str | None = Field(
        None, description="The session (conversation) the run is a turn of; null: a session of one."
    )
    user_id: str | None = Field(None, description="The end user, when the trace names one.")
    user_message: str | None = Field(
        None,
        description="What the user asked in the run (a turn's own message), redacted, at most 2,048 characters; "
        "in listings only (`GET /api/v1/runs`), null when no span captured it or the run's details are gone.",
    )
    created_at: UtcTime
    updated_at: UtcTime


class JudgeResultOut(BaseModel):
    """One LLM judge's latest verdict on the run (``score`` null when ``error`` says why)."""

    judge: str
    rubric_version: str = Field(description="Rubric name@version the verdict was given under.")
    model: str
    score: float | None = Field(description="0 to 1, higher is better.")
    passed: bool | None = Field(description="score >= the judge's pass threshold.")
    reasoning: str = Field(description="The judge's justification (model output: escape it).")
    error: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float = Field(description="Estimated cost of this verdict (0 when served from the cache).")
    latency_s: float
    content_hash: str
    cached: bool
    created_at: UtcTime
    updated_at: UtcTime
