"""The worked example of evaluation by dimension (``examples/react_agent``), end to end from its own
files through ``vigil eval run`` against the scripted model server: the summary by dimension equals
the hand computation below, the shortcut and the empty-input crash included, in every report."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scorers.eval.model import load_eval_set
from vigil.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "react_agent"

# The hand computation, from examples/react_agent/evalset.json and the scripts in agent.py.
#
# capability (5 cases)
#   tool-call accuracy, per case = expected calls made / expected calls:
#     weather_paris 1/1, price_x200 1/1, multiply 1/1, headsets_total 2/2,
#     discount_now 1/2 (the shortcut: calculator(79*0.8) on the question's price, get_price skipped)
#     mean = (1 + 1 + 1 + 1 + 0.5) / 5 = 0.9
#   task completion: each case's expected phrase is in its answer (the shortcut's "63.2 dollars"
#     too: the old price happens to be the current one) = 1.0
#   passed: discount_now fails tool_trajectory (EXACT) = 4/5
# efficiency (3 cases)
#   steps = LLM calls: eff_weather_berlin 2 (tool call, answer), eff_price_p5 2, eff_two_laptops 3
#     (get_price, calculator, answer): (2 + 2 + 3) / 3 = 7/3
#   tokens: the scripted server reports (100 + 10 i) prompt + (20 + 5 i) completion tokens for its
#     i-th answer of a conversation: 2 steps = 120 + 135 = 255, 3 steps = 255 + 150 = 405;
#     (255 + 255 + 405) / 3 = 305
#   passed: 3/3
# robustness (5 edge cases)
#   empty_input: the model API rejects the empty message (HTTP 400), the error reaches the caller:
#     fails graceful; prompt_injection, unknown_city (tool error handled), sqrt_negative (math
#     domain error handled), missing_product pass: 4/5 = 0.8
EXPECTED: dict[str, dict[str, Any]] = {
    "capability": {"runs": 5, "passed": 4, "tool_accuracy": 0.9, "task_completion": 1.0},
    "efficiency": {"runs": 3, "passed": 3, "steps": 7 / 3, "tokens": 305.0},
    "robustness": {"runs": 5, "passed": 4, "pass_rate": 0.8},
}
ROWS = [
    ("capability", "tool-call accuracy", "90.0 %"),
    ("capability", "task completion", "100.0 %"),
    ("capability", "cases passed", "80.0 % (4/5)"),
    ("efficiency", "steps per task", "2.33"),
    ("efficiency", "tokens per task", "305"),
    ("efficiency", "cases passed", "100.0 % (3/3)"),
    ("robustness", "pass rate over edge cases", "80.0 % (4/5)"),
]
CRASH = "the agent raised BadRequestError: Error code: 400"


@pytest.fixture(autouse=True, scope="module")
def _undo_example_tracing() -> Iterator[None]:
    """The example agent sets its tracing up once per process (and instruments OpenAI): undo it after."""
    yield
    from examples.react_agent import agent

    agent._model.reset()


def _run(tmp: Path, *extra: str) -> int:
    vigil_yaml = tmp / "vigil.yaml"
    vigil_yaml.write_text(f"database_url: sqlite:///{tmp / 'vigil.db'}\n")
    return main(
        ["--config", str(vigil_yaml), "eval", "run", "--agent", "examples.react_agent.agent:answer",
         str(EXAMPLE / "evalset.json"), "--config", str(EXAMPLE / "eval_config.json"), *extra]
    )  # fmt: skip


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of the example with every report written."""
    tmp = tmp_path_factory.mktemp("react")
    code = _run(tmp, "--json", str(tmp / "report.json"), "--junit", str(tmp / "junit.xml"),
                "--markdown", str(tmp / "report.md"))  # fmt: skip
    return {
        "code": code,
        "dir": tmp,
        "json": json.loads((tmp / "report.json").read_text()),
        "junit": ET.fromstring((tmp / "junit.xml").read_text()),
        "markdown": (tmp / "report.md").read_text(),
    }


def test_the_example_has_13_cases_by_dimension() -> None:
    cases = load_eval_set(EXAMPLE / "evalset.json").eval_cases
    counts = {d: sum(c.dimension == d for c in cases) for d in ("capability", "efficiency", "robustness")}
    assert {"capability": 5, "efficiency": 3, "robustness": 5} == counts


def test_dimension_summary_equals_the_hand_computation(reports: dict[str, Any]) -> None:
    assert 1 == reports["code"]  # two cases fail: the exit status says so
    dims = reports["json"]["dimensions"]
    for dimension, expected in EXPECTED.items():
        actual = {k: dims[dimension][k] for k in expected}
        assert expected == pytest.approx(actual), dimension
    assert dims["efficiency"]["latency_ms"] > 0


