"""REST routes of the workbench: claim/release/skip, verdicts, requeue/assign, feedback, tokens.

Roles: reading needs admin, reviewer or viewer; claiming and verdicts admin or reviewer;
requeue, assignment and tokens admin; feedback admin or ingest.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, Field, field_validator

from review_queue.access import ADMINS, FEEDBACK_SENDERS, READERS, REVIEWERS
from review_queue.api_shapes import UtcTime, iso_time
from review_queue.feedback import parse_score
from review_queue.model import FeedbackIn, Principal, Role, VerdictIn, VerdictTarget, VerdictValue
from review_queue.services import ReviewServices

__all__ = ["review_router"]

TRACE_ID_PATTERN = r"^[0-9a-fA-F]{32}$"


class ClaimIn(BaseModel):
    """Claim-next options."""

    priority: Literal["high", "normal", "low"] | None = Field(None, description="Only items of this priority.")


class ClaimOut(BaseModel):
    """A claimed item and its lease."""

    item_id: int
    trace_id: str
    lease_expires_at: UtcTime


class VerdictBody(BaseModel):
    """A reviewer's verdict."""

    verdict: VerdictValue
    categories: list[str] = Field(default_factory=list, max_length=20, description="Failure categories (fail only).")
    notes: str = Field("", max_length=20_000)
    corrected_answer: str | None = Field(None, max_length=200_000, description="What the agent should have said.")
    target: VerdictTarget | None = Field(
        None,
        description="What the verdict judges: `run` (a run item, the default there), `session` (a session item's "
        "whole session, the default there) or `turn` (one turn of that session, named by `target_trace_id`).",
    )
    target_trace_id: str | None = Field(None, max_length=64, description="The judged turn's trace id (`turn` only).")


class VerdictOut(BaseModel):
    """A stored verdict."""

    reviewer: str
    verdict: VerdictValue
    categories: list[str]
    notes: str
    corrected_answer: str | None
    created_at: UtcTime
    target: VerdictTarget = VerdictTarget.RUN
    target_trace_id: str | None = Field(None, description="The run the verdict applies to; null for a session verdict.")


class StateOut(BaseModel):
    """The item's state after the operation."""

    item_id: int
    state: str


class EventOut(BaseModel):
    """One audit event."""

    actor: str
    action: str
    detail: dict[str, Any] = Field(description="What the action recorded; its times (``*_at``) as ISO 8601 UTC.")
    at: UtcTime

    @field_validator("detail")
    @classmethod
    def _detail_times(cls, detail: dict[str, Any]) -> dict[str, Any]:
        """A recorded time (``lease_expires_at`` of a claim: Unix seconds) in the API's one format."""
        return {
            k: iso_time(datetime.fromtimestamp(v, tz=UTC))
            if k.endswith("_at") and isinstance(v, int | float) and not isinstance(v, bool)
            else v
            for k, v in detail.items()
        }


class ItemOut(BaseModel):
    """A review item with the verdicts the caller may see (blind review) and its audit trail."""

    id: int
    trace_id: str
    state: str
    priority: str
    reasons: list[str]
    sample_rate: float
    reviews_required: int
    reviews_done: int
    assigned_to: str | None
    claimed_by: str | None
    lease_expires_at: UtcTime | None
    verdicts: list[VerdictOut]
    events: list[EventOut]


class RequeueIn(BaseModel):
    """Requeue options."""

    reviews_required: int | None = Field(None, ge=1, le=20)


class AssignIn(BaseModel):
    """Assignment: a reviewer name, or null to unassign."""

    assignee: str | None = Field(None, max_length=128)


class ReviewsRequiredIn(BaseModel):
    """How many distinct reviewers must judge the item."""

    reviews_required: int = Field(ge=1, le=20)


