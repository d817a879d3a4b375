"""End to end: real third-party instrumentors -> OTLP/HTTP -> ``vigil run`` -> REST API.

Each driver in ``tests/e2e/drivers`` is a small agent app (LangGraph + OpenInference, the
OpenAI Agents SDK + OpenInference, the plain OpenAI client + the OTel GenAI instrumentation)
that talks to a scripted :class:`FakeOpenAI`, exports its spans to a ``vigil run`` subprocess
and writes what it observed (ground truth). The test then reads every run back from
``GET /api/v1/runs/{trace_id}`` and compares each derived field with the ground truth.

``TestDrivers`` checks the drivers alone (no Vigil): their ground truth must equal the
scenario table below, so a driver change cannot silently weaken the e2e expectations.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from collector.demo.fakeopenai import FakeOpenAI
from tests.support.review_queue import TRUTH_FIELDS as FIELDS
from vigil.process import VigilProcess as Vigil
from vigil.process import start_vigil

pytestmark = pytest.mark.integration

DRIVERS_DIR = Path(__file__).parent / "drivers"
DRIVERS: dict[str, tuple[str, ...]] = {
    "langgraph_agent": ("langgraph", "langchain_openai", "openinference.instrumentation.langchain"),
    "openai_agents": ("agents", "openinference.instrumentation.openai_agents"),
    "openai_plain": ("openai", "opentelemetry.instrumentation.genai.openai", "opentelemetry.util.genai"),
}
"""Driver script (without ``.py``) -> the modules it needs (the ``instrumentors`` extra)."""


# scenario: agent, llm_calls, tool_calls, tool_errors, input_tokens, output_tokens, hit_max, blocked, errored
# Turn i of the fake model reports 100 + 10 i prompt and 20 + 5 i completion tokens.
EXPECTED: dict[str, tuple[Any, ...]] = {
    "lg_normal": ("weather_agent", 2, 1, 0, 210, 45, False, False, False),
    "lg_tool_error": ("orders_agent", 2, 1, 1, 210, 45, False, False, False),
    "lg_content_filter": ("weather_agent", 1, 0, 0, 100, 20, False, True, False),
    "lg_recursion": ("weather_agent", 3, 3, 0, 330, 75, True, False, True),
    "lg_need_more_steps": ("planner_agent", 2, 1, 0, 210, 45, True, False, False),
    "ag_normal": ("travel_agent", 2, 1, 0, 210, 45, False, False, False),
    "ag_tool_error": ("travel_agent", 2, 1, 1, 210, 45, False, False, False),
    "ag_max_turns": ("travel_agent", 3, 3, 0, 330, 75, True, False, True),
    "ag_guardrail": ("travel_agent", 0, 0, 0, 0, 0, False, True, True),
    "ag_content_filter": ("travel_agent", 1, 0, 0, 0, 0, False, True, True),  # usage rejected with the response
    "ag_chat_completions": ("travel_agent_cc", 2, 1, 0, 210, 45, False, False, False),
    "ag_refusal": ("travel_agent", 1, 0, 0, 100, 20, False, True, True),
    "ag_refusal_cc": ("travel_agent_cc", 1, 0, 0, 100, 20, False, True, True),
    "ag_output_guardrail": ("travel_agent", 1, 0, 0, 100, 20, False, True, True),
    "ag_max_turns_graceful": ("travel_agent", 3, 3, 0, 330, 75, True, False, False),
    "oa_normal": ("support_agent", 2, 1, 0, 210, 45, False, False, False),
    "oa_stream": ("support_agent", 2, 1, 0, 210, 45, False, False, False),
    "oa_tool_error": ("support_agent", 2, 1, 1, 210, 45, False, False, False),
    "oa_content_filter": ("support_agent", 1, 0, 0, 100, 20, False, True, False),
    "oa_api_error": ("support_agent", 1, 0, 0, 0, 0, False, False, True),
}

RUN_TIMEOUT_S = 15.0
DRIVER_TIMEOUT_S = 120.0


def require_instrumentors(driver: str) -> None:
    """Skip, naming the install command, when the driver's instrumentors are missing."""
    missing = [m for m in DRIVERS[driver] if not _has(m)]
    if missing:
        pytest.skip(f"{driver}: missing {missing}; install with: pip install -e '.[instrumentors]'")


