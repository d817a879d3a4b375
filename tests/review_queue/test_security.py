"""Security review of the review API and UI: authz on every route, and the checks of SECURITY.md.

The authz table below is the single statement of who may call what. Routes are enumerated from
``app.openapi()`` (the API) and ``app.routes`` (the UI, hidden from the schema); a route missing from
the table fails :func:`test_every_route_is_in_the_table`, so a new route cannot ship unreviewed.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient

from collector.model import SpanEvent
from review_queue.access import SESSION_COOKIE
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import ReviewServices, build_services
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Evidence, Message, Step, StepKind, ToolCall
from scorers.redact import Redactor
from tests.support.review_queue import login, scored_run

ADMIN_TOKEN = "security-bootstrap-admin"
TRACE = "cd" * 16
POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
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
    ("GET", "/api/v1/sessions"): READ,
    ("GET", "/api/v1/quality"): READ,
    ("GET", "/api/v1/sessions/{session_id}"): READ,
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
    ("GET", "/runs"): READ,
    ("GET", "/runs/{trace_id}"): READ,
    ("GET", "/sessions"): READ,
    ("GET", "/sessions/{session_id:path}"): READ,
    ("GET", "/runs/{trace_id}/spans/{span_id}.json"): READ,
    ("POST", "/runs/{trace_id}/review"): REVIEW,
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
        path = template.replace(":path}", "}").format(
            item_id=1, trace_id=TRACE, token_id=token_id, span_id="1" * 16, session_id="conv/1"
        )
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


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class TestSessionFixation:
    """A session cookie planted before login is never the one in use after it."""

    def test_login_issues_a_fresh_session(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """The planted value is replaced by login and, presented alone, opens nothing."""
        app, services, _ = app_parts
        secret = services.tokens.create("rev", "reviewer")[0]
        client = TestClient(app)
        client.cookies.set(SESSION_COOKIE, "attacker-chosen-session")
        page = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        response = client.post("/login", data={"token": secret, "csrf": csrf.group(1)}, follow_redirects=False)
        issued = re.search(rf"{SESSION_COOKIE}=([^;]+)", response.headers["set-cookie"])
        assert issued is not None
        assert issued.group(1) not in ("attacker-chosen-session", '""')
        attacker = TestClient(app)
        attacker.cookies.set(SESSION_COOKIE, "attacker-chosen-session")
        response = attacker.get("/queue", follow_redirects=False)
        assert 303 == response.status_code
        assert "/login" in response.headers["location"]

    def test_two_logins_two_sessions(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """Logging in again (same browser, same token) issues a new session value."""
        app, services, _ = app_parts
        secret = services.tokens.create("rev", "reviewer")[0]
        client = TestClient(app)
        login(client, secret)
        first = client.cookies.get(SESSION_COOKIE)
        time.sleep(1.1)  # sessions carry their issue time in seconds
        login(client, secret)
        assert first != client.cookies.get(SESSION_COOKIE)


UI_POSTS = sorted(t for (m, t), who in AUTHZ.items() if m == "POST" and not t.startswith("/api/") and who != PUBLIC)


class TestCsrf:
    """Every state-changing UI form refuses a missing or wrong CSRF token with 403 (session auth)."""

    @pytest.mark.parametrize("template", UI_POSTS)
    @pytest.mark.parametrize("csrf", [None, "", "wrong-token"])
    def test_form_needs_csrf(
        self, app_parts: tuple[FastAPI, ReviewServices, SqlStore], template: str, csrf: str | None
    ) -> None:
        """Logged in as admin (every form allowed) but without the right token: 403, state unchanged."""
        app, services, _store = app_parts
        client = TestClient(app)
        login(client, services.tokens.create("root", "admin")[0])
        data = {} if csrf is None else {"csrf": csrf}
        before = client.get("/api/v1/items/1", headers={"X-CSRF-Token": "x"})
        response = client.post(template.format(item_id=1, trace_id=TRACE), data=data, follow_redirects=False)
        assert 403 == response.status_code, response.text
        assert before.status_code == client.get("/api/v1/items/1", headers={"X-CSRF-Token": "x"}).status_code

    def test_logout_without_csrf_keeps_session(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """Even logout (a state change) needs the token, so a cross-site POST cannot end a session."""
        app, services, _ = app_parts
        client = TestClient(app)
        login(client, services.tokens.create("rev", "reviewer")[0])
        assert 403 == client.post("/logout", data={}, follow_redirects=False).status_code
        assert 200 == client.get("/queue").status_code


JS_URL = "javascript:alert(document.cookie)"


def _hostile_run() -> Any:
    hostile_attrs = {XSS: XSS, "url": JS_URL, "gen_ai.input.messages": f'[{{"role": "user", "content": "{JS_URL}"}}]'}
    event = SpanEvent("exception", 1, {"exception.type": XSS, "exception.message": XSS, XSS: JS_URL})
    steps = (
        Step(
            span_id="1" * 16,
            parent_id=None,
            name=XSS,
            kind=StepKind.TOOL,
            status_message=XSS,
            error=True,
            attributes=hostile_attrs,
            events=(event,),
        ),
        Step(span_id="3" * 16, parent_id="1" * 16, name=JS_URL, kind=StepKind.LLM, attributes=hostile_attrs),
    )
    evidence = (
        Evidence("safety_blocked", "block.vocabulary", "1" * 16, XSS, "status.message", XSS),
        Evidence("errored", XSS, f'{"2" * 16}" onmouseover="alert(1)', XSS, XSS, XSS),
    )
    scored = scored_run(
        "ef" * 16,
        reasons=[XSS],
        agent=XSS,
        final_output=XSS,
        error_type=XSS,
        steps=steps,
        tools=(ToolCall(span_id="1" * 16, name=XSS, arguments=XSS, result=XSS, error=XSS),),
        messages=(Message(role="user", content=XSS),),
        attributes={"k": XSS},
        safety_blocked=True,
        evidence=evidence,
    )
    return dataclasses.replace(scored, evidence=(Evidence(XSS, "rule:x", "", "", "expr", XSS),))


class TestStoredXss:
    """Span content is attacker-controlled: escaped in every page, JSON (never HTML) on the API."""

    def test_pages_escape_span_content(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """Queue, item and run pages show the payload only escaped; no live tag survives."""
        app, services, store = app_parts
        hostile = _hostile_run()
        plain = dataclasses.replace(hostile, run=dataclasses.replace(hostile.run, trace_id="ab" * 16), flag=None)
        store.write([hostile, plain])
        DetailsWriter(store.write_details, Redactor()).write_now([hostile, plain])
        client = TestClient(app)
        login(client, services.tokens.create("root", "admin")[0])
        items = client.get("/api/v1/queue").json()["items"]
        item_id = next(i["id"] for i in items if i["trace_id"] == "ef" * 16)
        pages = ("/queue", f"/items/{item_id}", f"/runs/{'ef' * 16}", f"/runs/{'ab' * 16}", "/stats", "/runs",
                 f"/runs?agent={XSS}", f"/runs?q={XSS}&trace={XSS}&score={XSS}&score_min=1")  # fmt: skip
        for path in pages:
            page = client.get(path)
            assert 200 == page.status_code, path
            assert "<script>alert" not in page.text, path
            assert "<img src=x" not in page.text, path
            assert "&lt;script&gt;" in page.text or path == "/stats", path
            assert 'onmouseover="alert' not in page.text, path
            assert 'href="javascript:' not in page.text.lower(), path
            assert 'src="javascript:' not in page.text.lower(), path
            assert "script-src 'self'" in page.headers["content-security-policy"]
        for path in ("/queue", "/runs"):  # the user-message column: the hostile user's text, escaped
            cells = re.findall(r'<td class="asked"[^>]*>(.*?)</td>', client.get(path).text, re.S)
            assert any("&lt;script&gt;" in c for c in cells), path
        item_page = client.get(f"/items/{item_id}").text
        assert 'class="ev-span" href="#1111111111111111"' in item_page  # evidence links to its span
        assert 'id="1111111111111111"' in item_page
        assert item_page.count(JS_URL) >= 3  # shown as text: attribute value, conversation, span name
        run_page = client.get(f"/runs/{'ab' * 16}").text
        assert "&lt;script&gt;alert" in run_page
        assert JS_URL in run_page
        span = client.get(f"/runs/{'ab' * 16}/spans/{'1' * 16}.json")
        assert span.headers["content-type"].startswith("application/json")
        assert "nosniff" == span.headers["x-content-type-options"]
        assert XSS in span.json()["attributes"]

    def test_api_is_json(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """The API answers the payload verbatim but as application/json, with nosniff."""
        app, _services, store = app_parts
        store.write([_hostile_run()])
        client = TestClient(app)
        auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        for path in (f"/api/v1/runs/{'ef' * 16}", "/api/v1/queue", "/api/v1/runs?flagged=true"):
            response = client.get(path, headers=auth)
            assert response.headers["content-type"].startswith("application/json"), path
            assert "nosniff" == response.headers["x-content-type-options"]


class TestHeaderInjection:
    """Nothing a caller sends reaches a response header raw; login never redirects off-site."""

    @pytest.mark.parametrize("next_url", ["https://evil.example/", "//evil.example", "/queue\r\nSet-Cookie: x=1"])
    def test_login_redirect_is_fixed(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore], next_url: str) -> None:
        """A ``next`` parameter is ignored: login always lands on /queue, with no injected header."""
        app, services, _ = app_parts
        client = TestClient(app)
        secret = services.tokens.create("rev", "reviewer")[0]
        page = client.get("/login", params={"next": next_url})
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None
        response = client.post(
            "/login",
            params={"next": next_url},
            data={"token": secret, "csrf": csrf.group(1), "next": next_url},
            follow_redirects=False,
        )
        assert "/queue" == response.headers["location"]
        assert "x=1" not in str(response.headers)

    def test_crlf_in_values_never_splits_headers(self, app_parts: tuple[FastAPI, ReviewServices, SqlStore]) -> None:
        """CR/LF in a token, a filter or a path is refused or escaped, never echoed into a header."""
        app, _services, _ = app_parts
        client = TestClient(app)
        for response in (
            client.get("/api/v1/runs", params={"agent": "a\r\nX-Injected: 1", "cursor": "\r\nX-Injected: 1"}),
            client.get("/api/v1/runs", headers={"Authorization": "Bearer a%0d%0aX-Injected:%201"}),
            client.get("/login", params={"error": "x\r\nX-Injected: 1"}),
            client.get("/items/1%0d%0aX-Injected:%201", follow_redirects=False),
        ):
            assert response.status_code < 500
            assert "x-injected" not in {k.lower() for k in response.headers}


SQLI = ["' OR '1'='1", "x'; DROP TABLE runs; --", '" OR 1=1 --', "%", "_", "\\", "1 UNION SELECT * FROM tokens"]
FILTERS = [
    ("/api/v1/runs", "agent"),
    ("/api/v1/runs", "status"),
    ("/api/v1/runs", "flagged"),
    ("/api/v1/runs", "cursor"),
    ("/api/v1/queue", "cursor"),
    ("/api/v1/runs", "session"),
    ("/api/v1/runs", "user"),
    ("/api/v1/sessions", "agent"),
    ("/api/v1/sessions", "user"),
    ("/api/v1/sessions", "signal"),
    ("/api/v1/sessions", "cursor"),
    ("/api/v1/quality", "agent"),
    ("/sessions", "user"),
    ("/sessions", "signal"),
    ("/queue", "agent"),
    ("/queue", "reason"),
    ("/queue", "priority"),
    ("/queue", "state"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TestClient]:
    """The app over SQLite and over the real PostgreSQL scratch database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        yield from _client_over(url)
    else:
        from tests.support.review_queue import postgres_scratch_url

        with postgres_scratch_url(POSTGRES_URL) as url:
            upgrade_database(url)
            yield from _client_over(url)


