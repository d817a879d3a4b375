"""What every page of the reviewer UI shares: the template environment (autoescaping all agent text),
:func:`render`, and :func:`run_view` — a run's conversation, span tree and details status, shown on the
item, run and session pages (``review_queue/web.py``, ``review_queue/web_sessions.py``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from sqlalchemy import Connection

from review_queue import views
from review_queue.access import Caller
from review_queue.details_status import details_status, flagged_when_stored
from review_queue.model import ItemState
from review_queue.queries import InvalidCursorError
from review_queue.services import ReviewServices
from review_queue.store import guard
from scorers.model import Priority

__all__ = ["HERE", "list_page", "render", "run_view"]

HERE = Path(__file__).parent

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,  # agent text is attacker-controlled: escape everything, never mark it safe
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["age"] = views.age
_ENV.filters["clock"] = views.clock_time
_ENV.filters["iso"] = views.iso_time
_ENV.filters["pretty"] = views.pretty
_ENV.filters["snippet"] = views.snippet
_ENV.filters["attr_text"] = views.attr_text
_ENV.filters["span_json"] = views.span_json
_ENV.filters["attribute_rows"] = views.attribute_rows
_ENV.filters["path_part"] = lambda text: quote(str(text), safe="")  # a session id as one path segment


def render(name: str, request: Request, status: int = 200, **context: Any) -> HTMLResponse:
    """Render a template with the caller's session (for the CSRF token and the header)."""
    caller: Caller | None = getattr(request.state, "caller", None)
    session = caller.session if caller else None
    context.update(
        me=caller.principal if caller else None,
        csrf=session["csrf"] if session else "",
        priorities=[p.value for p in Priority],
        states=[s.value for s in ItemState],
    )
    html = _ENV.get_template(name).render(**context)
    return HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})


def run_view(
    services: ReviewServices, trace_id: str, snapshot: dict[str, Any], run: dict[str, Any] | None
) -> dict[str, Any]:
    """Conversation, span tree and details of a run page: from the run's details document when
    kept, else from the review snapshot (no attributes), else nothing but the summary; and why the
    document is missing or holds no content (:func:`review_queue.details_status.details_status`)."""
    details = services.store.get_details(trace_id)
    if details is not None:
        spans = details.get("spans") or []
        conversation = details.get("conversation") or []
    else:
        spans = snapshot.get("steps") or []
        conversation = views.snapshot_conversation(snapshot)
    policy = services.details
    created = (run or {}).get("created_at")
    status = details_status(
        present=details is not None,
        content_captured=bool((details or {}).get("content_captured")),
        flagged=flagged_when_stored(run.get("flag")) if run is not None else True,
        trace_id=trace_id,
        created_at=created.timestamp() if isinstance(created, datetime) else 0.0,
        now=services.clock(),
        sample_rate=policy.sample_rate,
        retention_days=policy.retention_days,
    )
    start = (run or {}).get("start_ns") or snapshot.get("start_ns", 0)
    end = (run or {}).get("end_ns") or snapshot.get("end_ns", 0)
    return {
        "fall": views.waterfall(spans, start, end),
        "cannot_show": views.cannot_show(run or {}, details),
        "conversation": conversation,
        "details_status": status.value,
        "details_policy": policy,
    }


Fetch = Callable[[Connection, str | None], tuple[list[dict[str, Any]], str | None]]
"""``fetch(conn, cursor) -> (rows, next_cursor)``: one page of a cursor-paged list."""


def list_page(
    template: str,
    request: Request,
    services: ReviewServices,
    fetch: Fetch,
    *,
    operation: str,
    cursor: str,
    filters: dict[str, str],
    **context: Any,
) -> HTMLResponse:
    """A page of a cursor-paged list (runs, sessions): its rows and next cursor, the filters kept in its
    links, and a bad cursor or filter said on the page instead of a traceback."""
    rows: list[dict[str, Any]] = []
    next_cursor = None
    error = ""
    try:
        with guard(operation, services.store.retry_after_s), services.store.engine.connect() as conn:
            rows, next_cursor = fetch(conn, cursor or None)
    except (InvalidCursorError, ValueError) as exc:
        error = str(exc)[:200]
    keep = {k: v for k, v in filters.items() if v}
    return render(
        template,
        request,
        rows=rows,
        filters=filters,
        keep=keep,
        next_cursor=next_cursor,
        first_page=not cursor,
        error=error,
        **context,
    )
