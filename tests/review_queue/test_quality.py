"""Tests of review_queue.quality: estimates read from a real store, equal to scorers.quality's on the
same labels, and the mixed share of verdicts shown to mislead."""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from review_queue.metrics import QualityCollector, ReviewMetrics
from review_queue.model import VerdictIn, VerdictValue
from review_queue.quality import QualityError, allocation_inputs, quality_report, runs_per_day, status
from review_queue.store import SqlStore
from review_queue.tables import judge_results, review_verdicts, sessions
from review_queue.workbench import Workbench
from scorers.model import RunStatus, ScoredRun
from scorers.quality import (
    Estimate,
    Labelled,
    PredictedStratum,
    Stratum,
    cohen_kappa,
    post_stratified,
    sampled_predictions,
    stratified_ppi,
)
from scorers.rules import sample_design, sample_point
from scorers.slo import DEFAULT_TARGETS, parse_slo
from tests.support.review_queue import Clock, scored_run

RATE = 0.05


@dataclasses.dataclass
class Truth:
    good: dict[str, bool] = dataclasses.field(default_factory=dict)
    flagged: dict[str, bool] = dataclasses.field(default_factory=dict)
    completed: dict[str, bool] = dataclasses.field(default_factory=dict)


def _run(rng: random.Random, trace_id: str, agent: str, pass_rate: float) -> tuple[ScoredRun, bool, bool, bool]:
    """One run: good with ``pass_rate``; rules flag 60 % of bad runs and 2 % of good; Vigil's completion
    heuristic misses 10 % of bad runs (they look completed) and 5 % of good ones (they look errored)."""
    good = rng.random() < pass_rate
    flagged = rng.random() < (0.02 if good else 0.6)
    looks_completed = (rng.random() >= 0.05) if good else (rng.random() < 0.1)
    fields: dict[str, Any] = (
        {"final_output": "answer", "complete": True}
        if looks_completed
        else {"status": RunStatus.ERROR, "errored": True, "complete": True}
    )
    draw = sample_design(trace_id, RATE, None).drawn
    reasons = [*(["errored"] if flagged else []), *(["random_sample"] if draw else [])]
    scored = scored_run(trace_id, agent=agent, reasons=reasons, sample_rate=RATE, **fields)
    return (
        dataclasses.replace(scored, design=sample_design(trace_id, RATE, scored.flag)),
        good,
        flagged,
        looks_completed,
    )


def _populate(store: SqlStore, clock: Clock, runs: int, agents: dict[str, float], seed: int = 7) -> Truth:
    rng = random.Random(seed)
    truth = Truth()
    batch = []
    for i in range(runs):
        agent = list(agents)[i % len(agents)]
        trace_id = f"{rng.getrandbits(128):032x}"
        scored, good, flagged, completed = _run(rng, trace_id, agent, agents[agent])
        truth.good[trace_id], truth.flagged[trace_id], truth.completed[trace_id] = good, flagged, completed
        batch.append(scored)
        if len(batch) == 500:
            store.write(batch)
            batch = []
    store.write(batch)
    return truth


def _review_all(store: SqlStore, clock: Clock, truth: Truth, most: int | None = None) -> int:
    """A reviewer who is always right clears the queue in its order (rule-flagged first), or its first
    ``most`` items."""
    bench = Workbench(store.engine, clock=clock, lease_s=600.0)
    done = 0
    while (most is None or done < most) and (claim := bench.claim_next("alice")) is not None:
        good = truth.good[claim.trace_id]
        verdict = VerdictIn(VerdictValue.PASS) if good else VerdictIn(VerdictValue.FAIL, ("hallucination",))
        bench.submit_verdict(claim.item_id, "alice", verdict)
        done += 1
    return done


def _fleet(report: dict[str, Any], target: str) -> dict[str, Any]:
    [fleet] = [a for a in report["agents"] if a["agent"] == "*"]
    [row] = [r for r in fleet["estimates"] if r["target"] == target]
    return row


