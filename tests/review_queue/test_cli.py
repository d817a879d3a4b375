"""Tests for the vigil CLI: configuration errors refuse to start with a message naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.cli import EXIT_CONFIG, main


class TestCli:
    """``vigil`` sub-commands and their failure modes."""

    def test_bad_setting_exits_2_naming_key(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad value in the config file refuses to start and names the key."""
        assert EXIT_CONFIG == _vigil(tmp_path, "sample_rate: 7\n", "run")
        assert "sample_rate" in capsys.readouterr().err

    def test_bad_rule_exits_2_naming_rule(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A bad rule refuses to start and names the rule."""
        assert EXIT_CONFIG == _vigil(tmp_path, "rules:\n  my_rule: {expr: 'nope(', priority: high}\n", "rules", "check")
        assert "my_rule" in capsys.readouterr().err

    def test_unknown_scorer_exits_2(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown scorer name refuses to start and lists the known ones."""
        assert EXIT_CONFIG == _vigil(tmp_path, "scorers: [latency, nope]\n", "rules", "check")
        err = capsys.readouterr().err
        assert "nope" in err
        assert "step_efficiency" in err

    def test_rules_check_lists_rules(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """``vigil rules check`` prints every rule in force with its priority."""
        assert 0 == _vigil(tmp_path, "rules:\n  slow: {expr: 'duration_s > 30.0', priority: low}\n", "rules", "check")
        out = capsys.readouterr().out
        assert "slow" in out
        assert "hit_max_iterations       high" in out

    def test_rules_check_includes_judge_rules(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A judge's flag_below shows up as a rule, and rules may read judge.<name>."""
        config = (
            "judges:\n  safety: {rubric: safety, model: m, flag_below: 0.3, priority: high}\n"
            "rules:\n  both: {expr: 'has(judge.safety) && judge.safety < 0.6 && errored', priority: normal}\n"
        )
        assert 0 == _vigil(tmp_path, config, "rules", "check")
        out = capsys.readouterr().out
        assert "judge_safety             high    has(judge.safety) && judge.safety < 0.3" in out
        assert "both" in out

    def test_bad_judge_exits_2_naming_judge(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """An unknown rubric refuses to start and names the judge and the key."""
        assert EXIT_CONFIG == _vigil(tmp_path, "judges:\n  mine: {rubric: vibes, model: m}\n", "rules", "check")
        err = capsys.readouterr().err
        assert "'mine'" in err
        assert "rubric" in err

    def test_rules_check_lists_session_judges(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A session judge shows up with the reason it adds; a bad one refuses to start naming it."""
        config = "session_judges:\n  memory: {rubric: knowledge_retention, model: m, select: 'turns >= 3'}\n"
        assert 0 == _vigil(tmp_path, config, "rules", "check")
        out = capsys.readouterr().out
        assert "judge_memory             normal  session judge knowledge_retention@1: score < 0.5 (turns >= 3)" in out
        bad = "session_judges:\n  memory: {rubric: groundedness, model: m}\n"
        assert EXIT_CONFIG == _vigil(tmp_path, bad, "rules", "check")
        err = capsys.readouterr().err
        assert "'memory'" in err
        assert "knowledge_retention" in err


def _vigil(tmp_path: Path, config: str, *args: str) -> int:
    """Run ``vigil --config <tmp_path>/vigil.yaml ARGS`` with ``config`` as that file; its exit status."""
    path = tmp_path / "vigil.yaml"
    path.write_text(config)
    return main(["--config", str(path), *args])
