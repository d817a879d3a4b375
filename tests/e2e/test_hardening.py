"""Hardening, second pass (issue 20): each finding reproduced against a real ``vigil run`` on real sockets.

One module-scoped ``vigil run`` with a bootstrap admin token serves the findings that need no special
settings; the others start their own.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.spans import capped_run
from vigil.process import VigilProcess, start_vigil

pytestmark = pytest.mark.integration

ADMIN_TOKEN = "hardening-admin-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PROTO = {"Content-Type": "application/x-protobuf"}


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run`` with a bootstrap admin token and no random sample."""
    env = {"VIGIL_QUIET_PERIOD_S": "0.3", "VIGIL_SAMPLE_RATE": "0", "VIGIL_ADMIN_TOKEN": ADMIN_TOKEN}
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        yield running


def _token(vigil: VigilProcess, name: str, role: str) -> str:
    response = httpx.post(f"{vigil.api}/api/v1/tokens", json={"name": name, "role": role}, headers=ADMIN)
    assert 201 == response.status_code, response.text
    return str(response.json()["token"])


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _flagged_item(vigil: VigilProcess, seed: int, timeout_s: float = 20.0) -> int:
    """Send a capped run and wait for its review item; returns the item id."""
    trace_id, payload = capped_run(seed)
    assert 200 == httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=payload, headers=PROTO).status_code
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", headers=ADMIN)
        if response.status_code == 200 and response.json().get("review_item"):
            return int(response.json()["review_item"]["id"])
        time.sleep(0.1)
    raise AssertionError(f"run {trace_id} was never flagged\n{vigil.log_tail()}")


class TestBlindReview:
    """Finding 1: the audit trail must not carry another reviewer's verdict before the item is done."""

    def test_events_hide_other_verdicts(self, vigil: VigilProcess) -> None:
        """B sees that A judged, not what A said, through the API and the UI; after B, both see all."""
        alice, bob = _token(vigil, "blind-alice", "reviewer"), _token(vigil, "blind-bob", "reviewer")
        item_id = _flagged_item(vigil, 1)
        url = f"{vigil.api}/api/v1/items/{item_id}"
        assert 200 == httpx.post(f"{url}/reviews-required", json={"reviews_required": 2}, headers=ADMIN).status_code
        assert 200 == httpx.post(f"{url}/claim", headers=_bearer(alice)).status_code
        verdict = {"verdict": "fail", "categories": ["loop"], "notes": "alice-secret-note"}
        assert 200 == httpx.post(f"{url}/verdict", json=verdict, headers=_bearer(alice)).status_code

        seen = httpx.get(url, headers=_bearer(bob))
        assert 200 == seen.status_code
        assert [] == seen.json()["verdicts"]
        [event] = [e for e in seen.json()["events"] if e["action"] == "verdict"]
        assert {"state": "pending", "blind": True} == event["detail"]
        assert "fail" not in str(seen.json()["events"])
        page = httpx.get(f"{vigil.api}/items/{item_id}", headers=_bearer(bob))
        assert 200 == page.status_code
        assert "alice-secret-note" not in page.text
        assert "fail" in str(httpx.get(url, headers=ADMIN).json()["events"])

        assert 200 == httpx.post(f"{url}/claim", headers=_bearer(bob)).status_code
        assert 200 == httpx.post(f"{url}/verdict", json={"verdict": "pass"}, headers=_bearer(bob)).status_code
        done = httpx.get(url, headers=_bearer(bob)).json()
        assert ["fail", "pass"] == [e["detail"]["verdict"] for e in done["events"] if e["action"] == "verdict"]


def _ui_login(vigil: VigilProcess, token: str) -> tuple[httpx.Client, str]:
    """A browser-like client logged in with ``token``; returns it and the session's CSRF token."""
    client = httpx.Client(base_url=vigil.api)
    page = client.get("/login")
    login_csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert login_csrf is not None
    assert 303 == client.post("/login", data={"token": token, "csrf": login_csrf.group(1)}).status_code
    queue = client.get("/queue")
    csrf = re.search(r'name="csrf" value="([^"]+)"', queue.text)
    assert csrf is not None, queue.text[:500]
    return client, csrf.group(1)


def _with_cookie(vigil: VigilProcess, cookie: str) -> httpx.Client:
    return httpx.Client(base_url=vigil.api, cookies={"vigil_session": cookie})


