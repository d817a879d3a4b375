"""The scoring configuration built from vigil.yaml (vigil.scoring): the ``sessions`` keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from collector.errors import SettingsError
from review_queue.model import VerdictIn, VerdictValue
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import Workbench
from scorers.assemble import ClosedTrace
from scorers.model import Run, RunStatus
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


class TestSampleAllocation:
    """``review_sample_allocation: uncertainty`` reaches the pipeline through the review budget."""

    def test_uniform_without_a_budget_is_one_fixed_rate(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, "")
        store = SqlStore(settings.database_url)
        try:
            assert Scoring.from_settings(settings).budget(store) is None
        finally:
            store.close()

    def test_uncertainty_samples_errored_runs_more_once_verdicts_say_they_vary_more(self, tmp_path: Path) -> None:
        """Completed runs that reviewers always pass and errored runs they pass half the time: after a
        refresh the pipeline records a higher rate on an errored run than on a completed one, and the
        expected sample stays the configured share."""
        settings = _settings(tmp_path, "sample_rate: 0.2\nreview_sample_allocation: uncertainty\n")
        upgrade_database(settings.database_url)
        store = SqlStore(settings.database_url)
        try:
            scoring = Scoring.from_settings(settings)
            budget = scoring.budget(store)
            assert budget is not None
            pipeline = scoring.pipeline(None, None, budget)
            batch = []
            for i in range(400):
                errored = i % 4 == 0
                fields: dict[str, Any] = (
                    {"status": RunStatus.ERROR, "errored": True} if errored else {"final_output": "done"}
                )
                run = Run(trace_id=f"{i:032x}", agent="bot", complete=True, **fields)
                batch.append(pipeline.decide_run(run))
            store.write(batch)
            bench = Workbench(store.engine, lease_s=60.0)
            while (claim := bench.claim_next("alice")) is not None:
                good = int(claim.trace_id, 16) % 4 != 0 or int(claim.trace_id, 16) % 8 == 0
                bench.submit_verdict(
                    claim.item_id, "alice", VerdictIn(VerdictValue.PASS if good else VerdictValue.FAIL)
                )
            budget.refresh()
            completed = pipeline.decide_run(Run(trace_id="f" * 32, agent="bot", complete=True, final_output="x"))
            errored = pipeline.decide_run(
                Run(trace_id="e" * 32, agent="bot", complete=True, status=RunStatus.ERROR, errored=True)
            )
            assert completed.design is not None
            assert errored.design is not None
            assert errored.design.rate > 2 * completed.design.rate
            assert 0.75 * completed.design.rate + 0.25 * errored.design.rate == pytest.approx(0.2)
        finally:
            store.close()
