"""Tests for scorers.rules: CEL rules, validation, the deterministic sample and the decision."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scorers.errors import RuleError, UnknownScorerError
from scorers.model import Priority, Run
from scorers.registry import build_chain
from scorers.rules import DEFAULT_RULES, EVAL_ERRORS, compile_rules, decide, sample_point

NAMES = ("step_efficiency", "repeated_tool_calls", "tool_error_rate")


def trace_ids(n: int) -> list[str]:
    return [f"{i:032x}" for i in range(n)]


class TestSample:
    """The deterministic random sample."""

    def test_deterministic_and_uniform(self) -> None:
        """The same id maps to the same point; ~5 % of 20k ids fall under 0.05."""
        ids = trace_ids(20_000)
        assert [sample_point(t) for t in ids[:50]] == [sample_point(t) for t in ids[:50]]
        share = sum(sample_point(t) < 0.05 for t in ids) / len(ids)
        assert 0.045 < share < 0.055

    def test_case_insensitive(self) -> None:
        """Upper- and lower-case hex ids sample alike."""
        assert sample_point("AB" * 16) == sample_point("ab" * 16)


class TestDecide:
    """One decision per run; every reason recorded; highest priority wins."""

    rules = compile_rules(None, NAMES)

    def test_not_flagged(self) -> None:
        """A clean run outside the sample is not flagged."""
        tid = next(t for t in trace_ids(100) if sample_point(t) >= 0.05)
        assert decide(Run(trace_id=tid), {"step_efficiency": 1.0}, self.rules, 0.05) is None

    def test_all_reasons_and_highest_priority(self) -> None:
        """A cap hit that also errored and was inefficient is high with every reason."""
        tid = next(t for t in trace_ids(100) if sample_point(t) < 0.05)
        run = Run(trace_id=tid, hit_max_iterations=True, errored=True)
        flag = decide(run, {"step_efficiency": 0.1}, self.rules, 0.05)
        assert flag is not None
        assert Priority.HIGH is flag.priority
        assert ("hit_max_iterations", "low_step_efficiency", "errored", "random_sample") == flag.reasons
        assert 0.05 == flag.sample_rate

    def test_random_sample_only_is_low(self) -> None:
        """A run flagged only by the sample is low priority and records the rate."""
        tid = next(t for t in trace_ids(100) if sample_point(t) < 0.05)
        flag = decide(Run(trace_id=tid), {}, self.rules, 0.05)
        assert flag is not None
        assert (("random_sample",), Priority.LOW) == (flag.reasons, flag.priority)

    def test_missing_score_does_not_match(self) -> None:
        """Without a step_efficiency score the efficiency rule simply does not match."""
        tid = next(t for t in trace_ids(100) if sample_point(t) >= 0.05)
        assert decide(Run(trace_id=tid), {}, self.rules, 0.05) is None

    def test_rule_error_is_reported_not_raised(self) -> None:
        """A rule that fails at run time does not match and is reported."""
        rules = compile_rules({"ratio": {"expr": "tool_errors / tool_calls > 0", "priority": "high"}}, NAMES)
        errors: list[str] = []
        flag = decide(Run(trace_id="f" * 32), {}, rules, 0.0, on_error=lambda name, _e: errors.append(name))
        assert flag is None
        assert ["ratio"] == errors

    def test_custom_rules_over_run_fields_and_attributes(self) -> None:
        """Rules see run fields, scores and root attributes."""
        config = {
            "slow_support": {"expr": "agent == 'support' && duration_s > 10.0", "priority": "normal"},
            "prod": {"expr": "attributes['deployment.environment'] == 'prod'", "priority": "low"},
        }
        rules = compile_rules(config, NAMES)
        run = Run(trace_id="e" * 32, agent="support", start_ns=0, end_ns=11 * 10**9,
                  attributes={"deployment.environment": "prod"})  # fmt: skip
        flag = decide(run, {}, rules, 0.0)
        assert flag is not None
        assert ("slow_support", "prod") == flag.reasons
        assert Priority.NORMAL is flag.priority


class TestValidation:
    """Rules are validated at start-up with an error naming the rule."""

    @pytest.mark.parametrize(
        ("config", "message"),
        [
            ({"bad": {"expr": "errored &&"}}, "syntax"),
            ({"bad": {"expr": "no_such_field"}}, "no_such_field"),
            ({"bad": {"expr": "llm_calls + 1"}}, "boolean"),
            ({"bad": {"expr": "errored", "priority": "urgent"}}, "priority"),
            ({"bad": {"priority": "high"}}, "expr"),
            ({"bad": {"expr": "errored", "when": 1}}, "unknown keys"),
            ({"bad": "errored"}, "mapping"),
        ],
    )
    def test_bad_rule_names_itself(self, config: dict[str, object], message: str) -> None:
        """Each kind of mistake raises RuleError naming the rule."""
        with pytest.raises(RuleError, match=message) as info:
            compile_rules(config, NAMES)
        assert "bad" == info.value.rule

    def test_disable_and_replace_defaults(self) -> None:
        """enabled: false removes a default rule; the same name replaces it."""
        rules = compile_rules(
            {"random_sample": {"enabled": False}, "errored": {"expr": "errored", "priority": "high"}}, NAMES
        )
        by_name = {r.name: r.priority for r in rules}
        assert "random_sample" not in by_name
        assert Priority.HIGH is by_name["errored"]

    def test_unknown_scorer_lists_known(self) -> None:
        """An unknown scorer name is refused with the known names."""
        with pytest.raises(UnknownScorerError, match="tool_error_rate"):
            build_chain(["nope"])


class TestRepeatThreshold:
    """The default loop rule follows VIGIL_REPEAT_THRESHOLD."""

    def test_threshold_configures_tool_loop(self) -> None:
        """With threshold 5, four identical calls do not flag and five do."""
        rules = compile_rules({"random_sample": {"enabled": False}}, NAMES, repeat_threshold=5)
        run = Run(trace_id="d" * 32)
        assert decide(run, {"repeated_tool_calls": 4.0}, rules, 0.0) is None
        flag = decide(run, {"repeated_tool_calls": 5.0}, rules, 0.0)
        assert flag is not None
        assert ("tool_loop",) == flag.reasons


_MISSING = object()


class TestScoreShortcut:
    """Guarded score comparisons are evaluated in Python with exactly CEL's result."""

    def test_default_score_rules_take_the_shortcut(self) -> None:
        """The default low_step_efficiency and tool_loop rules need no CEL context; others keep CEL."""
        config = {"odd": {"expr": "has(scores.tokens) && scores.tokens > 10", "priority": "low"}}
        rules = {r.name: r for r in compile_rules(config, NAMES)}
        assert rules["low_step_efficiency"].score_test is not None
        assert rules["tool_loop"].score_test is not None
        assert rules["odd"].score_test is None  # an int literal: left to CEL

    @settings(max_examples=400, deadline=None)
    @given(
        op=st.sampled_from(["<", "<=", ">", ">=", "==", "!="]),
        literal=st.sampled_from(["0.3", "3.0", "-1.5", "0.0", "1000.0"]),
        value=st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-(2**63), 2**63 - 1),
            st.booleans(),
            st.none(),
            st.just(_MISSING),
            st.sampled_from([0.3, 3.0, -1.5, 0.0, 1000.0, 3, 0]),
        ),
    )
    def test_same_result_as_cel(self, op: str, literal: str, value: Any) -> None:
        """Match, no match or an evaluation error: the same with and without the shortcut."""
        (rule,) = compile_rules({"r": {"expr": f"has(scores.x) && scores.x {op} {literal}"}, **_NO_DEFAULTS}, ["x"])
        assert rule.score_test is not None
        scores = {} if value is _MISSING else {"x": value}
        act = {"scores": scores}
        assert _outcome(lambda: rule.matches(act)) == _outcome(lambda: rule.program.execute(act) is True)


_NO_DEFAULTS: dict[str, Any] = {name: {"enabled": False} for name in DEFAULT_RULES}


def _outcome(evaluate: Any) -> object:
    try:
        return bool(evaluate())
    except EVAL_ERRORS as exc:
        return type(exc)
