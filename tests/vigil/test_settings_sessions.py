"""The session settings of vigil.yaml: ``session_idle_s`` and ``session_signals`` (validated at load)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.demo.plan import SESSION_IDLE_S
from review_queue.sessions import DEFAULT_IDLE_S
from vigil.cli import demo_settings
from vigil.settings import Settings, SettingsError


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "vigil.yaml"
    path.write_text(text)
    return Settings.load({}, config_file=path)


def test_defaults(tmp_path: Path) -> None:
    s = _load(tmp_path, "{}\n")
    assert (DEFAULT_IDLE_S, 0.6, s.sample_rate) == (
        s.session_config().idle_s, s.session_config().reask_threshold, s.session_sample_rate(),
    )  # fmt: skip
    assert "session_abandoned" in [r.name for r in s.session_rules()]


def test_configured(tmp_path: Path) -> None:
    s = _load(
        tmp_path,
        "session_idle_s: 600\nsession_signals:\n  human_phrases: [get me a manager]\n  sample_rate: 0.1\n"
        "  rules:\n    long: {expr: 'turns > 20', priority: high}\n    session_random_sample: {enabled: false}\n",
    )
    config = s.session_config()
    assert (600.0, "get me a manager", 0.1) == (config.idle_s, config.human_phrases[-1], s.session_sample_rate())
    names = [r.name for r in s.session_rules()]
    assert "long" in names
    assert "session_random_sample" not in names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("session_signals: {reask_threshold: 3}\n", "reask_threshold must be a number in (0, 1], got 3"),
        ("session_signals: {sample_rate: 2}\n", "sample_rate must be a number in [0, 1], got 2"),
        ("session_signals: {human_phrases: [1]}\n", "human_phrases must be a list of non-empty strings"),
        ("session_signals: {rules: {bad: {expr: 'turns +'}}}\n", "invalid rule 'bad': invalid session rule"),
        ("session_signals: {rules: {num: {expr: 'turns'}}}\n", "invalid rule 'num': must evaluate to a boolean"),
        ("session_idle_s: 0\n", "session_idle_s"),
    ],
)
def test_bad_settings_refuse_to_load_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError) as caught:
        _load(tmp_path, text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_wiring_applies_them(tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    from review_queue.store import upgrade_database
    from vigil.scoring import open_store, session_closer

    url = f"sqlite:///{tmp_path / 'v.db'}"
    upgrade_database(url)
    s = _load(tmp_path, f"database_url: '{url}'\nsession_idle_s: 60\nsession_signals: {{reask_threshold: 0.9}}\n")
    store = open_store(s)
    try:
        registry = CollectorRegistry()
        closer = session_closer(s, store, registry)
        assert (60.0, 0.9) == (store.sessions.config.idle_s, store.sessions.config.reask_threshold)
        assert [] == closer.close_idle()
        assert registry.get_sample_value("vigil_sessions_closed_total", {"agent": "x"}) is None  # no child yet
        assert "vigil_sessions_closed" in {m.name for m in registry.collect()}
    finally:
        store.close()


def test_the_readme_example_is_valid(tmp_path: Path) -> None:
    """The manual's sessions example (docs/sessions.md) is valid configuration."""
    readme = (Path(__file__).parents[2] / "docs" / "sessions.md").read_text()
    start = readme.index("```yaml\nsession_idle_s:") + len("```yaml\n")
    s = _load(tmp_path, readme[start : readme.index("```", start)])
    assert "long_conversation" in [r.name for r in s.session_rules()]
    assert "get me a manager" in s.session_config().human_phrases


def test_demo_closes_sessions_after_a_minute_unless_set(tmp_path: Path) -> None:
    """``vigil run --demo`` closes sessions after the demo's idle time, unless the file or the environment
    set ``session_idle_s``."""
    assert SESSION_IDLE_S == demo_settings(_load(tmp_path, "{}\n")).session_config().idle_s
    assert 600 == demo_settings(_load(tmp_path, "session_idle_s: 600\n")).session_config().idle_s
    from_env = Settings.load({"VIGIL_SESSION_IDLE_S": "5"}, config_file=tmp_path / "vigil.yaml")
    assert 5 == demo_settings(from_env).session_config().idle_s


class TestSessionJudges:
    """``session_judges``: validated by the settings, wired into the closer by the app (off when unset)."""

    def test_readme_example(self, tmp_path: Path) -> None:
        """The manual's session judges example (docs/sessions.md) is valid configuration."""
        import re

        readme = (Path(__file__).parents[2] / "docs" / "sessions.md").read_text()
        block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("session_judges:"))
        specs = _load(tmp_path, block).session_judge_specs({"OPENAI_API_KEY": "sk-x"})
        assert [("contradiction", "contradiction@1"), ("completeness", "conversation_completeness@1"),
                ("memory", "knowledge_retention@1")] == [(s.name, s.rubric.label) for s in specs]  # fmt: skip
        assert (0.2, "turns >= 3", 0.5) == (
            specs[0].config.sample_rate, specs[1].config.select, specs[1].config.budget.usd_per_hour,
        )  # fmt: skip

    def test_off_by_default_and_wired_when_set(self, tmp_path: Path) -> None:
        """No session judge unless configured; configured, the closer offers sessions to them and they
        count into the run judges' metrics of the process (one registry)."""
        from prometheus_client import CollectorRegistry

        from review_queue.store import SqlStore, upgrade_database
        from scorers.judge import JudgeMetrics
        from vigil.scoring import session_closer

        url = f"sqlite:///{tmp_path / 'vigil.db'}"
        upgrade_database(url)
        store = SqlStore(url)
        try:
            assert session_closer(_load(tmp_path, "{}\n"), store, CollectorRegistry()).judges is None
            settings = _load(tmp_path, "session_judges:\n  memory: {rubric: knowledge_retention, model: m}\n")
            registry = CollectorRegistry()
            shared = JudgeMetrics(registry)  # the run judges' metrics of a vigil run process
            closer = session_closer(settings, store, registry, judge_metrics=shared, environ={})
            assert closer.judges is not None
            assert ("memory",) == closer.judges.names
            assert 0 == registry.get_sample_value("vigil_judge_requests_total", {"judge": "memory", "outcome": "ok"})
        finally:
            store.close()

    def test_a_run_judge_name_is_refused(self, tmp_path: Path) -> None:
        """A session judge may not take a run judge's name (they share the judge label)."""
        from scorers.errors import JudgeConfigError

        settings = _load(
            tmp_path,
            "judges:\n  memory: {rubric: safety, model: m}\n"
            "session_judges:\n  memory: {rubric: knowledge_retention, model: m}\n",
        )
        with pytest.raises(JudgeConfigError, match="a run judge has this name"):
            settings.session_judge_specs({})
