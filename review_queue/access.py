"""Who may call what: bearer tokens or session cookies → :class:`Principal`, role checks, CSRF, headers.

Every ``/api/v1`` route and every UI page depends on :func:`Access.require` with the roles it
allows. A bearer token wins over a cookie. A request authenticated by its session cookie that
changes state (any method but GET/HEAD/OPTIONS) must carry the session's CSRF token in the
``X-CSRF-Token`` header or a ``csrf`` form field; bearer requests need none (a browser never
attaches them on its own). Missing, invalid or revoked credentials → 401; a role that may not
→ 403; a bad CSRF token → 403.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from review_queue.auth import ANONYMOUS, Authenticator, SessionSigner
from review_queue.model import Principal, Role

__all__ = [
    "CSP",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "Access",
    "AuthFailure",
    "SecurityHeaders",
]

SESSION_COOKIE = "vigil_session"
CSRF_HEADER = "X-CSRF-Token"
SAFE_METHODS = frozenset(("GET", "HEAD", "OPTIONS"))
READERS = (Role.ADMIN, Role.REVIEWER, Role.VIEWER)
REVIEWERS = (Role.ADMIN, Role.REVIEWER)
ADMINS = (Role.ADMIN,)
FEEDBACK_SENDERS = (Role.ADMIN, Role.INGEST)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)
"""Content-Security-Policy of every response: no inline script or style, nothing from elsewhere."""

_OPEN_SESSION = "open"


class AuthFailure(Exception):
    """Raised by :meth:`Access.require`; rendered as 401/403 (JSON for the API, a redirect in the UI)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller of one request and its session (``None`` for bearer/open callers)."""

    principal: Principal
    session: dict[str, Any] | None


class Access:
    """Resolves callers and builds role dependencies.

    Args:
        auth: token resolution.
        sessions: session cookie signer.
        secure_cookies: set the cookie's ``Secure`` flag (behind HTTPS).
    """

    def __init__(self, auth: Authenticator, sessions: SessionSigner, *, secure_cookies: bool = False) -> None:
        self.auth = auth
        self.sessions = sessions
        self.secure_cookies = secure_cookies

    def require(self, *roles: Role) -> Callable[[Request], Awaitable[Principal]]:
        """A FastAPI dependency returning the caller when their role is one of ``roles``."""
        allowed = frozenset(roles)

        async def dependency(request: Request) -> Principal:
            caller = await self.caller(request)
            if caller.principal.role not in allowed:
                raise AuthFailure(403, f"role {caller.principal.role.value} may not do this")
            request.state.caller = caller
            return caller.principal

        return dependency

    def require_page(self, *roles: Role) -> Callable[[Request], Awaitable[Principal]]:
        """Like :meth:`require`, for UI pages and forms: a bearer token or a session is needed even when
        Vigil runs open, so every form is covered by the session's CSRF token (no session → 401 → login)."""
        inner = self.require(*roles)

        async def dependency(request: Request) -> Principal:
            principal = await inner(request)
            if request.state.caller.session is None and request.headers.get("authorization") is None:
                raise AuthFailure(401, "log in first")
            return principal

        return dependency

    async def caller(self, request: Request) -> Caller:
        """Authenticate a request (see the module docstring).

        Raises:
            AuthFailure: 401 without valid credentials, 403 on a bad CSRF token.
        """
        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, secret = header.partition(" ")
            found = None
            if scheme.lower() == "bearer" and secret.strip():
                found = await run_in_threadpool(self.auth.principal, secret.strip())
            if found is None:
                raise AuthFailure(401, "missing or invalid bearer token")
            return Caller(found, None)
        session = await self._session(request)
        if session is not None:
            if request.method not in SAFE_METHODS:
                await self._check_csrf(request, session)
            principal = Principal(session["name"], Role(session["role"]), session["tid"])
            return Caller(principal, session)
        if await run_in_threadpool(self.auth.open):
            return Caller(ANONYMOUS, None)
        raise AuthFailure(401, "missing or invalid bearer token")

    def issue(self, response: Response, principal: Principal) -> dict[str, Any]:
        """Start a session for ``principal``: store it server-side and set the signed HttpOnly cookie;
        returns its payload. Blocking (a database write): call it from a worker thread."""
        fingerprint = _OPEN_SESSION if principal is ANONYMOUS else self.auth.admin_fingerprint
        value, payload = self.sessions.issue(principal, fingerprint)
        self.auth.tokens.open_session(payload["sid"], principal, float(payload["exp"]))
        response.set_cookie(
            SESSION_COOKIE,
            value,
            max_age=int(self.sessions.max_age_s),
            httponly=True,
            samesite="strict",
            secure=self.secure_cookies,
            path="/",
        )
        return payload

    def end(self, response: Response, session: dict[str, Any] | None) -> None:
        """End ``session`` server-side (a copy of its cookie opens nothing any more) and clear the cookie.
        Blocking (a database write): call it from a worker thread."""
        if session is not None:
            self.auth.end_session(session.get("sid"))
        response.delete_cookie(SESSION_COOKIE, path="/")

    async def session(self, request: Request) -> dict[str, Any] | None:
        """The request's valid session payload, or ``None``."""
        return await self._session(request)

    async def _session(self, request: Request) -> dict[str, Any] | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        if not cookie:
            return None
        payload = self.sessions.verify(cookie)
        if payload is None:
            return None
        if not await run_in_threadpool(self.auth.session_active, payload.get("sid")):
            return None
        if payload.get("adm") == _OPEN_SESSION and payload.get("tid") is None:
            valid = await run_in_threadpool(self.auth.open)
        else:
            valid = await run_in_threadpool(self.auth.session_valid, payload.get("tid"), payload.get("adm"))
        return payload if valid else None

    @staticmethod
    async def _check_csrf(request: Request, session: dict[str, Any]) -> None:
        given = request.headers.get(CSRF_HEADER)
        if given is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")
        ):
            form = await request.form()
            value = form.get("csrf")
            given = value if isinstance(value, str) else None
        if not given or not hmac.compare_digest(given, str(session["csrf"])):
            raise AuthFailure(403, "missing or invalid CSRF token")


class SecurityHeaders(BaseHTTPMiddleware):
    """Adds CSP, nosniff, frame denial and no-referrer to every response (CSP not on ``/docs``)."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """Add the headers."""
        response = await call_next(request)
        if not request.url.path.startswith(("/docs", "/redoc")):
            response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response


def random_secret() -> bytes:
    """A per-process session key (sessions then end when the process restarts)."""
    return secrets.token_bytes(32)