def _has(module: str) -> bool:
    """Whether ``module`` is importable (``find_spec`` raises when a parent package is missing)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def run_driver(driver: str, out: Path, fake: FakeOpenAI, endpoint: str | None = None) -> list[dict[str, Any]]:
    """Run ``drivers/<driver>.py`` to completion and return its ground-truth runs."""
    cmd = [sys.executable, str(DRIVERS_DIR / f"{driver}.py"), "--openai-base-url", fake.base_url, "--out", str(out)]
    if endpoint:
        cmd += ["--endpoint", endpoint]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, check=False)
    assert done.returncode == 0, f"driver {driver} failed:\n{done.stderr[-4000:]}"
    runs: list[dict[str, Any]] = json.loads(out.read_text())["runs"]
    return runs


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    """One scripted OpenAI-compatible server shared by the module; drivers register their scripts."""
    with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vigil]:
    """``vigil run`` in a temp directory on free ports; SIGTERM at the end must exit 0."""
    with start_vigil(
        tmp_path_factory.mktemp("vigil"), {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": "0"}
    ) as running:
        yield running


def fetch_run(vigil: Vigil, trace_id: str) -> dict[str, Any] | None:
    """Poll ``/api/v1/runs/{trace_id}`` until it exists and is complete (or the timeout)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    body: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        response = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}", timeout=5)
        if response.status_code == 200:
            body = response.json()
            if body.get("complete"):
                return body
        time.sleep(0.25)
    return body


UNOBSERVABLE: dict[str, dict[str, dict[str, str]]] = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "traces" / "unobservable.json").read_text()
)
"""Facts a driver sees that its trace does not carry (see the file's reasons): not compared."""


def mismatches(truth: dict[str, Any], got: dict[str, Any] | None, driver: str = "") -> list[str]:
    """Every way the API's run differs from the ground truth, as readable lines."""
    where = f"{truth['scenario']} ({truth['trace_id']})"
    if got is None:
        return [f"{where}: run never appeared in /api/v1/runs"]
    hidden = UNOBSERVABLE.get(driver, {}).get(truth["scenario"], {})
    wrong = [
        f"{where}: {name} expected {truth[name]!r}, got {got.get(name)!r}"
        for name in FIELDS
        if got.get(name) != truth[name] and name not in hidden
    ]
    if got.get("complete") is not True:
        wrong.append(f"{where}: complete expected True, got {got.get('complete')!r}")
    if truth["hit_max_iterations"] or truth["safety_blocked"]:
        flag = got.get("flag")
        if not flag or flag.get("priority") != "high":
            wrong.append(f"{where}: flag expected priority 'high', got {flag!r}")
    return wrong


@pytest.mark.parametrize("driver", sorted(DRIVERS))
class TestInstrumentorsThroughVigil:
    """Runs produced by real instrumentors come out of Vigil with the fields the driver observed."""

    def test_every_run_matches_ground_truth(
        self, driver: str, vigil: Vigil, fake_openai: FakeOpenAI, tmp_path: Path
    ) -> None:
        """Every derived field of every run equals the driver's ground truth."""
        require_instrumentors(driver)
        runs = run_driver(driver, tmp_path / "truth.json", fake_openai, vigil.otlp_endpoint)
        problems = [line for truth in runs for line in mismatches(truth, fetch_run(vigil, truth["trace_id"]), driver)]
        assert not problems, "\n".join(problems)


@pytest.mark.parametrize("driver", sorted(DRIVERS))
class TestDrivers:
    """The drivers are deterministic and observe exactly the scenario table."""

    def test_ground_truth_matches_scenario_table(self, driver: str, fake_openai: FakeOpenAI, tmp_path: Path) -> None:
        """Each scenario's observed counts, tokens and outcome flags equal ``EXPECTED``."""
        require_instrumentors(driver)
        runs = run_driver(driver, tmp_path / "truth.json", fake_openai)
        assert runs, f"{driver} ran no scenario"
        for run in runs:
            assert EXPECTED[run["scenario"]] == tuple(run[f] for f in FIELDS), run["scenario"]
            assert len(run["trace_id"]) == 32
        assert len({r["trace_id"] for r in runs}) == len(runs)
