"""Security review of the review API and UI: authz on every route, and the checks of SECURITY.md.

The authz table below is the single statement of who may call what. Routes are enumerated from
``app.openapi()`` (the API) and ``app.routes`` (the UI, hidden from the schema); a route missing from
the table fails :func:`test_every_route_is_in_the_table`, so a new route cannot ship unreviewed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore, upgrade_database
from review_queue.testing import scored_run

ADMIN_TOKEN = "security-bootstrap-admin"
TRACE = "cd" * 16
IDENTITIES = ("none", "invalid", "revoked", "viewer", "reviewer", "ingest", "admin")

PUBLIC = "public"  # anyone: never 401/403, never 5xx
READ = frozenset({"admin", "reviewer", "viewer"})
REVIEW = frozenset({"admin", "reviewer"})
ADMIN = frozenset({"admin"})
FEEDBACK = frozenset({"admin", "ingest"})

# (method, path template) → PUBLIC or the roles allowed. Everyone else: 401 without a valid credential
# (the UI may redirect to /login instead), 403 with a valid one of the wrong role.
AUTHZ: dict[tuple[str, str], str | frozenset[str]] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/api/v1/runs"): READ,
    ("GET", "/api/v1/runs/{trace_id}"): READ,
    ("GET", "/api/v1/queue"): READ,
    ("GET", "/api/v1/judges/agreement"): READ,
    ("POST", "/api/v1/queue/claim"): REVIEW,
    ("GET", "/api/v1/items/{item_id}"): READ,
    ("POST", "/api/v1/items/{item_id}/claim"): REVIEW,
    ("POST", "/api/v1/items/{item_id}/release"): REVIEW,
    ("POST", "/api/v1/items/{item_id}/skip"): REVIEW,
    ("POST", "/api/v1/items/{item_id}/verdict"): REVIEW,
    ("POST", "/api/v1/items/{item_id}/requeue"): ADMIN,
    ("POST", "/api/v1/items/{item_id}/assign"): ADMIN,
    ("POST", "/api/v1/items/{item_id}/reviews-required"): ADMIN,
    ("GET", "/api/v1/taxonomy"): READ,
    ("POST", "/api/v1/feedback"): FEEDBACK,
    ("GET", "/api/v1/tokens"): ADMIN,
    ("POST", "/api/v1/tokens"): ADMIN,
    ("DELETE", "/api/v1/tokens/{token_id}"): ADMIN,
    # The UI (include_in_schema=False).
    ("GET", "/"): PUBLIC,
    ("GET", "/login"): PUBLIC,
    ("POST", "/login"): PUBLIC,
    ("POST", "/logout"): PUBLIC,
    ("GET", "/queue"): READ,
    ("POST", "/queue/claim"): REVIEW,
    ("GET", "/stats"): READ,
    ("GET", "/items/{item_id}"): READ,
    ("GET", "/runs/{trace_id}"): READ,
    ("POST", "/items/{item_id}/claim"): REVIEW,
    ("POST", "/items/{item_id}/release"): REVIEW,
    ("POST", "/items/{item_id}/verdict"): REVIEW,
    ("POST", "/items/{item_id}/assign"): ADMIN,
    ("POST", "/items/{item_id}/requeue"): ADMIN,
}

BODIES: dict[str, object] = {
    "/api/v1/items/{item_id}/verdict": {"verdict": "pass"},
    "/api/v1/items/{item_id}/assign": {"assignee": "bob"},
    "/api/v1/items/{item_id}/reviews-required": {"reviews_required": 2},
    "/api/v1/feedback": {"trace_id": TRACE, "score": "up"},
    "/api/v1/tokens": {"name": "new", "role": "viewer"},
}


def _app(tmp_path: Path) -> tuple[FastAPI, ReviewServices, SqlStore]:
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    store = SqlStore(url)
    store.write([scored_run(TRACE, reasons=["errored"])])
    services = build_services(store, admin_token=ADMIN_TOKEN)
    app = create_api_app(store, admin_token=ADMIN_TOKEN, services=services, judge_agreement=list)
    return app, services, store


def _routes(app: FastAPI) -> set[tuple[str, str]]:
    """API operations from the OpenAPI document plus the UI routes hidden from it."""
    found = {(method.upper(), path) for path, ops in app.openapi()["paths"].items() for method in ops}
    for route in app.routes:
        if isinstance(route, APIRoute) and not route.include_in_schema:
            found |= {(method, route.path) for method in route.methods - {"HEAD"}}
    return found


@pytest.fixture
def app_parts(tmp_path: Path) -> Iterator[tuple[FastAPI, ReviewServices, SqlStore]]:
    """A fresh app per test: some routes change state (revoke, claim)."""
    parts = _app(tmp_path)
    yield parts
    parts[2].close()


def test_every_route_is_in_the_table(app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
    """A route without an entry in AUTHZ fails here; an entry without a route too."""
    routes = _routes(app_parts[0])
    assert routes - AUTHZ.keys() == set(), "routes with no authz entry"
    assert AUTHZ.keys() - routes == set(), "authz entries with no route"


def _headers(identity: str, secrets: dict[str, str]) -> dict[str, str]:
    if identity == "none":
        return {}
    return {"Authorization": f"Bearer {secrets[identity]}"}


@pytest.mark.parametrize(("method", "template"), sorted(AUTHZ))
def test_authz(app_parts: tuple[FastAPI, ReviewServices, SqlStore], method: str, template: str) -> None:
    """Every identity against one route: the status class the table says."""
    app, services, _store = app_parts
    secrets = {
        role: services.tokens.create(f"{role}-user", role)[0] for role in ("viewer", "reviewer", "ingest", "admin")
    }
    revoked, record = services.tokens.create("gone", "admin")
    assert 1 == services.tokens.revoke(record["id"])
    secrets |= {"revoked": revoked, "invalid": "not-a-token"}
    expected = AUTHZ[(method, template)]
    client = TestClient(app)
    for identity in IDENTITIES:
        token_id = services.tokens.create("victim", "viewer")[1]["id"]  # a fresh one each time: DELETE revokes it
        path = template.format(item_id=1, trace_id=TRACE, token_id=token_id)
        body = BODIES.get(template)
        response = client.request(method, path, json=body, headers=_headers(identity, secrets), follow_redirects=False)
        status = response.status_code
        where = f"{identity} {method} {path}: {status} {response.text[:200]}"
        assert status < 500, where
        if expected == PUBLIC:
            assert status != 401, where
        elif identity in expected:
            assert status not in (401, 403), where
        elif identity in ("none", "invalid", "revoked"):
            ui_redirect = not path.startswith("/api/") and status == 303 and "/login" in response.headers["location"]
            assert status == 401 or ui_redirect, where
        else:
            assert 403 == status, where
