"""Tests for scorers.judge.service against the local fake OpenAI-compatible server (no network)."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from collector.demo.fakeopenai import ErrorTurn, FakeOpenAI, TextTurn, Usage
from scorers.judge.config import judge_rules, parse_judges
from scorers.judge.metrics import JudgeMetrics
from scorers.judge.service import JudgeService
from scorers.model import RUN_BASE_BYTES, Flag, Message, Priority, Run, ScoredRun, run_bytes
from scorers.redact import Redactor
from scorers.rules import compile_rules, sample_design, sample_point
from tests.support.judge import InMemoryJudgeSink

LOW = TextTurn(json.dumps({"reasoning": "Claims a refund that no tool confirmed.", "score": 0.1}), Usage(300, 40))
HIGH = TextTurn(json.dumps({"reasoning": "All claims supported.", "score": 0.9}), Usage(300, 40))
FLAG = Flag(("errored",), Priority.NORMAL, 0.05)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    """A started fake server with a low-score and a high-score verdict."""
    with FakeOpenAI({"low": [LOW], "high": [HIGH]}) as server:
        yield server


def _run(n: int, scenario: str, *, flag: Flag | None = None, text: str = "Refund issued.") -> ScoredRun:
    run = Run(
        trace_id=f"{n:032x}",
        agent="support",
        final_output=f"[[scenario:{scenario}]] {text}",
        messages=(Message("user", "Refund me"),),
    )
    return ScoredRun(run, {"tokens": 100.0}, flag)


class Harness:
    """A judge service over the fake server, an in-memory sink and a fresh registry."""

    def __init__(
        self, fake: FakeOpenAI, clock: Any = None, prepare: Any = None, max_queue_bytes: int = 0, **judge: Any
    ) -> None:
        entry = {"rubric": "groundedness", "model": "judge-model", "base_url": fake.base_url, **judge}
        specs = parse_judges({"ground": entry}, {})
        self.rules = compile_rules(judge_rules(specs, None), judge_names=["ground"])
        self.registry = CollectorRegistry()
        self.sink = InMemoryJudgeSink()
        self.new_flags: list[ScoredRun] = []
        options: dict[str, Any] = {} if clock is None else {"clock": clock}
        if prepare is not None:
            options["prepare"] = prepare
        if max_queue_bytes:
            options["max_queue_bytes"] = max_queue_bytes
        self.service = JudgeService(
            specs,
            self.sink,
            rules=self.rules,
            sample_rate=0.0,
            metrics=JudgeMetrics(self.registry),
            on_new_flag=self.new_flags.append,
            **options,
        )

    def metric(self, name: str, **labels: str) -> float:
        value = self.registry.get_sample_value(name, {"judge": "ground", **labels})
        return 0.0 if value is None else value

    def judge(self, runs: list[ScoredRun]) -> None:
        self.service.submit(runs)
        assert self.service.flush(30)


@pytest.fixture
def harness(fake: FakeOpenAI) -> Iterator[Harness]:
    """A started harness judging every run, flagging below 0.5."""
    h = Harness(fake, select="true", flag_below=0.5)
    h.service.start()
    yield h
    h.service.shutdown(5)


class TestVerdicts:
    """Verdicts are stored with the run and counted."""

    def test_normal_verdict_is_stored(self, harness: Harness, fake: FakeOpenAI) -> None:
        """Score, pass/fail, reasoning, model, rubric version and tokens reach the sink and the metrics."""
        harness.judge([_run(1, "high")])
        result = harness.sink.results[(f"{1:032x}", "ground")]
        assert (0.9, True, "All claims supported.") == (result.score, result.passed, result.reasoning)
        assert ("judge-model", "groundedness@1", 300, 40) == (
            result.model,
            result.rubric_version,
            result.input_tokens,
            result.output_tokens,
        )
        assert 1 == harness.metric("vigil_judge_requests_total", outcome="ok")
        assert 300 == harness.metric("vigil_judge_tokens_total", kind="input")
        assert 1 == harness.metric("vigil_judge_score_count")
        assert 1 == harness.metric("vigil_judge_latency_seconds_count")
        assert {"ground": 0.9} == dict(harness.service.judge_scores(f"{1:032x}"))

    def test_cost_is_estimated(self, fake: FakeOpenAI) -> None:
        """With a price, the verdict's cost and the cost counter follow the token usage."""
        h = Harness(fake, select="true", price={"input_per_mtok": 1.0, "output_per_mtok": 10.0})
        h.service.start()
        h.judge([_run(1, "high")])
        h.service.shutdown(5)
        expected = (300 * 1.0 + 40 * 10.0) / 1e6
        assert pytest.approx(expected) == h.sink.results[(f"{1:032x}", "ground")].cost_usd
        assert pytest.approx(expected) == h.metric("vigil_judge_cost_usd_total")

    def test_malformed_twice_is_recorded_as_error(self, harness: Harness, fake: FakeOpenAI) -> None:
        """A judge error is stored (no score) and counted by outcome; nothing is flagged."""
        fake.register("junk", [TextTurn("no idea")])
        harness.judge([_run(1, "junk")])
        result = harness.sink.results[(f"{1:032x}", "ground")]
        assert result.score is None
        assert result.error is not None
        assert result.error.startswith("malformed")
        assert 1 == harness.metric("vigil_judge_requests_total", outcome="malformed")
        assert {} == harness.sink.flags

    def test_rate_limited_then_ok(self, harness: Harness, fake: FakeOpenAI) -> None:
        """A 429 with Retry-After is waited out; the verdict is then stored."""
        fake.register(
            "busy", [ErrorTurn(429, "slow down", "rate_limit_exceeded", retry_after=0.2), HIGH], sequential=True
        )
        harness.judge([_run(1, "busy")])
        assert 0.9 == harness.sink.results[(f"{1:032x}", "ground")].score
        assert 1 == harness.metric("vigil_judge_http_requests_total", outcome="rate_limited")
        assert 1 == harness.metric("vigil_judge_requests_total", outcome="ok")

    def test_timeout_is_an_error_outcome(self, fake: FakeOpenAI) -> None:
        """A judge slower than its timeout ends as outcome timeout, stored as an error."""
        fake.register("slow", [TextTurn(HIGH.text, delay_s=3.0)])
        h = Harness(fake, select="true", timeout_s=0.3, max_retries=0)
        h.service.start()
        h.judge([_run(1, "slow")])
        h.service.shutdown(5)
        assert 1 == h.metric("vigil_judge_requests_total", outcome="timeout")
        assert "timeout" in (h.sink.results[(f"{1:032x}", "ground")].error or "")