class TestSessions:
    """Finding 2: sessions live server-side; logout and token revocation end every copy of the cookie."""

    def test_logout_ends_copied_cookie(self, vigil: VigilProcess) -> None:
        """A cookie copied before logout is refused after it, for reading and (with its CSRF token) for writing."""
        client, csrf = _ui_login(vigil, _token(vigil, "session-logout", "reviewer"))
        copied = client.cookies["vigil_session"]
        with _with_cookie(vigil, copied) as thief:
            assert 200 == thief.get("/api/v1/runs").status_code
            assert 303 == client.post("/logout", data={"csrf": csrf}).status_code
            assert 401 == thief.get("/api/v1/runs").status_code
            assert 401 == thief.post("/api/v1/queue/claim", json={}, headers={"X-CSRF-Token": csrf}).status_code
            assert "/login" == thief.get("/queue").headers["location"]
        client.close()

    def test_token_revocation_ends_sessions(self, vigil: VigilProcess) -> None:
        """Revoking a token over the API ends its sessions at once."""
        token = _token(vigil, "session-revoke", "viewer")
        client, _ = _ui_login(vigil, token)
        assert 200 == client.get("/api/v1/runs").status_code
        listed = httpx.get(f"{vigil.api}/api/v1/tokens", headers=ADMIN).json()
        [record] = [t for t in listed if t["name"] == "session-revoke"]
        assert 200 == httpx.delete(f"{vigil.api}/api/v1/tokens/{record['id']}", headers=ADMIN).status_code
        assert 401 == client.get("/api/v1/runs").status_code
        client.close()


