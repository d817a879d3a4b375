"""Tests of review_queue.targets: the quality targets and their 7-day values on the stats page."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.model import VerdictIn, VerdictValue
from review_queue.services import build_services
from review_queue.store import SqlStore
from review_queue.targets import target_rows
from review_queue.workbench import Workbench
from scorers.model import RunStatus
from scorers.slo import parse_slo
from tests.support.review_queue import Clock, scored_run


def _seed(store: SqlStore, clock: Clock) -> None:
    """support: 4 completed runs (one later failed by a reviewer), 1 blocked; billing: 2 errored."""
    for n in range(4):
        store.write([scored_run(f"{n:032x}", agent="support", final_output="ok", llm_calls=3, reasons=["r"])])
    store.write([scored_run(f"{9:032x}", agent="support", status=RunStatus.BLOCKED, safety_blocked=True, llm_calls=1)])
    for n in (10, 11):
        store.write([scored_run(f"{n:032x}", agent="billing", status=RunStatus.ERROR, errored=True)])
    bench = Workbench(store.engine, clock=clock, lease_s=60.0)
    claim = bench.claim_next("alice")
    assert claim is not None
    bench.submit_verdict(claim.item_id, "alice", VerdictIn(VerdictValue.FAIL, ("loop",)))
    claim = bench.claim_next("alice")
    assert claim is not None
    bench.submit_verdict(claim.item_id, "alice", VerdictIn(VerdictValue.PASS))


class TestTargetRows:
    """Bounds from the configuration, values from the store."""

    def test_values_and_bounds(self, store: SqlStore, clock: Clock) -> None:
        """Per-agent bounds override the fleet's; no run scored for efficiency; the human-verdict targets
        of runs stored without a sample design have no estimate ("–", never the share of verdicts)."""
        _seed(store, clock)
        config = parse_slo({"agents": {"billing": {"task_completion": {"objective": 0.99}}}})
        with store.engine.connect() as conn:
            rows = {(r.agent, r.target): r for r in target_rows(conn, config, clock.now + 1)}
        assert ("–", None) == (rows["support", "task_completion"].value, rows["support", "task_completion"].met)
        assert (">= 99 %", "–") == (
            rows["billing", "task_completion"].bound,
            rows["billing", "task_completion"].value,
        )
        assert ("20.0 %", False) == (
            rows["support", "safety_block_rate"].value,
            rows["support", "safety_block_rate"].met,
        )
        assert "0.05 % - 0.5 %" == rows["*", "safety_block_rate"].bound
        assert ("–", None) == (rows["support", "review_pass_rate"].value, rows["support", "review_pass_rate"].met)
        assert ("2.60", None) == (rows["support", "steps_per_task"].value, rows["support", "steps_per_task"].met)
        assert ("–", None) == (rows["*", "step_efficiency"].value, rows["*", "step_efficiency"].met)  # none scored
        assert "–" == rows["*", "task_completion"].value

    def test_human_targets_are_the_estimates(self, store: SqlStore, clock: Clock) -> None:
        """With a sample design, the review pass rate's row is the estimate, its interval, n and method."""
        from review_queue.quality import quality_report
        from scorers.rules import sample_design

        for n in range(40):  # every run in the sample (rate 1): all reviewed, 30 of 40 pass
            scored = scored_run(f"{n:032x}", agent="support", final_output="ok", reasons=["random_sample"])
            store.write([dataclasses.replace(scored, design=sample_design(scored.run.trace_id, 1.0, scored.flag))])
        bench = Workbench(store.engine, clock=clock, lease_s=60.0)
        while (claim := bench.claim_next("alice")) is not None:
            good = int(claim.trace_id, 16) % 4 != 0
            bench.submit_verdict(claim.item_id, "alice", VerdictIn(VerdictValue.PASS if good else VerdictValue.FAIL))
        with store.engine.connect() as conn:
            report = quality_report(conn, parse_slo(None), clock.now + 1)
            rows = {(r.agent, r.target): r for r in target_rows(conn, parse_slo(None), clock.now + 1, report)}
        row = rows["support", "review_pass_rate"]
        assert row.value.startswith("75.0 % [")
        assert row.value.endswith("n=40 (ppi)")
        assert row.met is False  # the whole interval (a sample that is the population: exact) is below 90 %

    def test_step_efficiency_is_the_mean_of_the_scored_runs(self, store: SqlStore, clock: Clock) -> None:
        """support: (1 + 0.5 + 0.75) / 3 = 75 %; billing 25 %; the fleet (2.25 + 0.25) / 4 = 62.5 %."""
        _seed_efficiency(store)
        with store.engine.connect() as conn:
            rows = {(r.agent, r.target): r for r in target_rows(conn, parse_slo(None), clock.now + 1)}
        assert ("75.0 %", True) == (rows["support", "step_efficiency"].value, rows["support", "step_efficiency"].met)
        assert ("25.0 %", False) == (rows["billing", "step_efficiency"].value, rows["billing", "step_efficiency"].met)
        assert ("62.5 %", True) == (rows["*", "step_efficiency"].value, rows["*", "step_efficiency"].met)

    def test_session_completion_over_closed_sessions(self, store: SqlStore, clock: Clock) -> None:
        """Closed sessions not abandoned / closed sessions; open ones and sessions of one do not count."""
        from review_queue.session_close import SessionCloser
        from tests.review_queue.test_sessions_store import turn

        store.write([turn(1, "gone", start=0), turn(3, "gone", start=60, status=RunStatus.ERROR)])
        store.write([turn(5, "fine", start=0), turn(7, "kept", start=10), turn(9, None, start=20)])
        store.write([turn(11, "open", start=1000)])
        clock.now += 1800 + 100
        assert 3 == len(SessionCloser(store, (), idle_s=1800, clock=clock).close_idle())
        with store.engine.connect() as conn:
            rows = {(r.agent, r.target): r for r in target_rows(conn, parse_slo(None), clock.now + 1)}
        assert ("66.7 %", False) == (
            rows["support", "session_completion"].value,
            rows["support", "session_completion"].met,
        )
        assert (">= 90 %", "66.7 %") == (rows["*", "session_completion"].bound, rows["*", "session_completion"].value)

    def test_stats_page_shows_the_targets(self, store: SqlStore, clock: Clock) -> None:
        """The reviewers' stats page has the targets table."""
        _seed(store, clock)
        page = _stats_page(store, clock)
        assert 200 == page.status_code
        assert 'id="slo-targets"' in page.text
        assert "&gt;= 85 %" in page.text

    def test_stats_page_shows_step_efficiency(self, store: SqlStore, clock: Clock) -> None:
        """Runs scored for step efficiency: the fleet's 7-day value is shown, not "–"."""
        _seed_efficiency(store)
        page = _stats_page(store, clock)
        assert 200 == page.status_code
        row = "<td>all agents</td><td>step_efficiency</td><td>&gt;= 60 %</td><td>62.5 %</td><td>yes</td>"
        assert row in page.text


def _seed_efficiency(store: SqlStore) -> None:
    """support: step efficiency 1, 0.5, 0.75 and one run not scored for it; billing: 0.25."""
    for n, value in enumerate((1.0, 0.5, 0.75)):
        store.write([scored_run(f"{n:032x}", agent="support", scores={"step_efficiency": value})])
    store.write([scored_run(f"{3:032x}", agent="support", scores={"tool_error_rate": 0.0})])
    store.write([scored_run(f"{4:032x}", agent="billing", scores={"step_efficiency": 0.25})])


def _stats_page(store: SqlStore, clock: Clock) -> Any:
    """The stats page as a logged-in viewer sees it at the store's clock."""
    services = build_services(store, slo=parse_slo(None), clock=clock)
    client = TestClient(create_api_app(store, admin_token=None, services=services))
    login = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', login)
    assert csrf is not None
    services.tokens.create("root", "admin")  # the first token must be an admin one (open-mode lockout)
    token = services.tokens.create("viewer", "viewer")[0]
    client.post("/login", data={"token": token, "csrf": csrf.group(1)}, follow_redirects=False)
    return client.get("/stats")
