"""Tests of vigil.slo and `vigil slo`: generation, summaries, comparison, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from review_queue.metrics import ReviewMetrics
from scorers.eval.stats import wilson
from scorers.metrics import RunMetrics
from scorers.model import Run, RunStatus, ScoredRun
from scorers.slo import parse_slo
from vigil import slo
from vigil.cli import main


def metrics_text() -> str:
    """support: 4 runs, 3 completed, one of those revoked, 1 blocked; 3 verdicts, 1 passed — of the random
    sample's first verdicts, 1 of 2, standing for 20 and 60 runs (the review pass rate's SLI weighs only those)."""
    registry = CollectorRegistry()
    runs = RunMetrics(registry)
    for n in range(3):
        runs.observe_run(
            ScoredRun(Run(f"{n:032x}", agent="support", final_output="ok", llm_calls=2), {"step_efficiency": 0.5}, None)
        )
    runs.observe_run(
        ScoredRun(Run("f" * 32, agent="support", status=RunStatus.BLOCKED, safety_blocked=True, llm_calls=6), {}, None)
    )
    review = ReviewMetrics(registry, revoked=runs.revoked)
    review.verdict("support", "pass")
    review.verdict("support", "fail")
    review.verdict("support", "fail")
    review.sample_verdict("support", "pass", 20.0)
    review.sample_verdict("support", "fail", 60.0)
    review.completion_revoked("support")
    return generate_latest(registry).decode()


class TestSummary:
    """`vigil slo summary` documents."""

    def test_from_metrics(self) -> None:
        """Cumulative values per target from /metrics text; targets without data are None."""
        doc = slo.summary_from_metrics(parse_slo(None), metrics_text(), "test")
        assert slo.SUMMARY_FORMAT == doc["format"]
        t = doc["targets"]
        assert 0.5 == t["task_completion"]["fleet"]  # (3 - 1) / 4
        assert {"support": 0.5} == t["task_completion"]["agents"]
        assert 0.5 == t["step_efficiency"]["fleet"]
        assert 0.25 == t["review_pass_rate"]["fleet"]  # weighed: 20 runs passed of the 80 two verdicts stand for
        assert [0.5, 2.0] == t["review_pass_rate"]["counts"]["fleet"]  # the test's size: the 2 verdicts
        assert 0.25 == t["safety_block_rate"]["fleet"]
        assert 3.0 == t["steps_per_task"]["fleet"]
        assert {"fleet": [2.0, 4.0], "agents": {"support": [2.0, 4.0]}} == t["task_completion"]["counts"]
        assert [1.5, 3.0] == t["step_efficiency"]["counts"]["fleet"]
        assert ("at_least", 0.85, 0.05) == (
            t["task_completion"]["direction"], t["task_completion"]["objective"], t["task_completion"]["tolerance"]
        )  # fmt: skip


def summary(**values: float) -> dict[str, object]:
    targets = {}
    for name, t in parse_slo(None).targets.items():
        if name in values:
            targets[name] = slo._entry(t, values[name], {"support": values[name]}, 100)
    return {"format": slo.SUMMARY_FORMAT, "source": "x", "window": "7d", "targets": targets}


def counted(**counts: tuple[int, int]) -> dict[str, object]:
    """A summary whose values come with their (numerator, denominator) counts."""
    targets = {}
    for name, t in parse_slo(None).targets.items():
        if name in counts:
            num, den = counts[name]
            targets[name] = slo._entry(t, num / den, {"support": num / den}, den, {"support": (num, den)})
    return {"format": slo.SUMMARY_FORMAT, "source": "x", "window": "7d", "targets": targets}


class TestCompare:
    """`vigil slo compare`: relative tolerance per target and direction."""

    def test_two_proportion_test_from_counts(self) -> None:
        """The fleet and the agent are each tested (z-test on the counts), Holm-adjusted together."""
        from statsmodels.stats.proportion import proportions_ztest

        findings = slo.compare(counted(task_completion=(750, 1000)), counted(task_completion=(800, 1000)))
        assert 2 == len(findings)
        for f in findings:
            assert f.test is not None
            _, p = proportions_ztest([750, 800], [1000, 1000])
            assert pytest.approx(float(p)) == f.test.p_value
            assert pytest.approx(min(1.0, 2 * float(p))) == f.p_adjusted
            assert not f.ok

    def test_untested_without_counts_or_for_a_mean_of_counts(self) -> None:
        """Older summaries (no counts) and steps per task (no variance) keep the tolerance alone."""
        assert all(f.test is None for f in slo.compare(summary(task_completion=0.7), summary(task_completion=0.8)))
        assert not any(f.ok for f in slo.compare(summary(task_completion=0.7), summary(task_completion=0.8)))
        steps = slo.compare(counted(steps_per_task=(500, 100)), counted(steps_per_task=(400, 100)))
        assert all(f.test is None and not f.ok for f in steps)

    def test_completion_drop_beyond_five_percent_fails(self) -> None:
        """0.80 -> 0.77 is within 5 %, 0.80 -> 0.75 is not (fleet and agent)."""
        assert all(f.ok for f in slo.compare(summary(task_completion=0.77), summary(task_completion=0.80)))
        failed = [f for f in slo.compare(summary(task_completion=0.75), summary(task_completion=0.80)) if not f.ok]
        assert ["", "support"] == [f.agent for f in failed]
        assert pytest.approx(0.76) == failed[0].limit

    def test_directions(self) -> None:
        """Steps may rise 20 %; the safety band may double but not fall under its floor; overrides apply."""
        assert all(f.ok for f in slo.compare(summary(steps_per_task=4.7), summary(steps_per_task=4.0)))
        assert not any(f.ok for f in slo.compare(summary(steps_per_task=5.0), summary(steps_per_task=4.0)))
        assert all(f.ok for f in slo.compare(summary(safety_block_rate=0.004), summary(safety_block_rate=0.003)))
        assert not any(f.ok for f in slo.compare(summary(safety_block_rate=0.0001), summary(safety_block_rate=0.003)))
        tight = slo.compare(summary(task_completion=0.79), summary(task_completion=0.80), {"task_completion": 0.001})
        assert not any(f.ok for f in tight)

    def test_not_a_summary(self) -> None:
        """Anything else is refused with one line."""
        with pytest.raises(ValueError, match="not a vigil-slo-summary/1 document"):
            slo.compare({"targets": {}}, summary())


class TestCli:
    """`vigil slo generate | summary | compare`."""

    def test_compare_exit_status(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """0 within tolerance, 1 beyond, 2 on an unreadable file."""
        base, good, bad = (tmp_path / n for n in ("base.json", "good.json", "bad.json"))
        base.write_text(json.dumps(summary(task_completion=0.8)))
        good.write_text(json.dumps(summary(task_completion=0.79)))
        bad.write_text(json.dumps(summary(task_completion=0.7)))
        assert 0 == main(["slo", "compare", str(good), str(base)])
        assert 1 == main(["slo", "compare", str(bad), str(base)])
        assert "FAIL  task_completion" in capsys.readouterr().out
        assert 2 == main(["slo", "compare", str(tmp_path / "missing.json"), str(base)])

    def test_compare_fails_on_a_significant_drop_not_on_noise(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With the counts behind the ratios, 80 % -> 70 % over 40 runs each is noise (exit 0), the
        same drop over 4,000 runs each fails, and each side's Wilson interval is printed."""
        base, few, many = (tmp_path / n for n in ("base.json", "few.json", "many.json"))
        base.write_text(json.dumps(counted(task_completion=(32, 40))))
        few.write_text(json.dumps(counted(task_completion=(28, 40))))
        assert 0 == main(["slo", "compare", str(few), str(base)])
        out = capsys.readouterr().out
        assert "noise task_completion" in out
        assert "beyond it but not significant at alpha 0.05 (noise)" in out
        interval = wilson(32, 40)
        assert f"baseline 0.8 [{interval.low:.4g}, {interval.high:.4g}]" in out
        base.write_text(json.dumps(counted(task_completion=(3200, 4000))))
        many.write_text(json.dumps(counted(task_completion=(2800, 4000))))
        assert 1 == main(["slo", "compare", str(many), str(base)])
        assert "FAIL  task_completion" in capsys.readouterr().out
        assert 2 == main(["slo", "compare", str(many), str(base), "--alpha", "2"])

    def test_generate_says_the_retention_its_rules_need(self, capsys: pytest.CaptureFixture[str]) -> None:
        """On stderr (stdout stays the rule file) and in the file's header: the window plus a day."""
        assert 0 == main(["slo", "generate", "--defaults"])
        captured = capsys.readouterr()
        assert "--storage.tsdb.retention.time=29d" in captured.err
        assert "--storage.tsdb.retention.time=29d" in captured.out.split("groups:")[0]
        assert yaml.safe_load(captured.out)["groups"]
        assert 9 == slo.retention_days(parse_slo({"window": "7d"}))  # the trend reads a day a week ago

    def test_budget_exhausted_says_over_how_much_history(self) -> None:
        """The alert's value is the history the window was judged over; its annotations show it."""
        doc = slo.rules(parse_slo(None))
        rules = [r for g in doc["groups"] for r in g["rules"]]
        history = next(r for r in rules if r.get("record") == slo.HISTORY and r["labels"]["slo"] == "task_completion")
        window = next(g for g in doc["groups"] if history in g["rules"])
        assert "1m" == window["interval"]  # each sample counts a minute
        assert history["expr"].startswith("count_over_time(")
        assert history["expr"].endswith("[28d]) * 60")
        alert = next(
            r for r in rules if r.get("alert") == "VigilSLOBudgetExhausted" and r["labels"]["slo"] == "task_completion"
        )
        assert alert["expr"].startswith(slo.HISTORY)
        assert "over the last {{ $value | humanizeDuration }} (28d window)" in alert["annotations"]["summary"]
        assert ("7h 0m 0s", "1d 0h 0m 0s", "28d 0h 0m 0s") == tuple(
            slo.humanize_duration(s) for s in (25200, 86400, 28 * 86400)
        )

    def test_summary_from_a_metrics_file(self, tmp_path: Path) -> None:
        """--metrics-file writes the JSON document."""
        (tmp_path / "m.txt").write_text(metrics_text())
        out = tmp_path / "s.json"
        config = tmp_path / "vigil.yaml"
        config.write_text("{}\n")
        assert 0 == main(
            ["--config", str(config), "slo", "summary", "--metrics-file", str(tmp_path / "m.txt"), "-o", str(out)]
        )
        assert 0.5 == json.loads(out.read_text())["targets"]["task_completion"]["fleet"]

    def test_generate_for_the_configured_targets(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Per-agent bounds get their own alert rules; the fleet's exclude that agent."""
        config = tmp_path / "vigil.yaml"
        config.write_text(yaml.safe_dump({"slo": {"agents": {"billing": {"task_completion": {"objective": 0.95}}}}}))
        assert 0 == main(["--config", str(config), "slo", "generate"])
        doc = yaml.safe_load(capsys.readouterr().out)
        fast = [
            r
            for g in doc["groups"]
            for r in g["rules"]
            if r.get("alert") == "VigilSLOFastBurn" and r["labels"]["slo"] == "task_completion"
        ]
        assert [None, "billing"] == [r["labels"].get("agent") for r in fast]
        assert 'agent!~"billing"' in fast[0]["expr"]
        assert 'agent="billing"' in fast[1]["expr"]

    def test_bad_targets_refuse_with_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad slo section: exit 2 and one line naming the key."""
        config = tmp_path / "vigil.yaml"
        config.write_text(yaml.safe_dump({"slo": {"targets": {"task_completion": {"objective": 2}}}}))
        assert 2 == main(["--config", str(config), "slo", "generate"])
        err = capsys.readouterr().err.strip()
        assert "slo.targets.task_completion.objective: 2 must be a number in (0, 1)" in err
        assert 1 == len(err.splitlines())


class TestStartUp:
    """Every role loads the targets with its settings: a bad one refuses to start."""

    def test_settings_refuse_bad_targets_in_one_line(self, tmp_path: Path) -> None:
        """Settings.load raises SettingsError naming slo and the target's key; good ones are kept."""
        from collector.errors import SettingsError
        from vigil.settings import Settings

        config = tmp_path / "vigil.yaml"
        config.write_text(
            yaml.safe_dump({"slo": {"agents": {"billing": {"safety_block_rate": {"max": 0.2, "min": 0.3}}}}})
        )
        with pytest.raises(SettingsError) as info:
            Settings.load(environ={}, config_file=config)
        assert "slo.agents.billing.safety_block_rate.min: 0.3 must be a number in [0, 0.2]" in str(info.value)
        assert "\n" not in str(info.value)
        config.write_text(yaml.safe_dump({"slo": {"targets": {"task_completion": {"objective": 0.9}}}}))
        assert 0.9 == Settings.load(environ={}, config_file=config).slo_config().targets["task_completion"].objective

    def test_readme_example_generates_valid_rules(self, tmp_path: Path) -> None:
        """The manual's `slo:` example (docs/quality.md): per-agent scopes, a histogram target, a disabled band —
        promtool accepts it."""
        import re
        import shutil
        import subprocess

        promtool = shutil.which("promtool")
        if promtool is None:
            pytest.skip("LOUD SKIP: `promtool` is missing; apt-get install prometheus (scripts/test.sh does)")
        readme = (Path(__file__).resolve().parents[2] / "docs" / "quality.md").read_text()
        example = re.search(r"```yaml\n(slo:\n.*?)```", readme, re.S)
        assert example is not None
        config = tmp_path / "vigil.yaml"
        config.write_text(example.group(1))
        assert 0 == main(["--config", str(config), "slo", "generate", "-o", str(tmp_path), "--tests"])
        files = [str(tmp_path / "slo_rules.yml")]
        result = subprocess.run([promtool, "check", "rules", *files], capture_output=True, text=True, check=False)
        assert 0 == result.returncode, result.stdout + result.stderr
        tests = yaml.safe_load((tmp_path / "tests" / "slo_test.yml").read_text())["tests"]
        billing = [c for c in tests if any('agent="billing"' in s["series"] for s in c["input_series"])]
        assert billing  # the agent's own bounds get their own synthetic cases


def session_metrics_text(agents: dict[str, tuple[int, int]]) -> str:
    """Per agent (closed, abandoned) sessions counted by the real SessionMetrics, as /metrics text."""
    from review_queue.session_close import SessionMetrics
    from review_queue.sessions import ClosedSession

    registry = CollectorRegistry()
    metrics = SessionMetrics(registry)
    for agent, (closed, abandoned) in agents.items():
        for n in range(closed):
            signals = (
                [{"signal": "abandoned"}] if n < abandoned else [{"signal": "human_request"}] if n == closed - 1 else []
            )
            metrics.session_closed(ClosedSession({"agent": agent, "turns": 3, "signals": signals}, f"{n:032x}"))
    return generate_latest(registry).decode()


class TestSessionCompletion:
    """The session_completion target: completed (not abandoned) sessions / closed sessions."""

    def test_a_default_at_least_90_percent_over_closed_sessions(self) -> None:
        """On by default: at least 0.9, 10 closed sessions before an alert, read from the session counters."""
        t = parse_slo(None).targets["session_completion"]
        assert ("at_least", 0.9, 10) == (t.direction.value, t.objective, t.min_events)
        assert "vigil_sessions_completed_total" in t.sli.numerator
        assert "vigil_sessions_closed_total" in t.sli.denominator

    def test_summary_counts_completed_over_closed(self) -> None:
        """Abandoned sessions are not completed; a request for a human alone does not make one incomplete."""
        text = session_metrics_text({"support": (20, 4), "billing": (10, 0)})
        entry = slo.summary_from_metrics(parse_slo(None), text, "review")["targets"]["session_completion"]
        assert {"billing": 1.0, "support": 0.8} == entry["agents"]
        assert pytest.approx(26 / 30) == entry["fleet"]
        assert {"fleet": [26.0, 30.0], "agents": {"billing": [10.0, 10.0], "support": [16.0, 20.0]}} == entry["counts"]

    def test_no_session_metrics_no_value(self) -> None:
        """Runs without session ids export no session counters: the target has no value, not 0."""
        entry = slo.summary_from_metrics(parse_slo(None), metrics_text(), "scorer")["targets"]["session_completion"]
        assert (None, {}, 0) == (entry["fleet"], entry["agents"], entry["events"])

    def test_compare_fails_a_significant_drop(self) -> None:
        """`vigil slo compare` tests the counts: 95 % -> 80 % of 400 sessions fails, of 20 sessions is noise."""
        config = parse_slo(None)
        before = slo.summary_from_metrics(config, session_metrics_text({"support": (400, 20)}), "base")
        after = slo.summary_from_metrics(config, session_metrics_text({"support": (400, 80)}), "now")
        findings = [f for f in slo.compare(after, before) if f.target == "session_completion"]
        assert [("", False), ("support", False)] == [(f.agent, f.ok) for f in findings]
        assert all(f.test is not None for f in findings)
        small_before = slo.summary_from_metrics(config, session_metrics_text({"support": (20, 1)}), "base")
        small_after = slo.summary_from_metrics(config, session_metrics_text({"support": (20, 4)}), "now")
        noise = [f for f in slo.compare(small_after, small_before) if f.target == "session_completion"]
        assert [(True, True), (True, True)] == [(f.ok, f.beyond) for f in noise]

    def test_vigil_yaml_sets_its_objective(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Fleet and per-agent objectives from vigil.yaml reach Settings and the generated alert rules."""
        from vigil.settings import Settings

        config = tmp_path / "vigil.yaml"
        slo_section = {
            "targets": {"session_completion": {"objective": 0.8}},
            "agents": {"billing": {"session_completion": {"objective": 0.95, "min_events": 5}}},
        }
        config.write_text(yaml.safe_dump({"slo": slo_section}))
        loaded = Settings.load(environ={}, config_file=config).slo_config()
        assert 0.8 == loaded.targets["session_completion"].objective
        assert (0.95, 5) == (
            loaded.agents["billing"]["session_completion"].objective,
            loaded.agents["billing"]["session_completion"].min_events,
        )
        assert 0 == main(["--config", str(config), "slo", "generate"])
        doc = yaml.safe_load(capsys.readouterr().out)
        objectives = {
            r["labels"].get("agent"): r["expr"].rsplit("+ ", 1)[1]
            for g in doc["groups"]
            for r in g["rules"]
            if r.get("record") == "environment_agent:vigil_slo_objective:value"
            and r["labels"]["slo"] == "session_completion"
        }
        assert {None: "0.8", "billing": "0.95"} == objectives

    def test_bad_objective_fails_in_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """`objective: 1.5` for one agent: exit 2 and one line naming the key."""
        config = tmp_path / "vigil.yaml"
        config.write_text(yaml.safe_dump({"slo": {"agents": {"billing": {"session_completion": {"objective": 1.5}}}}}))
        assert 2 == main(["--config", str(config), "slo", "generate"])
        err = capsys.readouterr().err.strip()
        assert "slo.agents.billing.session_completion.objective: 1.5 must be a number in (0, 1)" in err
        assert 1 == len(err.splitlines())

    def test_promtool_burns_on_abandoned_sessions_not_on_completed(self, tmp_path: Path) -> None:
        """Generated promtool tests of session_completion alone (fleet and an agent's own bound) pass."""
        import shutil
        import subprocess

        promtool = shutil.which("promtool")
        if promtool is None:
            pytest.skip("LOUD SKIP: `promtool` is missing; apt-get install prometheus (scripts/test.sh does)")
        others = {n: {"enabled": False} for n in parse_slo(None).targets if n != "session_completion"}
        config = tmp_path / "vigil.yaml"
        agents = {"billing": {"session_completion": {"objective": 0.97}}}
        config.write_text(yaml.safe_dump({"slo": {"targets": others, "agents": agents}}))
        assert 0 == main(["--config", str(config), "slo", "generate", "-o", str(tmp_path), "--tests"])
        test_file = tmp_path / "tests" / "slo_test.yml"
        cases = yaml.safe_load(test_file.read_text())["tests"]
        fired = {
            (check["alertname"], alert["exp_labels"]["agent"])
            for case in cases
            for check in case["alert_rule_test"]
            for alert in check["exp_alerts"]
        }
        assert ("VigilSLOFastBurn", "outage") in fired
        assert ("VigilSLOSlowBurn", "burning") in fired
        assert ("VigilSLOFastBurn", "billing") in fired
        assert not any(agent == "healthy" for _, agent in fired)
        assert all("vigil_sessions_" in s["series"] for case in cases for s in case["input_series"])
        result = subprocess.run(
            [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
        )
        assert 0 == result.returncode, result.stdout + result.stderr