class FeedbackBody(BaseModel):
    """User feedback on a run."""

    feedback_id: str | None = Field(None, max_length=128, description="Client idempotency key.")
    trace_id: str = Field(pattern=TRACE_ID_PATTERN)
    score: bool | float | str = Field(description="Thumbs (up/down, true/false) or a number.")
    comment: str = Field("", max_length=10_000)
    source: str = Field("api", min_length=1, max_length=64)


class FeedbackOut(BaseModel):
    """What happened to the feedback."""

    feedback_id: str
    trace_id: str
    duplicate: bool = Field(description="This feedback id was seen before; nothing changed.")
    joined: bool = Field(description="The run exists and the rules were re-evaluated with the feedback.")
    flag: dict[str, Any] | None = Field(description="The run's flag after the join.")


class TokenIn(BaseModel):
    """A token to create."""

    name: str = Field(min_length=1, max_length=128)
    role: Role


class TokenOut(BaseModel):
    """A token record (never the secret)."""

    id: int
    name: str
    role: Role
    prefix: str
    created_at: UtcTime
    revoked_at: UtcTime | None


class TokenCreated(TokenOut):
    """A new token: ``token`` is shown this once."""

    token: str


MAX_ROW_ID = 2**63 - 1
"""The largest row id either database stores (a signed 64-bit integer); larger ids are a 422, not a crash."""

RowId = Annotated[int, Path(ge=1, le=MAX_ROW_ID)]
"""A path id of an item or a token."""


class ErrorOut(BaseModel):
    """An error answer."""

    detail: str


