"""Each criterion against hand-computed values; the three match modes; argument matching."""

from __future__ import annotations

import pytest

from scorers.eval.criteria import (
    ActualTurn,
    CriterionResult,
    args_match,
    match_any_order,
    match_exact,
    match_in_order,
    param_accuracy,
    phrase_recall,
    response_match,
    task_success,
    tool_precision,
    tool_recall,
    tool_trajectory,
)
from scorers.eval.model import ArgMatch, Content, CriterionConfig, IntermediateData, Invocation, MatchType, ToolCall


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(name=name, args=dict(args))


def inv(user: str, tools: list[ToolCall], answer: str | None = None) -> Invocation:
    return Invocation(
        user_content=Content.of(user, "user"),
        final_response=None if answer is None else Content.of(answer, "model"),
        intermediate_data=IntermediateData(tool_uses=tools),
    )


def turn(tools: list[ToolCall], answer: str = "") -> ActualTurn:
    return ActualTurn("q", tuple(tools), answer)


A, B, C = call("a", x=1), call("b", y="Paris"), call("c")


class TestArgs:
    def test_decoded_json_values(self) -> None:
        assert args_match({"n": 250.0, "s": "x"}, {"s": "x", "n": 250})  # key order ignored, 250 == 250.0
        assert not args_match({"s": "Paris"}, {"s": "paris"})  # case-sensitive
        assert not args_match({"s": "x"}, {"s": "x", "t": 1})  # missing key
        assert not args_match({"s": "x", "t": 1}, {"s": "x"})  # extra key
        assert args_match({"o": {"b": [1, 2.0], "a": None}}, {"o": {"a": None, "b": [1.0, 2]}})
        assert not args_match({"l": [1, 2]}, {"l": [2, 1]})

    def test_subset_and_ignore(self) -> None:
        assert args_match({"s": "x", "t": 1}, {"s": "x"}, ArgMatch.SUBSET)
        assert not args_match({"t": 1}, {"s": "x"}, ArgMatch.SUBSET)
        assert not args_match({"s": "y"}, {"s": "x"}, ArgMatch.SUBSET)
        assert args_match({"q": 1}, {"s": "x"}, ArgMatch.IGNORE)


class TestMatchModes:
    @pytest.mark.parametrize(
        ("actual", "expected", "exact", "in_order", "any_order"),
        [
            ([A, B], [A, B], True, True, True),
            ([B, A], [A, B], False, False, True),
            ([A, C, B], [A, B], False, True, True),
            ([A], [A, B], False, False, False),
            ([], [], True, True, True),
            ([A], [], False, True, True),
            ([], [A], False, False, False),
            ([A, A], [A, A], True, True, True),
            ([A], [A, A], False, False, False),  # ANY_ORDER: each expected call needs its own actual call
            ([call("a", x=2), B], [A, B], False, False, False),
        ],
    )
    def test_table(
        self, actual: list[ToolCall], expected: list[ToolCall], exact: bool, in_order: bool, any_order: bool
    ) -> None:
        assert exact == match_exact(actual, expected)
        assert in_order == match_in_order(actual, expected)
        assert any_order == match_any_order(actual, expected)

    def test_any_order_finds_a_full_pairing_under_subset(self) -> None:
        # greedy first-match would give the first actual call to the looser expectation and fail
        actual = [call("a", x=1, y=2), call("a", x=1)]
        expected = [call("a", x=1), call("a", x=1, y=2)]
        assert match_any_order(list(reversed(actual)), expected, ArgMatch.SUBSET)
        assert match_any_order(actual, expected, ArgMatch.SUBSET)


def cfg(threshold: float = 1.0, **kw: object) -> CriterionConfig:
    return CriterionConfig.model_validate({"threshold": threshold, **kw})