def _same(expected: Estimate, got: dict[str, Any]) -> None:
    assert (expected.value, expected.low, expected.high, expected.n, expected.population) == pytest.approx(
        (got["value"], got["low"], got["high"], got["n"], got["population"]), abs=1e-12
    )


Seeded = tuple[SqlStore, Truth, dict[str, Any]]


class TestReport:
    """4,000 runs through the real store, a true pass rate near 92 %, every flagged item reviewed."""

    @pytest.fixture
    def seeded(self, store: SqlStore, clock: Clock) -> Seeded:
        truth = _populate(store, clock, 4000, {"support": 0.92})
        clock.now += 60
        assert _review_all(store, clock, truth) > 300
        with store.engine.connect() as conn:
            report = quality_report(conn, parse_slo(None), clock.now + 1)
        return store, truth, report

    def test_report(self, seeded: Seeded) -> None:
        """One population per backend (building it is most of the time): each check a method of its own."""
        self.estimates_equal_the_estimators_on_the_same_labels(seeded)
        self.the_truth_is_inside_and_the_mixed_share_far_below(seeded)
        self.design_counts(seeded)

    @staticmethod
    def estimates_equal_the_estimators_on_the_same_labels(seeded: Seeded) -> None:
        _, truth, report = seeded
        drawn = {t: sample_design(t, RATE, None).drawn for t in truth.good}
        size = {h: sum(1 for t in truth.good if truth.flagged[t] == h) for h in (True, False)}
        sample: dict[bool, list[Labelled]] = {True: [], False: []}
        for t in truth.good:
            if drawn[t]:
                sample[truth.flagged[t]].append(Labelled(float(truth.good[t]), float(truth.completed[t]), 1 / RATE))
        flagged_all = [Labelled(float(truth.good[t])) for t in truth.good if truth.flagged[t]]
        row = _fleet(report, "review_pass_rate")
        by_rule = [Stratum(size[True], sample[True]), Stratum(size[False], sample[False])]
        _same(post_stratified("sample", by_rule), row["methods"]["sample"])
        with_flagged = [Stratum(size[True], flagged_all), Stratum(size[False], sample[False])]
        _same(post_stratified("stratified", with_flagged), row["methods"]["stratified"])
        completed = {h: float(sum(1 for t in truth.good if truth.flagged[t] == h and truth.completed[t])) for h in size}
        ppi = stratified_ppi([PredictedStratum(size[h], completed[h], completed[h], sample[h]) for h in (True, False)])
        _same(ppi, row["methods"]["ppi"])
        assert row["estimate"] == row["methods"]["ppi"]

    @staticmethod
    def the_truth_is_inside_and_the_mixed_share_far_below(seeded: Seeded) -> None:
        _, truth, report = seeded
        true = sum(truth.good.values()) / len(truth.good)
        row = _fleet(report, "review_pass_rate")
        for method in ("sample", "stratified", "ppi"):
            assert row["methods"][method]["low"] <= true <= row["methods"][method]["high"], method
        assert row["naive"]["value"] < 0.75  # the share of all verdicts: mostly rule-flagged failures
        assert 4000 == row["estimate"]["population"]
        share = sum(1 for t in truth.good if not truth.good[t]) / len(truth.good)
        category = _fleet(report, "category:hallucination")
        assert category["methods"]["sample"]["low"] <= share <= category["methods"]["sample"]["high"]
        assert category["status"] is None

    def test_reviewer_error_rates_correct_the_pass_rate(self, seeded: Seeded) -> None:
        """Known reviewer error rates map every pass-rate estimate and bound (Rogan–Gladen); the naive
        share and the other figures are left as they are."""
        store, _, plain = seeded
        with store.engine.connect() as conn:
            fixed = quality_report(conn, parse_slo(None), plain["until"], reviewer_error=(0.1, 0.03))
        before, after = _fleet(plain, "review_pass_rate"), _fleet(fixed, "review_pass_rate")
        for method in ("sample", "stratified", "ppi"):
            for bound in ("value", "low", "high"):
                expected = min(1.0, max(0.0, (before["methods"][method][bound] - 0.1) / 0.87))
                assert expected == pytest.approx(after["methods"][method][bound]), (method, bound)
        assert {"false_pass": 0.1, "false_fail": 0.03} == after["corrected_for"]
        assert before["naive"] == after["naive"]
        assert _fleet(plain, "task_completion") == _fleet(fixed, "task_completion")

    @staticmethod
    def design_counts(seeded: Seeded) -> None:
        _, truth, report = seeded
        [fleet] = [a for a in report["agents"] if a["agent"] == "*"]
        drawn = sum(1 for t in truth.good if sample_design(t, RATE, None).drawn)
        flagged = sum(truth.flagged.values())
        expected = {"runs": 4000, "shed": 0, "before_design": 0, "rule_flagged": flagged}
        expected |= {"rule_flagged_reviewed": flagged, "sample": drawn, "sample_reviewed": drawn}
        assert expected == fleet["design"]