def review_router(services: ReviewServices) -> APIRouter:
    """The ``/api/v1`` routes of the workbench."""
    router = APIRouter(
        prefix="/api/v1",
        responses={
            400: {"model": ErrorOut},
            401: {"model": ErrorOut},
            403: {"model": ErrorOut},
            404: {"model": ErrorOut},
            409: {"model": ErrorOut},
            503: {"model": ErrorOut},
        },
    )
    access = services.access
    reader = Depends(access.require(*READERS))
    reviewer = Depends(access.require(*REVIEWERS))
    admin = Depends(access.require(*ADMINS))
    sender = Depends(access.require(*FEEDBACK_SENDERS))
    bench = services.workbench

    @router.post("/queue/claim", response_model=ClaimOut, responses={204: {"description": "Nothing to claim."}})
    def claim_next(who: Principal = reviewer, body: ClaimIn | None = None) -> Any:
        """Claim the most urgent eligible item (highest priority, oldest) with a lease."""
        claim = bench.claim_next(who.name, priority=body.priority if body else None)
        if claim is None:
            return Response(status_code=204)
        return {"item_id": claim.item_id, "trace_id": claim.trace_id, "lease_expires_at": claim.lease_expires_at}

    @router.get("/items/{item_id}", response_model=ItemOut)
    def get_item(item_id: RowId, who: Principal = reader) -> dict[str, Any]:
        """One item, the verdicts the caller may see, and its audit trail."""
        item = bench.item(item_id)
        item.update(verdicts=bench.verdicts(item_id, who), events=bench.events(item_id, who))
        return item

    @router.post("/items/{item_id}/claim", response_model=ClaimOut)
    def claim(item_id: RowId, who: Principal = reviewer) -> dict[str, Any]:
        """Claim this item (409 when someone else holds it, it is done, or you reviewed it)."""
        got = bench.claim(item_id, who.name)
        return {"item_id": got.item_id, "trace_id": got.trace_id, "lease_expires_at": got.lease_expires_at}

    @router.post("/items/{item_id}/release", response_model=StateOut)
    def release(item_id: RowId, who: Principal = reviewer) -> dict[str, Any]:
        """Give your claim back to the queue."""
        bench.release(item_id, who.name)
        return {"item_id": item_id, "state": "pending"}

    @router.post("/items/{item_id}/skip", response_model=StateOut)
    def skip(item_id: RowId, who: Principal = reviewer) -> dict[str, Any]:
        """Give your claim back and do not be offered this item again."""
        bench.skip(item_id, who.name)
        return {"item_id": item_id, "state": "pending"}

    @router.post("/items/{item_id}/verdict", response_model=StateOut)
    def verdict(item_id: RowId, body: VerdictBody, who: Principal = reviewer) -> dict[str, Any]:
        """Record your verdict on the item you hold; on a session item, on the session or one turn of it."""
        given = VerdictIn(
            body.verdict,
            tuple(body.categories),
            body.notes,
            body.corrected_answer,
            body.target,
            body.target_trace_id,
        )
        return {"item_id": item_id, "state": bench.submit_verdict(item_id, who.name, given)}

    @router.post("/items/{item_id}/requeue", response_model=StateOut)
    def requeue(item_id: RowId, who: Principal = admin, body: RequeueIn | None = None) -> dict[str, Any]:
        """Put the item back to pending (admin)."""
        bench.requeue(item_id, who.name, reviews_required=body.reviews_required if body else None)
        return {"item_id": item_id, "state": "pending"}

    @router.post("/items/{item_id}/assign", response_model=StateOut)
    def assign(item_id: RowId, body: AssignIn, who: Principal = admin) -> dict[str, Any]:
        """Reserve the item for one reviewer, or unassign it (admin)."""
        bench.assign(item_id, who.name, body.assignee)
        return {"item_id": item_id, "state": bench.item(item_id)["state"]}

    @router.post("/items/{item_id}/reviews-required", response_model=StateOut)
    def reviews_required(item_id: RowId, body: ReviewsRequiredIn, who: Principal = admin) -> dict[str, Any]:
        """Set how many distinct reviewers must judge the item (admin)."""
        bench.set_reviews_required(item_id, who.name, body.reviews_required)
        return {"item_id": item_id, "state": bench.item(item_id)["state"]}

    @router.get("/taxonomy", response_model=list[str])
    def taxonomy(who: Principal = reader) -> list[str]:
        """The failure categories verdicts may use."""
        return list(bench.categories)

    @router.post(
        "/feedback",
        response_model=FeedbackOut,
        responses={429: {"model": ErrorOut, "description": "The run is not stored and the held feedback is full."}},
    )
    def feedback(body: FeedbackBody, who: Principal = sender) -> dict[str, Any]:
        """Record user feedback (idempotent on ``feedback_id``) and re-evaluate the run's flag rules.

        Feedback for a run not stored yet is held for ``VIGIL_FEEDBACK_PENDING_S`` within
        ``VIGIL_FEEDBACK_PENDING_MAX`` rows; beyond that it is refused with 429 + Retry-After."""
        kind, value = parse_score(body.score)
        fb = FeedbackIn(
            body.trace_id.lower(), kind, value, body.comment, body.source, body.feedback_id or uuid.uuid4().hex
        )
        return dict(services.feedback.record(fb))

    _token_routes(router, services, admin)
    return router


def _token_routes(router: APIRouter, services: ReviewServices, admin: Any) -> None:  # admin: a Depends()
    tokens = services.tokens

    @router.get("/tokens", response_model=list[TokenOut])
    def list_tokens(who: Principal = admin) -> list[dict[str, Any]]:
        """Every token, revoked ones too (admin)."""
        return tokens.list()

    @router.post("/tokens", response_model=TokenCreated, status_code=201)
    def create_token(body: TokenIn, who: Principal = admin) -> dict[str, Any]:
        """Create a token; the secret is in this answer only (admin)."""
        secret, record = tokens.create(body.name, body.role)
        services.access.auth.forget()
        return {**record, "token": secret}

    @router.delete("/tokens/{token_id}", response_model=dict[str, int])
    def revoke_token(token_id: RowId, who: Principal = admin) -> dict[str, int]:
        """Revoke a token; its sessions end within seconds (admin)."""
        revoked = tokens.revoke(token_id)
        services.access.auth.forget()
        return {"revoked": revoked}