def test_the_shortcut_and_the_crash_are_shown(reports: dict[str, Any]) -> None:
    by_case = {r["eval_id"]: r for r in reports["json"]["results"]}
    shortcut = by_case["discount_now"]
    assert 0.5 == shortcut["measures"]["tool_accuracy"]
    assert 1.0 == shortcut["measures"]["task_completion"]
    trajectory = [c["detail"] for c in shortcut["criteria"] if c["name"] == "tool_trajectory"]
    assert ['turn 1: missing get_price(product="T1 headset")'] == trajectory
    crash = by_case["empty_input"]
    assert CRASH in crash["error"]
    assert {"graceful": False} == {c["name"]: c["passed"] for c in crash["criteria"]}
    md = reports["markdown"]
    assert "| react\\_agent/discount\\_now | capability | price, calculator, multi\\_tool | 50 % | 100 % |" in md
    assert f"- **react\\_agent/empty\\_input** (robustness): error: turn 1: {CRASH}" in md


def test_markdown_table_rows(reports: dict[str, Any]) -> None:
    assert ROWS == [row[:3] for row in _summary_rows(reports["markdown"]) if row[1] != "latency per task"]


def _summary_rows(markdown: str) -> list[tuple[str, ...]]:
    lines = [
        line for line in markdown.splitlines() if line.startswith(("| capability", "| efficiency", "| robustness"))
    ]
    return [tuple(c.strip() for c in line.strip("|").split("|")) for line in lines]


def test_efficiency_against_a_baseline(reports: dict[str, Any], tmp_path: Path) -> None:
    """The first run's JSON report with 2 steps and 255 tokens per task as its efficiency: the second
    run shows the baseline's values and the change (+1/3 step, +50 tokens)."""
    earlier = copy.deepcopy(reports["json"])
    earlier["dimensions"]["efficiency"] |= {"steps": 2.0, "tokens": 255, "latency_ms": None}
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(earlier))
    _run(tmp_path, "--markdown", str(tmp_path / "report.md"), "--baseline", str(baseline))
    changes = {row[1]: row[3:] for row in _summary_rows((tmp_path / "report.md").read_text()) if row[0] == "efficiency"}
    assert ("2.00", "+0.33") == changes["steps per task"]
    assert ("255", "+50") == changes["tokens per task"]
    assert ("–", "") == changes["latency per task"]  # the baseline has no latency


def test_junit_carries_the_summary(reports: dict[str, Any]) -> None:
    suite = reports["junit"].find("testsuite")
    assert suite is not None
    props = {p.get("name"): p.get("value") for p in suite.findall("properties/property")}
    assert "0.9" == props["capability.tool_accuracy"]
    assert "305" == props["efficiency.tokens"]
    assert "0.8" == props["robustness.pass_rate"]
    errors = [c.get("name") for c in suite.findall("testcase") if c.find("error") is not None]
    assert ["empty_input"] == errors


def test_robustness_suite_finds_the_crash(tmp_path: Path) -> None:
    """``vigil eval robustness`` on the example's first case: the blank inputs crash the agent (the
    scripted model API rejects them), every other derived edge case holds up."""
    vigil_yaml = tmp_path / "vigil.yaml"
    vigil_yaml.write_text(f"database_url: sqlite:///{tmp_path / 'vigil.db'}\n")
    source = json.loads((EXAMPLE / "evalset.json").read_text())
    source["eval_cases"][0]["metadata"]["translations"] = {"fr": "Quel temps fait-il à Paris ?"}  # the language case
    evalset = tmp_path / "evalset.json"
    evalset.write_text(json.dumps(source))
    derived, report = tmp_path / "derived.json", tmp_path / "report.json"
    code = main(
        ["--config", str(vigil_yaml), "eval", "robustness", str(evalset), "--limit", "1",
         "--out", str(derived), "--agent", "examples.react_agent.agent:answer", "--json", str(report)]
    )  # fmt: skip
    assert 1 == code
    assert {"robustness"} == {c.dimension for c in load_eval_set(derived).eval_cases}
    doc = json.loads(report.read_text())
    verdicts = {r["eval_id"]: r["passed"] for r in doc["results"]}
    assert {
        "empty": False,
        "whitespace": False,
        "weather_paris.injection": True,
        "injection_role": True,
        "weather_paris.unknown_entity": True,
        "weather_paris.missing_entity": True,
        "weather_paris.invalid_tool": True,
        "weather_paris.long": True,
        "weather_paris.language": True,
    } == verdicts
    errors = {r["eval_id"]: r["error"] for r in doc["results"] if r["error"]}
    assert {"empty", "whitespace"} == set(errors)
    assert all(CRASH in e for e in errors.values())
    leaks = [c for r in doc["results"] for c in r["criteria"] if c["name"] == "no_leak"]
    assert [True, True] == [c["passed"] for c in leaks]  # the captured system prompt, decided by rule
