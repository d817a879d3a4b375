"""The REST API over the run index and the review queue (FastAPI, JSON under ``/api/v1``).

Routes that read the store are plain ``def`` functions: the store blocks on database I/O,
so FastAPI runs them in its thread pool. ``/healthz``, ``/readyz`` and ``/openapi.json``
are always open; every ``/api/v1`` route checks the caller's role (:mod:`review_queue.access`):
a bearer token (``VIGIL_ADMIN_TOKEN`` or a stored token) or the UI's session cookie.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from review_queue import listing, search
from review_queue.access import READERS, AuthFailure, SecurityHeaders
from review_queue.api_quality import quality_router
from review_queue.api_review import ErrorOut, review_router
from review_queue.api_sessions import sessions_router
from review_queue.api_shapes import JudgeResultOut, RunOut, UtcTime
from review_queue.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    OverCapacityError,
    StoreUnavailableError,
)
from review_queue.model import ItemState
from review_queue.pages import render
from review_queue.queries import InvalidCursorError
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore
from scorers.judge.model import Agreement
from scorers.model import Priority

__all__ = ["create_api_app"]

MAX_PAGE = 500
"""Largest ``limit`` a listing accepts."""

TRACE_ID_PATTERN = r"^[0-9a-fA-F]{32}$"


class _ItemOut(BaseModel):
    """What every view of a review item shows."""

    id: int
    state: ItemState
    priority: Priority
    reasons: list[str]
    sample_rate: float
    created_at: UtcTime
    updated_at: UtcTime


class ReviewItemOut(_ItemOut):
    """The review item of a flagged run, with the snapshot a reviewer sees."""

    snapshot: dict[str, Any] = Field(description="The normalised run: steps, tools, messages, scores.")


class RunDetailOut(RunOut):
    """One run with its review item (``null`` when it was never flagged) and its judge verdicts."""

    review_item: ReviewItemOut | None
    judges: list[JudgeResultOut] = Field(default_factory=list, description="LLM judge verdicts, by judge name.")


class RunPage(BaseModel):
    """A page of runs, newest first."""

    items: list[RunOut]
    next_cursor: str | None = Field(description="Pass as ``cursor`` for the next page; null at the end.")


class QueueItemOut(_ItemOut):
    """A pending review item."""

    trace_id: str
    agent: str
    user_message: str | None = Field(
        None, description="What the user asked in the run, redacted (null: no span captured it, or no details)."
    )


class QueuePage(BaseModel):
    """A page of pending items, highest priority first, then oldest first."""

    items: list[QueueItemOut]
    next_cursor: str | None


class StatusOut(BaseModel):
    """A liveness or readiness answer."""

    status: str
    checks: dict[str, bool] = Field(default_factory=dict)


class JudgeAgreementOut(BaseModel):
    """How often one judge (under one rubric version) agrees with the human reviewers."""

    judge: str
    rubric_version: str
    n: int = Field(description="Runs with both a judge verdict and a human verdict.")
    agreed: int
    agreement_rate: float
    cohen_kappa: float | None = Field(description="Chance-corrected agreement; null when undefined.")


def create_api_app(
    store: SqlStore,
    *,
    admin_token: str | None,
    ready: Callable[[], bool] | None = None,
    judge_agreement: Callable[[], Sequence[Agreement]] | None = None,
    services: ReviewServices | None = None,
    ui: bool = True,
    self_telemetry: bool = False,
) -> FastAPI:
    """Build the API application (and the reviewer UI).

    Args:
        store: the run index and queue to read.
        admin_token: the bootstrap admin bearer token (``VIGIL_ADMIN_TOKEN``), when set.
        ready: an extra readiness check (e.g. "the stream consumer is running").
        judge_agreement: judge–human agreement figures; serves ``GET /api/v1/judges/agreement`` when set.
        services: the review services (built with defaults over ``store`` when omitted).
        ui: also serve the reviewer web UI.
        self_telemetry: keep FastAPI's built-in OpenTelemetry (request spans, metrics and logs to the
            process's global providers; ``VIGIL_SELF_TELEMETRY``). Off by default: Vigil must never
            trace its own API into the OTLP receiver it serves (a demo or an agent in the same
            process sets the global provider), where every page view became a run to review.

    Returns:
        A FastAPI app; mount it or serve it with uvicorn.
    """
    services = services or build_services(store, admin_token=admin_token)
    telemetry: dict[str, Any] = {}
    if not self_telemetry and "telemetry" in inspect.signature(FastAPI.__init__).parameters:  # FastAPI ≥ 0.165
        telemetry["telemetry"] = {"tracing": False, "metrics": False, "logs": False, "auto_configure": False}
    app = FastAPI(title="Vigil", version="1", summary="Run index and review queue of LLM agent runs.", **telemetry)
    app.add_middleware(SecurityHeaders)
    app.add_exception_handler(StoreUnavailableError, _unavailable)
    app.add_exception_handler(InvalidCursorError, _bad_cursor)
    app.add_exception_handler(AuthFailure, _auth_failure)
    for error, status in ((NotFoundError, 404), (ConflictError, 409)):
        app.add_exception_handler(error, _status(status))
    app.add_exception_handler(InvalidInputError, _invalid_input)
    app.add_exception_handler(OverCapacityError, _over_capacity)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _http_error)
    _add_probes(app, store, ready)
    app.include_router(_api_router(store, services))
    app.include_router(review_router(services))

    app.include_router(sessions_router(services))
    app.include_router(quality_router(services))
    if judge_agreement is not None:
        app.include_router(_judge_router(judge_agreement, services))
    if ui:
        from review_queue.web import mount_ui

        mount_ui(app, services)
    return app


def _judge_router(agreement: Callable[[], Sequence[Agreement]], services: ReviewServices) -> APIRouter:
    router = APIRouter(
        prefix="/api/v1",
        dependencies=[Depends(services.access.require(*READERS))],
        responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}},
    )

    @router.get("/judges/agreement", response_model=list[JudgeAgreementOut])
    def judges_agreement() -> list[dict[str, Any]]:
        """Agreement rate and Cohen's kappa of each judge and rubric version with the human verdicts."""
        return [
            {
                "judge": a.judge,
                "rubric_version": a.rubric_version,
                "n": a.n,
                "agreed": a.agreed,
                "agreement_rate": a.rate,
                "cohen_kappa": None if math.isnan(a.kappa) else a.kappa,
            }
            for a in agreement()
        ]

    return router


