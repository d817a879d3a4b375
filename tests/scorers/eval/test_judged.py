"""The LLM-judged criteria through the judge machinery, against the scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from collector.demo.fakeopenai import FakeOpenAI, TextTurn
from scorers.eval.criteria import ActualTurn
from scorers.eval.evaluate import evaluate_case
from scorers.eval.judged import EvalJudge
from scorers.eval.model import Content, CriterionConfig, EvalCase, EvalConfig, Invocation, JudgeOptions, ToolCall
from scorers.judge.config import JudgeConfig


def verdict(score: float, why: str = "because") -> TextTurn:
    return TextTurn(json.dumps({"reasoning": why, "score": score}))


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def judge(fake: FakeOpenAI, **options: object) -> EvalJudge:
    return EvalJudge(JudgeOptions.model_validate({"base_url": fake.base_url, **options}))


def inv(scenario: str, reference: str = "It ships today.") -> Invocation:
    # the scenario marker rides in the reference text the judge is shown
    return Invocation(
        user_content=Content.of("Where is my order?", "user"),
        final_response=Content.of(f"{reference} [[scenario:{scenario}]]", "model"),
    )


CFG = CriterionConfig(threshold=0.5)


class TestFinalResponseMatch:
    def test_majority_of_samples(self, fake: FakeOpenAI) -> None:
        fake.register("yes_no_yes", [verdict(1), verdict(0, "differs"), verdict(0.9)], sequential=True)
        fake.register("no_no_yes", [verdict(0, "wrong day"), verdict(0.2), verdict(1)], sequential=True)
        j = judge(fake, num_samples=3)
        r = j.final_response_match(
            [ActualTurn(response="Today."), ActualTurn(response="Tomorrow.")],
            [inv("yes_no_yes"), inv("no_no_yes")],
            CFG,
        )
        assert (1.0, 0.0) == r.per_turn
        assert 0.5 == r.score
        assert r.passed is True
        assert "turn 2: wrong day" in r.detail
        assert 6 == len(fake.served())
        # the same questions again come from the cache
        j.final_response_match([ActualTurn(response="Today.")], [inv("yes_no_yes")], CFG)
        assert 6 == len(fake.served())

    def test_request_carries_the_material_as_data(self, fake: FakeOpenAI) -> None:
        fake.register("one", [verdict(1)])
        judge(fake).final_response_match([ActualTurn(response="Today.")], [inv("one")], CFG)
        (served,) = fake.served("one")
        assert "json_schema" == served.response_format

    def test_budget_exhausted_leaves_it_unscored_and_fails_the_case(self, fake: FakeOpenAI) -> None:
        fake.register("one", [verdict(1)])
        j = judge(fake, tokens_per_hour=10)
        case = EvalCase(eval_id="c", conversation=[inv("one")])
        config = EvalConfig.model_validate({"criteria": {"final_response_match": 0.5, "task_success": 1.0}})
        result = evaluate_case(case, [ActualTurn(response="Today.")], config, judge=j)
        fr, success = result.results
        assert fr.score is None
        assert "judge: budget exhausted" == fr.detail
        assert 0.0 == success.score
        assert result.passed is False
        assert [] == fake.served()

    def test_no_judge_configured(self) -> None:
        case = EvalCase(eval_id="c", conversation=[inv("x")])
        config = EvalConfig.model_validate({"criteria": {"final_response_match": 0.5}})
        result = evaluate_case(case, [ActualTurn(response="Today.")], config)
        assert result.passed is False
        assert result.results[0].detail.startswith("judge: no judge configured")


class TestRubrics:
    def test_share_of_rubrics_met(self, fake: FakeOpenAI) -> None:
        fake.register("rubric", [verdict(1), verdict(0, "no apology")], sequential=True)
        j = judge(fake)
        rubrics = [
            "The answer states the delivery date [[scenario:rubric]]",
            "The answer apologises [[scenario:rubric]]",
        ]
        r = j.rubric_quality(
            "rubric_response_quality", [ActualTurn(response="It ships today.")], [inv("rubric")], rubrics, CFG
        )
        assert 0.5 == r.score
        assert "no apology" in r.detail

    def test_tool_use_rubric_sees_the_calls(self, fake: FakeOpenAI) -> None:
        fake.register("tools", [verdict(1)])
        j = judge(fake)
        turn = ActualTurn(tool_calls=(ToolCall(name="lookup_order", args={"order_id": "A-17"}),))
        r = j.rubric_quality(
            "rubric_tool_use_quality", [turn], [inv("tools")], ["Looks the order up first [[scenario:tools]]"], CFG
        )
        assert 1.0 == r.score
        (served,) = fake.served("tools")
        assert served.kind == "text"

    def test_rubrics_from_the_case(self, fake: FakeOpenAI) -> None:
        fake.register("case_rubric", [verdict(1)])
        case = EvalCase(eval_id="c", conversation=[inv("case_rubric")], rubrics=["Polite [[scenario:case_rubric]]"])
        config = EvalConfig.model_validate({"criteria": {"rubric_based_final_response_quality_v1": 1.0}})
        result = evaluate_case(case, [ActualTurn(response="Sure!")], config, judge=judge(fake))
        assert result.passed is True


def test_endpoint_defaults_match_the_pipeline_judge() -> None:
    """The eval config's judge asks its model as a ``vigil.yaml`` judge does by default: the same
    timeout, retries, backoff cap and token limit (both are a JudgeClient endpoint)."""
    names = ("timeout_s", "max_retries", "max_backoff_s", "max_tokens")
    pipeline_judge = JudgeConfig.model_validate({"rubric": "groundedness", "model": "m"})
    eval_judge = JudgeOptions.model_validate({})
    assert [getattr(pipeline_judge, n) for n in names] == [getattr(eval_judge, n) for n in names]