class TestOpenModeLockout:
    """Finding 10: in open mode the first token must be an admin one, over the API and the CLI."""

    def test_first_token_must_be_admin(self, tmp_path: Path) -> None:
        """A first reviewer token is refused (409 / exit 1, one line, the reason); Vigil stays open."""
        with start_vigil(tmp_path) as vigil:
            refused = httpx.post(f"{vigil.api}/api/v1/tokens", json={"name": "alice", "role": "reviewer"})
            assert 409 == refused.status_code
            assert "no admin token" in refused.json()["detail"]
            assert 200 == httpx.get(f"{vigil.api}/api/v1/runs").status_code
            env = {**_clean_env(), "VIGIL_DATABASE_URL": f"sqlite:///{tmp_path / 'vigil.db'}"}
            cli = subprocess.run(
                [sys.executable, "-m", "vigil.cli", "tokens", "create", "--role", "reviewer", "--name", "b"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert 1 == cli.returncode
            assert "" == cli.stdout
            assert 1 == len(cli.stderr.strip().splitlines()), cli.stderr
            assert "no admin token" in cli.stderr
            made = httpx.post(f"{vigil.api}/api/v1/tokens", json={"name": "root", "role": "admin"})
            assert 201 == made.status_code
            assert 401 == httpx.get(f"{vigil.api}/api/v1/runs").status_code


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}


class TestFeedbackBound:
    """Finding 7: feedback for trace ids that are not stored is held within bounds, then dropped and counted."""

    def test_unknown_trace_feedback_bounded(self, tmp_path: Path) -> None:
        """5 held at most: the 6th is a 429 + Retry-After (counted); after the wait they are dropped (counted)."""
        env = {"VIGIL_FEEDBACK_PENDING_MAX": "5", "VIGIL_FEEDBACK_PENDING_S": "1", "VIGIL_QUIET_PERIOD_S": "0.3"}
        with start_vigil(tmp_path, env) as vigil:
            url = f"{vigil.api}/api/v1/feedback"

            def send(n: int) -> httpx.Response:
                payload = {"feedback_id": f"fb-{n}", "trace_id": f"{n:032x}", "score": "down"}
                return httpx.post(url, json=payload)

            assert [200] * 5 == [send(n).status_code for n in range(1, 6)]
            over = send(6)
            assert 429 == over.status_code
            assert int(over.headers["retry-after"]) >= 1
            assert "feedback already wait" in over.json()["detail"]
            assert 1.0 == vigil.metric("vigil_feedback_refused_total", {"reason": "pending_full"})
            assert 200 == send(1).status_code  # a retry of held feedback is a duplicate, not a refusal
            deadline = time.monotonic() + 15
            while (
                vigil.metric("vigil_feedback_dropped_total", {"reason": "expired"}) < 5 and time.monotonic() < deadline
            ):
                time.sleep(0.5)
            assert 5.0 == vigil.metric("vigil_feedback_dropped_total", {"reason": "expired"})
            assert 200 == send(7).status_code


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (EOF or reset; a 431 answer counts once read)."""
    sock.settimeout(0.05)
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except (TimeoutError, BlockingIOError):
        return False


class TestSlowloris:
    """Finding 3: idle and half-sent connections are closed, capped per listener, and counted."""

    def test_idle_flood_on_api_and_otlp(self, tmp_path: Path) -> None:
        """2,000 idle/half-sent connections (1,000 per port): normal requests answer within 1 s, the
        cap closes the longest-waiting ones, the rest are closed by the header timeout; all counted."""
        env = {"VIGIL_HTTP_HEADER_TIMEOUT_S": "2", "VIGIL_HTTP_MAX_CONNECTIONS": "800"}
        with start_vigil(tmp_path, env) as vigil:
            held: list[socket.socket] = []
            for port in (vigil.http_port, vigil.otlp_http_port):
                for n in range(1000):
                    sock = socket.create_connection(("127.0.0.1", port))
                    if n % 2:
                        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Ty")
                    held.append(sock)
            started = time.monotonic()
            assert 200 == httpx.get(f"{vigil.api}/api/v1/runs", timeout=5).status_code
            _, payload = capped_run(7)
            assert 200 == httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=payload, headers=PROTO).status_code
            assert time.monotonic() - started < 1.0
            time.sleep(1.0)
            assert sum(map(_closed_by_peer, held)) >= 400  # the cap: 200 over it on each port, oldest first
            time.sleep(2.5)  # header timeout 2 s, swept every 0.2 s
            assert all(map(_closed_by_peer, held))
            for sock in held:
                sock.close()
            for listener in ("api", "otlp_http"):
                name = "vigil_http_connections_closed_total"
                timeouts = vigil.metric(name, {"listener": listener, "reason": "header_timeout"})
                evicted = vigil.metric(name, {"listener": listener, "reason": "over_limit"})
                assert 1000 == timeouts + evicted
                assert evicted >= 200

    def test_grpc_handshake_timeout(self, tmp_path: Path) -> None:
        """Silent or half-sent connections to the OTLP/gRPC port are closed after the header timeout."""
        with start_vigil(tmp_path, {"VIGIL_HTTP_HEADER_TIMEOUT_S": "2"}) as vigil:
            held = [socket.create_connection(("127.0.0.1", vigil.otlp_grpc_port)) for _ in range(20)]
            held[1].sendall(b"PRI * HTTP/2.0\r\n")
            time.sleep(3.5)
            assert all(map(_closed_by_peer, held))
            for sock in held:
                sock.close()

    @pytest.mark.parametrize("endless", [b"X-Pad: " + b"a" * 4096 + b"\r\n", b"a" * 4096])
    def test_headers_too_large(self, vigil: VigilProcess, endless: bytes) -> None:
        """Endless headers (many, or one value that never ends) are answered 431 and closed (counted),
        not buffered for ever."""
        before = vigil.metric("vigil_http_connections_closed_total", {"listener": "api", "reason": "header_too_large"})
        with socket.create_connection(("127.0.0.1", vigil.http_port)) as sock:
            sock.sendall(b"GET /api/v1/runs HTTP/1.1\r\nHost: x\r\nX-Big: ")
            try:
                for _ in range(100):
                    sock.sendall(endless)
            except (BrokenPipeError, ConnectionResetError):
                pass
            sock.settimeout(5)
            assert sock.recv(200).startswith(b"HTTP/1.1 431")
        after = vigil.metric("vigil_http_connections_closed_total", {"listener": "api", "reason": "header_too_large"})
        assert before + 1 == after

    def test_early_answer_then_big_body_is_not_a_header(self, vigil: VigilProcess) -> None:
        """A body over the header limit after an early answer (here 415 before reading) is not taken for
        headers: the keep-alive connection then serves the next request."""
        with httpx.Client() as client:
            url = f"{vigil.otlp_endpoint}/v1/traces"
            refused = client.post(url, content=b"\x00" * 300_000, headers={"Content-Type": "text/plain"})
            assert 415 == refused.status_code
            _, payload = capped_run(11)
            assert 200 == client.post(url, content=payload, headers=PROTO).status_code


def _ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, by hand (the protobuf runtime refuses to build deep values)."""
    size, prefix = len(payload), bytearray([field << 3 | 2])
    while True:
        low, size = size & 0x7F, size >> 7
        prefix.append(low | (0x80 if size else 0))
        if not size:
            return bytes(prefix) + payload


class TestPartialSuccess:
    """Finding 6: one bad span costs only itself (OTLP partial success); protobuf and JSON agree."""

    def test_deep_and_malformed_attributes(self, vigil: VigilProcess) -> None:
        """A root, a child with a value nested 40 kvlist levels (kept, cut at MAX_DEPTH as in JSON) and a
        child whose attribute is not UTF-8 (rejected with a message): 200, the run is stored with 2 spans."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
            ExportTraceServiceResponse,
        )

        trace_id = random.Random(66).randbytes(16)
        request = ExportTraceServiceRequest()
        spans = request.resource_spans.add().scope_spans.add().spans
        now = time.time_ns()
        for n in range(3):
            spans.add(
                trace_id=trace_id, span_id=bytes([n + 1]) * 8, name=f"step {n}",
                parent_span_id=b"" if n == 0 else b"\x01" * 8, start_time_unix_nano=now, end_time_unix_nano=now + 10,
            )  # fmt: skip
        value = _ld(1, b"leaf")
        for _ in range(40):
            value = _ld(6, _ld(1, _ld(1, b"k") + _ld(2, value)))
        extra = {1: _ld(9, _ld(1, b"deep") + _ld(2, value)), 2: _ld(9, _ld(1, b"\xff\xfe") + _ld(2, _ld(1, b"v")))}
        scope = b"".join(_ld(2, sp.SerializeToString() + extra.get(n, b"")) for n, sp in enumerate(spans))
        body = _ld(1, _ld(2, scope))
        response = httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=body, headers=PROTO)
        assert 200 == response.status_code
        answer = ExportTraceServiceResponse.FromString(response.content)
        assert 1 == answer.partial_success.rejected_spans
        assert "UTF-8" in answer.partial_success.error_message
        deadline = time.monotonic() + 20
        run: dict[str, object] = {}
        while time.monotonic() < deadline:
            got = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id.hex()}", headers=ADMIN)
            if got.status_code == 200:
                run = got.json()
                break
            time.sleep(0.2)
        assert run, vigil.log_tail()
        assert trace_id.hex() == run["trace_id"]  # stored: the batch was not lost for one bad span


class TestRefusedVersusDropped:
    """Finding 9: refusals (retried by the sender) and losses are separate series; gRPC over-size is counted."""

    def test_series_and_grpc_too_large(self, tmp_path: Path) -> None:
        """A gRPC message over the body limit is RESOURCE_EXHAUSTED and counted as too_large (413); stream
        refusals are ``vigil_refused_total``, never ``vigil_dropped_total``."""
        import grpc

        from collector.grpc_receiver import EXPORT_METHOD

        with start_vigil(tmp_path, {"VIGIL_MAX_BODY_BYTES": "65536"}) as vigil:
            _, payload = capped_run(9)
            oversized = payload + _ld(1, _ld(2, _ld(2, b"\x0a\x10" + b"\x01" * 16 + b"\x12\x08" + b"\x02" * 8)))
            oversized += _ld(1, b"\x00" * 70_000)
            with grpc.insecure_channel(vigil.otlp_grpc_target) as channel:
                export = channel.unary_unary(EXPORT_METHOD)
                with pytest.raises(grpc.RpcError) as refused:
                    export(oversized, timeout=10)
                assert grpc.StatusCode.RESOURCE_EXHAUSTED == refused.value.code()
                export(payload, timeout=10)
            assert 1.0 == vigil.metric("vigil_otlp_rejected_requests_total", {"reason": "too_large"})
            assert 1.0 == vigil.metric("vigil_otlp_requests_total", {"encoding": "grpc", "code": "413"})
            text = httpx.get(vigil.metrics_url).text
            assert 'vigil_refused_total{reason="full",stage="stream"}' in text
            assert 'vigil_dropped_total{reason="full",stage="stream"}' not in text


class TestNoSelfIngestion:
    """Finding 11: ``vigil run --demo`` never turns Vigil's own API requests into runs."""

    def test_page_views_are_not_runs(self, tmp_path: Path) -> None:
        """Page and API views while the demo runs: every stored run is one of the demo's four agents."""
        with start_vigil(tmp_path, {"VIGIL_QUIET_PERIOD_S": "0.3"}, ("--demo", "--demo-rate", "2")) as vigil:
            time.sleep(3)
            for _ in range(10):
                assert 200 == httpx.get(f"{vigil.api}/api/v1/runs").status_code
                assert 200 == httpx.get(f"{vigil.api}/login").status_code
            time.sleep(5)  # the demo's batch processor and the quiet period
            runs = httpx.get(f"{vigil.api}/api/v1/runs", params={"limit": 500}).json()["items"]
            agents = {r["agent"] for r in runs}
            assert agents, vigil.log_tail()
            assert agents <= {"support", "research", "billing", "triage"}, agents


README = Path(__file__).resolve().parents[2] / "README.md"


class TestReadmeContentCapture:
    """Finding 12: the README's content-capture step, as written, gets the prompt into Vigil and the export."""

    def test_follow_the_readme(self, tmp_path: Path) -> None:
        """The README's capture value (one value everywhere) makes the pinned OpenAI instrumentation record
        the prompt: it is in the run's conversation and in ``vigil export`` after a verdict."""
        from collector.demo.fakeopenai import FakeOpenAI, TextTurn
        from tests.e2e.readme_agent import PROMPT

        docs = [README, *sorted((README.parent / "docs").glob("*.md"))]
        text = "".join(path.read_text() for path in docs)
        values = set(re.findall(r"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=([A-Za-z_]+)", text))
        assert 1 == len(values), values
        env = {"VIGIL_SAMPLE_RATE": "1", "VIGIL_QUIET_PERIOD_S": "0.3", "VIGIL_ADMIN_TOKEN": ADMIN_TOKEN}
        with start_vigil(tmp_path, env) as vigil, FakeOpenAI({"readme": [TextTurn("Refunds within 30 days.")]}) as fake:
            agent_env = {
                **_clean_env(),
                "OTEL_EXPORTER_OTLP_ENDPOINT": vigil.otlp_endpoint,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
                "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": values.pop(),
            }
            driver = Path(__file__).with_name("readme_agent.py")
            ran = subprocess.run(
                [sys.executable, str(driver), fake.base_url], env=agent_env, capture_output=True, text=True,
                timeout=60, check=False,
            )  # fmt: skip
            assert 0 == ran.returncode, ran.stderr
            assert "ignored_by_openai" not in ran.stderr
            deadline = time.monotonic() + 20
            items: list[dict[str, object]] = []
            while not items and time.monotonic() < deadline:
                items = httpx.get(f"{vigil.api}/api/v1/queue", headers=ADMIN).json()["items"]
                time.sleep(0.2)
            [item] = items
            page = httpx.get(f"{vigil.api}/items/{item['id']}", headers=ADMIN)
            assert "refund policy for order 4711" in page.text
            reviewer = _token(vigil, "readme-reviewer", "reviewer")
            url = f"{vigil.api}/api/v1/items/{item['id']}"
            assert 200 == httpx.post(f"{url}/claim", headers=_bearer(reviewer)).status_code
            assert 200 == httpx.post(f"{url}/verdict", json={"verdict": "pass"}, headers=_bearer(reviewer)).status_code
            export = subprocess.run(
                [sys.executable, "-m", "vigil.cli", "export", "--format", "jsonl"],
                env={**_clean_env(), "VIGIL_DATABASE_URL": f"sqlite:///{tmp_path / 'vigil.db'}"},
                capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert 0 == export.returncode, export.stderr
            assert "refund policy for order 4711" in export.stdout, export.stdout
            assert PROMPT.split(" [[")[0] in export.stdout


def _vigil(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    full = {**_clean_env(), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vigil.cli", *args], env=full, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _one_line(stderr: str) -> list[str]:
    """stderr without the JSON log lines (and gRPC's C-core line), i.e. what a person reads."""
    return [line for line in stderr.splitlines() if line and not line.startswith(("{", "E1", "W1", "I1"))]


class TestCli:
    """Finding 13: the CLI's rough edges."""

    def test_version(self) -> None:
        """``vigil --version`` prints the version and exits 0."""
        done = _vigil("--version")
        assert 0 == done.returncode
        assert re.fullmatch(r"vigil \S+\n", done.stdout), done.stdout

    def test_demo_fails_when_nothing_is_exported(self) -> None:
        """``vigil demo`` against a closed port exits 1 and says how many spans were not exported."""
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        done = _vigil("demo", "--endpoint", f"http://127.0.0.1:{port}", "--runs", "2", "--pace", "0",
                      env={"OTEL_EXPORTER_OTLP_TIMEOUT": "1"})  # fmt: skip
        assert 1 == done.returncode, done.stderr
        assert re.search(r"vigil demo: (\d+) of \1 spans could not be exported", done.stderr), done.stderr

    @pytest.mark.parametrize("url", ["nonsense", "foo://u:s3cret@h/db"])
    def test_bad_database_url(self, url: str, tmp_path: Path) -> None:
        """A URL that is not a database URL is one line naming the variable, exit 2, secrets hidden."""
        done = _vigil("run", env={"VIGIL_DATABASE_URL": url})
        assert 2 == done.returncode
        [line] = _one_line(done.stderr)
        assert "VIGIL_DATABASE_URL" in line
        assert "s3cret" not in done.stderr
        assert "Traceback" not in done.stderr

    @pytest.mark.parametrize("variable", ["VIGIL_OTLP_GRPC_PORT", "VIGIL_HTTP_PORT", "VIGIL_OTLP_HTTP_PORT"])
    def test_port_in_use(self, variable: str, tmp_path: Path) -> None:
        """A port already in use ends ``vigil run`` with one line naming it, exit 2, no traceback."""
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            env = {f"VIGIL_{name}_PORT": "0" for name in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")}
            env.update({"VIGIL_HTTP_HOST": "127.0.0.1", "VIGIL_OTLP_HTTP_HOST": "127.0.0.1", variable: str(port)})
            env["VIGIL_DATABASE_URL"] = f"sqlite:///{tmp_path / 'vigil.db'}"
            done = _vigil("run", env=env)
        assert 2 == done.returncode, done.stderr[-2000:]
        [line] = _one_line(done.stderr)
        assert f"cannot listen on 127.0.0.1:{port}" in line
        assert "Traceback" not in done.stderr

    def test_review_stops_on_ctrl_c_without_database(self) -> None:
        """``vigil review`` waiting for an unreachable database stops at SIGINT within seconds."""
        env = {**_clean_env(), "VIGIL_DATABASE_URL": "postgresql+psycopg://x@127.0.0.1:1/db", "VIGIL_HTTP_PORT": "0",
               "VIGIL_METRICS_PORT": "0", "VIGIL_HTTP_HOST": "127.0.0.1"}  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, "-m", "vigil.cli", "review"], env=env, stderr=subprocess.PIPE, text=True
        )
        try:
            assert process.stderr is not None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and "database_unavailable" not in process.stderr.readline():
                pass
            process.send_signal(signal.SIGINT)
            assert 2 == process.wait(10)
            assert "stopped while the database was unreachable" in process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()

    def test_readme_first_block_says_how_to_run_both(self) -> None:
        """The README starts with exactly two set-up commands (install and run, then the tests); since the
        first serves until Ctrl-C, the text right after says to run the second in another terminal."""
        text = README.read_text()
        block = text.split("```", 2)[1].strip().splitlines()
        assert 2 == len(block), block
        assert "vigil run" in block[0]
        assert "scripts/test.sh" in block[1]
        after = text.split("```", 2)[2][:300]
        assert "another" in after
        assert "terminal" in after


class TestScoringLatency:
    """Finding 14: the batch processor's delay is documented where users look, and the documented knob works."""

    def test_documented_in_quick_tour(self) -> None:
        """The quick tour's scoring step names the SDK's batch delay and how to tune it, in the README and in
        the manual's full quick tour (docs/getting-started.md)."""
        readme = README.read_text()
        assert "OTEL_BSP_SCHEDULE_DELAY" in readme[readme.index("## Quick tour") : readme.index("## The manual")]
        text = (README.parent / "docs" / "getting-started.md").read_text()
        tour = text[text.index("## Quick tour") : text.index("## Demo")]
        assert "OTEL_BSP_SCHEDULE_DELAY" in tour
        assert "2–7 s" in tour

    def test_schedule_delay_shortens_scoring(self, vigil: VigilProcess) -> None:
        """With ``OTEL_BSP_SCHEDULE_DELAY=200`` and no flush, a run is stored within 2 s of ending
        (the default 5 s delay alone would take longer)."""
        from collector.instrument import agent_run, vigil_setup

        environ = {"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_EXPORTER_OTLP_ENDPOINT": vigil.otlp_endpoint}
        tracing = vigil_setup(service_name="latency", environ=environ, instrument_openai=False, set_global=False)
        try:
            with agent_run("latency-agent", tracer_provider=tracing.tracer_provider) as run:
                trace_id = run.trace_id
            ended = time.monotonic()
            while time.monotonic() - ended < 4.5:
                if httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", headers=ADMIN).status_code == 200:
                    break
                time.sleep(0.1)
            assert time.monotonic() - ended < 2.0, "run not stored within 2 s"
        finally:
            tracing.shutdown()
