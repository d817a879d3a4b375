"""Online regression: a production run matched to its case is scored in the pipeline and flagged."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from scorers.assemble import ClosedTrace
from scorers.content import canonical_json
from scorers.eval.model import ArgMatch, EvalFileError, MatchType, parse_eval_config
from scorers.eval.online import OnlineEval
from scorers.model import Message, Run, ToolCall
from tests.support.spans import agent_run
from vigil.scoring import Scoring
from vigil.settings import Settings

QUESTION = "What is the weather in Paris and in Rome?"  # the user message of tests.support.spans.agent_run


def eval_set(path: Path, tool: str = "tool_0", answer: str = "Paris 18C, Rome 24C.", case_id: str = "weather") -> Path:
    doc = {
        "eval_set_id": "support",
        "eval_cases": [
            {
                "eval_id": case_id,
                "conversation": [
                    {
                        "user_content": {
                            "role": "user",
                            "parts": [{"text": "  what is the WEATHER in Paris and in Rome? "}],
                        },
                        "final_response": {"role": "model", "parts": [{"text": answer}]},
                        "intermediate_data": {"tool_uses": [{"name": tool, "args": {"city": "Paris"}}]},
                    }
                ],
            }
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def scoring(tmp_path: Path, **overrides: Any) -> Scoring:
    settings = Settings.load(environ={}, overrides={"database_url": "sqlite://", **overrides})
    return Scoring.from_settings(settings, environ={})


def closed(spans: list[Any]) -> ClosedTrace:
    return ClosedTrace(spans[0].trace_id, tuple(spans), True)


class TestPipeline:
    def test_a_matching_run_passes_and_joins_the_scores(self, tmp_path: Path) -> None:
        s = scoring(tmp_path, eval_sets=[str(eval_set(tmp_path / "set.json"))])
        scored = s.pipeline(None, None).process(closed(agent_run(llm_calls=2, tools_per_call=1, content=True)))
        assert 1.0 == scored.scores["eval_passed"]
        assert 1.0 == scored.scores["eval_tool_trajectory"]
        assert 1.0 == scored.scores["eval_response_match"]
        assert scored.flag is None or "eval_regression" not in scored.flag.reasons

    def test_a_regression_is_flagged_with_evidence(self, tmp_path: Path) -> None:
        s = scoring(tmp_path, eval_sets=[str(eval_set(tmp_path / "set.json", tool="get_weather"))])
        registry = CollectorRegistry()
        s.run_metrics(registry)
        scored = s.pipeline(None, None).process(closed(agent_run(llm_calls=2, tools_per_call=1, content=True)))
        assert 0.0 == scored.scores["eval_passed"]
        assert 0.0 == scored.scores["eval_tool_trajectory"]
        assert scored.flag is not None
        assert "eval_regression" in scored.flag.reasons
        assert any(e.signal == "eval_regression" for e in scored.evidence)
        assert 1.0 == registry.get_sample_value(
            "vigil_eval_online_runs_total", {"eval_set": "support", "result": "fail"}
        )
        assert 0.0 == registry.get_sample_value("vigil_eval_online_pass_rate", {"eval_set": "support"})

    def test_unmatched_runs_get_no_eval_scores(self, tmp_path: Path) -> None:
        s = scoring(tmp_path, eval_sets=[str(eval_set(tmp_path / "set.json"))])
        scored = s.pipeline(None, None).process(closed(agent_run(llm_calls=2, tools_per_call=1, content=False)))
        assert not {k for k in scored.scores if k.startswith("eval_")}

    def test_rule_is_off_without_eval_sets(self, tmp_path: Path) -> None:
        s = scoring(tmp_path)
        assert s.online is None
        assert "eval_regression" not in {r.name for r in s.rules}

    def test_a_missing_file_refuses_to_start(self, tmp_path: Path) -> None:
        with pytest.raises(EvalFileError, match="expected an eval set file"):
            scoring(tmp_path, eval_sets=[str(tmp_path / "none.json")])


def run(users: list[str], tools: tuple[ToolCall, ...] = (), answer: str = "", **attrs: Any) -> Run:
    messages = []
    for u in users:
        messages += [Message("user", u), Message("assistant", "…")]
    return Run(trace_id="ab" * 16, messages=tuple(messages), tools=tools, final_output=answer, attributes=attrs)


class TestMatching:
    def test_by_case_id_and_turn(self, tmp_path: Path) -> None:
        online = OnlineEval([eval_set(tmp_path / "s.json", case_id="c-1")])
        r = run(["something else"], (ToolCall("s1", "tool_0", arguments='{"city": "Paris"}'),), "Paris 18C, Rome 24C.")
        assert online.match(r) is None
        found = online.match(replace(r, attributes={"vigil.eval.case_id": "c-1"}))
        assert found is not None
        assert ("support", "c-1", 0) == (found.eval_set_id, found.case.eval_id, found.turn)
        assert online.match(replace(r, attributes={"vigil.eval.case_id": "c-1", "vigil.eval.turn": 3})) is None

    def test_by_normalised_first_message(self, tmp_path: Path) -> None:
        online = OnlineEval([eval_set(tmp_path / "s.json")])
        assert online.match(run([QUESTION.upper() + "  "])) is not None
        assert online.match(run([QUESTION, "and tomorrow?"])) is None  # a second turn the case does not have

    def test_robustness_cases_with_checks_are_not_matched_online(self, tmp_path: Path) -> None:
        """An edge case judged by rules has no reference answer to score a production run against."""
        path = eval_set(tmp_path / "s.json")
        doc = json.loads(path.read_text())
        doc["eval_cases"][0]["metadata"] = {"dimension": "robustness", "checks": ["graceful"]}
        path.write_text(json.dumps(doc))
        online = OnlineEval([path])
        assert online.match(run([QUESTION])) is None
        assert online.match(replace(run([QUESTION]), attributes={"vigil.eval.case_id": "weather"})) is None

    def test_reloads_on_change(self, tmp_path: Path) -> None:
        now = [0.0]
        path = eval_set(tmp_path / "s.json")
        online = OnlineEval([path], reload_interval_s=1.0, clock=lambda: now[0])
        good = run([QUESTION], (ToolCall("s1", "tool_0", arguments='{"city": "Paris"}'),), "Paris 18C, Rome 24C.")
        assert online.evaluate(good).passed  # type: ignore[union-attr]
        eval_set(path, tool="get_weather")
        os.utime(path, ns=(1, 1))
        now[0] = 2.0
        result = online.evaluate(replace(good))
        assert result is not None
        assert not result.passed
        assert 0.0 == result.results[0].score  # the expected tool is now get_weather
        path.write_text("{broken")  # a bad edit keeps the loaded cases
        os.utime(path, ns=(2, 2))
        now[0] = 4.0
        assert not online.maybe_reload()
        assert 1 == online.cases
        assert 0.5 == online.pass_rate("support")


# --- the direct online path scores exactly as evaluate_case -----------------------------------

_NAMES_ = ["search", "lookup", "refund"]
_ARGS = st.one_of(
    st.none(),
    st.sampled_from(['{"q":"a"}', '{"q": "a"}', '{"q":"b"}', '{"n":250}', '{"n":250.0}', "{}", "not json", "[1]"]),
)
_ANSWERS = st.sampled_from(["", "Paris 18C, Rome 24C.", "paris is 18c", "It rains in Rome.", "Ça va, Zürich 18°C"])
_EXPECTED_ARGS = st.sampled_from([None, {}, {"q": "a"}, {"q": "b"}, {"n": 250}, {"input": "not json"}])


def _online_set(path: Path, tools: list[tuple[str, dict[str, Any] | None]], answer: str) -> Path:
    doc = {
        "eval_set_id": "prop",
        "eval_cases": [
            {
                "eval_id": "c",
                "conversation": [
                    {
                        "user_content": {"parts": [{"text": QUESTION}]},
                        "final_response": {"parts": [{"text": answer}]},
                        "intermediate_data": {"tool_uses": [{"name": n, "args": a} for n, a in tools]},
                    }
                ],
            }
        ],
    }
    path.write_text(json.dumps(doc))
    return path


_CONFIGS = st.fixed_dictionaries(
    {
        "tool_trajectory": st.fixed_dictionaries(
            {
                "threshold": st.sampled_from([0.0, 0.5, 1.0]),
                "match_type": st.sampled_from(list(MatchType)),
                "arg_match": st.sampled_from(list(ArgMatch)),
            }
        ),
        "response_match": st.fixed_dictionaries({"threshold": st.sampled_from([0.0, 0.3, 0.8, 1.0])}),
    },
    optional={"task_success": st.fixed_dictionaries({"threshold": st.sampled_from([0.0, 1.0])})},
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.sampled_from(_NAMES_), _ARGS), max_size=4),
    st.lists(st.tuples(st.sampled_from(_NAMES_), _EXPECTED_ARGS), max_size=4),
    _ANSWERS,
    _ANSWERS,
    _CONFIGS,
    st.data(),
)
def test_direct_scores_equal_the_case_evaluation(  # noqa: PLR0917 - hypothesis draws
    tmp_path: Path,
    actual: list[tuple[str, str | None]],
    expected: list[tuple[str, dict[str, Any] | None]],
    answer: str,
    reference: str,
    config: dict[str, Any],
    data: st.DataObject,
) -> None:
    shape = data.draw(st.sampled_from(["drawn", "the expected calls", "the expected names"]))
    if shape == "the expected calls":  # what the case expects (the common, passing case)
        actual = [(n, canonical_json(a or {})) for n, a in expected]
    elif shape == "the expected names":  # the same tools, the arguments drawn
        actual = [(n, data.draw(_ARGS)) for n, _ in expected]
    online = OnlineEval(
        [_online_set(tmp_path / "p.json", expected, reference)], parse_eval_config({"criteria": config})
    )
    assert online._direct
    tools = tuple(ToolCall(f"s{i}", n, arguments=a) for i, (n, a) in enumerate(actual))
    r = run([QUESTION], tools, answer)
    scores = online.score(r)
    result = online.evaluate(r)
    assert scores is not None
    assert result is not None
    want = [(f"eval_{x.name}", x.score) for x in result.results if x.score is not None]
    want.append(("eval_passed", 1.0 if result.passed else 0.0))
    assert want == [(s.name, s.value) for s in scores]
    assert {"prop/c"} == {s.detail for s in scores}
