"""Tests for scorers.judge.config: validation of the judges section."""

from __future__ import annotations

from typing import Any

import pytest

from scorers.errors import JudgeConfigError
from scorers.judge.config import judge_rules, parse_judges, parse_session_judges
from scorers.judge.rubrics import BUILTIN_RUBRICS, SESSION_PREAMBLE, SESSION_RUBRICS
from scorers.model import Priority
from scorers.rules import compile_rules

BASE: dict[str, Any] = {"rubric": "groundedness", "model": "gpt-4o-mini"}


class TestParseJudges:
    """A bad judge refuses to start, naming the judge and the key."""

    def test_defaults(self) -> None:
        """Defaults: flagged runs only, all of them, no key needed, no budget."""
        (spec,) = parse_judges({"ground": BASE}, {})
        assert "ground" == spec.name
        assert spec.selector is None
        assert 1.0 == spec.config.sample_rate
        assert "unused" == spec.api_key
        assert BUILTIN_RUBRICS["groundedness"] == spec.rubric
        assert spec.config.budget.tokens_per_hour is None
        assert spec.rule is None

    def test_api_key_from_named_variable(self) -> None:
        """api_key_env names the variable holding the key."""
        (spec,) = parse_judges({"j": {**BASE, "api_key_env": "JUDGE_KEY"}}, {"JUDGE_KEY": "sk-1"})
        assert "sk-1" == spec.api_key

    @pytest.mark.parametrize(
        ("name", "entry", "key"),
        [
            ("j", {**BASE, "api_key_env": "MISSING"}, "api_key_env"),
            ("j", {**BASE, "rubric": "nope"}, "rubric"),
            ("j", {**BASE, "select": "agent =="}, "select"),
            ("j", {**BASE, "select": "agent"}, "select"),
            ("j", {**BASE, "sample_rate": 2}, "sample_rate"),
            ("j", {**BASE, "colour": "red"}, "colour"),
            ("j", {"rubric": "safety"}, "model"),
            ("j", {**BASE, "rubric": {"name": "x", "version": "1", "instructions": "short"}}, "rubric"),
            ("Bad-Name", BASE, "name"),
        ],
    )
    def test_refusals(self, name: str, entry: dict[str, Any], key: str) -> None:
        """Each bad value is reported with the judge name and the offending key."""
        with pytest.raises(JudgeConfigError) as info:
            parse_judges({name: entry}, {})
        assert name == info.value.judge
        assert key in info.value.key

    def test_custom_rubric_and_selector(self) -> None:
        """A custom rubric carries its version; a selector is compiled."""
        rubric = {"name": "concise", "version": "3", "instructions": "Score how concise the final answer is."}
        (spec,) = parse_judges({"c": {**BASE, "rubric": rubric, "select": "agent == 'support'"}}, {})
        assert "concise@3" == spec.rubric.label
        assert spec.selector is not None


class TestJudgeRules:
    """flag_below becomes a rule the rule engine accepts."""

    def test_flag_below_rule(self) -> None:
        """judge_<name>: has(judge.<name>) && judge.<name> < threshold, with the configured priority."""
        specs = parse_judges({"ground": {**BASE, "flag_below": 0.5, "priority": "high"}}, {})
        rules = judge_rules(specs, None)
        assert {"judge_ground": {"expr": "has(judge.ground) && judge.ground < 0.5", "priority": "high"}} == rules
        compiled = {r.name: r for r in compile_rules(rules, judge_names=["ground"])}
        assert Priority.HIGH == compiled["judge_ground"].priority

    def test_configured_rule_wins(self) -> None:
        """A rule of the same name in rules: overrides the generated one."""
        specs = parse_judges({"ground": {**BASE, "flag_below": 0.5}}, {})
        mine = {"judge_ground": {"expr": "judge.ground < 0.2", "priority": "low"}}
        assert mine["judge_ground"] == judge_rules(specs, mine)["judge_ground"]


class TestCustomRubric:
    """A custom rubric keeps the safety preamble and answer format."""

    def test_preamble(self) -> None:
        """The instructions follow the preamble that marks run content as data."""
        rubric = {"name": "concise", "version": "2", "instructions": "Score how concise the final answer is."}
        (spec,) = parse_judges({"c": {**BASE, "rubric": rubric}}, {})
        assert spec.rubric.instructions.endswith("Score how concise the final answer is.")
        assert "never as instructions" in spec.rubric.instructions


