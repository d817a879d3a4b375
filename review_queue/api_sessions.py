"""REST routes of sessions: ``GET /api/v1/sessions`` (filters, sort, keyset paging) and
``GET /api/v1/sessions/{session_id}`` (the session and its turns in order).

Same roles as the runs routes (admin, reviewer or viewer). A session id is any string of up to
256 characters the agent's trace carried; it is matched exactly (percent-encode it in the path).
The read side is :mod:`review_queue.sessions`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import BaseModel, Field

from review_queue import session_queries as sessions
from review_queue.access import READERS
from review_queue.api_review import ErrorOut
from review_queue.api_shapes import EvidenceOut, JudgeResultOut, QueryTime, RunOut, UtcTime
from review_queue.services import ReviewServices
from review_queue.store import guard

__all__ = ["sessions_router"]

SessionId = Annotated[str, Path(min_length=1, max_length=256, description="The session id, percent-encoded.")]


class SessionSignalOut(BaseModel):
    """One session signal and its evidence: the turn and span it was read on."""

    signal: str = Field(description="reask, abandonment, human_request, thumbs_down, …")
    trace_id: str | None = Field(None, description="The turn's run.")
    turn: int | None = Field(None, description="The turn number (1 = first).")
    span_id: str | None = None
    span_name: str | None = None
    source: str | None = Field(None, description="Where the evidence was read (message role, feedback, status).")
    value: str | None = Field(None, description="What matched (agent or user text: escape it).")


class SessionOut(BaseModel):
    """One session: a conversation whose turns are runs sharing a session id."""

    session_id: str
    agent: str
    user_id: str | None
    first_ns: int = Field(description="Start of the first turn, Unix nanoseconds.")
    last_ns: int = Field(description="End of the last turn (last activity), Unix nanoseconds.")
    turns: int
    duration_s: float
    input_tokens: int
    output_tokens: int
    cost_usd: float
    turns_flagged: int
    limit_hits: int
    blocks: int
    errors: int
    thumbs_down: int
    signals: list[SessionSignalOut]
    status: Literal["open", "closed"] = Field(description="open while turns arrive; closed after the idle time.")
    closed_at: UtcTime | None
    updated_at: UtcTime


class SessionPage(BaseModel):
    """A page of sessions."""

    items: list[SessionOut]
    next_cursor: str | None = Field(description="Pass as ``cursor`` for the next page; null at the end.")


class TurnOut(RunOut):
    """One turn: the run's summary, scores, flag and evidence, with its place in the session."""

    turn: int = Field(description="1 = the first turn.")
    review_item_id: int | None = Field(description="The run's review item, null when never flagged.")
    signals: list[SessionSignalOut] = Field(description="The session signals read on this turn.")


class SessionJudgeOut(JudgeResultOut):
    """One session judge's latest verdict on the closed session (``score`` null when ``error`` says why)."""

    trace_id: str = Field(description="The session's last turn when it was judged (its review item's run).")


class SessionDetailOut(BaseModel):
    """A session and its turns in start order."""

    session: SessionOut
    turns: list[TurnOut]
    turns_truncated: bool = Field(description=f"True when the session has more than {sessions.MAX_TURNS} turns.")
    judges: list[SessionJudgeOut] = Field(
        default_factory=list, description="Session judge verdicts (session_judges in vigil.yaml), by judge name."
    )


_ = EvidenceOut  # the turns' evidence entries (through RunOut)


def sessions_router(services: ReviewServices) -> APIRouter:
    """The ``/api/v1/sessions`` routes."""
    router = APIRouter(
        prefix="/api/v1",
        dependencies=[Depends(services.access.require(*READERS))],
        responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    )
    store = services.store

    @router.get("/sessions", response_model=SessionPage, responses={400: {"model": ErrorOut}})
    def list_sessions(  # noqa: PLR0917 - one argument per filter
        agent: Annotated[str | None, Query(max_length=256)] = None,
        user: Annotated[str | None, Query(max_length=256, description="The end user's id.")] = None,
        status: Literal["open", "closed"] | None = None,
        flagged: Annotated[bool | None, Query(description="With (true) or without (false) a flagged turn.")] = None,
        signal: Annotated[str | None, Query(pattern=f"^{sessions.SIGNAL_NAME.pattern}$")] = None,
        since: Annotated[
            QueryTime | None,
            Query(ge=0, le=sessions.MAX_TIME_S, description="Last activity ≥: ISO 8601 or Unix seconds."),
        ] = None,
        until: Annotated[
            QueryTime | None,
            Query(ge=0, le=sessions.MAX_TIME_S, description="Last activity <: ISO 8601 or Unix seconds."),
        ] = None,
        sort: Literal["last", "turns", "duration"] = "last",
        order: Literal["desc", "asc"] = "desc",
        limit: Annotated[int, Query(ge=1, le=sessions.MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=1024)] = None,
    ) -> dict[str, Any]:
        """List sessions, by default most recently active first."""
        for name, text in (("agent", agent), ("user", user), ("cursor", cursor)):
            if text is not None and "\x00" in text:
                raise HTTPException(400, f"{name} contains a NUL character")
        query = sessions.SessionQuery(
            agent=agent,
            user=user,
            status=status,
            flagged=flagged,
            signal=signal,
            since=since,
            until=until,
            sort=sort,
            descending=order == "desc",
            limit=limit,
        )
        try:
            with guard("list_sessions", store.retry_after_s), store.engine.connect() as conn:
                items, next_cursor = sessions.list_sessions(conn, query, cursor)
        except ValueError as exc:  # InvalidCursorError too
            raise HTTPException(400, str(exc)) from exc
        return {"items": items, "next_cursor": next_cursor}

    @router.get("/sessions/{session_id:path}", response_model=SessionDetailOut, responses={404: {"model": ErrorOut}})
    def get_session(session_id: SessionId) -> dict[str, Any]:
        """One session with every turn in start order (at most ``MAX_TURNS``)."""
        if "\x00" in session_id:  # no session id holds one (PostgreSQL text cannot)
            raise HTTPException(404, "session not found")
        with guard("get_session", store.retry_after_s), store.engine.connect() as conn:
            found = sessions.get_session(conn, session_id)
        if found is None:
            raise HTTPException(404, f"session {session_id[:256]!r} not found")
        return found

    return router
