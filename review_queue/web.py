"""The reviewer web UI: server-rendered Jinja2 pages and one small static script, no build step.

Pages: ``/login``, ``/queue`` (filters and counts), ``/items/{id}`` (the run view with the
verdict form), ``/runs/{trace_id}``, ``/stats``. Every form posts a CSRF token; every page
checks the role through :class:`review_queue.access.Access`. Agent-produced text is
attacker-controlled: the environment autoescapes everything and no template marks agent text
safe; the Content-Security-Policy forbids inline scripts, so the keyboard handling lives in
``static/triage.js``.
"""

from __future__ import annotations

import hmac
import secrets
import time
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from fastapi import Depends, FastAPI, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from review_queue import explorer, listing, queries, search, session_queries, targets, views
from review_queue.access import ADMINS, READERS, REVIEWERS
from review_queue.api_review import RowId
from review_queue.auth import ANONYMOUS
from review_queue.errors import ConflictError, InvalidInputError
from review_queue.model import ItemState, Principal, Role, VerdictIn, VerdictTarget, VerdictValue
from review_queue.pages import HERE, Fetch, ListForm, list_form, list_page, number, render, run_view
from review_queue.quality import quality_report
from review_queue.services import ReviewServices
from review_queue.store import guard
from review_queue.web_sessions import mount_session_pages, session_view

__all__ = ["mount_ui"]

LOGIN_CSRF_COOKIE = "vigil_login_csrf"
STATS_WINDOW_S = 24 * 3600
STATS_BUCKET_S = 3600
STATS_DAYS = 14
MAX_CHARTS = 24
"""Charts per section of the stats page (agents, failure categories)."""


def mount_ui(app: FastAPI, services: ReviewServices) -> None:
    """Add the UI routes and ``/static`` to ``app``."""
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    _auth_pages(app, services)
    _queue_pages(app, services)
    _item_pages(app, services)
    _runs_explorer(app, services)
    _admin_forms(app, services)
    mount_session_pages(app, services)


def _auth_pages(app: FastAPI, services: ReviewServices) -> None:
    access = services.access

    @app.get("/", include_in_schema=False)
    def home() -> RedirectResponse:
        return RedirectResponse("/queue", status_code=303)

    @app.get("/login", include_in_schema=False)
    async def login_page(request: Request, error: str = "") -> HTMLResponse:
        token = secrets.token_urlsafe(24)
        is_open = await run_in_threadpool(access.auth.open)
        response = render("login.html", request, login_csrf=token, error=error, is_open=is_open)
        response.set_cookie(LOGIN_CSRF_COOKIE, token, httponly=True, samesite="strict", max_age=3600)
        return response

    @app.post("/login", include_in_schema=False)
    async def login(request: Request, token: Annotated[str, Form()] = "", csrf: Annotated[str, Form()] = "") -> Any:
        expected = request.cookies.get(LOGIN_CSRF_COOKIE, "")
        if not expected or not hmac.compare_digest(expected, csrf):
            return RedirectResponse("/login?error=expired", status_code=303)
        principal = await run_in_threadpool(access.auth.principal, token.strip())
        if principal is None and await run_in_threadpool(access.auth.open):
            principal = ANONYMOUS
        if principal is None:
            return RedirectResponse("/login?error=invalid", status_code=303)
        if principal.role is Role.INGEST:
            return RedirectResponse("/login?error=ingest", status_code=303)
        response = RedirectResponse("/queue", status_code=303)
        await run_in_threadpool(access.issue, response, principal)
        response.delete_cookie(LOGIN_CSRF_COOKIE)
        return response

    anyone = Depends(access.require_page(*Role))

    @app.post("/logout", include_in_schema=False)
    def logout(request: Request, who: Principal = anyone) -> RedirectResponse:
        response = RedirectResponse("/login", status_code=303)
        access.end(response, request.state.caller.session)
        return response


QUEUE_PAGE = 100
"""Items a page of the queue shows; the page says which of how many, with links to the others."""


