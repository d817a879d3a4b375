"""Eval sets: every real ADK file (current and legacy formats), Vigil's own export, and clear errors."""

# ruff: noqa: E501  (tables of real file paths and full error messages read better unbroken)
from __future__ import annotations

import json
from pathlib import Path

import pytest

from review_queue.export import eval_case, eval_set
from scorers.eval.model import (
    ArgMatch,
    EvalConfig,
    EvalFileError,
    MatchType,
    load_eval_config,
    load_eval_set,
    parse_eval_config,
    parse_eval_set,
)

ADK = Path(__file__).parents[2] / "fixtures" / "adk_evalsets"
EVAL_FILES = sorted(
    p for p in ADK.rglob("*.json") if p.name != "test_config.json" and not p.name.endswith(".session.json")
)

# file (relative to the fixture directory) -> (cases, invocations, tool uses), as the fixtures' NOTICE lists them
EXPECTED = {
    "snapshot/tests/integration/fixture/ecommerce_customer_service_agent/order_query.test.json": (1, 4, 7),
    "snapshot/tests/integration/fixture/hello_world_agent/roll_die.test.json": (1, 3, 1),
    "snapshot/tests/integration/fixture/home_automation_agent/simple_test.test.json": (1, 1, 1),
    "snapshot/tests/integration/fixture/home_automation_agent/simple_test2.test.json": (1, 1, 1),
    "snapshot/tests/integration/fixture/home_automation_agent/test_files/dependent_tool_calls.test.json": (1, 2, 2),
    "snapshot/tests/integration/fixture/home_automation_agent/test_files/memorizing_past_events/eval_data.test.json": (1, 2, 1),
    "snapshot/tests/integration/fixture/home_automation_agent/test_files/simple_multi_turn_conversation.test.json": (1, 2, 2),
    "snapshot/tests/integration/fixture/home_automation_agent/test_files/simple_test.test.json": (1, 2, 1),
    "snapshot/tests/integration/fixture/home_automation_agent/test_files/simple_test2.test.json": (1, 1, 1),
    "snapshot/tests/integration/fixture/trip_planner_agent/test_files/trip_inquiry_sub_agent.test.json": (1, 1, 0),
    "snapshot/tests/integration/fixture/trip_planner_agent/trip_inquiry.test.json": (1, 2, 1),
    "history/98278201436c/src/google/adk/tests/integration/fixture/ecommerce_customer_service_agent/order_query.test.json": (1, 4, 7),
    "history/98278201436c/src/google/adk/tests/integration/fixture/hello_world_agent/roll_die.test.json": (1, 3, 1),
    "history/98278201436c/src/google/adk/tests/integration/fixture/home_automation_agent/simple_test.test.json": (1, 1, 1),
    "history/98278201436c/src/google/adk/tests/integration/fixture/home_automation_agent/test_files/dependent_tool_calls.test.json": (1, 2, 2),
    "history/98278201436c/src/google/adk/tests/integration/fixture/home_automation_agent/test_files/memorizing_past_events/eval_data.test.json": (1, 2, 1),
    "history/98278201436c/src/google/adk/tests/integration/fixture/home_automation_agent/test_files/simple_multi_turn_conversation.test.json": (1, 2, 2),
    "history/98278201436c/src/google/adk/tests/integration/fixture/trip_planner_agent/test_files/trip_inquiry_sub_agent.test.json": (1, 1, 0),
    "history/7e4ee838b04c/tests/integration/fixture/trip_planner_agent/trip_inquiry.test.json": (1, 2, 1),
    "index/tests/integration/fixture/conversation_scenario/conversation_scenario.test.json": (1, 0, 0),
    "index/contributing/samples/live/live_non_blocking_tool_agent/live_non_blocking_tool_agent.evalset.json": (2, 2, 0),
    "index/tests/integration/fixture/elicitation_agent/elicitation_flow.test.json": (1, 2, 2),
    "index/benchmarks/bigquerybench/eval_sets/bigquerybench_eval.json": (7, 7, 12),
    "index/benchmarks/skillsbench/eval_sets/skillsbench_eval.json": (8, 8, 30),
    "index/contributing/samples/security_agent/agents/evalset49e1df.evalset.json": (0, 0, 0),
}  # fmt: skip


def test_every_fixture_is_listed() -> None:
    assert 25 == len(EVAL_FILES)
    assert set(EXPECTED) == {p.relative_to(ADK).as_posix() for p in EVAL_FILES}


@pytest.mark.parametrize("path", EVAL_FILES, ids=lambda p: p.relative_to(ADK).as_posix())
def test_reads_every_real_adk_eval_set(path: Path) -> None:
    s = load_eval_set(path)
    counts = (
        len(s.eval_cases),
        sum(len(c.turns) for c in s.eval_cases),
        sum(len(i.tool_uses) for c in s.eval_cases for i in c.turns),
    )
    assert EXPECTED[path.relative_to(ADK).as_posix()] == counts
    for case in s.eval_cases:
        for invocation in case.turns:
            assert invocation.user_text  # every turn has the user's words
    json.dumps(s.document())  # and round-trips to JSON


def test_legacy_list_becomes_one_case() -> None:
    s = load_eval_set(ADK / "snapshot/tests/integration/fixture/home_automation_agent/simple_test2.test.json")
    (case,) = s.eval_cases
    (turn,) = case.turns
    assert "Turn off device_3 in the Bedroom." == turn.user_text
    assert "set_device_info" == turn.tool_uses[0].name
    assert {"location": "Bedroom", "device_id": "device_3", "status": "OFF"} == turn.tool_uses[0].args
    assert "I have set the device_3 status to off." == turn.expected_response


