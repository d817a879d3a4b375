"""Conformance on traces captured from real third-party frameworks (tests/fixtures/traces).

Each ``<stack>.json`` was produced by a driver in ``tests/e2e/drivers/`` running a real agent
framework with its real instrumentation against the scripted OpenAI-compatible server
(``collector.demo.fakeopenai``); ``<stack>.truth.json`` is what the driver observed (LLM calls
at the server, tool calls inside the tools, limits and blocks from what it caught). Re-capture
with ``bash scripts/capture_traces.sh``. The tests replay the captures without the frameworks
installed and compute, per stack and overall, recall and precision of ``hit_max_iterations``,
``safety_blocked`` and ``errored`` and the accuracy of every counted field; each must be at least
0.99. The table is written to ``test-artifacts/conformance.md`` (and reproduced in docs/scoring.md, "Supported stacks").
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from collector.model import Span
from collector.otlp import decode_json
from scorers.model import Priority, Run
from scorers.normalise import normalise
from scorers.pipeline import Pipeline
from scorers.registry import BUILTIN_NAMES, build_chain
from scorers.rules import compile_rules

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
STACKS = sorted(p.name.removesuffix(".truth.json") for p in FIXTURES.glob("*.truth.json"))
SIGNALS = ("hit_max_iterations", "safety_blocked", "errored")
COUNTS = ("agent", "llm_calls", "tool_calls", "tool_errors", "input_tokens", "output_tokens")
TARGET = 0.99
UNOBSERVABLE: dict[str, dict[str, dict[str, str]]] = {
    k: v for k, v in json.loads((FIXTURES / "unobservable.json").read_text()).items() if not k.startswith("_")
}
"""(stack, scenario, field) facts the trace does not carry, with the reason: left out of the figures, counted."""


def _traces(stack: str) -> dict[str, list[Span]]:
    result = decode_json((FIXTURES / f"{stack}.json").read_bytes())
    traces: dict[str, list[Span]] = {}
    for batch in result.batches:
        traces.setdefault(batch.trace_id, []).extend(batch.spans)
    return traces


def _cases(stack: str) -> Iterator[tuple[dict[str, Any], Run]]:
    truth: dict[str, Any] = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    traces = _traces(stack)
    for expected in truth["runs"]:
        yield expected, normalise(traces[expected["trace_id"]])


def _observable(stack: str, scenario: str, name: str) -> bool:
    return name not in UNOBSERVABLE.get(stack, {}).get(scenario, {})


@dataclass
class Tally:
    """Confusion counts per signal and hits per counted field."""

    stack: str = ""
    runs: int = 0
    hidden: int = 0
    tp: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0))
    fp: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0))
    fn: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SIGNALS, 0))
    right: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    misses: list[str] = field(default_factory=list)

    def add(self, scenario: str, expected: dict[str, Any], run: Run) -> None:
        self.runs += 1
        for name in SIGNALS:
            if not _observable(self.stack, scenario, name):
                self.hidden += 1
                continue
            want, got = bool(expected[name]), getattr(run, name)
            self.tp[name] += want and got
            self.fp[name] += got and not want
            self.fn[name] += want and not got
            if want != got:
                self.misses.append(f"{scenario}.{name}: want {want}, got {got} (evidence {_ev(run)})")
        for name in COUNTS:
            if not _observable(self.stack, scenario, name):
                self.hidden += 1
                self.right[name] += 1
                continue
            if getattr(run, name) == expected[name]:
                self.right[name] += 1
            else:
                self.misses.append(f"{scenario}.{name}: want {expected[name]!r}, got {getattr(run, name)!r}")

    def recall(self, name: str) -> float:
        positives = self.tp[name] + self.fn[name]
        return 1.0 if positives == 0 else self.tp[name] / positives

    def precision(self, name: str) -> float:
        predicted = self.tp[name] + self.fp[name]
        return 1.0 if predicted == 0 else self.tp[name] / predicted

    def accuracy(self) -> float:
        return min(self.right[n] for n in COUNTS) / self.runs if self.runs else 1.0

    def merge(self, other: Tally) -> None:
        self.runs += other.runs
        self.hidden += other.hidden
        for name in SIGNALS:
            self.tp[name] += other.tp[name]
            self.fp[name] += other.fp[name]
            self.fn[name] += other.fn[name]
        for name in COUNTS:
            self.right[name] += other.right[name]
        self.misses += other.misses


def _ev(run: Run) -> list[str]:
    return [f"{e.signal}:{e.rule}@{e.span_name}" for e in run.evidence]


def tally(stack: str) -> Tally:
    """The confusion counts of one stack's captures."""
    result = Tally(stack)
    for expected, run in _cases(stack):
        result.add(expected["scenario"], expected, run)
    return result


def table(rows: dict[str, Tally]) -> str:
    """A Markdown table: runs, recall/precision per signal, worst per-field accuracy."""
    head = "| stack | runs | " + " | ".join(f"{s} R / P" for s in SIGNALS) + " | counts accuracy | not in trace |"
    lines = [head, "|" + "---|" * (len(SIGNALS) + 4)]
    for name, t in rows.items():
        cells = " | ".join(f"{t.recall(s):.2f} / {t.precision(s):.2f}" for s in SIGNALS)
        lines.append(f"| {name} | {t.runs} | {cells} | {t.accuracy():.2f} | {t.hidden} |")
    return "\n".join(lines) + "\n"


