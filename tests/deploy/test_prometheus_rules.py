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


RULE_FILES = ("recording_rules.yml", "alert_rules.yml", "slo_rules.yml")


def slo_labels(rule: dict[str, object]) -> dict[str, str]:
    labels = rule["labels"]
    assert isinstance(labels, dict)
    return labels


def alerts() -> list[dict[str, object]]:
    found = []
    for name in ("alert_rules.yml", "slo_rules.yml"):
        doc = yaml.safe_load((PROM_DIR / name).read_text())
        found += [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    return found


class TestPromtool:
    """The real promtool accepts the rules and their unit tests pass."""

    def test_check_rules(self) -> None:
        """``promtool check rules`` succeeds on every rule file (lint included: no duplicate rules)."""
        files = [str(PROM_DIR / f) for f in RULE_FILES]
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
        assert "SUCCESS: 3 rule files found" in result.stdout

    def test_unit_tests_pass(self) -> None:
        """``promtool test rules`` passes every file in deploy/prometheus/tests (one promtool per file,
        all at once: the SLO files evaluate days of series and take most of a minute each)."""
        tests = sorted(str(p) for p in (PROM_DIR / "tests").glob("*.yml"))
        assert len(tests) >= 4
        pipe, merged = subprocess.PIPE, subprocess.STDOUT
        runs = [
            (test, subprocess.Popen([promtool(), "test", "rules", test], stdout=pipe, stderr=merged, text=True))
            for test in tests
        ]
        for test, run in runs:
            output, _ = run.communicate()
            assert 0 == run.returncode, f"{test}: {output}"
            assert 1 == output.count("SUCCESS"), f"{test}: {output}"


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


class TestSloRules:
    """deploy/prometheus/slo_rules.yml and its promtool tests are `vigil slo generate` of the defaults."""

    def test_committed_rules_and_tests_are_generated_from_the_defaults(self, tmp_path: Path) -> None:
        """Regenerate with `vigil slo generate --defaults -o deploy/prometheus --tests`."""
        from vigil.cli import main

        assert 0 == main(["slo", "generate", "--defaults", "-o", str(tmp_path), "--tests"])
        generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.yml"))
        assert [Path("slo_rules.yml"), Path("tests/slo_test.yml"), Path("tests/slo_trend_test.yml")] == generated
        for path in generated:
            assert (tmp_path / path).read_text() == (PROM_DIR / path).read_text(), f"{path} is stale"

    def test_every_slo_alert_fires_and_stays_quiet_in_promtool_tests(self) -> None:
        """Per (alert, slo): a test where it fires, and a healthy agent or an earlier time where it does not."""
        expected = {(str(r["alert"]), slo_labels(r)["slo"]) for r in alerts() if str(r["alert"]).startswith("VigilSLO")}
        assert len(expected) == 17  # 3 budget alerts x 5 budget targets, the band's floor, the trend
        fired: set[tuple[str, str]] = set()
        quiet: set[tuple[str, str]] = set()
        for name in ("slo_test.yml", "slo_trend_test.yml"):
            for case in yaml.safe_load((PROM_DIR / "tests" / name).read_text())["tests"]:
                agents = {s["series"].split('agent="')[1].split('"')[0] for s in case["input_series"]}
                for check in case["alert_rule_test"]:
                    firing = check["exp_alerts"]
                    for alert in firing:
                        fired.add((check["alertname"], alert["exp_labels"]["slo"]))
                    slos = {a["exp_labels"]["slo"] for a in firing} or {
                        s for (a, s) in expected if a == check["alertname"]
                    }
                    if len({a["exp_labels"]["agent"] for a in firing}) < len(agents):
                        quiet.update((check["alertname"], s) for s in slos if (check["alertname"], s) in expected)
        assert expected == fired
        assert expected == quiet

    def test_session_completion_quiet_without_sessions_or_with_too_few(self, tmp_path: Path) -> None:
        """Runs without session ids export no session counters: no session SLI, no alert; 5 closed
        sessions an hour, all abandoned, stay under the 10 a fast burn needs (the slow burn, over 6 h, fires)."""
        from vigil.slo import _expected

        base = 'environment="test", job="vigil"'
        series = [
            (f'vigil_runs_total{{{base}, agent="runs_only", outcome="ok", complete="true"}}', "0+100x480"),
            (f'vigil_task_completions_total{{{base}, agent="runs_only"}}', "0+100x480"),
            (f'vigil_sessions_closed_total{{{base}, agent="few"}}', "0+0.0833333333x480"),
            (f'vigil_sessions_completed_total{{{base}, agent="few"}}', "0+0x480"),
        ]
        sli = 'environment_agent:vigil_slo_sli:ratio_rate1h{slo="session_completion"}'
        rules = yaml.safe_load((PROM_DIR / "slo_rules.yml").read_text())
        slow = _expected(rules, "VigilSLOSlowBurn", "session_completion", ["few"])
        assert 1 == len(slow)
        doc = {
            "rule_files": [str(PROM_DIR / "slo_rules.yml")],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [{"series": s, "values": v} for s, v in series],
                    "promql_expr_test": [
                        {
                            "expr": sli.replace("}", ', agent="runs_only"}'),
                            "eval_time": "2h",
                            "exp_samples": [],
                        },
                        {
                            "expr": sli.replace("}", ', agent="few"}'),
                            "eval_time": "2h",
                            "exp_samples": [
                                {"labels": sli.replace("}", ', environment="test", agent="few"}'), "value": 0}
                            ],
                        },
                    ],
                    "alert_rule_test": [
                        {"alertname": "VigilSLOFastBurn", "eval_time": "2h", "exp_alerts": []},
                        {"alertname": "VigilSLOBudgetExhausted", "eval_time": "2h", "exp_alerts": []},
                        {"alertname": "VigilSLOSlowBurn", "eval_time": "7h", "exp_alerts": slow},
                    ],
                }
            ],
        }  # fmt: skip
        test_file = tmp_path / "session_test.yml"
        test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        result = subprocess.run(
            [promtool(), "test", "rules", str(test_file)], capture_output=True, text=True, check=False
        )
        assert 0 == result.returncode, result.stdout + result.stderr

    def test_safety_band_alerts_on_both_sides(self) -> None:
        """The safety-block band: burn-rate alerts above its ceiling, VigilSLOBelowFloor under its floor."""
        band = {str(r["alert"]) for r in alerts() if slo_labels(r).get("slo") == "safety_block_rate"}
        assert {"VigilSLOFastBurn", "VigilSLOSlowBurn", "VigilSLOBudgetExhausted", "VigilSLOBelowFloor"} == band

    def test_thresholds_follow_the_workbook_and_stay_reachable(self) -> None:
        """14.4x / 6x the budget for tight targets; capped below 100 % errors for loose ones, fast above slow."""
        from scorers.slo import DEFAULT_TARGETS
        from vigil.slo import thresholds

        fast, slow = thresholds(DEFAULT_TARGETS["safety_block_rate"])
        assert pytest.approx(0.072) == fast
        assert pytest.approx(0.03) == slow
        for name in ("task_completion", "step_efficiency", "review_pass_rate", "session_completion"):
            fast, slow = thresholds(DEFAULT_TARGETS[name])
            assert slow < fast < 1.0, name
