"""Secure defaults: loopback binds unless configured, and no open API off loopback (issue 15, item 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.errors import SettingsError
from vigil.exposure import is_loopback, refuse_open_api
from vigil.process import free_port, start_vigil
from vigil.settings import Settings


def _settings(**env: str) -> Settings:
    return Settings.load({f"VIGIL_{k.upper()}": v for k, v in env.items()})


class TestBindHosts:
    """Where each listener binds."""

    def test_every_listener_defaults_to_loopback(self) -> None:
        """Nothing configured: OTLP (HTTP, gRPC), API/UI and metrics all on 127.0.0.1."""
        s = _settings()
        assert ["127.0.0.1"] * 4 == [s.bind_host(e) for e in ("otlp_http", "otlp_grpc", "http", "metrics")]

    def test_listen_host_moves_every_listener(self) -> None:
        """VIGIL_LISTEN_HOST is the default of every endpoint."""
        s = _settings(listen_host="0.0.0.0")
        assert ["0.0.0.0"] * 4 == [s.bind_host(e) for e in ("otlp_http", "otlp_grpc", "http", "metrics")]

    def test_per_endpoint_hosts_win(self) -> None:
        """Each endpoint's own host wins; gRPC follows OTLP/HTTP and metrics follow the API, as before."""
        s = _settings(listen_host="127.0.0.1", otlp_http_host="0.0.0.0", http_host="10.0.0.5")
        assert ("0.0.0.0", "0.0.0.0") == (s.bind_host("otlp_http"), s.bind_host("otlp_grpc"))
        assert ("10.0.0.5", "10.0.0.5") == (s.bind_host("http"), s.bind_host("metrics"))
        s = _settings(otlp_http_host="0.0.0.0", otlp_grpc_host="127.0.0.1", metrics_host="0.0.0.0")
        assert ("127.0.0.1", "0.0.0.0", "127.0.0.1") == (
            s.bind_host("otlp_grpc"),
            s.bind_host("metrics"),
            s.bind_host("http"),
        )

    @pytest.mark.parametrize(
        ("host", "loopback"),
        [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
         ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("vigil.internal", False)],
    )  # fmt: skip
    def test_is_loopback(self, host: str, loopback: bool) -> None:
        """Only loopback addresses (and the name localhost) count as local; names and wildcards do not."""
        assert loopback == is_loopback(host)


class TestOpenApi:
    """The API/UI never serve open (every caller an admin) on a non-loopback address."""

    def test_open_on_loopback_is_allowed(self) -> None:
        """The default: open on 127.0.0.1, as before (only this machine can reach it)."""
        refuse_open_api(_settings(), api_open=True)

    def test_closed_anywhere_is_allowed(self) -> None:
        """With a token the API may bind every interface."""
        refuse_open_api(_settings(listen_host="0.0.0.0"), api_open=False)

    def test_open_off_loopback_names_the_setting_and_the_fix(self) -> None:
        """The error names the setting that chose the address, and the fix."""
        with pytest.raises(SettingsError) as err:
            refuse_open_api(_settings(listen_host="0.0.0.0"), api_open=True)
        assert "VIGIL_LISTEN_HOST='0.0.0.0'" in str(err.value)
        assert "VIGIL_ADMIN_TOKEN" in str(err.value)
        with pytest.raises(SettingsError, match=r"VIGIL_HTTP_HOST='10\.1\.2\.3'"):
            refuse_open_api(_settings(http_host="10.1.2.3"), api_open=True)


@pytest.mark.integration
class TestStart:
    """``vigil run`` as a process."""

    def test_open_api_on_every_interface_refuses_to_start(self, tmp_path: Path) -> None:
        """Exit 2 with one line naming the fix, before anything listens or logs that it started."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}
        env.update({f"VIGIL_{n}_PORT": str(free_port()) for n in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")})
        env.update({"VIGIL_LISTEN_HOST": "0.0.0.0", "VIGIL_DATABASE_URL": f"sqlite:///{tmp_path / 'v.db'}"})
        done = subprocess.run(
            [sys.executable, "-m", "vigil.cli", "run"],
            check=False,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=60,
        )
        assert 2 == done.returncode
        err = done.stderr.decode()
        assert "vigil_started" not in err + done.stdout.decode()
        last = err.strip().splitlines()[-1]
        assert "VIGIL_LISTEN_HOST" in last, err[-2000:]
        assert "VIGIL_ADMIN_TOKEN" in last

    def test_with_an_admin_token_it_serves_every_interface(self, tmp_path: Path) -> None:
        """The same with VIGIL_ADMIN_TOKEN starts (and the API asks for the token)."""
        import httpx

        with start_vigil(tmp_path, {"VIGIL_HTTP_HOST": "0.0.0.0", "VIGIL_ADMIN_TOKEN": "s3cret-token-123456"}) as v:
            assert 401 == httpx.get(f"{v.api}/api/v1/runs").status_code
            auth = {"Authorization": "Bearer s3cret-token-123456"}
            assert 200 == httpx.get(f"{v.api}/api/v1/runs", headers=auth).status_code
