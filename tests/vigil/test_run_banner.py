"""What a person reads of a role: the line ``vigil run`` prints once it serves (vigil.run.start_banner),
and every role's ``--help`` with the settings it reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.run import start_banner
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