class TestCache:
    """Verdicts are cached by (rubric version, model, content hash)."""

    def test_same_content_is_judged_once(self, fake: FakeOpenAI) -> None:
        """Two runs with the same content (one worker): one request, the second served from the cache."""
        h = Harness(fake, select="true", concurrency=1)
        h.service.start()
        h.judge([_run(1, "high"), _run(2, "high")])
        h.judge([_run(1, "high")])  # a re-score with unchanged content
        h.service.shutdown(5)
        assert 1 == len(fake.served("high"))
        assert 2 == h.metric("vigil_judge_requests_total", outcome="cached")
        second = h.sink.results[(f"{2:032x}", "ground")]
        assert (True, 0.9, 0, 0.0) == (second.cached, second.score, second.input_tokens, second.cost_usd)

    def test_other_content_is_judged_again(self, harness: Harness, fake: FakeOpenAI) -> None:
        """A changed final answer misses the cache."""
        harness.judge([_run(1, "high", text="A")])
        harness.judge([_run(1, "high", text="B")])
        assert 2 == len(fake.served("high"))

    def test_model_sees_prepared_content(self, fake: FakeOpenAI) -> None:
        """With redaction as ``prepare``, answers differing only by an email render alike: one request."""
        h = Harness(fake, prepare=Redactor().run, select="true", concurrency=1)
        h.service.start()
        h.judge([_run(1, "high", text="Sent to ann@example.com")])
        h.judge([_run(2, "high", text="Sent to bob@example.org")])
        h.service.shutdown(5)
        assert 1 == len(fake.served("high"))
        assert 1 == h.metric("vigil_judge_requests_total", outcome="cached")

    def test_errors_are_not_cached(self, harness: Harness, fake: FakeOpenAI) -> None:
        """A malformed answer is asked again next time (no cached error)."""
        fake.register("junk", [TextTurn("no idea")])
        harness.judge([_run(1, "junk")])
        harness.judge([_run(1, "junk")])
        assert 4 == len(fake.served("junk"))


class TestBudget:
    """The hourly spend budget stops judging, counts, and resumes next window."""

    def test_exhausted_then_resumes(self, fake: FakeOpenAI) -> None:
        """Budget for one verdict (606 reserved, 340 used): the second is skipped and counted; judged next hour."""
        now = [7200.0]
        h = Harness(fake, clock=lambda: now[0], select="true", concurrency=1, budget={"tokens_per_hour": 900})
        h.service.start()
        h.judge([_run(1, "high", text="one")])
        h.judge([_run(2, "high", text="two")])
        assert 1 == len(fake.served("high"))
        assert 1 == h.metric("vigil_judge_budget_exhausted_total")
        assert (f"{2:032x}", "ground") not in h.sink.results
        now[0] += 3600
        h.judge([_run(2, "high", text="two")])
        h.service.shutdown(5)
        assert 2 == len(fake.served("high"))
        assert (f"{2:032x}", "ground") in h.sink.results


