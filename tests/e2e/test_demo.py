"""End to end: the demo fleet against a real ``vigil run``, checked run by run against its ground truth.

The fleet knows what each run was meant to be (:class:`collector.demo.fleet.DemoRun`). Every run
is read back from ``GET /api/v1/runs/{trace_id}`` and each derived field is compared with
the truth; every cap hit and every safety block must be flagged high, and the share of
runs in the random sample must match ``VIGIL_SAMPLE_RATE``. A second test starts
``vigil run --demo`` and waits for flagged runs in the review queue.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from collector.demo.fleet import DemoFleet, DemoRun, session_truths
from collector.demo.plan import Kind
from review_queue.store import SqlStore
from review_queue.tables import run_details, runs
from tests.support.review_queue import TRUTH_FIELDS as FIELDS
from vigil.process import VigilProcess, spawn_vigil, start_vigil

pytestmark = pytest.mark.integration

SAMPLE_RATE = 0.2
RUNS = 150


@pytest.fixture(scope="module")
def vigil(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VigilProcess]:
    """``vigil run`` with a short quiet period, a 20 % random sample and sessions closed 3 s after their
    last turn (the fleet's users pause at most 0.3 s at pace 0.05)."""
    env = {"VIGIL_QUIET_PERIOD_S": "0.5", "VIGIL_SAMPLE_RATE": str(SAMPLE_RATE), "VIGIL_SESSION_IDLE_S": "3"}
    with start_vigil(tmp_path_factory.mktemp("vigil"), env) as running:
        yield running


@pytest.fixture(scope="module")
def truth(vigil: VigilProcess) -> list[DemoRun]:
    """The fleet's ground truth after sending :data:`RUNS` runs fast (latencies at 5 %)."""

    def thumbs_down(trace_id: str, feedback: str) -> None:  # what the agent's web app would send
        body = {"feedback_id": f"fb-{trace_id}", "trace_id": trace_id, "score": "down", "source": "demo"}
        httpx.post(f"{vigil.api}/api/v1/feedback", json=body, timeout=10).raise_for_status()

    fleet = DemoFleet(
        vigil.otlp_endpoint,
        rate_per_s=50,
        runs=RUNS,
        seed=20240601,
        pace=0.05,
        progress=False,
        on_feedback=thumbs_down,
    )
    return fleet.run()


@pytest.fixture(scope="module")
def records(vigil: VigilProcess, truth: list[DemoRun]) -> dict[str, dict[str, Any]]:
    """Every run's API record, polled until all are there (30 s at most)."""
    found: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + 30
    with httpx.Client(base_url=vigil.api) as client:
        while time.monotonic() < deadline and len(found) < len(truth):
            for run in truth:
                if run.trace_id not in found:
                    r = client.get(f"/api/v1/runs/{run.trace_id}")
                    if r.status_code == 200:
                        found[run.trace_id] = r.json()
            time.sleep(0.2)
    return found


class TestDemoAgainstVigil:
    """What Vigil derived and flagged equals what the fleet meant, run by run."""

    def test_every_run_sent_and_scored(
        self, vigil: VigilProcess, truth: list[DemoRun], records: dict[str, Any]
    ) -> None:
        """All runs finished with a trace id, every kind was sent, and each one reached the API."""
        assert RUNS == len(truth) == len({r.trace_id for r in truth})
        assert set(Kind) == {Kind(r.kind) for r in truth}
        missing = [r.trace_id for r in truth if r.trace_id not in records]
        assert [] == missing, vigil.log_tail()

    def test_every_field_matches(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """Agent, LLM calls, tools, tool errors, tokens, cap hit, block and error match for every run."""
        wrong = []
        for run in truth:
            got = {f: records[run.trace_id][f] for f in FIELDS}
            want = {f: run.expected[f] for f in FIELDS}
            if got != want:
                diff = {f: (want[f], got[f]) for f in FIELDS if want[f] != got[f]}
                wrong.append((run.kind, run.scenario, run.outcome, diff))
        assert [] == wrong

    def test_caps_and_blocks_flagged_high(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """Every cap hit and every safety block is flagged with priority high, for the right reason."""
        serious = [r for r in truth if r.expected["hit_max_iterations"] or r.expected["safety_blocked"]]
        assert len(serious) >= 10
        for run in serious:
            flag = records[run.trace_id]["flag"]
            assert flag is not None, run
            assert "high" == flag["priority"], run
            reason = "hit_max_iterations" if run.expected["hit_max_iterations"] else "safety_blocked"
            assert reason in flag["reasons"], run

    def test_inefficient_and_errored_flagged(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """Inefficient runs are flagged for step efficiency; runs that raised, as errored."""
        for run in truth:
            reasons = (records[run.trace_id]["flag"] or {}).get("reasons", [])
            if run.kind == Kind.INEFFICIENT.value:
                assert "low_step_efficiency" in reasons, run
            if run.expected["errored"]:
                assert "errored" in reasons, run

    def test_random_share_close_to_rate(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """The share of runs sampled at random is within 4 binomial standard deviations of the rate."""
        flags = [records[r.trace_id]["flag"] for r in truth]
        sampled = sum(1 for f in flags if f is not None and "random_sample" in f["reasons"])
        n = len(truth)
        assert abs(sampled - n * SAMPLE_RATE) <= 4 * math.sqrt(n * SAMPLE_RATE * (1 - SAMPLE_RATE))
        assert {SAMPLE_RATE} == {f["sample_rate"] for f in flags if f is not None}

    def test_thumbs_down_flagged(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """Every run whose user gave a thumbs-down through the feedback API is flagged user_thumbs_down."""
        down = [r for r in truth if r.expected["feedback"] == "thumbs_down"]
        assert down
        for run in down:
            flag = records[run.trace_id]["flag"] or {"reasons": []}
            assert "user_thumbs_down" in flag["reasons"], run

    def test_good_runs_only_sampled(self, truth: list[DemoRun], records: dict[str, dict[str, Any]]) -> None:
        """Good runs are flagged by nothing but the random sample — or, as the last turn of a session a
        session rule flagged, by that rule (the session's review item is its last turn's)."""
        reasons = Counter(
            reason
            for r in truth
            if r.kind == Kind.GOOD.value
            for reason in (records[r.trace_id]["flag"] or {}).get("reasons", [])
        )
        assert {r for r in reasons if not r.startswith("session_")} <= {"random_sample"}


class TestDemoSessions:
    """The fleet's conversations as Vigil's sessions: grouped exactly, with exactly the planned signals."""

    def test_sessions_match_truth(self, vigil: VigilProcess, truth: list[DemoRun], records: dict[str, Any]) -> None:
        """Every session closes with the fleet's turns in order and the re-asks, requests for a human,
        thumbs-down and abandonment the fleet planned (a run cut by the run limit ends its session there);
        several are multi-turn and each signal occurs."""
        want = session_truths(truth)
        got: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 40
        with httpx.Client(base_url=vigil.api) as client:
            while time.monotonic() < deadline and len(got) < len(want):
                for session_id in want:
                    r = client.get(f"/api/v1/sessions/{session_id}")
                    if session_id not in got and r.status_code == 200 and r.json()["session"]["status"] == "closed":
                        got[session_id] = r.json()
                time.sleep(0.5)
        assert sorted(want) == sorted(got), vigil.log_tail()
        turns = {r.trace_id: (r.session_id, r.turn) for r in truth}
        wrong = []
        for session_id, doc in got.items():
            found: dict[str, Any] = {"turns": doc["session"]["turns"], "reask": [], "human_request": []}
            found |= {"thumbs_down": [], "abandoned": False}
            for signal in doc["session"]["signals"]:
                if signal["signal"] == "abandoned":
                    found["abandoned"] = True
                else:
                    found[signal["signal"]].append(signal["turn"])
            if found != want[session_id]:
                wrong.append((session_id, want[session_id], found))
            assert [turns[t["trace_id"]] for t in doc["turns"]] == [
                (session_id, n) for n in range(1, len(doc["turns"]) + 1)
            ]
        assert [] == wrong
        assert sum(1 for t in want.values() if t["turns"] > 1) >= 10
        for signal in ("reask", "human_request", "thumbs_down"):
            assert any(t[signal] for t in want.values()), signal
        assert any(t["abandoned"] for t in want.values())


class TestDemoCommand:
    """``vigil demo`` as a user runs it."""

    def test_runs_and_writes_truth(self, vigil: VigilProcess, tmp_path: Path) -> None:
        """``vigil demo --runs N --truth F`` sends N runs, writes their truth, and Vigil scores them."""
        out = tmp_path / "truth.json"
        cmd = [sys.executable, "-m", "vigil.cli", "demo", "--endpoint", vigil.otlp_endpoint]
        cmd += ["--runs", "12", "--rate", "20", "--pace", "0", "--seed", "3", "--truth", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        assert 0 == done.returncode, done.stderr
        assert "12 runs sent" in done.stderr
        runs = json.loads(out.read_text())["runs"]
        assert 12 == len(runs)
        for run in runs:
            record = _wait_run(vigil, run["trace_id"])
            assert {f: run["expected"][f] for f in FIELDS} == {f: record[f] for f in FIELDS}


class TestRunDemo:
    """``vigil run --demo`` lights up on its own."""

    def test_flagged_runs_within_30_s(self, tmp_path: Path) -> None:
        """Flagged runs appear in /api/v1/queue within 30 s, SIGTERM still exits 0 after flushing, and the
        stored details of the demo's runs show the conversation: the user's input and the model's answers,
        with no scenario marker or script name anywhere in them (reviewers judge the runs blind)."""
        vigil = spawn_vigil(tmp_path, {"VIGIL_OTLP_GRPC_PORT": "0", "VIGIL_QUIET_PERIOD_S": "0.5"}, ["--demo"])
        try:
            items = _wait_queue(vigil, timeout_s=30)
            # the details must show a later turn: wait for one to be stored (a conversation's second turn
            # comes a few seconds after its first, which may be later than the first flagged run)
            later = _wait_later_turn(vigil, timeout_s=60) if items else False
        finally:
            code = vigil.stop()
        assert items, vigil.log_tail()
        assert later, f"no session reached a second turn in 60 s\n{vigil.log_tail()}"
        assert {"high", "normal", "low"} >= {i["priority"] for i in items}
        assert 0 == code, vigil.log_tail()
        assert "demo_stopped" in vigil.log_tail()
        store = SqlStore(f"sqlite:///{tmp_path / 'vigil.db'}")
        try:
            with store.engine.connect() as conn:
                traces = [row[0] for row in conn.execute(sa.select(run_details.c.trace_id))]
            docs = [store.get_details(t) or {} for t in traces]
        finally:
            store.close()
        assert docs, vigil.log_tail()
        said = [e for d in docs for e in d.get("conversation") or () if e.get("role") == "user"]
        assert said, "no demo run's details hold the user's input (content capture off?)"
        # blind review: the scenario goes to the fake model in a header, so nothing stored names it
        stored = json.dumps([d["conversation"] for d in docs])
        assert "[[scenario:" not in stored
        assert not re.search(r"\b(support|research|billing|triage)\.\w+\.[a-z_]+\.\d+\b", stored)  # no script name
        system = [e for d in docs for e in d["conversation"] if e.get("role") == "system"]
        assert system, "no demo run's details hold its system prompt"
        assert not any("[[scenario:" in e["content"] for e in system)
        assert any(sum(e.get("role") == "user" for e in d["conversation"]) > 1 for d in docs)  # later turns
        assert any(e.get("role") == "assistant" or e["kind"] == "final" for d in docs for e in d["conversation"])

    def test_restart_starts_fresh_sessions(self, tmp_path: Path) -> None:
        """Two starts of ``vigil run --demo`` on one database play different seeds: the runs the second
        start stores name no session of the first start's (with one fixed seed they would carry on the
        old sessions), and each start logs the seed it plays."""
        env = {"VIGIL_OTLP_GRPC_PORT": "0", "VIGIL_QUIET_PERIOD_S": "0.5"}
        earlier: dict[str, str | None] = {}  # trace id → session id of every run the earlier starts stored
        sessions: list[set[str]] = []
        seeds: list[int] = []
        for _ in range(2):
            vigil = spawn_vigil(tmp_path, env, ["--demo", "--demo-rate", "8"])
            try:
                _wait_new_sessions(vigil, set(earlier), at_least=3, timeout_s=45)
            finally:
                code = vigil.stop()
            assert 0 == code, vigil.log_tail()
            started = [json.loads(line) for line in vigil.log_path.read_text().splitlines() if "demo_started" in line]
            seeds += [line["seed"] for line in started if "seed" in line]
            stored = _stored_sessions(tmp_path / "vigil.db")  # all of them: runs stored after the poll too
            sessions.append({s for t, s in stored.items() if t not in earlier and s})
            earlier = stored
        first, second = sessions
        assert len(first) >= 3, sessions
        assert len(second) >= 3, sessions
        assert not first & second, f"the second start added turns to the first's sessions {first & second}"
        assert 2 == len(seeds), seeds
        assert seeds[0] != seeds[1], seeds


def _wait_new_sessions(vigil: VigilProcess, earlier: set[str], at_least: int, timeout_s: float) -> None:
    """Poll ``GET /api/v1/runs`` until the runs not in ``earlier`` name ``at_least`` sessions (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and vigil.process.poll() is None:
        try:
            r = httpx.get(f"{vigil.api}/api/v1/runs", params={"limit": 500}, timeout=2)
            if r.status_code == 200:
                listed = r.json()["items"]
                new = {x["session_id"] for x in listed if x["session_id"] and x["trace_id"] not in earlier}
                if len(new) >= at_least:
                    return
        except httpx.TransportError:
            pass
        time.sleep(0.5)


def _stored_sessions(db: Path) -> dict[str, str | None]:
    """Trace id → session id of every run stored in the SQLite database ``db``."""
    store = SqlStore(f"sqlite:///{db}")
    try:
        with store.engine.connect() as conn:
            return {row.trace_id: row.session_id for row in conn.execute(sa.select(runs.c.trace_id, runs.c.session_id))}
    finally:
        store.close()


def _wait_run(vigil: VigilProcess, trace_id: str, timeout_s: float = 15.0) -> dict[str, Any]:
    """Poll the API until run ``trace_id`` is there."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = httpx.get(f"{vigil.api}/api/v1/runs/{trace_id}")
        if r.status_code == 200:
            return dict(r.json())
        time.sleep(0.2)
    raise AssertionError(f"run {trace_id} never appeared\n{vigil.log_tail()}")


def _wait_later_turn(vigil: VigilProcess, timeout_s: float) -> bool:
    """Poll the sessions API until a session has two turns or more; whether one did in time."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and vigil.process.poll() is None:
        try:
            r = httpx.get(f"{vigil.api}/api/v1/sessions", params={"sort": "turns", "limit": 1}, timeout=2)
            if r.status_code == 200 and any(s["turns"] >= 2 for s in r.json()["items"]):
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    return False


def _wait_queue(vigil: VigilProcess, timeout_s: float) -> list[dict[str, Any]]:
    """Poll the review queue until it holds an item; the items (empty on timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if vigil.process.poll() is not None:
            return []
        try:
            r = httpx.get(f"{vigil.api}/api/v1/queue", timeout=2)
            if r.status_code == 200 and r.json()["items"]:
                return list(r.json()["items"])
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    return []
