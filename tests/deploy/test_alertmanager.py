"""deploy/prometheus/alertmanager.yml checked by the real amtool (Debian prometheus-alertmanager)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alertmanager.yml"
ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alert_rules.yml"


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("amtool")
    if path is None:
        pytest.skip("LOUD SKIP: `amtool` is missing; apt-get install prometheus-alertmanager (scripts/test.sh does)")
    return subprocess.run([path, *args], capture_output=True, text=True, check=False)


def route(**labels: str) -> str:
    result = amtool("config", "routes", "test", f"--config.file={CONFIG}", *(f"{k}={v}" for k, v in labels.items()))
    assert 0 == result.returncode, result.stderr
    return result.stdout.strip()


class TestAlertmanagerConfig:
    """The compose stack's Alertmanager configuration."""

    def test_check_config(self) -> None:
        """`amtool check-config` accepts it."""
        result = amtool("check-config", str(CONFIG))
        assert 0 == result.returncode, result.stdout + result.stderr

    def test_every_severity_is_routed(self) -> None:
        """Critical alerts go to the on-call receiver, warnings to the default one."""
        severities = {r["labels"]["severity"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
        assert {"critical", "warning"} == severities
        assert "oncall" == route(alertname="VigilDown", severity="critical", environment="prod")
        assert "default" == route(alertname="VigilSpansRejected", severity="warning", environment="prod")