class TestLateFlag:
    """Judge scores re-decide the rules: a run can become flagged by its judge score."""

    def test_unflagged_run_becomes_flagged(self, harness: Harness) -> None:
        """A low score adds judge_ground; the run had no flag, so it is a new flag (counted once)."""
        harness.judge([_run(1, "low")])
        flag = harness.sink.flags[f"{1:032x}"]
        assert ("judge_ground",) == flag.reasons
        assert Priority.NORMAL == flag.priority
        assert [f"{1:032x}"] == [s.run.trace_id for s in harness.new_flags]
        assert harness.new_flags[0].flag is not None
        (evidence,) = harness.new_flags[0].evidence  # why: the judge score that matched the rule
        assert ("judge_ground", "rule:judge_ground", "judge") == (evidence.signal, evidence.rule, evidence.source)
        assert "ground=" in evidence.value

    def test_flagged_run_gains_a_reason(self, harness: Harness) -> None:
        """On a run already flagged, the judge reason is added; it is not a new flag."""
        harness.sink.seed_flag(f"{1:032x}", FLAG)
        harness.judge([_run(1, "low", flag=FLAG)])
        assert ("errored", "judge_ground") == harness.sink.flags[f"{1:032x}"].reasons
        assert [] == harness.new_flags

    def test_high_score_flags_nothing(self, harness: Harness) -> None:
        """A good score adds no reason."""
        harness.judge([_run(1, "high")])
        assert {} == harness.sink.flags

    def test_store_outage_is_retried(self, harness: Harness) -> None:
        """An unavailable store is retried; the verdict and the flag still land."""
        harness.sink.fail_next(2)
        harness.judge([_run(1, "low")])
        assert ("judge_ground",) == harness.sink.flags[f"{1:032x}"].reasons
        assert 0 == harness.metric("vigil_judge_dropped_total", reason="store_unavailable")


class TestOrdering:
    """A verdict on an older version of a run never overwrites the newer one."""

    def test_slow_old_version_is_superseded(self, harness: Harness, fake: FakeOpenAI) -> None:
        """v1 (slow, low score) and v2 (re-scored after late spans, fast, high score) in flight together: v2 wins."""
        fake.register("slowlow", [TextTurn(LOW.text, delay_s=1.0)])
        harness.judge([_run(1, "slowlow", text="v1"), _run(1, "high", text="v2 with the late tool result")])
        result = harness.sink.results[(f"{1:032x}", "ground")]
        assert 0.9 == result.score
        assert {} == harness.sink.flags
        assert 1 == harness.metric("vigil_judge_dropped_total", reason="superseded")
        assert [result] == [r for r in harness.sink.writes if r.trace_id == f"{1:032x}"]

    def test_other_judges_and_runs_are_independent(self, harness: Harness) -> None:
        """Submitting run 2 does not supersede run 1."""
        harness.judge([_run(1, "high", text="a"), _run(2, "low", text="b")])
        assert {(f"{1:032x}", "ground"), (f"{2:032x}", "ground")} == set(harness.sink.results)


