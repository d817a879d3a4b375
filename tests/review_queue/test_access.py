"""Auth matrix: each role can do exactly what it should; 401/403 for missing, invalid, revoked; CSRF; headers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from review_queue.access import CSP, SESSION_COOKIE
from review_queue.api import create_api_app
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore, upgrade_database
from tests.support.review_queue import assert_unauthorized, login, scored_run

ADMIN_TOKEN = "bootstrap-admin-secret"
TRACE = "ab" * 16


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    """A migrated SQLite store with one flagged run (item 1)."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    sql_store = SqlStore(url)
    sql_store.write([scored_run(TRACE, reasons=["errored"])])
    yield sql_store
    sql_store.close()


@pytest.fixture
def services(store: SqlStore) -> ReviewServices:
    """Services with the bootstrap admin token."""
    return build_services(store, admin_token=ADMIN_TOKEN)


@pytest.fixture
def client(store: SqlStore, services: ReviewServices) -> TestClient:
    """A client of the API + UI app."""
    return TestClient(create_api_app(store, admin_token=ADMIN_TOKEN, services=services))


@pytest.fixture
def tokens(services: ReviewServices) -> dict[str, str]:
    """One token per role: role name → secret."""
    return {role: services.tokens.create(f"{role}-user", role)[0] for role in ("admin", "reviewer", "viewer", "ingest")}


def _bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


READ = {"admin", "reviewer", "viewer"}
REVIEW = {"admin", "reviewer"}
ADMIN = {"admin"}
FEEDBACK = {"admin", "ingest"}

MATRIX = [
    ("GET", "/api/v1/runs", None, READ),
    ("GET", "/api/v1/queue", None, READ),
    ("GET", f"/api/v1/runs/{TRACE}", None, READ),
    ("GET", "/api/v1/items/1", None, READ),
    ("GET", "/api/v1/taxonomy", None, READ),
    ("POST", "/api/v1/queue/claim", {}, REVIEW),
    ("POST", "/api/v1/items/1/requeue", {}, ADMIN),
    ("POST", "/api/v1/items/1/assign", {"assignee": "bob"}, ADMIN),
    ("POST", "/api/v1/items/1/reviews-required", {"reviews_required": 2}, ADMIN),
    ("POST", "/api/v1/feedback", {"trace_id": TRACE, "score": "up"}, FEEDBACK),
    ("GET", "/api/v1/tokens", None, ADMIN),
    ("POST", "/api/v1/tokens", {"name": "x", "role": "viewer"}, ADMIN),
    ("GET", "/queue", None, READ),
    ("GET", "/stats", None, READ),
    ("GET", "/items/1", None, READ),
    ("POST", "/queue/claim", None, REVIEW),
    ("POST", "/items/1/assign", None, ADMIN),
    ("POST", "/items/1/requeue", None, ADMIN),
]


class TestRoleMatrix:
    """Each role reaches exactly the endpoints of its role."""

    @pytest.mark.parametrize("role", ["admin", "reviewer", "viewer", "ingest"])
    @pytest.mark.parametrize(("method", "path", "body", "allowed"), MATRIX)
    def test_matrix(
        self,
        *,
        client: TestClient,
        tokens: dict[str, str],
        role: str,
        method: str,
        path: str,
        body: dict[str, object] | None,
        allowed: set[str],
    ) -> None:
        """Allowed roles get a non-auth answer; the others get 403."""
        response = client.request(method, path, json=body, headers=_bearer(tokens[role]), follow_redirects=False)
        if role in allowed:
            assert response.status_code not in (401, 403), response.text
            assert response.status_code < 500
        else:
            assert 403 == response.status_code

    def test_bootstrap_admin(self, client: TestClient) -> None:
        """VIGIL_ADMIN_TOKEN is an admin."""
        assert 200 == client.get("/api/v1/tokens", headers=_bearer(ADMIN_TOKEN)).status_code

    def test_reviewer_identity_is_token_name(self, client: TestClient, tokens: dict[str, str]) -> None:
        """A claim is recorded under the token's name."""
        client.post("/api/v1/queue/claim", headers=_bearer(tokens["reviewer"]))
        item = client.get("/api/v1/items/1", headers=_bearer(tokens["viewer"])).json()
        assert "reviewer-user" == item["claimed_by"]


