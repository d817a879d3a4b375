"""Start-up errors (issue 15, item 4): one line naming what is wrong; no "started" before every listener is bound."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from collector.errors import SettingsError
from vigil.process import free_port
from vigil.settings import Settings


def _run(workdir: Path, **env: str) -> subprocess.CompletedProcess[bytes]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("VIGIL_", "OTEL_"))}
    full.update({f"VIGIL_{n}_PORT": str(free_port()) for n in ("OTLP_HTTP", "OTLP_GRPC", "HTTP", "METRICS")})
    full.update({"VIGIL_DATABASE_URL": f"sqlite:///{workdir / 'v.db'}", **env})
    command = [sys.executable, "-m", "vigil.cli", "run"]
    return subprocess.run(command, check=False, cwd=workdir, env=full, capture_output=True, timeout=90)


class TestSettingsErrors:
    """Configuration errors name the file (or variable) and the field."""

    def test_a_missing_rules_file_names_the_variable_and_the_file(self) -> None:
        """VIGIL_RULES=/missing.yaml: 'file not found', not 'Input should be a valid dictionary'."""
        with pytest.raises(SettingsError) as err:
            Settings.load({"VIGIL_RULES": "/missing.yaml"})
        assert "invalid setting 'rules' (VIGIL_RULES='/missing.yaml'): file not found" in str(err.value)

    def test_a_rules_file_in_the_environment_is_read(self, tmp_path: Path) -> None:
        """YAML-only settings accept a path to a YAML file holding the mapping."""
        path = tmp_path / "rules.yaml"
        path.write_text("slow: {expr: 'duration_s > 3.0', priority: normal}\n")
        assert {"slow": {"expr": "duration_s > 3.0", "priority": "normal"}} == Settings.load(
            {"VIGIL_RULES": str(path)}
        ).rules
        path.write_text("- not a mapping\n")
        with pytest.raises(SettingsError, match="must hold a mapping"):
            Settings.load({"VIGIL_RULES": str(path)})

    def test_a_bad_value_in_the_yaml_file_names_the_file_and_the_key(self, tmp_path: Path) -> None:
        """The error says which file the value came from, and the nested field when there is one."""
        path = tmp_path / "vigil.yaml"
        path.write_text("sample_rate: 2\n")
        with pytest.raises(SettingsError, match=r"\(.*vigil\.yaml: sample_rate=2\)"):
            Settings.load({}, config_file=path)
        path.write_text("model_prices: {gpt-x: [1.0, oops]}\n")
        with pytest.raises(SettingsError) as err:
            Settings.load({}, config_file=path)
        assert "vigil.yaml: model_prices" in str(err.value)
        assert "at model_prices.gpt-x.1" in str(err.value)
        path.write_text("smaple_rate: 0.1\n")
        with pytest.raises(SettingsError, match=r"vigil\.yaml: smaple_rate.*Extra inputs"):
            Settings.load({}, config_file=path)

    def test_the_environment_still_names_the_variable(self) -> None:
        """A bad variable is named as before."""
        with pytest.raises(SettingsError, match=r"\(VIGIL_SAMPLE_RATE='2'\)"):
            Settings.load({"VIGIL_SAMPLE_RATE": "2"})


@pytest.mark.integration
class TestPortInUse:
    """A port already in use stops the start with one line naming it, before anything logs that it started."""

    @pytest.mark.parametrize("which", ["OTLP_HTTP", "HTTP", "METRICS", "OTLP_GRPC"])
    def test_busy_port(self, tmp_path: Path, which: str) -> None:
        """Each listener: exit 2, ``cannot listen on 127.0.0.1:<port>``, no ``vigil_started``."""
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            port = busy.getsockname()[1]
            done = _run(tmp_path, **{f"VIGIL_{which}_PORT": str(port)})
        out = done.stderr.decode() + done.stdout.decode()
        assert 2 == done.returncode, out[-3000:]
        assert "vigil_started" not in out
        assert f"cannot listen on 127.0.0.1:{port}" in out.strip().splitlines()[-1]
