"""End to end over a real ``vigil run``: runs over OTLP, every review item judged through the API, and
``GET /api/v1/quality`` (and ``vigil quality --json``) equal to the estimators on the same data."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from scorers.quality import Labelled, PredictedStratum, Stratum, post_stratified, stratified_ppi
from scorers.rules import sample_point
from vigil.bench.synth import body, make_run
from vigil.process import start_vigil

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": "Bearer e2e-admin-token"}
PROTO = {"Content-Type": "application/x-protobuf"}
COLUMNS = "trace_id, agent, sample_p, sample_drawn, rule_flagged, task_completed"
RATE = 0.25
RUNS = 240
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def _wait_stored(api: str, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    seen = 0
    while time.monotonic() < deadline:
        seen, cursor = 0, None
        while True:
            params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = httpx.get(f"{api}/api/v1/runs", params=params, headers=ADMIN).json()
            seen += len(page["items"])
            cursor = page.get("next_cursor")
            if not cursor:
                break
        if seen >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{seen} of {count} runs stored")


def _judge_everything(api: str, rng: random.Random) -> dict[str, str]:
    """Claim every item through the API; fail about 60 % of rule-flagged runs and 5 % of the others."""
    given = {}
    while True:
        claim = httpx.post(f"{api}/api/v1/queue/claim", headers=ADMIN)
        if claim.status_code == 204:
            return given
        assert 200 == claim.status_code, claim.text
        item = claim.json()
        run = httpx.get(f"{api}/api/v1/runs/{item['trace_id']}", headers=ADMIN).json()
        ruled = any(r != "random_sample" for r in run["flag"]["reasons"])
        fail = rng.random() < (0.6 if ruled else 0.05)
        verdict = {"verdict": "fail", "categories": ["loop"]} if fail else {"verdict": "pass"}
        answer = httpx.post(f"{api}/api/v1/items/{item['item_id']}/verdict", json=verdict, headers=ADMIN)
        assert 200 == answer.status_code, answer.text
        given[item["trace_id"]] = verdict["verdict"]


def _stats_page(browser: Any, api: str, shot: Path) -> dict[str, str]:
    """Log in, open /stats, screenshot the estimates; the fleet's review pass rate row as the page shows it."""
    page = browser.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(f"{api}/login")
        page.wait_for_function("document.activeElement !== null && document.activeElement.id === 'token'")
        page.keyboard.type("e2e-admin-token")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        page.goto(f"{api}/stats")
        table = page.locator("#quality-estimates")
        shot.parent.mkdir(parents=True, exist_ok=True)
        table.screenshot(path=str(shot))
        row = page.locator('#quality-estimates tr[data-agent="*"][data-target="review_pass_rate"]')
        return {cls: row.locator(f"td.{cls}").inner_text() for cls in ("estimate", "interval", "status", "naive")}
    finally:
        page.close()


def test_quality_through_vigil_run(tmp_path: Path, browser: Any) -> None:
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": str(RATE), "VIGIL_ADMIN_TOKEN": "e2e-admin-token"}
    rng = random.Random(41)
    with start_vigil(tmp_path, env) as vigil:
        runs = [make_run(rng, answer="done") for _ in range(RUNS)]
        for start in range(0, RUNS, 40):
            chunk = [s for r in runs[start : start + 40] for s in r.spans]
            sent = httpx.post(f"{vigil.otlp_endpoint}/v1/traces", content=body(chunk), headers=PROTO)
            assert 200 == sent.status_code
        _wait_stored(vigil.api, RUNS)
        given = _judge_everything(vigil.api, random.Random(5))
        served = httpx.get(f"{vigil.api}/api/v1/quality", params={"window": "1d"}, headers=ADMIN)
        assert 200 == served.status_code, served.text
        report = served.json()
        shown = _stats_page(browser, vigil.api, ARTIFACTS / "stats-quality.png")
        cli = subprocess.run(
            [sys.executable, "-m", "vigil.cli", "quality", "--window", "1d", "--json"],
            env={"VIGIL_DATABASE_URL": f"sqlite:///{tmp_path / 'vigil.db'}", "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    assert report["agents"] == json.loads(cli.stdout)["agents"]
    with sqlite3.connect(tmp_path / "vigil.db") as db:
        stored = db.execute(f"SELECT {COLUMNS} FROM runs").fetchall()
    assert RUNS == len(stored)
    # the design as recorded: every run's rate, its draw deterministic on the trace id
    assert {RATE} == {row[2] for row in stored}
    assert all(bool(row[3]) == (sample_point(row[0]) < RATE) for row in stored)
    assert any(row[4] for row in stored)
    assert any(row[3] for row in stored)
    size = {h: sum(1 for r in stored if bool(r[4]) == h) for h in (True, False)}
    sample: dict[bool, list[Labelled]] = {True: [], False: []}
    for tid, _agent, p, drawn, flagged, completed in stored:
        if drawn and tid in given:
            sample[bool(flagged)].append(Labelled(float(given[tid] == "pass"), float(bool(completed)), 1 / p))
    flagged_all = [Labelled(float(given[r[0]] == "pass")) for r in stored if r[4] and r[0] in given]
    completed = {h: float(sum(1 for r in stored if bool(r[4]) == h and r[5])) for h in (True, False)}
    by_rule = [Stratum(size[True], sample[True]), Stratum(size[False], sample[False])]
    with_flagged = [Stratum(size[True], flagged_all), Stratum(size[False], sample[False])]
    predicted = [PredictedStratum(size[h], completed[h], completed[h], sample[h]) for h in (True, False)]
    expected = {
        "sample": post_stratified("sample", by_rule),
        "stratified": post_stratified("stratified", with_flagged),
        "ppi": stratified_ppi(predicted),
    }
    [fleet] = [a for a in report["agents"] if a["agent"] == "*"]
    [row] = [r for r in fleet["estimates"] if r["target"] == "review_pass_rate"]
    for method, estimate in expected.items():
        got = row["methods"][method]
        assert (estimate.value, estimate.low, estimate.high, estimate.n) == pytest.approx(
            (got["value"], got["low"], got["high"], got["n"]), abs=1e-12
        ), method
    assert len(given) == fleet["design"]["rule_flagged_reviewed"] + sum(1 for r in stored if r[3] and not r[4])
    assert fleet["design"]["sample_reviewed"] == fleet["design"]["sample"]
    # the stats page (a real browser) shows the same estimate, its interval and its status
    ppi = row["estimate"]
    assert f"{ppi['value'] * 100:.1f} %" == shown["estimate"]
    assert f"[{ppi['low'] * 100:.1f} %, {ppi['high'] * 100:.1f} %]" == shown["interval"]
    assert row["status"] == shown["status"]
    assert shown["naive"].startswith(f"{row['naive']['value'] * 100:.1f} %")