def test_current_format_details() -> None:
    s = load_eval_set(ADK / "index/tests/integration/fixture/elicitation_agent/elicitation_flow.test.json")
    first, second = s.eval_cases[0].turns
    assert "" == first.expected_response  # "text": null
    assert "Successfully booked flight to London on 2026-05-15 for Alice." == second.expected_response
    scenario = load_eval_set(
        ADK / "index/tests/integration/fixture/conversation_scenario/conversation_scenario.test.json"
    )
    assert "Hello" == scenario.eval_cases[0].conversation_scenario.starting_prompt  # type: ignore[union-attr]


@pytest.mark.parametrize("path", sorted(ADK.rglob("test_config.json")), ids=lambda p: p.relative_to(ADK).as_posix())
def test_reads_adk_test_configs(path: Path) -> None:
    cfg = load_eval_config(path)
    raw = json.loads(path.read_text())["criteria"]
    names = {"tool_trajectory_avg_score": "tool_trajectory", "response_match_score": "response_match"}
    assert {names[k]: v for k, v in raw.items()} == {k: c.threshold for k, c in cfg.criteria.items()}


def test_reads_vigils_own_export() -> None:
    snapshot = {
        "trace_id": "ab" * 16,
        "agent": "support",
        "messages": [{"role": "user", "content": "Where is order 7?"}],
        "final_output": "It ships today.",
        "tools": [{"name": "lookup", "call_id": "c1", "arguments": '{"order": 7}'}],
    }
    case, _ = eval_case(snapshot, [{"verdict": "pass"}], 1.0)
    assert case is not None
    s = parse_eval_set(eval_set([case], "vigil_reviewed", 1.0))
    (inv,) = s.eval_cases[0].turns
    assert ("Where is order 7?", "It ships today.") == (inv.user_text, inv.expected_response)
    assert {"order": 7} == inv.tool_uses[0].args


class TestConfig:
    def test_defaults_are_adks(self) -> None:
        cfg = EvalConfig()
        assert {"tool_trajectory": 1.0, "response_match": 0.8} == {k: c.threshold for k, c in cfg.criteria.items()}

    def test_rich_form(self) -> None:
        cfg = parse_eval_config(
            {
                "criteria": {
                    "tool_trajectory_avg_score": {"threshold": 0.5, "matchType": "in_order", "arg_match": "SUBSET"},
                    "phrase_recall": {"threshold": 1, "phrases": ["refund"]},
                    "final_response_match_v2": 0.6,
                    "task_success": 1,
                },
                "judge": {"model": "gpt-4o-mini", "num_samples": 3},
            }
        )
        t = cfg.criteria["tool_trajectory"]
        assert (0.5, MatchType.IN_ORDER, ArgMatch.SUBSET) == (t.threshold, t.match_type, t.arg_match)
        assert ("final_response_match",) == cfg.judged


class TestErrors:
    @pytest.mark.parametrize(
        ("doc", "message"),
        [
            ("[1]", "f.json: $[0]: expected a turn object {query, expected_tool_use, reference}, got a number"),
            ('[{"query": 3}]', "f.json: $[0].query: expected the user's query as a string, got a number"),
            ('[{"query": "q", "expected_tool_use": [{"tool_input": {}}]}]', "f.json: $[0].expected_tool_use[0]: expected {tool_name: string, tool_input: object}"),
            ('"x"', "f.json: $: expected an EvalSet object or a legacy list of turns, got a string"),
            ('{"eval_cases": []}', "f.json: $.eval_set_id: expected this field, it is missing"),
            ('{"eval_set_id": "s", "eval_cases": [{"eval_id": "c", "conversation": [{}]}]}', "f.json: $.eval_cases[0].conversation[0].user_content: expected this field, it is missing"),
            ('{"eval_set_id": "s", "eval_cases": [{"eval_id": "c", "conversation": [{"user_content": {"parts": "hi"}}]}]}', "f.json: $.eval_cases[0].conversation[0].user_content.parts: expected a valid list (got a string)"),
            ('{"eval_set_id": "s", "eval_cases": [{"eval_id": "c", "conversation": [{"user_content": {"parts": []}, "intermediate_data": {"tool_uses": [{"args": {}}]}}]}]}', "f.json: $.eval_cases[0].conversation[0].intermediate_data.tool_uses[0].name: expected this field, it is missing"),
            ('{"eval_set_id": "s", "eval_cases"', "f.json: $: expected JSON: Expecting ':' delimiter at line 1 column 34"),
        ],
    )  # fmt: skip
    def test_eval_set(self, tmp_path: Path, doc: str, message: str) -> None:
        path = tmp_path / "f.json"
        path.write_text(doc)
        with pytest.raises(EvalFileError) as info:
            load_eval_set(path)
        assert message == str(info.value).replace(str(tmp_path) + "/", "")

    @pytest.mark.parametrize(
        ("doc", "message"),
        [
            ({"criteria": {"tool_trajectory": 2}}, "c: $.criteria.tool_trajectory.threshold: expected less than or equal to 1 (got a number)"),
            ({"criteria": {"tool_trajectory": {"threshold": 1, "match_type": "SOMETIMES"}}}, "c: $.criteria.tool_trajectory.match_type: expected 'EXACT', 'IN_ORDER' or 'ANY_ORDER' (got a string)"),
            ({"criteria": {"rouge": 0.5}}, "c: $.criteria: expected a known criterion"),
            ({"criteria": {"response_match": True}}, "c: $.criteria: expected a threshold number or an object for criterion 'response_match'"),
            ({"judge": {"modle": "x"}}, "c: $.judge.modle: expected no such key (unknown field)"),
        ],
    )  # fmt: skip
    def test_config(self, doc: object, message: str) -> None:
        with pytest.raises(EvalFileError) as info:
            parse_eval_config(doc, "c")
        assert str(info.value).startswith(message)
