"""API tokens with roles, signed session cookies and CSRF tokens.

Tokens are ``vgl_`` + 43 URL-safe random characters (256 bits). Only their SHA-256 is
stored: a token is shown once, at creation. A plain hash (not a slow KDF) is right for
secrets of this entropy and keeps the per-request check cheap. ``VIGIL_ADMIN_TOKEN``, when
set, is accepted as an admin named ``admin`` without being stored.

With no admin token configured and no active token in the database, Vigil runs **open**:
every caller is the admin ``anonymous`` (a warning is logged at start-up). Creating the
first token closes it.

Sessions: the web UI exchanges a token for a cookie holding ``{session id, token id, name, role,
csrf, expiry}`` signed with HMAC-SHA256. The session is also stored server-side (``ui_sessions``,
the SHA-256 of its random id): logout ends the row, revoking a token ends every session of it, and
a cookie opens nothing once its row is ended, even when copied before. Both checks are re-done on
every request (cached for :data:`CACHE_S`; the process that ends a session drops its cache, other
replicas see it within that time).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue.errors import ConflictError, InvalidInputError, NotFoundError
from review_queue.model import Principal, Role
from review_queue.store import guard
from review_queue.tables import api_tokens, ui_sessions

__all__ = ["CACHE_S", "Authenticator", "SessionSigner", "TokenStore", "hash_token"]

TOKEN_PREFIX = "vgl_"
CACHE_S = 5.0
"""How long a token lookup (valid or not) and the "any token exists" answer are cached."""
ANONYMOUS = Principal("anonymous", Role.ADMIN)
"""The caller when Vigil runs open (no admin token, no stored token)."""
BOOTSTRAP_ADMIN = "admin"


def hash_token(token: str) -> str:
    """SHA-256 hex of a token (what is stored)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """Create, list, revoke and look up tokens in ``api_tokens``.

    Args:
        engine: the store's engine.
        clock: Unix epoch seconds.
        retry_after_s: ``retry_after`` of :class:`~review_queue.errors.StoreUnavailableError`.
        admin_configured: ``VIGIL_ADMIN_TOKEN`` is set. Without it, no change may leave active tokens
            but no active admin one (that would lock everyone out of token management): the first
            token made in open mode must be an admin one, and the last admin token cannot be revoked
            while other tokens are active (revoking every token returns to open mode).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.time,
        retry_after_s: float = 2.0,
        admin_configured: bool = False,
    ) -> None:
        self._engine = engine
        self._clock = clock
        self._retry_after = retry_after_s
        self._admin_configured = admin_configured

    def create(self, name: str, role: Role | str) -> tuple[str, dict[str, Any]]:
        """Create a token; returns ``(secret, record)``. The secret is not stored and cannot be shown again.

        Raises:
            InvalidInputError: empty or too long name, or an unknown role.
            ConflictError: no admin token is active or configured and ``role`` is not admin (see the class).
        """
        name = name.strip()
        if not name or len(name) > 128:
            raise InvalidInputError("token name must be 1-128 characters")
        try:
            role = Role(role)
        except ValueError:
            raise InvalidInputError(f"role must be one of {[r.value for r in Role]}, got {role!r}") from None
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        row = {
            "name": name,
            "role": role.value,
            "token_hash": hash_token(secret),
            "prefix": secret[:8],
            "created_at": self._clock(),
        }
        with guard("token_create", self._retry_after), self._engine.begin() as conn:
            if role is not Role.ADMIN and not self._admin_configured and not self._admin_left(conn, ()):
                raise ConflictError(
                    f"refusing to create a {role.value} token while no admin token exists: nobody could manage "
                    "tokens any more; create an admin token first (--role admin) or set VIGIL_ADMIN_TOKEN"
                )
            token_id = conn.execute(sa.insert(api_tokens).values(row).returning(api_tokens.c.id)).scalar_one()
        return secret, self._record({**row, "id": token_id, "last_used_at": None, "revoked_at": None})

    def list(self) -> list[dict[str, Any]]:
        """Every token (revoked ones too), oldest first, without hashes."""
        with guard("token_list", self._retry_after), self._engine.connect() as conn:
            rows = conn.execute(sa.select(api_tokens).order_by(api_tokens.c.id)).mappings()
            return [self._record(row) for row in rows]

    def revoke(self, ident: str | int) -> int:
        """Revoke by id or by name (every active token of that name); returns how many were revoked.

        Raises:
            NotFoundError: no active token matches.
            ConflictError: it would leave active tokens but no admin one (see the class).
        """
        if isinstance(ident, int) or str(ident).isdigit():
            match = api_tokens.c.id == int(ident)
        else:
            match = api_tokens.c.name == str(ident)
        now = self._clock()
        with guard("token_revoke", self._retry_after), self._engine.begin() as conn:
            active = sa.select(api_tokens.c.id).where(match, api_tokens.c.revoked_at.is_(None))
            ids = list(conn.execute(active).scalars())
            if ids and not self._admin_configured and self._others_left(conn, ids) and not self._admin_left(conn, ids):
                raise ConflictError(
                    "refusing to revoke the last admin token while other tokens are active: nobody could manage "
                    "tokens any more; create another admin token first or set VIGIL_ADMIN_TOKEN"
                )
            if ids:
                conn.execute(sa.update(api_tokens).where(api_tokens.c.id.in_(ids)).values(revoked_at=now))
                conn.execute(
                    sa.update(ui_sessions)
                    .where(ui_sessions.c.token_id.in_(ids), ui_sessions.c.ended_at.is_(None))
                    .values(ended_at=now)
                )
        if not ids:
            raise NotFoundError(f"no active token {ident!r}")
        return len(ids)

    def open_session(self, session_id: str, principal: Principal, expires_at: float) -> None:
        """Store a new UI session (its id's SHA-256); sessions expired for a day are deleted on the way."""
        now = self._clock()
        row = {
            "id_hash": hash_token(session_id),
            "token_id": principal.token_id,
            "name": principal.name,
            "role": principal.role.value,
            "created_at": now,
            "expires_at": expires_at,
            "ended_at": None,
        }
        with guard("session_open", self._retry_after), self._engine.begin() as conn:
            conn.execute(sa.delete(ui_sessions).where(ui_sessions.c.expires_at < now - 86_400))
            conn.execute(sa.insert(ui_sessions).values(row))

    def session_active(self, session_id: str) -> bool:
        """Whether the UI session exists, has not ended and has not expired."""
        query = sa.select(ui_sessions.c.id_hash).where(
            ui_sessions.c.id_hash == hash_token(session_id),
            ui_sessions.c.ended_at.is_(None),
            ui_sessions.c.expires_at > self._clock(),
        )
        with guard("session_active", self._retry_after), self._engine.connect() as conn:
            return conn.execute(query).first() is not None

    def end_session(self, session_id: str) -> None:
        """End a UI session (logout); nothing when it is unknown or already ended."""
        stmt = (
            sa.update(ui_sessions)
            .where(ui_sessions.c.id_hash == hash_token(session_id), ui_sessions.c.ended_at.is_(None))
            .values(ended_at=self._clock())
        )
        with guard("session_end", self._retry_after), self._engine.begin() as conn:
            conn.execute(stmt)

    def lookup(self, secret: str) -> Principal | None:
        """The principal of an active token, or ``None`` (unknown or revoked)."""
        query = sa.select(api_tokens.c.id, api_tokens.c.name, api_tokens.c.role).where(
            api_tokens.c.token_hash == hash_token(secret), api_tokens.c.revoked_at.is_(None)
        )
        with guard("token_lookup", self._retry_after), self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else Principal(row.name, Role(row.role), int(row.id))

    def active(self, token_id: int) -> bool:
        """Whether the token with this id exists and is not revoked."""
        query = sa.select(api_tokens.c.id).where(api_tokens.c.id == token_id, api_tokens.c.revoked_at.is_(None))
        with guard("token_active", self._retry_after), self._engine.connect() as conn:
            return conn.execute(query).first() is not None

    def any_active(self) -> bool:
        """Whether at least one token is active (auth is then enforced even without an admin token)."""
        query = sa.select(api_tokens.c.id).where(api_tokens.c.revoked_at.is_(None)).limit(1)
        with guard("token_any", self._retry_after), self._engine.connect() as conn:
            return conn.execute(query).first() is not None

    @staticmethod
    def _admin_left(conn: sa.Connection, excluding: Sequence[int]) -> bool:
        query = sa.select(api_tokens.c.id).where(
            api_tokens.c.revoked_at.is_(None), api_tokens.c.role == Role.ADMIN.value, api_tokens.c.id.not_in(excluding)
        )
        return conn.execute(query.limit(1)).first() is not None

    @staticmethod
    def _others_left(conn: sa.Connection, excluding: Sequence[int]) -> bool:
        query = sa.select(api_tokens.c.id).where(api_tokens.c.revoked_at.is_(None), api_tokens.c.id.not_in(excluding))
        return conn.execute(query.limit(1)).first() is not None

    @staticmethod
    def _record(row: Any) -> dict[str, Any]:
        keys = ("id", "name", "role", "prefix", "created_at", "last_used_at", "revoked_at")
        return {key: row[key] for key in keys}


class Authenticator:
    """Resolve a bearer token or a session to a :class:`Principal`, with a small TTL cache.

    Args:
        tokens: the token table.
        admin_token: the bootstrap admin token (``VIGIL_ADMIN_TOKEN``), if any.
        clock: monotonic seconds, for the cache.
    """

    def __init__(
        self, tokens: TokenStore, admin_token: str | None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.tokens = tokens
        self._admin = admin_token.encode() if admin_token else None
        self._clock = clock
        self._cache: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    @property
    def admin_fingerprint(self) -> str:
        """A short digest of the bootstrap admin token (binds bootstrap sessions to it)."""
        return hashlib.sha256(self._admin or b"").hexdigest()[:16]

    def open(self) -> bool:
        """True when nothing is configured to authenticate against: every caller is :data:`ANONYMOUS`."""
        if self._admin is not None:
            return False
        return not bool(self._cached("any", self.tokens.any_active))

    def principal(self, secret: str) -> Principal | None:
        """The caller of a bearer token, or ``None`` when it is unknown or revoked."""
        if not secret:
            return None
        if self._admin is not None and hmac.compare_digest(secret.encode(), self._admin):
            return Principal(BOOTSTRAP_ADMIN, Role.ADMIN)
        found: Principal | None = self._cached("t:" + hash_token(secret), lambda: self.tokens.lookup(secret))
        return found

    def session_valid(self, token_id: int | None, admin_fingerprint: str | None) -> bool:
        """Whether the token behind a session is still active (bootstrap: the admin token is unchanged)."""
        if token_id is None:
            return self._admin is not None and admin_fingerprint == self.admin_fingerprint
        return bool(self._cached(f"a:{token_id}", lambda: self.tokens.active(token_id)))

    def session_active(self, session_id: object) -> bool:
        """Whether the server-side session ``session_id`` is still open (``False`` for a cookie without one)."""
        if not isinstance(session_id, str) or not session_id:
            return False
        return bool(self._cached("s:" + hash_token(session_id), lambda: self.tokens.session_active(session_id)))

    def end_session(self, session_id: object) -> None:
        """End a server-side session (logout) and drop the cache, so this process refuses it at once."""
        if isinstance(session_id, str) and session_id:
            self.tokens.end_session(session_id)
        self.forget()

    def ingest_allowed(self, secret: str) -> bool:
        """The OTLP ingest check: a token of role ``ingest`` or ``admin``."""
        found = self.principal(secret)
        return found is not None and found.role in (Role.INGEST, Role.ADMIN)

    def forget(self) -> None:
        """Drop the cache (after creating or revoking a token in this process)."""
        with self._lock:
            self._cache.clear()

    def _cached(self, key: str, load: Callable[[], Any]) -> Any:
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        value = load()
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key] = (now + CACHE_S, value)
        return value


class SessionSigner:
    """Sign and verify session cookies (HMAC-SHA256 over base64 JSON, with an expiry).

    Args:
        secret: the signing key (``VIGIL_SESSION_SECRET``; random per process when unset).
        max_age_s: session lifetime.
        clock: Unix epoch seconds.
    """

    def __init__(self, secret: bytes, *, max_age_s: float = 12 * 3600, clock: Callable[[], float] = time.time) -> None:
        if len(secret) < 16:
            raise InvalidInputError("session secret must be at least 16 bytes")
        self._key = secret
        self.max_age_s = max_age_s
        self._clock = clock

    def issue(self, principal: Principal, admin_fingerprint: str | None = None) -> tuple[str, dict[str, Any]]:
        """A new session for ``principal``: ``(cookie value, payload)`` with a fresh CSRF token."""
        payload = {
            "sid": secrets.token_urlsafe(32),
            "tid": principal.token_id,
            "name": principal.name,
            "role": principal.role.value,
            "csrf": secrets.token_urlsafe(24),
            "exp": self._clock() + self.max_age_s,
            "adm": admin_fingerprint if principal.token_id is None else None,
        }
        body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode().rstrip("=")
        return f"{body}.{self._sign(body)}", payload

    def verify(self, cookie: str) -> dict[str, Any] | None:
        """The payload of a well-signed, unexpired cookie, else ``None``."""
        body, _, signature = cookie.partition(".")
        if not body or not hmac.compare_digest(signature, self._sign(body)):
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        except (binascii.Error, ValueError):
            return None
        if not isinstance(payload, dict) or float(payload.get("exp", 0)) < self._clock():
            return None
        return payload

    def _sign(self, body: str) -> str:
        digest = hmac.new(self._key, body.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")
