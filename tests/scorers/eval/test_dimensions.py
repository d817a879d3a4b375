"""Dimensions on cases (``metadata``), kept by ADK, and the per-case measures and per-dimension summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scorers.eval.criteria import ActualTurn
from scorers.eval.dimensions import CaseMeasures, measure, summarise_dimensions
from scorers.eval.evaluate import CaseResult, evaluate_case
from scorers.eval.model import EvalConfig, EvalFileError, ToolCall, load_eval_set, parse_eval_set

ROOT = Path(__file__).resolve().parents[3]
ROUNDTRIP = ROOT / "tests" / "fixtures" / "adk_roundtrip"


def _case(metadata: Any = None, tools: tuple[str, ...] = ("get_weather",), phrases: Any = None) -> dict[str, Any]:
    case: dict[str, Any] = {
        "eval_id": "c1",
        "conversation": [
            {
                "user_content": {"parts": [{"text": "Weather in Paris?"}]},
                "intermediate_data": {"tool_uses": [{"name": t, "args": {}} for t in tools]},
            }
        ],
    }
    if metadata is not None:
        case["metadata"] = metadata
    if phrases is not None:
        case["expected_phrases"] = phrases
    return case


def _set(*cases: dict[str, Any]) -> Any:
    return parse_eval_set({"eval_set_id": "s", "eval_cases": list(cases)})


class TestMetadata:
    def test_default_is_capability_without_tags(self) -> None:
        (case,) = _set(_case()).eval_cases
        assert ("capability", ()) == (case.dimension, case.tags)

    def test_dimension_and_tags_read_and_written_back(self) -> None:
        (case,) = _set(_case({"dimension": "Efficiency", "tags": ["slow"]})).eval_cases
        assert ("efficiency", ("slow",)) == (case.dimension, case.tags)
        doc = _set(_case({"dimension": "robustness", "tags": ["x"], "owner": "team-a"})).document()
        assert {"dimension": "robustness", "tags": ["x"], "owner": "team-a"} == doc["eval_cases"][0]["metadata"]

    @pytest.mark.parametrize(
        ("metadata", "where"),
        [
            ({"dimension": "speed"}, "$.eval_cases[0].metadata.dimension"),
            ({"checks": ["graceful", "polite"]}, "$.eval_cases[0].metadata.checks"),
            ({"tags": "x"}, "$.eval_cases[0].metadata.tags"),
        ],
    )
    def test_bad_metadata_names_the_path(self, metadata: dict[str, Any], where: str) -> None:
        with pytest.raises(EvalFileError) as err:
            _set(_case(metadata))
        assert where == err.value.path

    def test_facts_are_expected_facts_else_expected_phrases(self) -> None:
        (only_phrases,) = _set(_case(phrases=["sunny"])).eval_cases
        (both,) = _set(_case({"expected_facts": ["21 C"]}, phrases=["sunny"])).eval_cases
        assert (("sunny",), ("21 C",)) == (only_phrases.facts, both.facts)

    @pytest.mark.parametrize("name", ["react_agent.evalset.json", "react_agent_robustness.evalset.json"])
    def test_adk_keeps_the_metadata(self, name: str) -> None:
        """Files Vigil wrote, loaded and saved again by ADK 2.13.0 (see the fixture's NOTES.md)."""
        source = {
            "react_agent.evalset.json": ROOT / "examples" / "react_agent" / "evalset.json",
            "react_agent_robustness.evalset.json": ROUNDTRIP / "react_agent_robustness.vigil.json",
        }[name]
        ours = load_eval_set(source)
        theirs = load_eval_set(ROUNDTRIP / name)
        assert [c.metadata for c in ours.eval_cases] == [c.metadata for c in theirs.eval_cases]
        assert [c.turns[0].user_text for c in ours.eval_cases] == [c.turns[0].user_text for c in theirs.eval_cases]


def _turn(*tools: str, answer: str = "", steps: int = 0, tokens: int = 0, ms: float = 0.0) -> ActualTurn:
    calls = tuple(ToolCall(name=t) for t in tools)
    return ActualTurn("q", calls, answer, "t", steps=steps, tokens=tokens, latency_ms=ms)


class TestMeasure:
    def test_tool_accuracy_is_the_share_of_expected_calls_made(self) -> None:
        (case,) = _set(_case(tools=("get_price", "calculator"))).eval_cases
        assert 0.5 == measure(case, [_turn("calculator")]).tool_accuracy
        assert 1.0 == measure(case, [_turn("calculator", "get_price", "get_price")]).tool_accuracy

    def test_no_expected_call_no_accuracy_no_facts_no_completion(self) -> None:
        (case,) = _set(_case(tools=())).eval_cases
        assert CaseMeasures(None, None, 3, 40, 5.0) == measure(case, [_turn(steps=3, tokens=40, ms=5.0)])

    def test_task_completion_is_the_share_of_facts_found(self) -> None:
        (case,) = _set(_case({"expected_facts": ["21 C", "Sunny", "wind"]})).eval_cases
        assert pytest.approx(2 / 3) == measure(case, [_turn(answer="It is 21 c and sunny.")]).task_completion

    def test_steps_tokens_latency_sum_over_turns(self) -> None:
        (case,) = _set(_case()).eval_cases
        m = measure(case, [_turn(steps=2, tokens=100, ms=10.0), _turn(steps=1, tokens=50, ms=2.5)])
        assert (3, 150, 12.5) == (m.steps, m.tokens, m.latency_ms)


def _result(dimension: str, passed: bool, measures: CaseMeasures) -> CaseResult:
    return CaseResult("s", f"{dimension}-{id(measures)}", (), passed, dimension=dimension, measures=measures)


class TestSummaries:
    def test_means_over_the_cases_that_have_them(self) -> None:
        results = [
            _result("capability", True, CaseMeasures(1.0, 1.0, 2, 100, 10.0)),
            _result("capability", False, CaseMeasures(0.5, None, 2, 100, 10.0)),
            _result("capability", True, CaseMeasures(None, 0.5, 2, 100, 10.0)),
            _result("robustness", False, CaseMeasures()),
            _result("robustness", True, CaseMeasures()),
        ]
        cap, rob = summarise_dimensions(results)
        assert ("capability", 3, 2, 0.75, 0.75) == (
            cap.dimension,
            cap.runs,
            cap.passed,
            cap.tool_accuracy,
            cap.task_completion,
        )
        assert ("robustness", 0.5) == (rob.dimension, rob.pass_rate)

    def test_baseline_delta(self) -> None:
        results = [_result("efficiency", True, CaseMeasures(None, None, 3, 300, 40.0))]
        baseline = json.loads(
            json.dumps({"dimensions": {"efficiency": {"steps": 2, "tokens": 250.0, "latency_ms": "x"}}})
        )
        (eff,) = summarise_dimensions(results, baseline)
        assert (1.0, 50.0, None) == (eff.delta("steps"), eff.delta("tokens"), eff.delta("latency_ms"))
        assert {"steps": 1.0, "tokens": 50.0, "latency_ms": None, "pass_rate": None} == eff.as_dict()["delta"]

    def test_evaluate_case_carries_dimension_tags_and_measures(self) -> None:
        (case,) = _set(_case({"dimension": "efficiency", "tags": ["t"]})).eval_cases
        result = evaluate_case(case, [_turn("get_weather", steps=2, tokens=255, ms=3.0)], EvalConfig())
        assert ("efficiency", ("t",), 1.0, 2) == (
            result.dimension,
            result.tags,
            result.measures.tool_accuracy,
            result.measures.steps,
        )
        doc = result.as_dict()
        assert ("efficiency", ["t"], 255) == (doc["dimension"], doc["tags"], doc["measures"]["tokens"])