def test_shed_and_older_runs_are_left_out_and_counted(store: SqlStore, clock: Clock) -> None:
    """Runs decided while shedding (rate 0) or stored without a design are no part of any estimate."""
    shed = [
        dataclasses.replace(
            scored_run(f"{i:032x}", agent="a", final_output="x"), design=sample_design(f"{i:032x}", 0.0, None)
        )
        for i in range(5)
    ]
    old = [scored_run(f"{i + 100:032x}", agent="a", final_output="x") for i in range(3)]
    store.write([*shed, *old])
    with store.engine.connect() as conn:
        report = quality_report(conn, parse_slo(None), clock.now + 1)
    [fleet, agent] = report["agents"]
    assert {"runs": 0, "shed": 5, "before_design": 3} == {
        k: fleet["design"][k] for k in ("runs", "shed", "before_design")
    }
    assert "a" == agent["agent"]
    assert _fleet(report, "review_pass_rate")["estimate"]["value"] is None
    assert "not enough data" == _fleet(report, "review_pass_rate")["status"]


def test_a_late_flag_keeps_the_run_in_its_stratum(store: SqlStore, clock: Clock) -> None:
    """A run first decided unflagged and outside the sample, later flagged (a judge, a thumbs-down), is
    reviewed — its verdict is in the naive share but in no stratum's sample."""
    tid = next(f"{i:032x}" for i in range(10_000) if not sample_design(f"{i:032x}", RATE, None).drawn)
    first = dataclasses.replace(scored_run(tid, final_output="x"), design=sample_design(tid, RATE, None))
    store.write([first])
    late = scored_run(tid, final_output="x", reasons=["judge_low"])
    store.write([dataclasses.replace(late, design=sample_design(tid, RATE, late.flag))])
    bench = Workbench(store.engine, clock=clock, lease_s=60.0)
    claim = bench.claim_next("alice")
    assert claim is not None
    bench.submit_verdict(claim.item_id, "alice", VerdictIn(VerdictValue.FAIL, ("hallucination",)))
    with store.engine.connect() as conn:
        report = quality_report(conn, parse_slo(None), clock.now + 1)
    row = _fleet(report, "review_pass_rate")
    assert 1 == row["naive"]["n"]
    assert 0 == row["methods"]["sample"]["n"]
    assert {"rule_flagged": 0, "sample": 0} == {k: report["agents"][0]["design"][k] for k in ("rule_flagged", "sample")}


def test_unknown_window_is_refused(store: SqlStore) -> None:
    with store.engine.connect() as conn, pytest.raises(QualityError, match="unknown window '3d'"):
        quality_report(conn, parse_slo(None), 0.0, window="3d")


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [(0.91, 0.95, "met"), (0.80, 0.89, "not met"), (0.85, 0.93, "not enough data"), (None, None, "not enough data")],
)
def test_status_is_decided_by_the_whole_interval(low: float | None, high: float | None, expected: str) -> None:
    value = None if low is None or high is None else (low + high) / 2
    assert expected == status(DEFAULT_TARGETS["review_pass_rate"], Estimate("ppi", value, low, high, 10, 100))


