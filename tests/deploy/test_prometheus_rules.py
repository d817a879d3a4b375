"""``promtool check rules`` and ``promtool test rules`` on the shipped rules, and rule hygiene."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROM_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RUNBOOK = PROM_DIR.parent / "RUNBOOK.md"

ISSUE_ALERTS = {
    "VigilSafetyBlockRateHigh",  # safety-block rate out of band (too high)
    "VigilSafetyBlockRateLow",  # ... and too low
    "VigilMaxIterationsSpike",
    "VigilStepEfficiencyDrop",
    "VigilErrorRateSpike",
    "VigilReviewBacklogOverSLA",
    "VigilConsumerLagGrowing",
    "VigilSpansDropped",
    "VigilSpansRejected",
    "VigilDown",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("LOUD SKIP: `promtool` is missing; apt-get install prometheus (scripts/test.sh does)")
    return path


def alerts() -> list[dict[str, object]]:
    doc = yaml.safe_load((PROM_DIR / "alert_rules.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


class TestPromtool:
    """The real promtool accepts the rules and their unit tests pass."""

    def test_check_rules(self) -> None:
        """``promtool check rules`` succeeds on both rule files."""
        files = [str(PROM_DIR / "recording_rules.yml"), str(PROM_DIR / "alert_rules.yml")]
        result = subprocess.run([promtool(), "check", "rules", *files], capture_output=True, text=True, check=False)
        assert 0 == result.returncode, result.stdout + result.stderr

    def test_check_config(self) -> None:
        """``promtool check config`` accepts prometheus.yml and the rule files it names."""
        result = subprocess.run(
            [promtool(), "check", "config", str(PROM_DIR / "prometheus.yml")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert 0 == result.returncode, result.stdout + result.stderr
        assert "SUCCESS: 2 rule files found" in result.stdout

    def test_unit_tests_pass(self) -> None:
        """``promtool test rules`` passes every file in deploy/prometheus/tests."""
        tests = sorted(str(p) for p in (PROM_DIR / "tests").glob("*.yml"))
        assert len(tests) >= 4
        result = subprocess.run([promtool(), "test", "rules", *tests], capture_output=True, text=True, check=False)
        assert 0 == result.returncode, result.stdout + result.stderr
        assert result.stdout.count("SUCCESS") == len(tests)


class TestRuleHygiene:
    """Every alert is documented, tested and routed."""

    def test_issue_alerts_present(self) -> None:
        """Every alert the issue asks for exists."""
        assert ISSUE_ALERTS <= {str(r["alert"]) for r in alerts()}

    def test_every_alert_has_severity_and_runbook_section(self) -> None:
        """Each alert has a severity, a summary and a runbook_url whose anchor is a RUNBOOK.md heading."""
        anchors = {h.strip().lower() for h in re.findall(r"^## (\w+)$", RUNBOOK.read_text(), re.MULTILINE)}
        for rule in alerts():
            labels, notes = rule["labels"], rule["annotations"]
            assert isinstance(labels, dict)
            assert isinstance(notes, dict)
            assert labels["severity"] in {"critical", "warning"}, rule["alert"]
            assert notes["summary"], rule["alert"]
            path, anchor = str(notes["runbook_url"]).split("#")
            assert "deploy/RUNBOOK.md" == path
            assert anchor in anchors, f"{rule['alert']}: no '## ' heading for #{anchor} in RUNBOOK.md"

    def test_every_alert_has_a_promtool_test(self) -> None:
        """Each alert name appears as an alertname in some promtool test with an expected firing alert."""
        tested: set[str] = set()
        for path in (PROM_DIR / "tests").glob("*.yml"):
            for case in yaml.safe_load(path.read_text())["tests"]:
                tested.update(t["alertname"] for t in case.get("alert_rule_test", []) if t.get("exp_alerts"))
        assert {str(r["alert"]) for r in alerts()} == tested
