"""An empty final answer scores as Google ADK scores it: ROUGE-1 of an empty text, 0.

ADK's ``response_match_score`` takes the text of the invocation's final response event and nothing
else (``final_response_match_v1.py`` in https://github.com/google/adk-python); an empty answer is
ROUGE-1 of the empty string. Vigil used to take an earlier assistant message instead.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scorers.eval.actual import turn_of
from scorers.eval.criteria import ActualTurn, response_match
from scorers.eval.model import Content, CriterionConfig, Invocation
from scorers.normalise import normalise
from tests.support.spans import node, trace

EXPECTED = "The weather in Paris is 18C."
ASIDE = "Let me check the weather in Paris."
"""Text the model wrote beside its tool call: ROUGE-1 against EXPECTED is P 4/7, R 4/6, F 32/52."""


def expected(answer: str | None = EXPECTED) -> list[Invocation]:
    final = None if answer is None else Content.of(answer, "model")
    return [Invocation(user_content=Content.of("Weather in Paris?", "user"), final_response=final)]


def score(actual: list[ActualTurn], answer: str | None = EXPECTED) -> float | None:
    return response_match(actual, expected(answer), CriterionConfig(threshold=0.5)).score


def text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def chat(history: list[dict[str, Any]], output: dict[str, Any], finish: str) -> Any:
    return node(
        "chat gpt-4o",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.finish_reasons": [finish],
            "gen_ai.input.messages": json.dumps(history),
            "gen_ai.output.messages": json.dumps([output]),
        },
    )


def weather_run(final_text: str, root: dict[str, Any] | None = None) -> Any:
    """An OTel GenAI run: the model writes ASIDE beside a weather tool call, then answers ``final_text``."""
    user = text("user", "Weather in Paris?")
    asked = {
        "role": "assistant",
        "parts": [
            {"type": "text", "content": ASIDE},
            {"type": "tool_call", "id": "c1", "name": "weather", "arguments": {"city": "Paris"}},
        ],
    }
    result = {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "result": "18C"}]}
    tool = node(
        "execute_tool weather",
        {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "c1"},
    )
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather", **(root or {})}
    return normalise(
        trace(
            node(
                "invoke_agent weather",
                agent,
                chat([user], asked, "tool_call"),
                tool,
                chat([user, asked, result], text("assistant", final_text), "stop"),
            )
        )
    )


class TestCriterion:
    def test_an_empty_answer_scores_zero(self) -> None:
        assert 0.0 == score([ActualTurn("Weather in Paris?", (), "")])

    def test_a_blank_answer_scores_zero(self) -> None:
        assert 0.0 == score([ActualTurn("Weather in Paris?", (), "  \n\t ")])

    @pytest.mark.parametrize("answer", ["", None])
    def test_empty_against_empty_scores_zero_as_rouge_score_does(self, answer: str | None) -> None:
        # rouge-score: precision = recall = 0 / max(0, 1) = 0, so the F-measure is 0
        assert 0.0 == score([ActualTurn("Weather in Paris?", (), "")], answer)

    def test_a_missing_turn_scores_zero(self) -> None:
        assert 0.0 == score([])


class TestFromTraces:
    def test_the_aside_is_scored_when_it_is_the_answer(self) -> None:
        # the control: ASIDE as the final answer scores 32/52 (hand-computed above)
        assert pytest.approx(32 / 52) == score([turn_of(weather_run(ASIDE))])

    @pytest.mark.parametrize("final", ["", "   "])
    def test_an_empty_last_answer_is_not_replaced_by_the_aside(self, final: str) -> None:
        run = weather_run(final)
        assert final == run.final_output
        assert 0.0 == score([turn_of(run)])

    def test_an_empty_answer_captured_on_the_root_is_the_answer(self) -> None:
        run = weather_run("The weather in Paris is 18C.", {"output.value": ""})
        assert "" == run.final_output
        assert 0.0 == score([turn_of(run)])

    def test_a_captured_answer_still_scores(self) -> None:
        assert 1.0 == score([turn_of(weather_run("The weather in Paris is 18C."))])