class TestTrajectory:
    def test_mean_over_invocations(self) -> None:
        expected = [inv("1", [A]), inv("2", [B]), inv("3", []), inv("4", [A, B])]
        actual = [turn([A]), turn([C]), turn([]), turn([B, A])]
        r = tool_trajectory(actual, expected, cfg())
        assert (1.0, 0.0, 1.0, 0.0) == r.per_turn
        assert 0.5 == r.score
        assert r.passed is False
        assert 'turn 2: missing b(y="Paris")' in r.detail
        r = tool_trajectory(actual, expected, cfg(0.5, match_type="any_order"))
        assert 0.75 == r.score
        assert r.passed is True

    def test_explains_argument_difference(self) -> None:
        r = tool_trajectory([turn([call("b", y="paris")])], [inv("1", [B])], cfg())
        assert 'b: argument y: expected "Paris", got "paris"' in r.detail

    def test_missing_turn_counts_as_empty(self) -> None:
        r = tool_trajectory([turn([A])], [inv("1", [A]), inv("2", [B])], cfg())
        assert 0.5 == r.score

    def test_adk_match_type_numbers(self) -> None:
        assert MatchType.IN_ORDER == cfg(match_type=1).match_type
        assert MatchType.ANY_ORDER == cfg(match_type="any-order").match_type


class TestCounts:
    def test_recall_precision_param_accuracy(self) -> None:
        expected = [inv("1", [call("a", x=1, y=2), call("b", z="q")])]
        actual = [turn([call("a", x=1, y=3), call("c"), call("c")])]
        # recall: a made, b missing -> 1/2; precision: a of 3 calls -> 1/3
        assert 0.5 == tool_recall(actual, expected, cfg()).score
        assert pytest.approx(1 / 3) == tool_precision(actual, expected, cfg()).score
        # param accuracy: a -> keys {x,y}, x right -> 1/2; b unpaired -> 0; mean 0.25
        r = param_accuracy(actual, expected, cfg())
        assert 0.25 == r.score
        assert "a: argument y: expected 2, got 3" in r.detail
        assert "b not called" in r.detail

    def test_empty_cases(self) -> None:
        assert 1.0 == tool_recall([turn([A])], [inv("1", [])], cfg()).score
        assert 0.0 == tool_precision([turn([A])], [inv("1", [])], cfg()).score
        assert 1.0 == tool_precision([turn([])], [inv("1", [])], cfg()).score
        assert 0.0 == tool_precision([turn([])], [inv("1", [A])], cfg()).score
        assert 1.0 == param_accuracy([turn([])], [inv("1", [])], cfg()).score


class TestResponse:
    def test_rouge_mean(self) -> None:
        # turn 1: "the cat sat" vs "the cat sat down": P=1, R=3/4 -> F=6/7; turn 2: identical -> 1
        expected = [inv("1", [], "the cat sat down"), inv("2", [], "Hello there")]
        actual = [turn([], "The cat sat"), turn([], "hello, there!")]
        r = response_match(actual, expected, cfg(0.8))
        assert pytest.approx((6 / 7, 1.0)) == r.per_turn
        assert pytest.approx((6 / 7 + 1) / 2) == r.score
        assert r.passed is True

    def test_no_reference_scores_zero_as_adk(self) -> None:
        assert 0.0 == response_match([turn([], "anything")], [inv("1", [])], cfg(0.8)).score


class TestPhrasesAndSuccess:
    def test_phrase_recall(self) -> None:
        r = phrase_recall(
            [turn([], "Your order  A-17 ships TODAY."), turn([], "Refund issued")],
            ["a-17 ships", "today", "tomorrow"],
            cfg(0.5),
        )
        assert pytest.approx(2 / 3) == r.score
        assert "'tomorrow'" in r.detail
        assert phrase_recall([turn([])], [], cfg()).score is None

    def test_task_success(self) -> None:
        ok = tool_recall([turn([A])], [inv("1", [A])], cfg())
        bad = tool_recall([turn([])], [inv("1", [A])], cfg())
        assert 1.0 == task_success([ok], cfg()).score
        r = task_success([ok, bad], cfg())
        assert 0.0 == r.score
        assert "tool_recall" in r.detail


class TestJsonForm:
    def test_as_dict_names_every_field(self) -> None:
        """The JSON form is every field by name, in field order, with the per-turn scores as a list."""
        result = CriterionResult("tool_trajectory_avg_score", 0.5, 1.0, False, "turn 2 differs", (1.0, 0.0))
        expected = {
            "name": "tool_trajectory_avg_score",
            "score": 0.5,
            "threshold": 1.0,
            "passed": False,
            "detail": "turn 2 differs",
            "per_turn": [1.0, 0.0],
        }
        assert list(expected.items()) == list(result.as_dict().items())
