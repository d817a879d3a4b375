"""Online regression: production runs scored against the eval cases they match, in the pipeline.

A run matches a case when

* its root span carries ``vigil.eval.case_id`` naming a loaded case (the turn is
  ``vigil.eval.turn``, else 0), or
* its first captured user message equals, normalised (NFKC, case-folded, whitespace collapsed), the
  first user message of a case; the turn is the number of user messages in the run minus one
  (a later turn of a multi-turn conversation), and its last user message must equal that turn's.

The matched run is scored against that expected invocation with the configured (non-judged)
criteria — LLM-judged criteria would put a model call on the stream thread, so they are offline
only. The scores join the run's scores as ``eval_<criterion>`` plus ``eval_passed`` (1 or 0); the
default rule ``eval_regression`` (added only when eval sets are configured) flags a run whose
``eval_passed`` is 0. Prometheus gets ``vigil_eval_online_runs_total{eval_set, result}`` and
``vigil_eval_online_pass_rate{eval_set}``.

Eval sets are files; :meth:`OnlineEval.maybe_reload` (called on the scoring thread, at most every
``reload_interval_s``) re-reads a file whose modification time or size changed; a file that no
longer parses keeps its previous cases (logged).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from collector.model import fast_constructor
from scorers.eval.actual import CASE_ID, TURN, TracedCall, turn_of, user_messages
from scorers.eval.criteria import MATCHERS
from scorers.eval.evaluate import CaseResult, evaluate_case
from scorers.eval.model import (
    CRITERIA,
    JUDGED,
    ArgMatch,
    CriterionConfig,
    EvalCase,
    EvalConfig,
    EvalFileError,
    EvalSet,
    Invocation,
    MatchType,
    load_eval_set,
)
from scorers.eval.text import normalise_message, rouge1
from scorers.model import Run, Score, Scorer

log = structlog.get_logger(__name__)

__all__ = ["EVAL_RULE", "Match", "OnlineEval", "case_index"]

_new_score = fast_constructor(Score)
_NAMES: Mapping[str, str] = {name: f"eval_{name}" for name in CRITERIA.values()}
_DIRECT = frozenset(("tool_trajectory", "response_match", "task_success"))
"""Criteria :meth:`OnlineEval.score` computes directly for one turn (the others go through :func:`evaluate_case`)."""

EVAL_RULE: Mapping[str, Mapping[str, str]] = {
    "eval_regression": {"expr": "has(scores.eval_passed) && scores.eval_passed < 1.0", "priority": "normal"}
}
"""The default rule added when eval sets are configured (a configured rule of that name wins)."""


@dataclass(frozen=True, slots=True)
class Match:
    """A run matched to an expected invocation."""

    eval_set_id: str
    case: EvalCase
    turn: int


@dataclass(slots=True)
class _Expected:
    """A matched expected invocation, prepared once for scoring runs against it.

    Attributes:
        source: the case it comes from.
        invocation: the expected invocation.
        where: ``<eval set>/<case id>``, the detail of the scores.
        calls: the expected tool calls as ``(name, canonical arguments)``: a run whose calls have
            the same names and captured argument texts matches EXACT/exact without decoding them.
        response: the expected final response text.
        one_turn: the invocation as a one-turn case (what :func:`evaluate_case` scores a turn
            against), built on first use (the direct path never needs it).
    """

    source: EvalCase
    invocation: Invocation
    where: str
    calls: list[tuple[str, str]]
    response: str
    one_turn: EvalCase | None = None

    def case(self) -> EvalCase:
        """The one-turn case."""
        if self.one_turn is None:
            self.one_turn = self.source.model_copy(update={"conversation": [self.invocation]})
        return self.one_turn


@dataclass(frozen=True, slots=True)
class _Index:
    by_id: Mapping[str, tuple[str, EvalCase]]
    by_message: Mapping[str, tuple[str, EvalCase]]
    sets: tuple[str, ...]


def case_index(sets: Sequence[EvalSet], *, references_only: bool = False) -> _Index:
    """Index cases by id and by normalised first user message (the first set listing one wins).

    With ``references_only`` (online), cases judged by robustness checks (``metadata.checks``) are
    left out: they have no reference answer to score a production run against.
    """
    by_id: dict[str, tuple[str, EvalCase]] = {}
    by_message: dict[str, tuple[str, EvalCase]] = {}
    for s in sets:
        for case in s.eval_cases:
            if not case.turns or (references_only and case.metadata is not None and case.metadata.checks):
                continue
            by_id.setdefault(case.eval_id, (s.eval_set_id, case))
            key = normalise_message(case.turns[0].user_text)
            if key:
                by_message.setdefault(key, (s.eval_set_id, case))
    return _Index(by_id, by_message, tuple(dict.fromkeys(s.eval_set_id for s in sets)))


def match_run(index: _Index, run: Run) -> Match | None:
    """The expected invocation ``run`` should be scored against, or None."""
    case_id = run.attributes.get(CASE_ID)
    if isinstance(case_id, str) and case_id in index.by_id:
        set_id, case = index.by_id[case_id]
        turn = run.attributes.get(TURN, 0)
        if isinstance(turn, int) and not isinstance(turn, bool) and 0 <= turn < len(case.turns):
            return Match(set_id, case, turn)
        return None
    if not index.by_message or not run.messages:
        return None
    for m in run.messages:
        if m.role == "user" and m.content:
            first = m.content
            break
    else:
        return None
    found = index.by_message.get(normalise_message(first))
    if found is None:
        return None
    set_id, case = found
    users = user_messages(run)
    turn = len(users) - 1
    if turn >= len(case.turns):
        return None
    if turn and normalise_message(users[-1]) != normalise_message(case.turns[turn].user_text):
        return None
    return Match(set_id, case, turn)


class OnlineEval:
    """Loaded eval sets, matched against every run on the scoring thread.

    Args:
        paths: eval set files.
        config: criteria and thresholds (judged criteria are left out online).
        reload_interval_s: how often file changes are looked for.
        clock: monotonic seconds (tests).

    Raises:
        EvalFileError: a file is missing or malformed at start-up (a later bad edit keeps the old cases).
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        config: EvalConfig | None = None,
        *,
        reload_interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.paths = tuple(Path(p) for p in paths)
        cfg = config or EvalConfig()
        self.config = EvalConfig(criteria={k: v for k, v in cfg.criteria.items() if k not in JUDGED})
        self._interval = reload_interval_s
        self._clock = clock
        self._stamps: dict[Path, tuple[int, int]] = {}
        self._sets: dict[Path, EvalSet] = {}
        for path in self.paths:
            if not path.is_file():
                raise EvalFileError(str(path), "$", "expected an eval set file; there is none (eval_sets)")
            self._sets[path] = load_eval_set(path)
            self._stamps[path] = _stamp(path)
        self._index = case_index(list(self._sets.values()), references_only=True)
        self._next_check = clock() + reload_interval_s
        self._lock = threading.Lock()
        self._runs: Counter | None = None
        self._tally: dict[str, list[int]] = {}
        self._registries: set[int] = set()
        self._expected: dict[tuple[int, int], _Expected] = {}
        self._children: dict[str, tuple[Any, Any]] = {}
        criteria = self.config.criteria
        self._direct = all(name in _DIRECT for name in criteria)
        self._scored = tuple((name, _NAMES[name], cfg) for name, cfg in criteria.items() if name != "task_success")
        self._success = criteria.get("task_success")

    @property
    def cases(self) -> int:
        """Cases loaded."""
        return sum(len(s.eval_cases) for s in self._sets.values())

    @property
    def score_names(self) -> tuple[str, ...]:
        """The score names this adds to a run: ``eval_<criterion>`` and ``eval_passed``."""
        return (*(f"eval_{name}" for name in self.config.criteria), "eval_passed")

    def register(self, registry: CollectorRegistry) -> None:
        """Export the per-eval-set metrics on ``registry`` (once per registry)."""
        if id(registry) in self._registries:
            return
        self._registries.add(id(registry))
        self._runs = Counter(
            "vigil_eval_online_runs",
            "Production runs scored against a matching eval case, by eval set and result (pass/fail).",
            ("eval_set", "result"),
            registry=registry,
        )
        registry.register(_PassRates(self))

    def maybe_reload(self) -> bool:
        """Re-read changed files (at most every ``reload_interval_s``); True when something was reloaded."""
        now = self._clock()
        if now < self._next_check:
            return False
        self._next_check = now + self._interval
        changed = False
        for path in self.paths:
            try:
                stamp = _stamp(path)
            except OSError as exc:
                log.warning("eval_set_unreadable", path=str(path), error=str(exc))
                continue
            if stamp == self._stamps.get(path):
                continue
            self._stamps[path] = stamp
            try:
                self._sets[path] = load_eval_set(path)
            except (EvalFileError, OSError) as exc:
                log.warning("eval_set_reload_failed", path=str(path), error=str(exc))
                continue
            changed = True
            log.info("eval_set_reloaded", path=str(path), cases=len(self._sets[path].eval_cases))
        if changed:
            self._index = case_index(list(self._sets.values()), references_only=True)
        return changed

    def match(self, run: Run) -> Match | None:
        """The expected invocation of ``run``, or None."""
        return match_run(self._index, run)

    def evaluate(self, run: Run) -> CaseResult | None:
        """Score ``run`` against its matching case, or None (the full result, with every criterion's detail)."""
        self.maybe_reload()
        found = self.match(run)
        result = None
        if found is not None:
            case = self._prepared(found).case()
            result = evaluate_case(case, [turn_of(run)], self.config, eval_set_id=found.eval_set_id, explain=False)
            self._count(found.eval_set_id, result.passed)
        return result

    def _prepared(self, found: Match) -> _Expected:
        """The matched invocation prepared for scoring (built once per case and turn)."""
        key = (id(found.case), found.turn)
        expected = self._expected.get(key)
        if expected is None or expected.source is not found.case:
            invocation = found.case.turns[found.turn]
            calls = [(c.name, c.canonical) for c in invocation.tool_uses]
            where = f"{found.eval_set_id}/{found.case.eval_id}"
            expected = _Expected(found.case, invocation, where, calls, invocation.expected_response)
            if len(self._expected) >= 4 * max(self.cases, 1024):
                self._expected.clear()
            self._expected[key] = expected
        return expected

    def scorers(self) -> tuple[tuple[str, Scorer], ...]:
        """The pipeline chain's entry: ``eval``, giving ``eval_<criterion>`` and ``eval_passed`` for a matched run."""
        return (("eval", self.score),)

    def score(self, run: Run) -> tuple[Score, ...] | None:
        """The scores of ``run`` against its case, or None when it matches none.

        The same values as :meth:`evaluate` (``eval_<criterion>`` in config order, ``task_success``
        last, then ``eval_passed``), computed without building the criteria's results and details when
        every configured criterion is one :data:`_DIRECT` computes: the pipeline keeps only the values,
        and ``vigil eval`` explains a case.
        """
        if not self._direct:
            result = self.evaluate(run)
            if result is None:
                return None
            where = f"{result.eval_set_id}/{result.eval_id}"
            out = [_new_score(_NAMES[r.name], r.score, where, ()) for r in result.results if r.score is not None]
            out.append(_new_score("eval_passed", 1.0 if result.passed else 0.0, where, ()))
            return tuple(out)
        self.maybe_reload()
        found = match_run(self._index, run)
        if found is None:
            return None
        expected = self._prepared(found)
        where = expected.where
        out = []
        passed = True
        for name, score_name, cfg in self._scored:
            if name == "tool_trajectory":
                value = 1.0 if _trajectory_matches(run, expected, cfg) else 0.0
            else:  # response_match
                value = rouge1(run.final_output or "", expected.response).fmeasure
            if value < cfg.threshold:
                passed = False
            out.append(_new_score(score_name, value, where, ()))
        if self._success is not None:  # every other criterion passed (none is ever inapplicable here)
            value = 1.0 if passed else 0.0
            passed = passed and value >= self._success.threshold
            out.append(_new_score("eval_task_success", value, where, ()))
        out.append(_new_score("eval_passed", 1.0 if passed else 0.0, where, ()))
        self._count(found.eval_set_id, passed)
        return tuple(out)

    def _count(self, eval_set: str, passed: bool) -> None:
        with self._lock:
            tally = self._tally.setdefault(eval_set, [0, 0])
            tally[0] += passed
            tally[1] += 1
        if self._runs is not None:
            children = self._children.get(eval_set)
            if children is None:
                children = self._children[eval_set] = (
                    self._runs.labels(eval_set, "pass"),
                    self._runs.labels(eval_set, "fail"),
                )
            children[0 if passed else 1].inc()

    def pass_rate(self, eval_set: str) -> float | None:
        """Share of matched runs of ``eval_set`` that passed, or None before the first."""
        with self._lock:
            tally = self._tally.get(eval_set)
            return None if not tally or not tally[1] else tally[0] / tally[1]

    def pass_rates(self) -> dict[str, float]:
        """Every eval set's pass rate so far."""
        with self._lock:
            return {name: t[0] / t[1] for name, t in self._tally.items() if t[1]}


