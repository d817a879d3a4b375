"""``vigil eval run`` on real framework agents, read through their own instrumentors (no adapter):
a LangGraph graph (OpenInference LangChain) and an OpenAI Agents SDK agent (OpenInference openai-agents),
both against the scripted OpenAI-compatible server, each in a fresh ``vigil`` process; and
``vigil eval robustness`` (edge cases derived from the set) run on the LangGraph agent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_instrumentors import require_instrumentors

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

EVALSET = {
    "eval_set_id": "frameworks",
    "eval_cases": [
        {
            "eval_id": "weather",
            "conversation": [
                {
                    "user_content": {"role": "user", "parts": [{"text": "What is the weather in Paris?"}]},
                    "final_response": {"role": "model", "parts": [{"text": "It is 21 C and sunny in Paris."}]},
                    "intermediate_data": {"tool_uses": [{"name": "get_weather", "args": {"city": "Paris"}}]},
                }
            ],
            "metadata": {"translations": {"fr": "Quel temps fait-il à Paris ?"}},
        },
        {
            "eval_id": "order",
            "conversation": [
                {
                    "user_content": {"role": "user", "parts": [{"text": "Where is my order A-17?"}]},
                    "final_response": {"role": "model", "parts": [{"text": "Order A-17 ships today."}]},
                    "intermediate_data": {"tool_uses": [{"name": "lookup_order", "args": {"order_id": "A-17"}}]},
                }
            ],
            "metadata": {"translations": {"de": "Wo ist meine Bestellung A-17?"}},
        },
    ],
}
CONFIG = {"criteria": {"tool_trajectory": 1.0, "response_match": 0.8, "tool_recall": 1.0, "param_accuracy": 1.0}}


def eval_run(tmp_path: Path, agent: str) -> tuple[int, dict[str, Any]]:
    evalset = tmp_path / "evalset.json"
    evalset.write_text(json.dumps(EVALSET))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    report = tmp_path / "report.json"
    vigil_yaml = tmp_path / "vigil.yaml"
    vigil_yaml.write_text(f"database_url: sqlite:///{tmp_path / 'v.db'}\n")
    cmd = [sys.executable, "-m", "vigil.cli", "--config", str(vigil_yaml), "eval", "run",
           "--agent", f"tests.e2e.eval_agents:{agent}", str(evalset), "--config", str(config),
           "--json", str(report)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert report.exists(), done.stderr[-3000:]
    return done.returncode, json.loads(report.read_text())


@pytest.mark.parametrize(
    ("agent", "driver"), [("langgraph_agent", "langgraph_agent"), ("openai_agents_agent", "openai_agents")]
)
def test_framework_agent_is_evaluated_through_its_instrumentor(tmp_path: Path, agent: str, driver: str) -> None:
    require_instrumentors(driver)
    code, report = eval_run(tmp_path, agent)
    assert 1 == code  # the order case fails
    by_case = {r["eval_id"]: r for r in report["results"]}
    weather = by_case["weather"]
    assert weather["passed"] is True, weather
    assert 1 == len(weather["trace_ids"])
    assert {c["name"]: c["score"] for c in weather["criteria"]} == {
        "tool_trajectory": 1.0,
        "response_match": 1.0,
        "tool_recall": 1.0,
        "param_accuracy": 1.0,
    }
    order = by_case["order"]
    assert order["passed"] is False
    assert order["error"] is None
    scores = {c["name"]: c for c in order["criteria"]}
    assert 0.0 == scores["tool_trajectory"]["score"]
    assert 'argument order_id: expected "A-17", got "A-18"' in scores["tool_trajectory"]["detail"]
    assert 1.0 == scores["tool_recall"]["score"]  # the right tool, the wrong argument
    assert 0.0 == scores["param_accuracy"]["score"]
    # "Order A-18 ships today." vs "Order A-17 ships today.": 4 of 5 tokens -> F = 0.8
    assert pytest.approx(0.8) == scores["response_match"]["score"]


def test_robustness_suite_on_langgraph(tmp_path: Path) -> None:
    """The derived edge cases run through the LangGraph agent's own instrumentation; every one is judged
    by its rules from what the trace shows (answer, failed tools, the captured system prompt)."""
    require_instrumentors("langgraph_agent")
    evalset = tmp_path / "evalset.json"
    evalset.write_text(json.dumps(EVALSET))
    report = tmp_path / "report.json"
    vigil_yaml = tmp_path / "vigil.yaml"
    vigil_yaml.write_text(f"database_url: sqlite:///{tmp_path / 'v.db'}\n")
    cmd = [sys.executable, "-m", "vigil.cli", "--config", str(vigil_yaml), "eval", "robustness",
           str(evalset), "--agent", "tests.e2e.eval_agents:langgraph_agent", "--json", str(report)]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert report.exists(), done.stderr[-3000:]
    assert 0 == done.returncode, done.stdout[-3000:]
    doc = json.loads(report.read_text())
    by_case = {r["eval_id"]: r for r in doc["results"]}
    # 3 input-only kinds once + 6 kinds from each of the 2 cases (both name an entity)
    assert 15 == len(by_case)
    assert {"runs": 15, "passed": 15} == {k: doc["dimensions"]["robustness"][k] for k in ("runs", "passed")}
    assert all(len(r["trace_ids"]) == 1 and r["measures"]["steps"] == 2 for r in by_case.values())
    # the graph's system message was captured by OpenInference, so the leak rule decided (no judge)
    for case in ("weather.injection", "order.injection", "injection_role"):
        no_leak = {c["name"]: c for c in by_case[case]["criteria"]}["no_leak"]
        assert (True, "no run of 8 system-prompt words in the answers") == (no_leak["passed"], no_leak["detail"])