class TestSelection:
    """Which runs a judge takes."""

    def test_default_is_flagged_runs_only(self, fake: FakeOpenAI) -> None:
        """Without select, only flagged runs are judged."""
        h = Harness(fake)
        h.service.start()
        h.judge([_run(1, "high"), _run(2, "high", flag=FLAG, text="other")])
        h.service.shutdown(5)
        assert {f"{2:032x}"} == {tid for tid, _ in h.sink.results}

    def test_selector_and_sample(self, fake: FakeOpenAI) -> None:
        """A CEL selector picks runs; sample_rate keeps a deterministic share of them."""
        h = Harness(fake, select="agent == 'support'", sample_rate=0.5, cache_size=0)
        chosen = [s for s in (_run(n, "high") for n in range(400)) if h.service._judges[0].selects(s)]
        assert 150 < len(chosen) < 250
        again = [s for s in (_run(n, "high") for n in range(400)) if h.service._judges[0].selects(s)]
        assert [s.run.trace_id for s in chosen] == [s.run.trace_id for s in again]
        other = ScoredRun(Run(trace_id="f" * 32, agent="billing", final_output="x"), {}, None)
        assert not h.service._judges[0].selects(other)

    @pytest.mark.parametrize(
        ("select", "expected"),
        [
            ("flagged && priority == 'normal' && 'errored' in reasons", {1}),
            ("status == 'ok' && has(attributes.tier) && attributes.tier == 'gold'", {2}),
            ("scores.tokens > 50.0 && !flagged", {0, 2}),
        ],
    )
    def test_selector_variables(self, fake: FakeOpenAI, select: str, expected: set[int]) -> None:
        """Selectors read the flag decision, run fields, attributes and scores."""
        h = Harness(fake, select=select)
        runs = [_run(0, "high"), _run(1, "high", flag=FLAG), _run(2, "high")]
        gold = runs[2].run
        runs[2] = ScoredRun(
            Run(**{**{f: getattr(gold, f) for f in Run.__dataclass_fields__}, "attributes": {"tier": "gold"}}),
            runs[2].scores,
            None,
        )
        assert expected == {n for n, s in enumerate(runs) if h.service._judges[0].selects(s)}

    def test_random_sample_selects_the_runs_of_the_sample(self, fake: FakeOpenAI) -> None:
        """``select: random_sample`` takes the runs whose design put them in the random review sample,
        flagged by rules or not, and no other (what judge calibration on the sample needs)."""
        h = Harness(fake, select="random_sample")
        runs = [_run(n, "high") for n in range(100)]
        designed = [dataclasses.replace(s, design=sample_design(s.run.trace_id, 0.3, s.flag)) for s in runs]
        chosen = {s.run.trace_id for s in designed if h.service._judges[0].selects(s)}
        assert {s.run.trace_id for s in designed if sample_point(s.run.trace_id) < 0.3} == chosen
        assert 10 < len(chosen) < 60

    def test_runs_without_content_are_counted(self, harness: Harness) -> None:
        """Content capture off: nothing to judge, counted as no_content."""
        harness.judge([ScoredRun(Run(trace_id="e" * 32), {}, None)])
        assert 1 == harness.metric("vigil_judge_dropped_total", reason="no_content")


class TestIsolation:
    """A flood of runs never makes the stream wait on a judge."""

    def test_flood_against_a_stalled_judge(self, fake: FakeOpenAI) -> None:
        """With the judge stalled, submitting 2,000 runs returns; all but the queue and in-flight are dropped."""
        fake.register("stall", [TextTurn(HIGH.text, delay_s=5.0)])
        h = Harness(fake, select="true", queue_size=10, concurrency=2, timeout_s=10)
        h.service.start()
        runs = [_run(n, "stall", text=str(n)) for n in range(2000)]
        submitted = threading.Event()

        def stream() -> None:
            for i in range(0, len(runs), 100):  # in batches, as the stream worker writes them
                h.service.submit(runs[i : i + 100])
            submitted.set()

        threading.Thread(target=stream, daemon=True).start()
        assert submitted.wait(30), "submit blocked on a stalled judge"
        dropped = h.metric("vigil_judge_dropped_total", reason="queue_full")
        assert 2000 - 10 - 2 <= dropped <= 2000 - 10
        assert h.service.pending() <= 12
        assert not h.service.shutdown(0.5)  # the stalled requests cannot finish in time
        assert dropped + h.metric("vigil_judge_dropped_total", reason="shutdown") >= 2000 - 2


class TestByteBudget:
    """The judge queues are bounded in bytes as well as runs (issue 15 item 3)."""

    def test_run_bytes_counts_the_captured_texts(self) -> None:
        small, big = _run(1, "high", text="ok"), _run(2, "high", text="x" * 10_000)
        assert RUN_BASE_BYTES < run_bytes(small.run) < RUN_BASE_BYTES + 100
        assert 10_000 == run_bytes(big.run) - run_bytes(small.run) + 2

    def test_runs_past_the_byte_budget_are_dropped_and_counted(self, fake: FakeOpenAI) -> None:
        """Room for three runs by bytes (of 100 by count): the others are dropped as queue_bytes; judged
        runs give their bytes back."""
        runs = [_run(n, "high", text="y" * 5000 + str(n)) for n in range(10)]
        size = run_bytes(runs[0].run)
        h = Harness(fake, select="true", queue_size=100, max_queue_bytes=3 * size + 10)
        h.service.submit(runs)
        assert 7 == h.metric("vigil_judge_dropped_total", reason="queue_bytes")
        assert 0 == h.metric("vigil_judge_dropped_total", reason="queue_full")
        assert 3 * size == h.service.account.held
        h.service.start()
        assert h.service.flush(30)
        assert 0 == h.service.account.held
        assert 3 == len(h.sink.results)
        h.service.shutdown(5)
