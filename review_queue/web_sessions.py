"""The reviewer UI's session pages: ``/sessions`` (the sessions explorer) and ``/sessions/{id}``.

The session page shows every turn in start order, each a ``<details>`` holding the turn's
signals, the evidence of its run and its conversation (the run page's ``conversation_view``,
without the history the turn repeats: :func:`review_queue.sessions.fresh_entries`).
``static/triage.js`` moves between turns with ``j``/``k`` (or ``n``/``p``). Everything a turn
shows is agent- or user-controlled text: autoescaped by the environment, never marked safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response

from review_queue import session_queries as sessions
from review_queue import views
from review_queue.access import READERS
from review_queue.model import Principal
from review_queue.pages import ListForm, list_form, list_page, render, run_view
from review_queue.services import ReviewServices
from review_queue.store import guard

__all__ = ["PAGE_TURNS", "SessionFilters", "mount_session_pages", "session_view"]

PAGE_TURNS = 200
"""Turns the session page renders with their conversation (the API lists up to ``sessions.MAX_TURNS``)."""
OPEN_ALL_UP_TO = 10
"""Sessions of at most this many turns show every turn open; longer ones open flagged turns and turns with a signal."""

_SORT_LABELS = {"last": "last activity", "turns": "turns", "duration": "duration"}


@dataclass(frozen=True)
class SessionFilters:
    """The sessions explorer's own filters, one query parameter each (a FastAPI dependency)."""

    agent: str = ""
    user: str = ""
    status: str = ""
    flagged: str = ""
    signal: str = ""

    def checked(self, form: ListForm) -> dict[str, str]:
        """The filters the page keeps in its links (and the form's): capped; an unknown status or flag dropped."""
        return {
            "agent": self.agent[:256], "user": self.user[:256],
            "status": self.status if self.status in sessions.STATUSES else "",
            "flagged": self.flagged if self.flagged in ("yes", "no") else "", "signal": self.signal[:64],
            "since_h": form.since_h[:16], "until_h": form.until_h[:16],
            **form.filters(),
        }  # fmt: skip

    def query(self, form: ListForm, checked: dict[str, str]) -> sessions.SessionQuery:
        """The listing query of the ``checked`` filters (empty: any) and the form's window, sort and page."""
        text = {name: checked[name] or None for name in ("agent", "user", "status", "signal")}
        return form.query(sessions.SessionQuery, **text, flagged={"yes": True, "no": False}.get(checked["flagged"]))


def mount_session_pages(app: FastAPI, services: ReviewServices) -> None:
    """Add ``/sessions`` and ``/sessions/{session_id}`` to ``app``."""

    reader = Depends(services.access.require_page(*READERS))
    sessions_form = Depends(list_form(services.clock, _SORT_LABELS, sessions.MAX_PAGE))
    filtered = Depends(SessionFilters)

    @app.get("/sessions", include_in_schema=False)
    def sessions_page(
        request: Request, who: Principal = reader, form: ListForm = sessions_form, chosen: SessionFilters = filtered
    ) -> Response:
        filters = chosen.checked(form)
        query = chosen.query(form, filters)
        return list_page(
            "sessions.html", request, services, form, lambda conn, at: sessions.list_sessions(conn, query, at),
            filters=filters,
        )  # fmt: skip

    @app.get("/sessions/{session_id:path}", include_in_schema=False)
    def session_page(request: Request, session_id: str, who: Principal = reader) -> Response:
        session_id = session_id[:256]
        view = session_view(services, session_id)
        if view is None:
            return render("error.html", request, status=404, message=f"session {session_id} not found")
        return render("session.html", request, **view)


def session_view(services: ReviewServices, session_id: str) -> dict[str, Any] | None:
    """What ``session_turns.html`` shows of a session (the session page, a session's item page), or ``None``.

    ``session`` (the row), ``turns`` (the first :data:`PAGE_TURNS`, each with its run ``view``, the
    ``fresh`` conversation entries and the ``repeated`` count, its evidence by signal ``why``, ``open``),
    ``truncated``, ``judges`` (the session judges' verdicts) and ``details_policy``.
    """

    store = services.store
    with guard("session_page", store.retry_after_s), store.engine.connect() as conn:
        found = sessions.get_session(conn, session_id)
    if found is None:
        return None
    turns = found["turns"]
    shown = turns[:PAGE_TURNS]
    previous: list[Any] = []
    for turn in shown:
        view = run_view(services, turn["trace_id"], {}, turn)
        turn["view"] = view
        turn["fresh"], turn["repeated"] = sessions.fresh_entries(previous, view["conversation"])
        turn["why"] = views.evidence_by_signal(turn.get("evidence"))
        turn["open"] = len(turns) <= OPEN_ALL_UP_TO or bool(turn["flag"]) or bool(turn["signals"])
        previous = view["conversation"] or previous
    return {
        "session": found["session"],
        "judges": found["judges"],
        "turns": shown,
        "truncated": found["turns_truncated"] or len(turns) > len(shown),
        "details_policy": services.details,
    }