def _client_over(url: str) -> Iterator[TestClient]:
    store = SqlStore(url)
    store.write(
        [
            scored_run(TRACE, reasons=["errored"], agent="alice", session_id="s1", user_id="u1"),
            scored_run("ab" * 16, reasons=["slow"], agent="bob"),
        ]
    )
    services = build_services(store, admin_token=ADMIN_TOKEN)
    client = TestClient(create_api_app(store, admin_token=ADMIN_TOKEN, services=services))
    client.headers["Authorization"] = f"Bearer {ADMIN_TOKEN}"
    yield client
    store.close()


@pytest.mark.parametrize(("path", "param"), FILTERS)
def test_sql_injection_through_filters(any_store_app: TestClient, path: str, param: str) -> None:
    """Injection strings are plain values: no 5xx, no extra rows, no SQL in the error text."""
    client = any_store_app
    for payload in SQLI:
        response = client.get(path, params={param: payload})
        assert response.status_code < 500, (payload, response.text)
        text = response.text.lower().replace(payload.lower(), "")
        for leak in ("from runs", "where ", "sqlalchemy", "syntax error", "psycopg", "sqlite3", "traceback"):
            assert leak not in text, (payload, leak)
        if response.status_code == 200 and path.startswith("/api/") and param == "agent":
            body = response.json()
            assert [] == body.get("items", body.get("agents")), payload  # /api/v1/quality lists agents
    assert 2 == len(client.get("/api/v1/runs").json()["items"])  # nothing dropped


def test_tokens_never_logged(
    app_parts: tuple[FastAPI, ReviewServices, SqlStore],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Create, use, log in with and revoke tokens (and fail with wrong ones): no secret in logs or errors."""
    caplog.set_level(logging.DEBUG)
    app, _services, _ = app_parts
    client = TestClient(app)
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    created = client.post("/api/v1/tokens", json={"name": "leaky", "role": "reviewer"}, headers=admin).json()
    secret = created["token"]
    bodies = [client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret}"}).text]
    login(client, secret)
    bodies.append(client.delete(f"/api/v1/tokens/{created['id']}", headers=admin).text)
    bodies.append(client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret}"}).text)
    bodies.append(client.get("/api/v1/runs", headers={"Authorization": f"Bearer {secret}x"}).text)
    bodies.append(client.get("/api/v1/tokens", headers=admin).text)
    out = capsys.readouterr()
    logged = out.out + out.err + caplog.text
    for leak in (secret, ADMIN_TOKEN):
        assert leak not in logged
        assert all(leak not in body for body in bodies)
