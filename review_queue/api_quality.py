"""``GET /api/v1/quality``: the production quality estimates of :mod:`review_queue.quality` (readers)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, Field

from review_queue.access import READERS
from review_queue.api_review import ErrorOut
from review_queue.api_shapes import UtcTime
from review_queue.quality import quality_report
from review_queue.services import ReviewServices
from review_queue.store import guard

__all__ = ["quality_router"]


class EstimateOut(BaseModel):
    """One estimate with its 95 % interval; ``value`` null when the data cannot give one."""

    method: str = Field(description="`sample`, `stratified`, `ppi` or `naive` (the plain share of verdicts).")
    value: float | None
    low: float | None
    high: float | None
    n: int = Field(description="Verdicts it used.")
    population: int = Field(description="Runs it speaks for.")


class ChangeOut(BaseModel):
    """The change from the previous window of the same length, and its two-sided p-value."""

    delta: float
    p_value: float | None


class QualityRowOut(BaseModel):
    """One target or failure category of one agent."""

    target: str = Field(description="`review_pass_rate`, `task_completion` or `category:<name>`.")
    objective: float | None = Field(description="The target's bound (vigil.yaml `slo:`), null for a category.")
    direction: str | None
    estimate: EstimateOut = Field(description="The headline: `ppi` where it exists, else `sample`.")
    status: Literal["met", "not met", "not enough data"] | None = Field(
        description="Decided by the whole interval against the bound; null without a bound."
    )
    methods: dict[str, EstimateOut]
    naive: EstimateOut
    collapsed: bool = Field(description="A rule stratum had too few labelled sample members and was merged.")
    previous: EstimateOut | None
    change: ChangeOut | None
    corrected_for: dict[str, float] | None = Field(
        description="The reviewers' known error rates the pass rate was corrected for (`review_error_rates`)."
    )


class DesignOut(BaseModel):
    """The sample's design in the window."""

    runs: int = Field(description="Runs that could enter the random sample (its rate above 0).")
    shed: int = Field(description="Runs decided while the queue shed the sample (rate 0): in no estimate.")
    before_design: int = Field(description="Runs stored before the design was recorded: in no estimate.")
    rule_flagged: int
    rule_flagged_reviewed: int
    sample: int = Field(description="Runs in the random stratum.")
    sample_reviewed: int = Field(description="Of them, runs with a verdict.")


class SessionQualityOut(BaseModel):
    """The same for the agent's sessions closed in the window (the design's counts are sessions)."""

    design: DesignOut
    estimates: list[QualityRowOut] = Field(description="`session_review_pass_rate`, from first session verdicts.")


class AgentQualityOut(BaseModel):
    """One agent's (``*``: the fleet's) estimates."""

    agent: str
    design: DesignOut
    estimates: list[QualityRowOut]
    sessions: SessionQualityOut


class BoundsOut(BaseModel):
    """A figure with its 95 % interval."""

    value: float
    low: float
    high: float


class JudgeCalibrationOut(BaseModel):
    """An LLM judge against the reviewers' first verdicts, on runs of the random sample only."""

    judge: str
    agent: str = Field(description="`*`: every agent.")
    n: int = Field(description="Runs of the sample with both a judge verdict and a human one.")
    agreement: BoundsOut = Field(description="Share of those runs where the judge and the reviewer agree.")
    kappa: BoundsOut | None = Field(description="Cohen's kappa; null with too few pairs or one class only.")


class QualityOut(BaseModel):
    """The estimates of a window ending now."""

    window: str
    since: UtcTime = Field(description="The window's start.")
    until: UtcTime = Field(description="The window's end: now.")
    confidence: float
    judges: list[JudgeCalibrationOut]
    agents: list[AgentQualityOut]


def quality_router(services: ReviewServices) -> APIRouter:
    """The quality route over ``services`` (its store, SLO configuration and clock)."""
    router = APIRouter(
        prefix="/api/v1",
        tags=["quality"],
        responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    )
    reader = Depends(services.access.require(*READERS))

    @router.get("/quality", response_model=QualityOut, dependencies=[reader])
    def quality(
        window: Literal["1d", "7d", "28d"] = "7d",
        agent: Annotated[str | None, Query(max_length=256, description="One agent (`*`: the fleet).")] = None,
    ) -> dict[str, Any]:
        """Production quality per agent and for the fleet, estimated from the review sample's design.

        The review pass rate, task completion corrected by the reviewers and each failure category's
        share of runs, each with its 95 % interval, n, method and status against its target, beside
        the plain share of verdicts, and the change from the previous window with its p-value."""
        store = services.store
        with guard("quality", store.retry_after_s), store.engine.connect() as conn:
            return quality_report(
                conn, services.slo, services.clock(), window=window, agent=agent, reviewer_error=services.reviewer_error
            )

    return router