class TestRejections:
    """Missing, invalid and revoked credentials."""

    @pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc", "Bearer ", "vgl_x"])
    def test_api_401(self, client: TestClient, header: str | None) -> None:
        """No valid bearer token → 401 with WWW-Authenticate."""
        assert_unauthorized(client, "/api/v1/runs", header)

    def test_ui_redirects_tologin(self, client: TestClient) -> None:
        """A UI page without a session redirects to /login."""
        response = client.get("/queue", follow_redirects=False)
        assert (303, "/login") == (response.status_code, response.headers["location"])

    def test_revoked_token_401(self, client: TestClient, tokens: dict[str, str], services: ReviewServices) -> None:
        """A token revoked through the API is refused at once."""
        assert 200 == client.get("/api/v1/runs", headers=_bearer(tokens["viewer"])).status_code
        viewer_id = next(t["id"] for t in services.tokens.list() if t["name"] == "viewer-user")
        assert 200 == client.delete(f"/api/v1/tokens/{viewer_id}", headers=_bearer(ADMIN_TOKEN)).status_code
        assert 401 == client.get("/api/v1/runs", headers=_bearer(tokens["viewer"])).status_code

    def test_tokens_stored_hashed(self, services: ReviewServices, tokens: dict[str, str]) -> None:
        """The secret is nowhere in the token table."""
        with services.store.engine.connect() as conn:
            dump = str(conn.exec_driver_sql("SELECT * FROM api_tokens").all())
        for secret in tokens.values():
            assert secret not in dump
            assert secret[:8] in dump  # the display prefix only

    def test_open_mode_until_first_token(self, store: SqlStore) -> None:
        """Without an admin token and without stored tokens the API is open; one token closes it."""
        services = build_services(store)
        client = TestClient(create_api_app(store, admin_token=None, services=services))
        assert 200 == client.get("/api/v1/runs").status_code
        secret, _ = services.tokens.create("root", "admin")
        services.access.auth.forget()
        assert 401 == client.get("/api/v1/runs").status_code
        assert 200 == client.get("/api/v1/runs", headers=_bearer(secret)).status_code

    def test_open_mode_first_token_must_be_admin(self, store: SqlStore) -> None:
        """In open mode a first non-admin token is refused with the reason (409), and the API stays open;
        the last admin token cannot be revoked while others are active; revoking everything reopens."""
        services = build_services(store)
        client = TestClient(create_api_app(store, admin_token=None, services=services))
        refused = client.post("/api/v1/tokens", json={"name": "alice", "role": "reviewer"})
        assert 409 == refused.status_code
        assert "no admin token" in refused.json()["detail"]
        assert 200 == client.get("/api/v1/runs").status_code
        admin = client.post("/api/v1/tokens", json={"name": "root", "role": "admin"}).json()
        as_admin = _bearer(admin["token"])
        reviewer = client.post("/api/v1/tokens", json={"name": "alice", "role": "reviewer"}, headers=as_admin)
        assert 201 == reviewer.status_code
        last = client.delete(f"/api/v1/tokens/{admin['id']}", headers=_bearer(admin["token"]))
        assert 409 == last.status_code
        assert "last admin token" in last.json()["detail"]
        services.tokens.revoke("alice")
        assert 200 == client.delete(f"/api/v1/tokens/{admin['id']}", headers=_bearer(admin["token"])).status_code


class TestOpenModeUi:
    """Without any credential configured the UI still needs a session, so its forms keep CSRF."""

    def test_open_ui_needs_session_and_csrf(self, store: SqlStore) -> None:
        """Pages redirect to login; an empty token logs in; form posts need the CSRF token."""
        client = TestClient(create_api_app(store, admin_token=None, services=build_services(store)))
        assert "/login" == client.get("/queue", follow_redirects=False).headers["location"]
        assert "/login" == client.post("/queue/claim", data={}, follow_redirects=False).headers["location"]
        page = client.get("/login").text
        assert "runs open" in page
        # the command the page suggests is the one that works first (a reviewer token is refused then)
        assert "vigil tokens create --role admin" in page
        assert "--role reviewer" not in page
        csrf = login(client, "")
        assert 403 == client.post("/queue/claim", data={"csrf": "forged"}, follow_redirects=False).status_code
        response = client.post("/queue/claim", data={"csrf": csrf}, follow_redirects=False)
        assert (303, "/items/1") == (response.status_code, response.headers["location"])
        assert 200 == client.get("/api/v1/runs").status_code  # the API stays open for scripts