def test_sample_verdicts_are_counted_once_per_sample_run_and_the_gauges_match_the_report(
    store: SqlStore, clock: Clock
) -> None:
    """``vigil_review_sample_verdicts_total`` counts a run's first verdict when the run is in the random
    sample (not a second reviewer's, not a rule-only run's), ``vigil_review_sample_weight_total`` the
    runs they stand for (1 / p each); the gauges are the report's headline."""
    ids = [f"{i:032x}" for i in range(400)]
    drawn = [t for t in ids if sample_design(t, RATE, None).drawn][:3]
    rule_only = next(t for t in ids if not sample_design(t, RATE, None).drawn)
    for t in [*drawn, rule_only]:
        reasons = ["random_sample"] if t in drawn else ["errored"]
        scored = scored_run(t, agent="support", final_output="x", reasons=reasons)
        store.write([dataclasses.replace(scored, design=sample_design(t, RATE, scored.flag))])
    registry = CollectorRegistry()
    metrics = ReviewMetrics(registry)
    bench = Workbench(store.engine, clock=clock, lease_s=60.0, observer=metrics)
    for reviewer in ("alice", "bob"):
        while (claim := bench.claim_next(reviewer)) is not None:
            bench.submit_verdict(claim.item_id, reviewer, VerdictIn(VerdictValue.PASS))
            if reviewer == "alice" and claim.trace_id == drawn[0]:
                bench.requeue(claim.item_id, "root", reviews_required=2)

    def sample(verdict: str) -> float | None:
        return registry.get_sample_value("vigil_review_sample_verdicts_total", {"agent": "support", "verdict": verdict})

    assert 3.0 == sample("pass")
    weight = registry.get_sample_value("vigil_review_sample_weight_total", {"agent": "support", "verdict": "pass"})
    assert pytest.approx(3 / RATE) == weight
    assert 5.0 == registry.get_sample_value("vigil_review_verdicts_total", {"agent": "support", "verdict": "pass"})
    gauges = CollectorRegistry()
    gauges.register(QualityCollector(store.engine, parse_slo(None), clock=lambda: clock.now + 1))
    with store.engine.connect() as conn:
        report = quality_report(conn, parse_slo(None), clock.now + 1, compare=False)
    row = _fleet(report, "review_pass_rate")
    labels = {"agent": "*", "target": "review_pass_rate"}
    assert row["estimate"]["value"] == gauges.get_sample_value("vigil_quality_estimate", {**labels, "bound": "value"})
    assert row["estimate"]["low"] == gauges.get_sample_value("vigil_quality_estimate", {**labels, "bound": "low"})
    assert row["estimate"]["n"] == gauges.get_sample_value("vigil_quality_verdicts", labels)


def test_runs_per_day_from_the_last_hour_and_day(store: SqlStore, clock: Clock) -> None:
    """10 runs in the last hour (240 a day) beat 30 over the day since the first (12 h: 60 a day); the
    day's rate wins when the last hour was quiet."""
    start = clock.now
    for i in range(20):
        store.write([scored_run(f"{i:032x}", agent="busy")])
    clock.now = start + 11 * 3600
    for i in range(10):
        store.write([scored_run(f"{i + 100:032x}", agent="busy")])
    clock.now = start + 12 * 3600
    assert {"busy": pytest.approx(240.0)} == runs_per_day(store.engine, clock.now)
    assert {"busy": pytest.approx(30 * 86_400 / (14 * 3600))} == runs_per_day(store.engine, start + 14 * 3600)