def _api_router(store: SqlStore, services: ReviewServices) -> APIRouter:
    router = APIRouter(
        prefix="/api/v1",
        dependencies=[Depends(services.access.require(*READERS))],
        responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}, 503: {"model": ErrorOut}},
    )

    @router.get("/runs", response_model=RunPage, responses={400: {"model": ErrorOut}})
    def list_runs(  # noqa: PLR0917 - one argument per filter
        agent: Annotated[str | None, Query(max_length=256)] = None,
        flagged: bool | None = None,
        reason: Annotated[str | None, Query(max_length=256)] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
        session: Annotated[
            str | None, Query(min_length=1, max_length=256, description="The turns of this session.")
        ] = None,
        user: Annotated[
            str | None, Query(min_length=1, max_length=256, description="The runs of this end user.")
        ] = None,
        q: Annotated[
            str | None,
            Query(
                min_length=1,
                max_length=search.MAX_QUERY_CHARS,
                description="Text in the user message or the final answer (case-insensitive; the newest "
                f"{search.SEARCH_WINDOW:,} runs).",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """List runs newest first, optionally by agent, flagged state, flag reason, session, user or text."""
        for name, text in (("session", session), ("user", user), ("q", q)):
            if text is not None and "\x00" in text:
                raise HTTPException(400, f"{name} contains a NUL character")
        items, next_cursor = store.list_runs(agent, flagged, reason, limit, cursor, session=session, user=user, text=q)
        return {"items": items, "next_cursor": next_cursor}

    @router.get("/runs/{trace_id}", response_model=RunDetailOut, responses={404: {"model": ErrorOut}})
    def get_run(trace_id: Annotated[str, Path(pattern=TRACE_ID_PATTERN)]) -> dict[str, Any]:
        """Return one run (trace id: 32 hex characters) with its review item."""
        run = store.get_run(trace_id.lower())
        if run is None:
            raise HTTPException(404, f"run {trace_id.lower()} not found")
        return run

    @router.get("/queue", response_model=QueuePage, responses={400: {"model": ErrorOut}})
    def list_queue(  # noqa: PLR0917 - one argument per filter, as the queue page has
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
        cursor: Annotated[str | None, Query(max_length=512)] = None,
        state: ItemState = ItemState.PENDING,
        priority: Priority | None = None,
        reason: Annotated[str | None, Query(min_length=1, max_length=256, description="A flag reason.")] = None,
        agent: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
        assigned_to: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    ) -> dict[str, Any]:
        """List review items (pending by default), highest priority first, then oldest first; filtered as the
        queue page filters (state, priority, flag reason, agent, assignee)."""
        for name, text in (("reason", reason), ("agent", agent), ("assigned_to", assigned_to)):
            if text is not None and "\x00" in text:
                raise HTTPException(400, f"{name} contains a NUL character")
        f = listing.ItemFilter(
            state=state.value,
            priority=priority.value if priority else None,
            reason=reason,
            agent=agent,
            assignee=assigned_to,
        )
        items, next_cursor = store.list_queue(limit, cursor, f)
        return {"items": items, "next_cursor": next_cursor}

    return router


def _add_probes(app: FastAPI, store: SqlStore, ready: Callable[[], bool] | None) -> None:
    @app.get("/healthz", response_model=StatusOut, tags=["probes"])
    async def healthz() -> dict[str, Any]:
        """Liveness: 200 whenever the process serves requests."""
        return {"status": "ok"}

    @app.get("/readyz", response_model=StatusOut, tags=["probes"], responses={503: {"model": StatusOut}})
    def readyz() -> Any:
        """Readiness: 200 when the database answers and the extra check passes, else 503."""
        checks = {"database": store.ping()}
        if ready is not None:
            checks["ready"] = ready()
        if all(checks.values()):
            return {"status": "ready", "checks": checks}
        return JSONResponse({"status": "not ready", "checks": checks}, status_code=503)


async def _unavailable(_request: Request, exc: Exception) -> JSONResponse:
    retry_after = getattr(exc, "retry_after", 1.0)
    return JSONResponse(
        {"detail": "database unavailable"},
        status_code=503,
        headers={"Retry-After": str(max(1, math.ceil(retry_after)))},
    )


async def _over_capacity(_request: Request, exc: Exception) -> JSONResponse:
    retry_after = getattr(exc, "retry_after", 60.0)
    return JSONResponse(
        {"detail": str(exc)}, status_code=429, headers={"Retry-After": str(max(1, math.ceil(retry_after)))}
    )


async def _bad_cursor(_request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse({"detail": str(exc)}, status_code=400)


async def _auth_failure(request: Request, exc: Exception) -> Any:
    assert isinstance(exc, AuthFailure)
    if not request.url.path.startswith("/api/"):  # a UI page: log in, or say no
        if exc.status == 401:
            return RedirectResponse("/login", status_code=303)
        return PlainTextResponse(f"403 Forbidden: {exc.detail}", status_code=403)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse({"detail": exc.detail}, status_code=exc.status, headers=headers)


async def _invalid_input(_request: Request, exc: Exception) -> JSONResponse:
    """422 in FastAPI's own validation-error shape, so every 422 matches the documented schema."""
    return JSONResponse({"detail": [{"loc": ["body"], "msg": str(exc), "type": "value_error"}]}, status_code=422)


def _status(status: int) -> Callable[[Request, Exception], Any]:
    async def handler(request: Request, exc: Exception) -> Any:
        if is_page(request):
            return render("error.html", request, status=status, message=str(exc)[:300])
        return JSONResponse({"detail": str(exc)}, status_code=status)

    return handler


_MACHINE_PATHS = ("/api/", "/healthz", "/readyz", "/metrics", "/docs", "/redoc", "/openapi.json", "/static/")


def is_page(request: Request) -> bool:
    """Whether ``request`` is for a page of the reviewer UI (an error is then an HTML page, not JSON)."""
    return not request.url.path.startswith(_MACHINE_PATHS)


async def _http_error(request: Request, exc: Exception) -> Any:
    """FastAPI's own errors (an unknown path, a bad query value): an HTML page on UI routes, else as FastAPI
    answers them."""
    if is_page(request):
        if isinstance(exc, RequestValidationError):
            wrong = "; ".join(f"{'.'.join(map(str, e['loc'][1:]))}: {e['msg']}" for e in exc.errors()[:3])
            return render("error.html", request, status=422, message=f"bad request: {wrong}"[:300])
        assert isinstance(exc, StarletteHTTPException)
        message = "page not found" if exc.status_code == 404 else str(exc.detail)[:300]
        return render("error.html", request, status=exc.status_code, message=message)
    if isinstance(exc, RequestValidationError):
        return await request_validation_exception_handler(request, exc)
    assert isinstance(exc, StarletteHTTPException)
    return await http_exception_handler(request, exc)