class TestConformance:
    """Recall and precision of the headline signals and per-field accuracy, per stack and overall."""

    def test_at_least_ten_stacks(self) -> None:
        """The corpus covers at least ten framework stacks (issue: breadth proven with real instrumentors)."""
        assert len(STACKS) >= 10, STACKS

    @pytest.mark.parametrize("stack", STACKS)
    def test_stack(self, stack: str) -> None:
        """Each stack meets 0.99 recall and precision on every signal and 0.99 accuracy on every count."""
        t = tally(stack)
        worst = min([t.accuracy()] + [min(t.recall(s), t.precision(s)) for s in SIGNALS])
        assert worst >= TARGET, "\n".join(t.misses)

    def test_overall_table(self) -> None:
        """The overall figures meet the target; the table is written as a test artifact."""
        rows = {stack: tally(stack) for stack in STACKS}
        overall = Tally("overall")
        for t in rows.values():
            overall.merge(t)
        rows["overall"] = overall
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "conformance.md").write_text(table(rows))
        assert overall.runs > 0
        assert min(min(overall.recall(s), overall.precision(s)) for s in SIGNALS) >= TARGET, overall.misses

    @pytest.mark.parametrize("stack", STACKS)
    def test_limits_and_blocks_are_flagged_high(self, stack: str) -> None:
        """Every run the driver saw hit a limit or get blocked is flagged with priority high by the default rules."""
        chain = build_chain(BUILTIN_NAMES)
        pipeline = Pipeline(chain, compile_rules(None, [n for n, _ in chain]), 0.0)
        low = []
        for expected, run in _cases(stack):
            wanted = [n for n in ("hit_max_iterations", "safety_blocked") if expected[n]]
            if not any(_observable(stack, expected["scenario"], n) for n in wanted):
                continue
            flag = pipeline.decide_run(run).flag
            if flag is None or flag.priority is not Priority.HIGH:
                low.append(expected["scenario"])
        assert [] == low


def _truth(stack: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{stack}.truth.json").read_text())
    return data


SESSION_STACKS = [stack for stack in STACKS if "sessions" in _truth(stack)]
"""Stacks whose drivers ran multi-turn conversations and recorded the session and user ids they set."""


def membership(runs: list[tuple[dict[str, Any], Run]]) -> tuple[float, float, list[str]]:
    """Pairwise session membership: precision and recall of "these two runs are turns of one session".

    A run without a session id (in the truth or as read) shares a session with no other run.
    """
    tp = fp = fn = 0
    misses: list[str] = []
    for i, (want_a, got_a) in enumerate(runs):
        for want_b, got_b in runs[i + 1 :]:
            want = want_a["session_id"] is not None and want_a["session_id"] == want_b["session_id"]
            got = got_a.session_id is not None and got_a.session_id == got_b.session_id
            tp += want and got
            fp += got and not want
            fn += want and not got
            if want != got:
                misses.append(f"{want_a['scenario']} ~ {want_b['scenario']}: want {want}, got {got}")
    precision = 1.0 if tp + fp == 0 else tp / (tp + fp)
    recall = 1.0 if tp + fn == 0 else tp / (tp + fn)
    return precision, recall, misses


class TestSessions:
    """Runs of multi-turn conversations are grouped into sessions exactly (issue 26), user ids read exactly."""

    def test_at_least_three_frameworks(self) -> None:
        assert len(SESSION_STACKS) >= 3, SESSION_STACKS

    @pytest.mark.parametrize("stack", SESSION_STACKS)
    def test_membership(self, stack: str) -> None:
        """Precision and recall 1.00 of session membership over every pair of the stack's runs."""
        precision, recall, misses = membership(list(_cases(stack)))
        assert (1.0, 1.0) == (precision, recall), misses

    def test_membership_overall(self) -> None:
        """Across every session stack at once: no two frameworks' sessions are confused either."""
        runs = [case for stack in SESSION_STACKS for case in _cases(stack)]
        precision, recall, misses = membership(runs)
        assert (1.0, 1.0) == (precision, recall), misses
        assert sum(len(_truth(stack)["sessions"]) for stack in SESSION_STACKS) >= 9

    @pytest.mark.parametrize("stack", SESSION_STACKS)
    def test_ids_exact(self, stack: str) -> None:
        """Each run's session id and user id are exactly the ones the driver set (None where it set none),
        except a user id the framework never puts on a span (``unobservable.json``: ADK)."""
        wrong = []
        for expected, run in _cases(stack):
            for name in ("session_id", "user_id"):
                hidden = not _observable(stack, expected["scenario"], name)
                want = None if hidden else expected[name]
                if want != getattr(run, name):
                    wrong.append((expected["scenario"], name, want, getattr(run, name)))
        assert [] == wrong

    @pytest.mark.parametrize("stack", SESSION_STACKS)
    def test_truth_is_consistent(self, stack: str) -> None:
        """The truth's conversations list their turns' traces in order, with a lone run beside them, and
        their signals name turns they have (what the session-signal tests count on)."""
        truth = _truth(stack)
        lone = [r for r in truth["runs"] if r["session_id"] is None or r["turn"] is None]
        assert lone, "a single-turn run outside any conversation"
        for session in truth["sessions"]:
            turns = sorted(
                (r["turn"], r["trace_id"]) for r in truth["runs"] if r["session_id"] == session["session_id"]
            )
            assert [trace for _, trace in turns] == session["traces"], session["name"]
            assert 2 <= len(session["traces"]) <= 4, session["name"]
            signals = session["signals"]
            assert {"reask", "abandoned", "human_request"} == set(signals)
            assert all(0 < i < len(session["traces"]) for i in signals["reask"] + signals["human_request"])
        flagged = [s["signals"] for s in truth["sessions"]]
        assert any(s["reask"] for s in flagged)
        assert any(s["abandoned"] for s in flagged)