def test_allocation_learns_each_groups_pass_rate_from_the_sample(store: SqlStore, clock: Clock) -> None:
    """What sampling where the prediction is least sure reads: the day's share of runs predicted completed
    and the smoothed pass rate of the sample's first verdicts on each group (rule-flagged-only runs left out)."""
    truth = _populate(store, clock, 2000, {"support": 0.85}, seed=13)
    assert {} == {a: v for a, v in allocation_inputs(store.engine, clock.now + 1).items() if v[1] != (0.5, 0.5)}
    clock.now += 60
    _review_all(store, clock, truth)
    [(agent, (share, passes))] = allocation_inputs(store.engine, clock.now + 1).items()
    drawn = [t for t in truth.good if sample_design(t, RATE, None).drawn]
    expected = []
    for completed in (True, False):
        group = [truth.good[t] for t in drawn if truth.completed[t] == completed]
        expected.append((sum(group) + 1) / (len(group) + 2))
    assert "support" == agent
    assert sum(truth.completed.values()) / 2000 == pytest.approx(share)
    assert expected == pytest.approx(list(passes))
    assert passes[0] > passes[1]


def _judge_rows(clock: Clock, passed: dict[str, bool]) -> list[dict[str, Any]]:
    row = {"judge": "quality", "rubric_version": "1", "model": "m", "score": 1.0, "reasoning": "", "error": None,
           "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "latency_s": 0.0, "content_hash": "h",
           "cached": False, "created_at": clock.now, "updated_at": clock.now}  # fmt: skip
    return [{**row, "trace_id": t, "passed": p} for t, p in passed.items()]


