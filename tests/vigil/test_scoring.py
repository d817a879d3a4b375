"""The scoring configuration built from vigil.yaml (vigil.scoring): the ``sessions`` keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.errors import SettingsError
from scorers.assemble import ClosedTrace
from tests.support.spans import node, trace
from vigil.scoring import Scoring
from vigil.settings import Settings

AGENT = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"}


def _settings(tmp_path: Path, yaml: str) -> Settings:
    config = tmp_path / "vigil.yaml"
    config.write_text(f"database_url: sqlite:///{tmp_path / 'vigil.db'}\n{yaml}")
    return Settings.load(environ={}, config_file=config)


class TestSessionKeys:
    def test_own_keys_from_vigil_yaml_reach_the_pipeline(self, tmp_path: Path) -> None:
        """A run naming its conversation and customer only with the app's own keys gets both ids."""
        settings = _settings(
            tmp_path, "sessions:\n  session_keys: [app.conversation_id]\n  user_keys: [app.customer_id]\n"
        )
        spans = trace(
            node("invoke_agent bot", {**AGENT, "app.conversation_id": "conv-42"}, node("step", {"app.customer_id": 7}))
        )
        run = (
            Scoring.from_settings(settings)
            .pipeline(None, None)
            .process(ClosedTrace(spans[0].trace_id, tuple(spans), True))
            .run
        )
        assert ("conv-42", "7") == (run.session_id, run.user_id)

    def test_without_the_section_only_builtins(self, tmp_path: Path) -> None:
        spans = trace(node("invoke_agent bot", {**AGENT, "app.conversation_id": "conv-42", "session.id": "s-1"}))
        pipeline = Scoring.from_settings(_settings(tmp_path, "")).pipeline(None, None)
        assert "s-1" == pipeline.process(ClosedTrace(spans[0].trace_id, tuple(spans), True)).run.session_id

    def test_bad_section_refuses_to_start_in_one_line(self, tmp_path: Path) -> None:
        with pytest.raises(SettingsError) as err:
            _settings(tmp_path, "sessions:\n  session_keys: app.conversation_id\n")
        message = str(err.value)
        assert "\n" not in message
        assert message.startswith("invalid setting 'sessions'")
        assert "sessions.session_keys: expected a list of attribute keys (non-empty strings)" in message