class TestSessions:
    """Login, cookie flags, CSRF."""

    def test_login_sets_httponly_cookie(self, client: TestClient, tokens: dict[str, str]) -> None:
        """Login answers with a signed HttpOnly SameSite=strict session cookie."""
        page = client.get("/login")
        assert "vigil tokens create --role reviewer" in page.text  # tokens exist: the usual hint
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        response = client.post(
            "/login", data={"token": tokens["reviewer"], "csrf": csrf.group(1)}, follow_redirects=False
        )
        cookie = response.headers["set-cookie"].lower()
        assert cookie.startswith(SESSION_COOKIE)
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert tokens["reviewer"].lower() not in cookie

    def test_login_needs_login_csrf(self, client: TestClient, tokens: dict[str, str]) -> None:
        """A login post without the form's CSRF token is refused."""
        response = client.post("/login", data={"token": tokens["reviewer"], "csrf": "forged"}, follow_redirects=False)
        assert "/login?error=expired" == response.headers["location"]
        assert SESSION_COOKIE not in response.headers.get("set-cookie", "")

    @pytest.mark.parametrize("bad", ["invalid-token", "ingest"])
    def test_login_refused(self, client: TestClient, tokens: dict[str, str], bad: str) -> None:
        """Unknown tokens and ingest tokens cannot log in."""
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        token = tokens.get(bad, bad)
        response = client.post("/login", data={"token": token, "csrf": csrf.group(1)}, follow_redirects=False)
        assert response.headers["location"].startswith("/login?error=")

    def test_csrf_required_on_forms(self, client: TestClient, tokens: dict[str, str]) -> None:
        """A session POST without or with a wrong CSRF token is 403; with the right one it works."""
        csrf = login(client, tokens["reviewer"])
        assert 403 == client.post("/queue/claim", data={}, follow_redirects=False).status_code
        assert 403 == client.post("/queue/claim", data={"csrf": "wrong"}, follow_redirects=False).status_code
        assert 403 == client.post("/api/v1/queue/claim", json={}).status_code
        response = client.post("/queue/claim", data={"csrf": csrf}, follow_redirects=False)
        assert (303, "/items/1") == (response.status_code, response.headers["location"])

    def test_csrf_header_for_api_with_session(self, client: TestClient, tokens: dict[str, str]) -> None:
        """The session's CSRF token in X-CSRF-Token authorises a JSON call."""
        csrf = login(client, tokens["reviewer"])
        assert 200 == client.post("/api/v1/queue/claim", json={}, headers={"X-CSRF-Token": csrf}).status_code

    def test_tampered_cookie(self, client: TestClient, tokens: dict[str, str]) -> None:
        """A modified session cookie is no session."""
        login(client, tokens["admin"])
        original = client.cookies[SESSION_COOKIE]
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, original)
        assert 200 == client.get("/api/v1/runs").status_code
        body, _, signature = original.partition(".")
        forged = body.replace(body[5], "A" if body[5] != "A" else "B", 1)
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, f"{forged}.{signature}")
        assert 401 == client.get("/api/v1/runs").status_code

    def test_revoked_token_ends_session(
        self, client: TestClient, tokens: dict[str, str], services: ReviewServices
    ) -> None:
        """Revoking the token behind a session logs it out."""
        login(client, tokens["viewer"])
        assert 200 == client.get("/queue").status_code
        services.tokens.revoke("viewer-user")
        services.access.auth.forget()
        assert 303 == client.get("/queue", follow_redirects=False).status_code

    def test_admin_forms(self, client: TestClient, tokens: dict[str, str], services: ReviewServices) -> None:
        """An admin assigns and sets reviews_required from the run view; the forms carry CSRF."""
        csrf = login(client, tokens["admin"])
        assert 'id="assign-form"' in client.get("/items/1").text
        assert 403 == client.post("/items/1/assign", data={"assignee": "bob"}, follow_redirects=False).status_code
        client.post("/items/1/assign", data={"assignee": "bob", "csrf": csrf}, follow_redirects=False)
        client.post("/items/1/requeue", data={"reviews": "2", "csrf": csrf}, follow_redirects=False)
        item = services.workbench.item(1)
        assert ("bob", 2) == (item["assigned_to"], item["reviews_required"])

    def test_logout(self, client: TestClient, tokens: dict[str, str]) -> None:
        """Logout clears the session."""
        csrf = login(client, tokens["viewer"])
        client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        assert 303 == client.get("/queue", follow_redirects=False).status_code

    def test_logout_ends_copied_cookie(self, client: TestClient, tokens: dict[str, str]) -> None:
        """A copy of the cookie taken before logout opens nothing after it (the session ended server-side)."""
        csrf = login(client, tokens["reviewer"])
        copied = client.cookies[SESSION_COOKIE]
        client.post("/logout", data={"csrf": csrf}, follow_redirects=False)
        client.cookies.clear()
        client.cookies.set(SESSION_COOKIE, copied)
        assert 303 == client.get("/queue", follow_redirects=False).status_code
        assert 401 == client.get("/api/v1/runs").status_code
        assert 401 == client.post("/api/v1/queue/claim", json={}, headers={"X-CSRF-Token": csrf}).status_code

    def test_cookie_without_server_session(
        self, client: TestClient, tokens: dict[str, str], services: ReviewServices
    ) -> None:
        """A well-signed cookie whose session was never stored (or predates the table) is no session."""
        principal = services.tokens.lookup(tokens["admin"])
        assert principal is not None
        value, _ = services.access.sessions.issue(principal)
        client.cookies.set(SESSION_COOKIE, value)
        assert 401 == client.get("/api/v1/runs").status_code


class TestHeaders:
    """Security headers and the OpenAPI document."""

    @pytest.mark.parametrize("path", ["/login", "/api/v1/runs", "/healthz"])
    def test_csp_everywhere(self, client: TestClient, path: str) -> None:
        """Every answer carries a CSP without inline script, plus nosniff and frame denial."""
        response = client.get(path, headers=_bearer(ADMIN_TOKEN))
        assert CSP == response.headers["Content-Security-Policy"]
        assert "unsafe-inline" not in CSP
        assert "script-src 'self'" in CSP
        assert ("nosniff", "DENY") == (response.headers["X-Content-Type-Options"], response.headers["X-Frame-Options"])

    def test_openapi_lists_workbench(self, client: TestClient) -> None:
        """The workbench routes are documented."""
        paths = set(client.get("/openapi.json").json()["paths"])
        assert {"/api/v1/queue/claim", "/api/v1/items/{item_id}/verdict", "/api/v1/feedback", "/api/v1/tokens"} <= paths
