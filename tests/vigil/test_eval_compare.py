"""``vigil eval compare`` and the ``--baseline`` gate: paired tests on JSON reports of a simulated
non-deterministic agent (fixed seeds), and the ``--repeat`` intervals in every report."""

from __future__ import annotations

import io
import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from scorers.eval.criteria import CriterionResult
from scorers.eval.evaluate import CaseResult
from scorers.eval.stats import wilson
from vigil.cli import main
from vigil.eval_compare import compare_runs, print_comparison, runs_from_report
from vigil.eval_report import junit_xml, report_json
from vigil.eval_stats import case_intervals, markdown_intervals, statistics_json, summaries

CASES = 40
REPEATS = 5


Run = tuple[CaseResult, float]


def _agent(seed: int, *, worse: float = 0.0, slower: float = 0.0) -> list[Run]:
    """A report of an agent whose case ``i`` passes with a fixed per-case probability (the same for
    every seed: the cases are the same), its trajectory score tracking the pass and tokens drawn
    around a per-case mean. ``worse`` lowers the pass probability of every other case, ``slower``
    adds tokens."""
    per_case = random.Random(1234)
    probs = [per_case.uniform(0.5, 1.0) for _ in range(CASES)]
    tokens = [per_case.uniform(50, 400) for _ in range(CASES)]
    rng = random.Random(seed)
    out = []
    for i in range(CASES):
        p = max(0.0, probs[i] - (worse if i % 2 else 0.0))
        for rep in range(REPEATS):
            passed = rng.random() < p
            score = 1.0 if passed else rng.choice([0.0, 0.5])
            crit = CriterionResult("tool_trajectory", score, 1.0, score >= 1.0, "")
            result = CaseResult("shop", f"case{i:02}", (crit,), passed, repeat=rep)
            out.append((result, tokens[i] * (1 + slower) + rng.gauss(0, 20)))
    return out


def _results(runs: list[Run]) -> list[CaseResult]:
    return [r for r, _ in runs]


def _report(runs: list[Run]) -> dict[str, Any]:
    """The JSON report, tokens in each result's ``measures`` (as the efficiency dimension reports them)."""
    doc = report_json(_results(runs))
    for entry, (_, tokens) in zip(doc["results"], runs, strict=True):
        entry["measures"]["tokens"] = round(tokens)
    return doc


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