def test_a_judge_on_the_sample_is_a_prediction_of_its_own(store: SqlStore, clock: Clock) -> None:
    """A judge that judged every sample member (right 9 times in 10) while the reviewers cleared the
    rule-flagged items and only part of the rest: ``judge:quality`` equals PPI++ with the judge's passes
    on the unreviewed members standing for each rule stratum, and narrows the interval."""
    truth = _populate(store, clock, 3000, {"support": 0.85}, seed=11)
    drawn = [t for t in truth.good if sample_design(t, RATE, None).drawn]
    rng = random.Random(5)
    said = {t: truth.good[t] if rng.random() < 0.9 else not truth.good[t] for t in drawn}
    with store.engine.begin() as conn:
        conn.execute(sa.insert(judge_results), _judge_rows(clock, said))
    clock.now += 60
    flagged = sum(truth.flagged.values())
    _review_all(store, clock, truth, most=flagged + len(drawn) // 3)
    with store.engine.connect() as conn:
        reviewed = {t for (t,) in conn.execute(sa.select(review_verdicts.c.trace_id))}
        report = quality_report(conn, parse_slo(None), clock.now + 1)
    parts = []
    for h in (True, False):
        members = [t for t in drawn if truth.flagged[t] == h]
        labels = [Labelled(float(truth.good[t]), float(said[t]), 1 / RATE) for t in members if t in reviewed]
        size, total, squares = sampled_predictions([(float(said[t]), 1 / RATE) for t in members if t not in reviewed])
        population = sum(1 for t in truth.good if truth.flagged[t] == h)
        parts.append(PredictedStratum(population, total, squares, labels, predicted=size))
    row = _fleet(report, "review_pass_rate")
    _same(stratified_ppi(parts, method="judge:quality"), row["methods"]["judge:quality"])
    assert row["methods"]["judge:quality"]["method"] == "judge:quality"
    judged, humans = row["methods"]["judge:quality"], row["methods"]["sample"]
    assert judged["high"] - judged["low"] < humans["high"] - humans["low"]
    widths = {m: e["high"] - e["low"] for m, e in row["methods"].items() if m in ("ppi", "judge:quality")}
    assert row["estimate"]["method"] == min(widths, key=lambda m: widths[m])


def test_judge_calibration_counts_the_random_sample_only(store: SqlStore, clock: Clock) -> None:
    """Agreement and κ between a judge and the first human verdicts, over sampled runs only: the
    rule-only run the judge got wrong (flagged *because* of it, say) is left out."""
    ids = [f"{i:032x}" for i in range(2000)]
    sampled = [t for t in ids if sample_design(t, RATE, None).drawn][:30]
    rule_only = next(t for t in ids if not sample_design(t, RATE, None).drawn)
    for t in [*sampled, rule_only]:
        reasons = ["random_sample"] if t in sampled else ["judge_low"]
        scored = scored_run(t, agent="support", final_output="x", reasons=reasons)
        store.write([dataclasses.replace(scored, design=sample_design(t, RATE, scored.flag))])
    rng = random.Random(3)
    human = {t: rng.random() < 0.7 for t in [*sampled, rule_only]}
    judge = {t: human[t] if rng.random() < 0.8 else not human[t] for t in sampled} | {rule_only: not human[rule_only]}
    bench = Workbench(store.engine, clock=clock, lease_s=60.0)
    while (claim := bench.claim_next("alice")) is not None:
        bench.submit_verdict(
            claim.item_id, "alice", VerdictIn(VerdictValue.PASS if human[claim.trace_id] else VerdictValue.FAIL)
        )
    with store.engine.begin() as conn:
        conn.execute(sa.insert(judge_results), _judge_rows(clock, judge))
    with store.engine.connect() as conn:
        report = quality_report(conn, parse_slo(None), clock.now + 1)
    [fleet] = [j for j in report["judges"] if j["agent"] == "*"]
    pairs = [(judge[t], human[t]) for t in sampled]
    kappa = cohen_kappa(pairs)
    assert kappa is not None
    assert 30 == fleet["n"]
    assert sum(a == b for a, b in pairs) / 30 == pytest.approx(fleet["agreement"]["value"])
    assert kappa == pytest.approx((fleet["kappa"]["value"], fleet["kappa"]["low"], fleet["kappa"]["high"]))


def test_sessions_record_their_design_at_the_first_close_and_are_estimated(store: SqlStore, clock: Clock) -> None:
    """Each closed session records its rate, its draw (the session id's point) and whether a session
    rule flagged it; a reopened session closed again at another rate keeps the first; the report's
    ``session_review_pass_rate`` counts first session verdicts on sessions of the sample."""
    from review_queue.session_close import SessionCloser, compile_session_rules
    from tests.review_queue.test_sessions_store import turn

    names = [f"conv-{i}" for i in range(60)]
    for i, name in enumerate(names):
        store.write([turn(2 * i + 1, name, start=0), turn(2 * i + 2, name, start=10)])
    clock.now += 1800 + 100
    closer = SessionCloser(store, compile_session_rules(None), sample_rate=0.5, idle_s=1800, clock=clock)
    assert 60 == len(closer.close_idle())
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(sessions.c.session_id, sessions.c.sample_p, sessions.c.sample_drawn)).all()
    assert {(n, 0.5, sample_point(n) < 0.5) for n in names} == {tuple(r) for r in rows}
    store.write([turn(500, names[0], start=4000)])  # the first session reopens, then closes again
    clock.now += 4000
    SessionCloser(store, compile_session_rules(None), sample_rate=0.0, idle_s=1800, clock=clock).close_idle()
    with store.engine.connect() as conn:
        again = conn.execute(sa.select(sessions.c.sample_p).where(sessions.c.session_id == names[0])).scalar_one()
    assert 0.5 == again
    bench = Workbench(store.engine, clock=clock, lease_s=60.0)
    while (claim := bench.claim_next("alice")) is not None:  # every item is a session's (no run rule fired)
        verdict = VerdictValue.PASS if int(claim.trace_id, 16) % 3 else VerdictValue.FAIL
        bench.submit_verdict(claim.item_id, "alice", VerdictIn(verdict))
    with store.engine.connect() as conn:
        report = quality_report(conn, parse_slo(None), clock.now + 1)
    [fleet] = [a for a in report["agents"] if a["agent"] == "*"]
    drawn = sum(1 for n in names if sample_point(n) < 0.5)
    design = fleet["sessions"]["design"]
    assert {"runs": 60, "sample": drawn, "sample_reviewed": drawn} == {
        k: design[k] for k in ("runs", "sample", "sample_reviewed")
    }
    [row] = fleet["sessions"]["estimates"]
    assert "session_review_pass_rate" == row["target"]
    assert drawn == row["methods"]["sample"]["n"]
    assert row["status"] is None
