"""What every page of the reviewer UI shares: the template environment (autoescaping all agent text),
:func:`render`, and :func:`run_view` — a run's conversation, span tree and details status, shown on the
item, run and session pages (``review_queue/web.py``, ``review_queue/web_sessions.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar
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

__all__ = ["HERE", "ListForm", "hours_ago", "list_form", "list_page", "number", "render", "run_view"]

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
    blocked = bool((run or {}).get("safety_blocked") or snapshot.get("safety_blocked"))
    return {
        "fall": views.waterfall(spans, start, end),
        "span_messages": views.span_messages(spans, conversation),
        "blocked_input": views.blocked_input(spans, conversation, blocked=blocked),
        "cannot_show": views.cannot_show(run or {}, details),
        "conversation": conversation,
        "details_status": status.value,
        "details_policy": policy,
    }


Fetch = Callable[[Connection, str | None], tuple[list[dict[str, Any]], str | None]]
"""``fetch(conn, cursor) -> (rows, next_cursor)``: one page of a cursor-paged list."""


def number(text: str) -> float | None:
    """A form field as a finite number, or ``None`` (empty, not a number, infinite)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def hours_ago(now: float, text: str) -> float | None:
    """A form's "hours ago" field (``since_h``, ``until_h``) as a time, or ``None``."""
    hours = number(text)
    return None if hours is None else now - 3600 * hours


Q = TypeVar("Q")

DEFAULT_PAGE = 50
"""Rows a list page shows when the form does not say."""


@dataclass(frozen=True)
class ListForm:
    """What the cursor-paged list pages (runs, sessions) read alike from their form, checked: the time,
    the cursor, the window (``since_h``/``until_h`` hours ago), the sort (labelled for the page), its
    order and the page size. A route gets one from :func:`list_form`."""

    now: float
    cursor: str
    since_h: str
    until_h: str
    sort: str
    descending: bool
    limit: int
    explicit_limit: bool
    labels: Mapping[str, str]

    @property
    def since(self) -> float | None:
        return hours_ago(self.now, self.since_h)

    @property
    def until(self) -> float | None:
        return hours_ago(self.now, self.until_h)

    def query(self, make: Callable[..., Q], **filters: Any) -> Q:
        """``make(**filters)`` (a :class:`~review_queue.explorer.RunQuery`, a
        :class:`~review_queue.session_queries.SessionQuery`) with the form's window, sort and page size."""
        return make(
            **filters, since=self.since, until=self.until, sort=self.sort, descending=self.descending, limit=self.limit
        )

    def filters(self) -> dict[str, str]:
        """The form's ``sort``, ``order`` and ``limit`` values to keep in the page's links."""
        return {
            "sort": self.sort,
            "order": "desc" if self.descending else "asc",
            "limit": str(self.limit) if self.explicit_limit else "",
        }


def list_form(clock: Callable[[], float], labels: Mapping[str, str], max_page: int) -> Callable[..., ListForm]:
    """A FastAPI dependency reading a list page's shared query parameters into a :class:`ListForm`:
    ``sort`` one of ``labels`` (the first by default), descending unless ``order`` is ``asc``, at most
    ``max_page`` rows."""
    default = next(iter(labels))

    def read(  # noqa: PLR0917 - one argument per field of the form
        cursor: str = "",
        since_h: str = "",
        until_h: str = "",
        sort: str = default,
        order: str = "desc",
        limit: int = DEFAULT_PAGE,
    ) -> ListForm:
        return ListForm(
            clock(),
            cursor,
            since_h,
            until_h,
            sort if sort in labels else default,
            order != "asc",
            max(1, min(limit, max_page)),
            limit != DEFAULT_PAGE,
            labels,
        )

    return read


def list_page(
    template: str,
    request: Request,
    services: ReviewServices,
    form: ListForm,
    fetch: Fetch,
    *,
    filters: dict[str, str],
    **context: Any,
) -> HTMLResponse:
    """A page of a cursor-paged list (runs, sessions): its rows and next cursor, the filters kept in its
    links, and a bad cursor or filter said on the page instead of a traceback."""
    rows: list[dict[str, Any]] = []
    next_cursor = None
    error = ""
    operation = template.removesuffix(".html") + "_page"
    try:
        with guard(operation, services.store.retry_after_s), services.store.engine.connect() as conn:
            rows, next_cursor = fetch(conn, form.cursor or None)
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
        first_page=not form.cursor,
        error=error,
        now=form.now,
        sorts=form.labels,
        **context,
    )
