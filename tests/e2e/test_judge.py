"""End to end over a real ``vigil run`` subprocess with an LLM judge on the fake OpenAI-compatible server.

Runs go in over OTLP/HTTP; the judge's verdicts, the flag they cause, the judge metrics and the
judge–human agreement gauges come back out of the REST API and the real /metrics endpoint.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from collector.demo.fakeopenai import FakeOpenAI
from vigil.bench.synth import body, make_run
from vigil.process import VigilProcess, start_vigil

from .judge_config import HIGH, LOW, judge_yaml

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOpenAI]:
    """The judge's model."""
    with FakeOpenAI({"low": [LOW], "high": [HIGH]}) as server:
        yield server


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory, fake: FakeOpenAI) -> Iterator[VigilProcess]:
    """``vigil run`` with a groundedness judge on every run, flagging below 0.5; no other rule."""
    workdir = tmp_path_factory.mktemp("vigil-judge")
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    (workdir / "vigil.yaml").write_text(judge_yaml(fake.base_url, price=price))  # only the judge flags: exact
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": "0", "JUDGE_API_KEY": "sk-test"}
    with start_vigil(workdir, env) as running:
        yield running


def _send(vigil: VigilProcess, seed: int, scenario: str) -> str:
    run = make_run(random.Random(seed), answer=f"[[scenario:{scenario}]] Your refund of $40 was issued.")
    r = httpx.post(
        f"{vigil.otlp_endpoint}/v1/traces",
        content=body(list(run.spans)),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert 200 == r.status_code
    return run.trace_id


def _judged(vigil: VigilProcess, trace_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}")
        if r.status_code == 200 and r.json()["judges"]:
            return dict(r.json())
        time.sleep(0.2)
    raise AssertionError(f"run {trace_id} was never judged\n{vigil.log_tail()}")


def test_verdicts_flags_metrics_and_agreement(vigil: VigilProcess, fake: FakeOpenAI) -> None:
    """A low groundedness score flags the run (review item created); a high one does not; all is measured."""
    low_id, high_id = _send(vigil, 1, "low"), _send(vigil, 2, "high")
    low, high = _judged(vigil, low_id), _judged(vigil, high_id)
    (verdict,) = low["judges"]
    assert ("ground", 0.1, False, "groundedness@1", "judge-model") == (
        verdict["judge"],
        verdict["score"],
        verdict["passed"],
        verdict["rubric_version"],
        verdict["model"],
    )
    assert pytest.approx((400 * 1.0 + 30 * 2.0) / 1e6) == verdict["cost_usd"]
    deadline = time.monotonic() + 15
    while low["flag"] is None and time.monotonic() < deadline:  # the flag is written with the verdict
        time.sleep(0.2)
        low = httpx.get(f"{vigil.api}/api/v1/runs/{low_id}").json()
    assert "judge_ground" in low["flag"]["reasons"]
    assert "judge_ground" in low["review_item"]["reasons"]
    assert high["flag"] is None
    assert 0.95 == high["judges"][0]["score"]
    assert {"json_schema"} == {s.response_format for s in fake.served()}

    assert 2.0 == vigil.metric("vigil_judge_requests_total", {"judge": "ground", "outcome": "ok"})
    assert 800.0 == vigil.metric("vigil_judge_tokens_total", {"judge": "ground", "kind": "input"})
    assert 1.0 == vigil.metric("vigil_flags_total", {"reason": "judge_ground", "priority": "normal"})

    # Human verdicts through the workbench: the high run gets an item from a user's thumbs-down;
    # a reviewer fails both (low: agrees with the judge, high: disagrees).
    api = f"{vigil.api}/api/v1"
    assert 200 == httpx.post(f"{api}/feedback", json={"trace_id": high_id, "score": "down"}).status_code
    for _ in range(2):
        claim = httpx.post(f"{api}/queue/claim")
        assert 200 == claim.status_code, claim.text
        item_id = claim.json()["item_id"]
        done = httpx.post(f"{api}/items/{item_id}/verdict", json={"verdict": "fail", "categories": ["hallucination"]})
        assert 200 == done.status_code, done.text
    labels = {"judge": "ground", "rubric_version": "groundedness@1"}
    deadline = time.monotonic() + 20  # the agreement gauges are recomputed at most every 15 s
    while vigil.metric("vigil_judge_agreement_rate", labels) != 0.5 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert 0.5 == vigil.metric("vigil_judge_agreement_rate", labels)
    assert 0.0 == vigil.metric("vigil_judge_cohen_kappa", labels)  # reviewers always fail: chance level
    agreement = httpx.get(f"{vigil.api}/api/v1/judges/agreement").json()
    assert [{"judge": "ground", "rubric_version": "groundedness@1", "n": 2, "agreed": 1}] == [
        {k: row[k] for k in ("judge", "rubric_version", "n", "agreed")} for row in agreement
    ]