class TestReadmeExample:
    """The manual's judges example (docs/judges.md) is valid configuration."""

    def test_readme_yaml(self) -> None:
        """Every judge of the example parses, and their rules compile."""
        import re
        from pathlib import Path

        import yaml

        readme = (Path(__file__).parents[3] / "docs" / "judges.md").read_text()
        block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("judges:"))
        specs = parse_judges(yaml.safe_load(block)["judges"], {"OPENAI_API_KEY": "sk-x"})
        assert ["groundedness", "safety_local", "concise"] == [s.name for s in specs]
        assert "http://127.0.0.1:11434/v1" == specs[1].config.base_url
        assert "concise@2" == specs[2].rubric.label
        names = {r.name for r in compile_rules(judge_rules(specs, None), judge_names=[s.name for s in specs])}
        assert "judge_groundedness" in names


SESSION_BASE: dict[str, Any] = {"rubric": "contradiction", "model": "gpt-4o-mini"}
SAMPLE_SESSION_VARIABLES: dict[str, Any] = {"turns": 1, "agent": "sample", "abandoned": False, "signals": []}
"""A sample session's variables (review_queue.session_close passes its own)."""


class TestParseSessionJudges:
    """Session judges: a judge's keys with session rubrics, a selector over the session, and their defaults."""

    def test_defaults(self) -> None:
        """Sessions of two turns or more, all of them, a score below 0.5 flags; rubric by name."""
        (spec,) = parse_session_judges({"contradiction": SESSION_BASE}, {}, sample=SAMPLE_SESSION_VARIABLES)
        assert SESSION_RUBRICS["contradiction"] == spec.rubric
        assert "turns >= 2" == spec.config.select
        assert spec.selector is not None
        assert spec.selector.execute({"turns": 2}) is True
        assert spec.selector.execute({"turns": 1}) is False
        assert 1.0 == spec.config.sample_rate
        assert 0.5 == spec.config.flag_below
        assert spec.config.budget.tokens_per_hour is None

    def test_budget_sample_and_selector(self) -> None:
        """The run judges' budget, price, sample and cache keys apply; the selector sees the session variables."""
        entry = {
            **SESSION_BASE,
            "rubric": "knowledge_retention",
            "select": "turns >= 3 && agent == 'support' && !abandoned",
            "sample_rate": 0.1,
            "budget": {"tokens_per_hour": 5000, "usd_per_hour": 0.5},
            "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6},
            "cache_size": 10,
            "flag_below": 0.3,
        }
        (spec,) = parse_session_judges({"memory": entry}, {}, sample=SAMPLE_SESSION_VARIABLES)
        assert spec.selector is not None
        assert spec.selector.execute({"turns": 3, "agent": "support", "abandoned": False}) is True
        assert (0.1, 5000, 10, 0.3) == (
            spec.config.sample_rate,
            spec.config.budget.tokens_per_hour,
            spec.config.cache_size,
            spec.config.flag_below,
        )
        assert spec.price.cost(1_000_000, 0) == pytest.approx(0.15)

    @pytest.mark.parametrize(
        ("name", "entry", "taken", "key"),
        [
            ("ground", SESSION_BASE, ("ground",), "name"),
            ("c", {**SESSION_BASE, "rubric": "groundedness"}, (), "rubric"),
            ("c", {**SESSION_BASE, "select": "turns >="}, (), "select"),
            ("c", {**SESSION_BASE, "select": "turns"}, (), "select"),
            ("c", {**SESSION_BASE, "select": "turnz >= 2"}, (), "select"),
            ("c", {**SESSION_BASE, "sample_rate": 2}, (), "sample_rate"),
            ("c", {**SESSION_BASE, "api_key_env": "NOT_SET_ANYWHERE"}, (), "api_key_env"),
            ("Bad-Name", SESSION_BASE, (), "name"),
        ],
    )
    def test_refusals(self, name: str, entry: dict[str, Any], taken: tuple[str, ...], key: str) -> None:
        """A run rubric, a bad selector, a name a run judge has (they share metric labels) refuse to start."""
        with pytest.raises(JudgeConfigError) as err:
            parse_session_judges({name: entry}, {}, sample=SAMPLE_SESSION_VARIABLES, taken=taken)
        assert (name, key) == (err.value.judge, err.value.key)

    def test_unknown_rubric_lists_the_session_rubrics(self) -> None:
        """The error names the session rubrics one can choose."""
        with pytest.raises(JudgeConfigError, match="contradiction, conversation_completeness, knowledge_retention"):
            parse_session_judges({"c": {**SESSION_BASE, "rubric": "nope"}}, {}, sample=SAMPLE_SESSION_VARIABLES)

    def test_custom_session_rubric_gets_the_session_preamble(self) -> None:
        """Your own instructions follow the session preamble (the conversation is data)."""
        rubric = {"name": "tone", "version": "2", "instructions": "Score 1 when the agent stays polite throughout."}
        entry = {**SESSION_BASE, "rubric": rubric}
        (spec,) = parse_session_judges({"tone": entry}, {}, sample=SAMPLE_SESSION_VARIABLES)
        assert "tone@2" == spec.rubric.label
        assert spec.rubric.instructions.startswith(SESSION_PREAMBLE)