def _page_links(filters: dict[str, Any], page: int, *, has_next: bool) -> dict[str, str | None]:
    """The previous and next pages' URLs under the same filters (``None`` where there is none)."""
    query = {k: ("1" if v is True else v) for k, v in filters.items() if v}

    def at(n: int) -> str:
        return "/queue?" + urlencode({**query, **({"page": n} if n > 1 else {})})

    return {"previous": at(page - 1) if page > 1 else None, "next": at(page + 1) if has_next else None}


def _queue_pages(app: FastAPI, services: ReviewServices) -> None:
    access = services.access
    reader = Depends(access.require_page(*READERS))
    reviewer = Depends(access.require_page(*REVIEWERS))

    @app.get("/queue", include_in_schema=False)
    def queue_page(
        request: Request,
        *,
        who: Principal = reader,
        state: str = "pending",
        priority: str = "",
        reason: str = "",
        agent: str = "",
        mine: bool = False,
        notice: str = "",
        page: int = 1,
    ) -> HTMLResponse:
        page = max(1, page)
        f = listing.ItemFilter(
            state=state or None,
            priority=priority or None,
            reason=reason[:256] or None,
            agent=agent[:256] or None,
            assignee=who.name if mine else None,
        )
        with guard("queue_page", services.store.retry_after_s), services.store.engine.connect() as conn:
            items = listing.list_items(conn, f, QUEUE_PAGE + 1, (page - 1) * QUEUE_PAGE)
            counts = listing.item_counts(conn, f)
            choices = listing.filter_choices(conn)
        filters = {"state": state, "priority": priority, "reason": reason, "agent": agent, "mine": mine}
        total = counts.get(state, 0) if state else sum(counts.values())
        first = (page - 1) * QUEUE_PAGE
        pages = _page_links(filters, page, has_next=len(items) > QUEUE_PAGE)
        shown = {"first": first + 1, "last": first + min(len(items), QUEUE_PAGE), "total": total, **pages}
        return render(
            "queue.html",
            request,
            items=items[:QUEUE_PAGE],
            counts=counts,
            filters=filters,
            now=time.time(),
            notice=notice,
            shown=shown,
            choices=choices,
        )

    @app.post("/queue/claim", include_in_schema=False)
    def claim_next(who: Principal = reviewer) -> RedirectResponse:
        claim = services.workbench.claim_next(who.name)
        if claim is None:
            return RedirectResponse("/queue?notice=empty", status_code=303)
        return RedirectResponse(f"/items/{claim.item_id}", status_code=303)

    @app.get("/stats", include_in_schema=False)
    def stats_page(request: Request, who: Principal = reader) -> HTMLResponse:
        now = services.clock()
        hours = listing.bucket_window(now, STATS_BUCKET_S, STATS_WINDOW_S // STATS_BUCKET_S)
        days = listing.bucket_window(now, 86_400, STATS_DAYS)
        with guard("stats_page", services.store.retry_after_s), services.store.engine.connect() as conn:
            depth = queries.queue_stats(conn)
            verdicts = listing.verdict_stats(conn)
            flags = listing.flags_by_reason(conn, *hours, STATS_BUCKET_S)
            history = listing.since_first(
                listing.depth_over_time(conn, *hours, STATS_BUCKET_S), listing.first_item_at(conn), STATS_BUCKET_S
            )
            rates = listing.verdicts_over_time(conn, *days, 86_400)
            estimates = quality_report(conn, services.slo, now, reviewer_error=services.reviewer_error)
            slo_targets = targets.target_rows(conn, services.slo, now, estimates)  # stats_targets.html
        pending = {s.priority.value: s for s in depth if s.state is ItemState.PENDING}
        charts = {
            "depth": views.line_chart({"all agents": history["total"]}),
            "depth_agents": {a: views.line_chart({a: v}) for a, v in list(history["agents"].items())[:MAX_CHARTS]},
            "rate": views.line_chart({"all agents": rates["pass_rate"]}, top=1.0),
            "rate_agents": {
                a: views.line_chart({a: v}, top=1.0) for a, v in list(rates["agents"].items())[:MAX_CHARTS]
            },
            "categories": {
                c: views.line_chart({c: [float(n) for n in v]})
                for c, v in list(rates["categories"].items())[:MAX_CHARTS]
            },
        }
        return render(
            "stats.html",
            request,
            depth=depth,
            pending=pending,
            verdicts=verdicts,
            flags=flags,
            now=now,
            charts=charts,
            hour_buckets=history["buckets"],
            day_buckets=rates["buckets"],
            slo_targets=slo_targets,
            quality=estimates,
        )


def _item_pages(app: FastAPI, services: ReviewServices) -> None:
    access = services.access
    reader = Depends(access.require_page(*READERS))
    reviewer = Depends(access.require_page(*REVIEWERS))
    bench = services.workbench

    @app.get("/items/{item_id}", include_in_schema=False)
    def item_page(
        request: Request, item_id: RowId, who: Principal = reader, error: str = "", saved: int = 0
    ) -> HTMLResponse:
        item = bench.item(item_id)
        run = services.store.get_run(item["trace_id"])
        snapshot = ((run or {}).get("review_item") or {}).get("snapshot") or {}
        context = {
            "item": item,
            "run": run,
            "snap": snapshot,
            "ended": views.unanswered(bool(snapshot.get("hit_max_iterations")), bool(snapshot.get("errored"))),
            "why": views.evidence_by_signal(snapshot.get("evidence") or (run or {}).get("evidence")),
            "evidence_kept": snapshot.get("evidence") is not None or (run or {}).get("evidence") is not None,
            "score_rows": views.score_rows((run or {}).get("scores"), services.thresholds),
            "saved": saved,
            **run_view(services, item["trace_id"], snapshot, run),
            "position": _turn_position(services, item["trace_id"]),
            "session_item": _session_item(services, snapshot),
            "verdicts": bench.verdicts(item_id, who),
            "events": bench.events(item_id, who),
            "feedback": services.feedback.for_run(item["trace_id"]),
            "categories": bench.categories,
            "holding": item["state"] == ItemState.CLAIMED.value and item["claimed_by"] == who.name,
            "can_review": who.role in REVIEWERS,
            "is_admin": who.role in ADMINS,
            "error": error,
        }
        return render("item.html", request, **context)

    @app.get("/runs/{trace_id}", include_in_schema=False)
    def run_page(request: Request, trace_id: str, who: Principal = reader) -> Response:
        run = services.store.get_run(trace_id.lower()[:32])
        if run is None:
            return render("error.html", request, status=404, message=f"run {trace_id[:32]} not found")
        if run["review_item"] is not None:
            return RedirectResponse(f"/items/{run['review_item']['id']}", status_code=303)
        return render(
            "run.html",
            request,
            run=run,
            why=views.evidence_by_signal(run.get("evidence")),
            evidence_kept=run.get("evidence") is not None,
            score_rows=views.score_rows(run.get("scores"), services.thresholds),
            can_review=who.role in REVIEWERS,
            position=_turn_position(services, run["trace_id"]),
            **run_view(services, run["trace_id"], {}, run),
        )

    @app.get("/runs/{trace_id}/spans/{span_id}.json", include_in_schema=False)
    def span_json(trace_id: str, span_id: str, who: Principal = reader) -> Response:
        """One span of the run's details as JSON (the page's "copy as JSON")."""
        found = _span_of(services, trace_id.lower()[:32], span_id[:64])
        if found is None:
            return Response('{"detail": "span not found"}', status_code=404, media_type="application/json")
        return Response(views.span_json(found), media_type="application/json", headers={"Cache-Control": "no-store"})

    @app.post("/runs/{trace_id}/review", include_in_schema=False)
    def send_to_review(trace_id: str, who: Principal = reviewer) -> Response:
        sent = services.store.send_to_review(trace_id.lower()[:32], who.name)
        if sent is None:
            return RedirectResponse("/runs?notice=unknown", status_code=303)
        return RedirectResponse(f"/items/{sent[0]}", status_code=303)

    @app.post("/items/{item_id}/claim", include_in_schema=False)
    def claim(item_id: RowId, who: Principal = reviewer) -> RedirectResponse:
        try:
            bench.claim(item_id, who.name)
        except ConflictError as exc:
            return RedirectResponse(f"/items/{item_id}?error={_q(str(exc))}", status_code=303)
        return RedirectResponse(f"/items/{item_id}", status_code=303)

    @app.post("/items/{item_id}/release", include_in_schema=False)
    def release(item_id: RowId, who: Principal = reviewer, skip: Annotated[str, Form()] = "") -> RedirectResponse:
        (bench.skip if skip else bench.release)(item_id, who.name)
        return RedirectResponse("/queue", status_code=303)

    @app.post("/items/{item_id}/verdict", include_in_schema=False)
    def verdict(
        item_id: RowId,
        *,
        who: Principal = reviewer,
        verdict: Annotated[str, Form()] = "",
        categories: Annotated[list[str] | None, Form()] = None,
        notes: Annotated[str, Form()] = "",
        corrected_answer: Annotated[str, Form()] = "",
        target: Annotated[str, Form()] = "",
        target_trace_id: Annotated[str, Form()] = "",
    ) -> RedirectResponse:
        try:
            if target and target not in {t.value for t in VerdictTarget}:
                raise InvalidInputError(f"unknown verdict target {target!r}: run, session or turn")
            given = VerdictIn(
                VerdictValue(verdict),
                tuple(categories or ()),
                notes,
                corrected_answer.strip() or None,
                VerdictTarget(target) if target else None,
                target_trace_id.strip() or None,
            )
            bench.submit_verdict(item_id, who.name, given)
        except (ValueError, InvalidInputError, ConflictError) as exc:
            message = str(exc) if not isinstance(exc, ValueError) or isinstance(exc, InvalidInputError) else ""
            return RedirectResponse(f"/items/{item_id}?error={_q(message or 'choose pass or fail')}", status_code=303)
        return RedirectResponse(_next_item(services, who, saved=item_id), status_code=303)


def _session_item(services: ReviewServices, snapshot: dict[str, Any]) -> dict[str, Any] | None:
    """The session a session item stands for (snapshot ``subject: session``), as the session page shows it."""
    if snapshot.get("subject") != "session" or not snapshot.get("session_id"):
        return None
    return session_view(services, str(snapshot["session_id"])[:256])


def _turn_position(services: ReviewServices, trace_id: str) -> dict[str, Any] | None:
    """The run's session and neighbour turns (:func:`review_queue.session_queries.turn_position`)."""
    with guard("turn_position", services.store.retry_after_s), services.store.engine.connect() as conn:
        return session_queries.turn_position(conn, trace_id)


def _span_of(services: ReviewServices, trace_id: str, span_id: str) -> dict[str, Any] | None:
    """A span of a run's details document, else of its review snapshot, else ``None``."""
    details = services.store.get_details(trace_id)
    if details is not None:
        spans = details.get("spans") or []
    else:
        run = services.store.get_run(trace_id)
        spans = (((run or {}).get("review_item") or {}).get("snapshot") or {}).get("steps") or []
    return next((s for s in spans if isinstance(s, dict) and s.get("span_id") == span_id), None)


_SORT_LABELS = {"created": "indexed", "duration": "duration", "llm_calls": "LLM calls", "tool_errors": "tool errors",
                "tokens": "input tokens"}  # fmt: skip


def _runs_explorer(app: FastAPI, services: ReviewServices) -> None:
    access = services.access
    reader = Depends(access.require_page(*READERS))

    runs_form = Depends(list_form(services.clock, _SORT_LABELS, explorer.MAX_PAGE))

    @app.get("/runs", include_in_schema=False)
    def runs_page(  # noqa: PLR0917 - one argument per filter of the form
        request: Request,
        who: Principal = reader,
        form: ListForm = runs_form,
        agent: str = "",
        service: str = "",
        status: str = "",
        session: str = "",
        user: str = "",
        flagged: str = "",
        reason: str = "",
        hit_max_iterations: str = "",
        safety_blocked: str = "",
        errored: str = "",
        score: str = "",
        score_min: str = "",
        score_max: str = "",
        trace: str = "",
        q: str = "",
        notice: str = "",
    ) -> Response:
        trace = trace.strip().lower()
        if len(trace) == 32 and all(c in "0123456789abcdef" for c in trace):
            return RedirectResponse(f"/runs/{trace}", status_code=303)
        signals = tuple(
            (name, value == "yes")
            for name, value in (
                ("hit_max_iterations", hit_max_iterations),
                ("safety_blocked", safety_blocked),
                ("errored", errored),
            )
            if value in ("yes", "no")
        )
        filters = {
            "agent": agent[:256], "service": service[:256], "status": status[:16], "session": session[:256],
            "user": user[:256], "flagged": flagged,
            "reason": reason[:256], "hit_max_iterations": hit_max_iterations, "safety_blocked": safety_blocked,
            "errored": errored, "score": score[:64], "score_min": score_min[:32], "score_max": score_max[:32],
            "since_h": form.since_h[:16], "until_h": form.until_h[:16], "trace": trace[:32], "q": q[:256],
            **form.filters(),
        }  # fmt: skip
        query = form.query(
            explorer.RunQuery,
            agent=filters["agent"] or None,
            service=filters["service"] or None,
            status=filters["status"] or None,
            session=filters["session"] or None,
            user=filters["user"] or None,
            signals=signals,
            flagged={"yes": True, "no": False}.get(flagged),
            reason=filters["reason"] or None,
            score=filters["score"] or None,
            score_min=number(score_min),
            score_max=number(score_max),
            trace=filters["trace"] or None,
            text=filters["q"] or None,
        )
        fetch: Fetch = lambda conn, at: explorer.explore(conn, query, at)  # noqa: E731
        return list_page(
            "runs.html", request, services, form, fetch, filters=filters, notice=notice, signals=explorer.SIGNALS,
            can_review=who.role in REVIEWERS,
            search_window=search.SEARCH_WINDOW,
        )  # fmt: skip


def _admin_forms(app: FastAPI, services: ReviewServices) -> None:
    admin = Depends(services.access.require_page(*ADMINS))
    bench = services.workbench

    @app.post("/items/{item_id}/assign", include_in_schema=False)
    def assign(item_id: RowId, who: Principal = admin, assignee: Annotated[str, Form()] = "") -> RedirectResponse:
        bench.assign(item_id, who.name, assignee.strip()[:128] or None)
        return RedirectResponse(f"/items/{item_id}", status_code=303)

    @app.post("/items/{item_id}/requeue", include_in_schema=False)
    def requeue(item_id: RowId, who: Principal = admin, reviews: Annotated[int, Form()] = 0) -> RedirectResponse:
        try:
            if reviews:
                bench.set_reviews_required(item_id, who.name, reviews)
            else:
                bench.requeue(item_id, who.name)
        except InvalidInputError as exc:
            return RedirectResponse(f"/items/{item_id}?error={_q(str(exc))}", status_code=303)
        return RedirectResponse(f"/items/{item_id}", status_code=303)


def _next_item(services: ReviewServices, who: Principal, saved: int) -> str:
    """Where "submit and advance" goes: the next item already held, else the next one the reviewer may claim,
    **unclaimed** (its claim button has the focus: one Enter claims it), else the queue; the page says the
    verdict on item ``saved`` was saved. Nothing is claimed here: a reviewer who submits and walks away
    holds no lease on an item nobody is looking at (docs/reviewing.md, "Submit and next")."""
    held = services.workbench.claims_of(who.name)
    if held:
        return f"/items/{held[0]}?saved={saved}"
    found = services.workbench.next_for(who.name)
    return f"/items/{found}?saved={saved}" if found is not None else "/queue?notice=done"


def _q(text: str) -> str:

    return quote(text[:300])