class _PassRates(Collector):
    """``vigil_eval_online_pass_rate{eval_set}``, computed at scrape time (nothing per run)."""

    def __init__(self, online: OnlineEval) -> None:
        self._online = online

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "vigil_eval_online_pass_rate",
            "Share of matched production runs that passed their eval case, by eval set (since start).",
            labels=("eval_set",),
        )
        for name, rate in sorted(self._online.pass_rates().items()):
            family.add_metric((name,), rate)
        yield family


def _trajectory_matches(run: Run, expected: _Expected, cfg: CriterionConfig) -> bool:
    """Whether the run's tool calls match the expected invocation's (``tool_trajectory`` of one turn)."""
    tools = run.tools
    if (
        cfg.match_type is MatchType.EXACT
        and cfg.arg_match is ArgMatch.EXACT
        and len(tools) == len(expected.calls)
        and [(t.name, t.arguments) for t in tools] == expected.calls
    ):
        return True  # the same names and captured argument texts (canonical JSON): what match_exact accepts first
    calls = tuple(TracedCall(t.name, t.arguments, t.call_id) for t in tools)
    tool_uses = expected.invocation.tool_uses
    return MATCHERS[cfg.match_type](calls, tool_uses, cfg.arg_match)


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_mtime_ns, st.st_size
