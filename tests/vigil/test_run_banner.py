"""What a person reads of a role: the line ``vigil run`` prints once it serves (vigil.run.start_banner),
its periodic progress line on a terminal (vigil.run.show_progress), and every role's ``--help`` with the
settings it reads."""

from __future__ import annotations

import asyncio
import io
import types
from pathlib import Path
from typing import Any

import pytest

from vigil.run import progress_line, show_progress, start_banner
from vigil.settings import Settings


def _settings(tmp_path: Path, environ: dict[str, str]) -> Settings:
    config = tmp_path / "vigil.yaml"
    config.write_text("")
    return Settings.load(environ=environ, config_file=config)


def test_the_defaults_name_every_address_and_the_open_login(tmp_path: Path) -> None:
    line = start_banner(_settings(tmp_path, {}))
    for part in (
        "http://127.0.0.1:8080/",
        "http://127.0.0.1:4318",
        "gRPC 127.0.0.1:4317",
        "http://127.0.0.1:9464/metrics",
        "vigil tokens create --role admin",
        "an empty one while none exists",
    ):
        assert part in line, part
    assert "\n" not in line


def test_own_ports_a_wildcard_host_an_admin_token_and_a_password_in_the_url(tmp_path: Path) -> None:
    """A wildcard listen address reads as loopback (a browser cannot open 0.0.0.0); the database
    password never reaches the terminal; gRPC 0 is left out."""
    env = {
        "VIGIL_LISTEN_HOST": "0.0.0.0",
        "VIGIL_HTTP_PORT": "9000",
        "VIGIL_OTLP_GRPC_PORT": "0",
        "VIGIL_ADMIN_TOKEN": "s3cret-token-value",
        "VIGIL_DATABASE_URL": "postgresql://vigil:hunter2@db:5432/vigil",
    }
    line = start_banner(_settings(tmp_path, env))
    assert "http://127.0.0.1:9000/" in line
    assert "gRPC" not in line
    assert "log in with VIGIL_ADMIN_TOKEN" in line
    assert "hunter2" not in line
    assert "s3cret-token-value" not in line


def test_every_roles_help_lists_every_setting_with_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    from vigil.cli import main

    for role in ("run", "collector", "scorer", "review"):
        with pytest.raises(SystemExit):
            main([role, "--help"])
        text = capsys.readouterr().out
        missing = [n for n in Settings.model_fields if f"VIGIL_{n.upper()}=" not in text]
        assert [] == missing, role
        assert "VIGIL_HTTP_PORT=8080  REST API and reviewer UI port" in text


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _embedded(tmp_path: Path, pending: int) -> Any:
    from review_queue.store import SqlStore, upgrade_database
    from tests.support.review_queue import scored_run

    url = f"sqlite:///{tmp_path / 'progress.db'}"
    upgrade_database(url)
    store = SqlStore(url)
    store.write([scored_run(f"{n:032x}", reasons=["errored"]) for n in range(1, pending + 1)])
    worker = types.SimpleNamespace(new_runs=1234, new_flags=56)
    return types.SimpleNamespace(store=store, worker=worker)


def test_the_progress_line_says_what_was_scored_flagged_and_is_pending(tmp_path: Path) -> None:
    emb = _embedded(tmp_path, pending=3)
    out = _Terminal()

    async def watch() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(show_progress(emb, stop, every_s=0.05, out=out))
        await asyncio.sleep(0.3)
        stop.set()
        await task

    asyncio.run(watch())
    lines = out.getvalue().splitlines()
    assert lines, "no progress line on a terminal"
    assert lines[0].endswith("· 1,234 runs scored · 56 flagged (since start) · 3 pending review")
    emb.store.close()


def test_no_progress_line_when_stdout_is_not_a_terminal(tmp_path: Path) -> None:
    emb = _embedded(tmp_path, pending=1)
    out = io.StringIO()

    async def watch() -> None:
        await asyncio.wait_for(show_progress(emb, asyncio.Event(), every_s=0.01, out=out), 1.0)

    asyncio.run(watch())  # returns at once: nothing to show to a log collector
    assert "" == out.getvalue()
    emb.store.close()


def test_the_progress_line_says_when_the_queue_cannot_be_read() -> None:
    assert progress_line(0.0, 0, 0, None).endswith("· 0 runs scored · 0 flagged (since start) · queue unavailable")
