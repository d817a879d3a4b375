"""Tests of review_queue.views (pure helpers of the UI)."""

from __future__ import annotations

from review_queue import views
from review_queue.views import WATERFALL_WIDTH, age, clock_time, waterfall


class TestWaterfall:
    """Bars on a shared time axis."""

    def test_geometry(self) -> None:
        """Offsets and widths are proportional to time; depth follows parents."""
        t = 10**18  # epoch nanoseconds; 0 means "unknown"
        steps = [
            {"span_id": "a", "parent_id": None, "name": "root", "kind": "agent", "start_ns": t, "end_ns": t + 1000},
            {"span_id": "b", "parent_id": "a", "name": "llm", "kind": "llm", "start_ns": t + 250, "end_ns": t + 750},
            {"span_id": "c", "parent_id": "b", "name": "tool", "kind": "tool", "start_ns": t + 500, "end_ns": t + 500},
        ]
        rows = waterfall(steps, t, t + 1000)["rows"]
        assert [(0.0, WATERFALL_WIDTH), (250.0, 500.0), (500.0, 2.0)] == [(r["x"], r["width"]) for r in rows]
        assert [0, 1, 2] == [r["depth"] for r in rows]

    def test_empty_and_unknown_bounds(self) -> None:
        """No steps gives no rows; unknown run bounds come from the steps."""
        assert [] == waterfall([], 0, 0)["rows"]
        rows = waterfall([{"span_id": "a", "start_ns": 10, "end_ns": 20}], 0, 0)["rows"]
        assert (0.0, WATERFALL_WIDTH) == (rows[0]["x"], rows[0]["width"])

    def test_parent_cycle_terminates(self) -> None:
        """A parent cycle in bad data does not hang."""
        steps = [{"span_id": "a", "parent_id": "b"}, {"span_id": "b", "parent_id": "a"}]
        assert 2 == len(waterfall(steps, 0, 0)["rows"])


class TestFormat:
    """Human ages and times."""

    def test_age(self) -> None:
        """Seconds, minutes, hours, days."""
        assert ["5s", "2m", "3h", "2d"] == [age(5), age(150), age(3 * 3600 + 5), age(2 * 86400 + 1)]

    def test_clock(self) -> None:
        """UTC timestamp, empty for None."""
        assert ("1970-01-01 00:01:00", "") == (clock_time(60), clock_time(None))

    def test_snippet(self) -> None:
        """One line, cut at a word with an ellipsis within the limit; short text as it is; None empty."""
        assert ("", "hi there") == (views.snippet(None), views.snippet("  hi\n\tthere "))
        cut = views.snippet("word " * 40, 30)
        assert cut.endswith("…")
        assert len(cut) <= 30
        assert "word word" in cut
        assert not cut[:-1].endswith(" ")
        assert 20 == len(views.snippet("x" * 50, 20))  # no space: cut mid-word


class TestEvidence:
    def test_grouped_and_deduplicated(self) -> None:
        """A reason named after its signal repeats that signal's evidence: shown once."""
        one = {"signal": "hit_max_iterations", "rule": "limit.cutoff", "span_id": "a", "source": "s", "value": "v"}
        other = {**one, "signal": "tool_loop", "rule": "rule:tool_loop"}
        grouped = views.evidence_by_signal([one, dict(one), other, {"no": "signal"}, "junk"])  # type: ignore[list-item]
        assert {"hit_max_iterations": [one], "tool_loop": [other]} == grouped

    def test_none(self) -> None:
        assert {} == views.evidence_by_signal(None)


def test_score_rows_give_unit_direction_and_the_rules_that_test_them() -> None:
    from review_queue.views import score_rows
    from scorers.rules import compile_rules, score_thresholds

    rows = {r["name"]: r for r in score_rows(
        {"step_efficiency": 0.25, "repeated_tool_calls": 1.0, "latency": 2.5, "safety_block": 1.0, "custom": 7.0},
        score_thresholds(compile_rules(None)),
    )}  # fmt: skip
    step = rows["step_efficiency"]
    assert ("0.25", "higher is better", True) == (step["value"], step["direction"], step["crossed"])
    assert [{"rule": "low_step_efficiency", "op": "<", "threshold": 0.3, "crossed": True}] == step["tests"]
    loop = rows["repeated_tool_calls"]
    assert ("1 call", "lower is better", False) == (loop["value"], loop["direction"], loop["crossed"])
    assert ("2.50 s", []) == (rows["latency"]["value"], rows["latency"]["tests"])
    assert "yes" == rows["safety_block"]["value"]
    assert ("7", "") == (rows["custom"]["value"], rows["custom"]["direction"])  # a plugin's score: no unit


def test_the_depth_chart_starts_with_the_first_item() -> None:
    from review_queue.listing import since_first

    history = {"buckets": [0.0, 10.0, 20.0, 30.0], "total": [0, 0, 3, 4], "agents": {"a": [0, 0, 3, 4]}}
    assert {"buckets": [20.0, 30.0], "total": [3, 4], "agents": {"a": [3, 4]}} == since_first(history, 25.0, 10.0)
    assert [10.0, 20.0, 30.0] == since_first(history, 15.0, 10.0)["buckets"]
    assert [20.0, 30.0] == since_first(history, None, 10.0)["buckets"]  # no item ever: two buckets, for a line