class TestCompare:
    def test_known_drop_is_significant_and_named(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        base = _write(tmp_path / "base.json", _report(_agent(1)))
        new = _write(tmp_path / "new.json", _report(_agent(2, worse=0.35, slower=0.3)))
        assert 1 == main(["eval", "compare", str(base), str(new), "--fail-on-drop"])
        out = capsys.readouterr().out
        lines = {line.split()[0]: line for line in out.splitlines() if line.split()}
        assert "DROP (significant)" in lines["pass"]
        assert "DROP (significant)" in lines["tool_trajectory"]
        assert "DROP (significant)" in lines["tokens"]  # more tokens is worse
        drop = next(line for line in out.splitlines() if line.startswith("DROP pass:"))
        assert "case" in drop.split("worse cases:")[1]  # the cases that got worse are named
        assert "3 significant drop(s) at alpha 0.05" in out
        # without --fail-on-drop the verdict is printed and the exit is 0
        assert 0 == main(["eval", "compare", str(base), str(new)])

    def test_same_agent_rerun_is_not_significant(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        base = _write(tmp_path / "base.json", _report(_agent(1)))
        rerun = _write(tmp_path / "rerun.json", _report(_agent(2)))
        assert 0 == main(["eval", "compare", str(base), str(rerun), "--fail-on-drop", "--json"])
        doc = json.loads(capsys.readouterr().out)
        assert {"pass", "tool_trajectory", "tokens", "steps", "latency_ms"} == {m["name"] for m in doc["metrics"]}
        assert not any(m["significant"] for m in doc["metrics"])
        assert doc["drop"] is False
        passes = next(m for m in doc["metrics"] if m["name"] == "pass")
        assert CASES * REPEATS == passes["pairs"]
        assert passes["low"] <= 0 <= passes["high"]

    def test_improvement_is_significant_but_not_a_drop(self) -> None:
        base = runs_from_report(_report(_agent(3, worse=0.4)), "base")
        new = runs_from_report(_report(_agent(4)), "new")
        cmp = compare_runs(base, new)
        by = {m.name: m for m in cmp.metrics}
        assert by["pass"].significant
        assert not by["pass"].worse
        assert [] == cmp.drops

    def test_tolerance_ignores_a_small_significant_drop(self) -> None:
        base = runs_from_report(_report(_agent(1)), "base")
        new = runs_from_report(_report(_agent(2, slower=0.3)), "new")
        assert ["tokens"] == [m.name for m in compare_runs(base, new).drops]
        assert [] == compare_runs(base, new, tolerance=0.5).drops

    def test_top_level_numbers_are_metrics_and_steps_are_better_lower(self) -> None:
        """A number beside ``passed`` (as an efficiency report may put ``steps``) is compared too."""

        def doc(steps: list[int]) -> dict[str, Any]:
            results = [{"eval_id": f"c{i}", "repeat": 0, "passed": True, "steps": s} for i, s in enumerate(steps)]
            return {"results": results}

        base = runs_from_report(doc([2] * 30), "base")
        fewer = runs_from_report(doc([1] * 30), "new")
        more = runs_from_report(doc([3] * 30), "new")
        assert [] == compare_runs(base, fewer).drops
        assert ["steps"] == [m.name for m in compare_runs(base, more).drops]
        assert {"pass", "steps"} == {m.name for m in compare_runs(base, more).metrics}

    def test_wall_clock_metrics_are_shown_but_gate_only_when_asked(self) -> None:
        """The same agent's latency rising with the machine's load is significant, not a drop, unless
        ``gate_wall_clock``; the other lower-is-better metrics gate as before."""

        def doc(latency: float, steps: int) -> dict[str, Any]:
            results = [
                {"eval_id": f"c{i}", "repeat": 0, "passed": True, "steps": steps, "latency_ms": latency + i % 3}
                for i in range(30)
            ]
            return {"results": results}

        base = runs_from_report(doc(48.0, 2), "base")
        slower = runs_from_report(doc(61.0, 2), "new")
        cmp = compare_runs(base, slower)
        latency = next(m for m in cmp.metrics if m.name == "latency_ms")
        assert (latency.significant, latency.worse, latency.gated, latency.drop) == (True, True, False, False)
        assert [] == cmp.drops
        out = io.StringIO()
        print_comparison(cmp, out)
        assert "worse (significant, wall clock: not gated)" in out.getvalue()
        assert ["latency_ms"] == [m.name for m in compare_runs(base, slower, gate_wall_clock=True).drops]
        more_steps = runs_from_report(doc(48.0, 3), "new")
        assert ["steps"] == [m.name for m in compare_runs(base, more_steps).drops]

    def test_unpaired_runs_are_counted(self) -> None:
        base = runs_from_report(_report(_agent(1)), "base")
        new = {k: v for k, v in runs_from_report(_report(_agent(1)), "new").items() if k[1] != "case00"}
        cmp = compare_runs(base, new)
        assert (REPEATS, 0) == (cmp.only_base, cmp.only_new)
        assert (CASES - 1) * REPEATS == cmp.metrics[0].pairs

    def test_bad_input_is_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        good = _write(tmp_path / "good.json", _report(_agent(1)))
        bad = _write(tmp_path / "bad.json", {"cases": []})
        assert 2 == main(["eval", "compare", str(good), str(bad)])
        err = capsys.readouterr().err.strip()
        assert f"vigil eval compare: {bad}: not a vigil eval JSON report (expected an object with 'results')" == err
        assert 2 == main(["eval", "compare", str(good), str(tmp_path / "missing.json")])
        assert "missing.json" in capsys.readouterr().err


class TestBadReports:
    """Reports ``vigil eval compare`` refuses: one line naming the file and the result, exit 2, no traceback."""

    @staticmethod
    def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], results: list[Any]) -> str:
        good = _write(tmp_path / "good.json", {"results": [{"eval_id": "c0", "repeat": 0, "passed": True}]})
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps({"results": results}))  # json.dumps writes NaN as Python's reader accepts it
        assert 2 == main(["eval", "compare", str(good), str(bad)])
        err = capsys.readouterr().err
        assert 1 == len(err.strip().splitlines())
        assert err.startswith(f"vigil eval compare: {bad}: results[")
        return err.strip()

    @pytest.mark.parametrize("repeat", [None, "x", "1", -1, True, 1.5])
    def test_a_repeat_that_is_not_a_non_negative_integer(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], repeat: Any
    ) -> None:
        err = self._refused(tmp_path, capsys, [{"eval_id": "c0", "repeat": repeat, "passed": True}])
        assert err.endswith(f"results[0]: 'repeat' must be a non-negative integer, got {json.dumps(repeat)}")

    def test_a_criterion_without_a_name(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        criteria = [{"name": "tool_trajectory", "score": 1.0}, {"score": 0.5}]
        err = self._refused(tmp_path, capsys, [{"eval_id": "c0", "passed": True, "criteria": criteria}])
        assert err.endswith("results[0]: criteria[1]: expected an object with a 'name'")

    @pytest.mark.parametrize(
        ("result", "where"),
        [
            ({"measures": {"tokens": float("nan")}}, "results[1]: 'tokens' is nan"),
            ({"latency_ms": float("inf")}, "results[1]: 'latency_ms' is inf"),
            ({"criteria": [{"name": "judge", "score": float("nan")}]}, "results[1]: criteria[0]: 'score' is nan"),
        ],
    )
    def test_a_metric_that_is_not_finite(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str], result: dict[str, Any], where: str
    ) -> None:
        """NaN compares unequal to everything: it made p = 0 and "better (significant)"."""
        results = [{"eval_id": "c0", "passed": True}, {"eval_id": "c1", "passed": True, **result}]
        err = self._refused(tmp_path, capsys, results)
        assert err.endswith(f"{where}, not a finite number")

    def test_two_results_of_one_case_and_repeat(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The second used to overwrite the first silently."""
        results = [
            {"eval_set_id": "shop", "eval_id": "c0", "repeat": 0, "passed": True},
            {"eval_set_id": "shop", "eval_id": "c0", "repeat": 1, "passed": True},
            {"eval_set_id": "shop", "eval_id": "c0", "repeat": 0, "passed": False},
        ]
        err = self._refused(tmp_path, capsys, results)
        assert err.endswith(
            "results[2]: case 'shop/c0' repeat 0 again (first at results[0]): one result per case and repeat"
        )

    def test_the_footer_names_the_family_holm_adjusted_over(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Five metrics shown, only ``steps`` differs on a pair: Holm was over one, not five."""

        def doc(steps: int) -> dict[str, Any]:
            results = [
                {"eval_id": f"c{i}", "repeat": 0, "passed": True, "steps": steps, "tokens": 100 + i, "errors": 0,
                 "cost_usd": 0.01}
                for i in range(30)
            ]  # fmt: skip
            return {"results": results}

        base, new = _write(tmp_path / "base.json", doc(2)), _write(tmp_path / "new.json", doc(3))
        assert 0 == main(["eval", "compare", str(base), str(new)])
        out = capsys.readouterr().out
        assert "1 significant drop(s) at alpha 0.05 (Holm over 1 metric(s); 4 no pair differs on left out)." in out
        assert 0 == main(["eval", "compare", str(base), str(new), "--json"])
        found = json.loads(capsys.readouterr().out)
        assert (1, 5) == (found["family"], len(found["metrics"]))


class TestIntervals:
    def test_case_wilson_and_summary_bootstrap(self) -> None:
        results = _results(_agent(1))
        cases = case_intervals(results)
        assert CASES == len(cases)
        first = cases[0]
        assert wilson(first.passed, REPEATS) == first.interval
        summary = summaries(results)["all"]
        assert sum(r.passed for r in results) / len(results) == summary.estimate
        assert summary.low < summary.estimate < summary.high

    def test_summary_is_never_narrower_than_the_runs(self) -> None:
        """Every case passing every run: the bootstrap over cases is degenerate, Wilson over runs is not."""
        results = [r for r in _results(_agent(1)) if r.eval_id == "case00"][:1] * 9
        summary = summaries(results)["all"]
        assert (1.0, wilson(9, 9).low, 1.0) == (summary.estimate, summary.low, summary.high)

    def test_json_and_junit_carry_the_intervals(self) -> None:
        results = _results(_agent(1))[:10]  # two cases, five repeats each
        doc = report_json(results)
        stats_doc = statistics_json(results)
        assert stats_doc == doc["statistics"]
        case = doc["statistics"]["cases"][0]
        interval = wilson(case["passed"], case["runs"])
        assert (round(interval.low, 6), round(interval.high, 6)) == (case["low"], case["high"])
        root = ET.fromstring(junit_xml(results))
        (suite,) = root.findall("testsuite")
        (properties,) = suite.findall("properties")  # beside the dimension summary's, not a second block
        props = {p.get("name"): p.get("value") for p in properties}
        assert interval.text() == props["pass_rate:case00"]
        assert "pass_rate_summary:all" in props

    def test_markdown_section(self) -> None:
        results = _results(_agent(1))[:10]
        text = markdown_intervals(results)
        first = case_intervals(results)[0]
        assert f"| shop/case00 | 5 | {first.passed} | {first.interval.estimate:.2f} |" in text
        assert "| **summary: all** | 10 |" in text

    def test_a_single_run_has_no_intervals(self) -> None:
        results = [r for r in _results(_agent(1)) if r.repeat == 0]
        assert "statistics" not in report_json(results)
        assert "" == markdown_intervals(results)


class TestGate:
    def test_baseline_gate_fails_on_a_drop_not_on_noise(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The example agent end to end: its regressed version fails the gate against the good
        version's report and names what dropped; the good version passes it."""
        from tests.vigil.test_eval import _run

        base = tmp_path / "base.json"
        assert 0 == _run(tmp_path, "answer", "--repeat", "6", "--json", str(base))
        assert "statistics" in json.loads(base.read_text())
        assert "pass rates (95% intervals" in capsys.readouterr().out
        assert 1 == _run(tmp_path, "answer_regressed", "--repeat", "6", "--baseline", str(base))
        out = capsys.readouterr().out
        drop = next(line for line in out.splitlines() if line.startswith("DROP pass:"))
        assert "support_agent/weather_paris" in drop
        assert "support_agent/order_then_refund" in drop
        assert "greeting" not in drop
        assert 0 == _run(tmp_path, "answer", "--repeat", "6", "--baseline", str(base))
        assert "0 significant drop(s)" in capsys.readouterr().out
