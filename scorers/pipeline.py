"""Turn a closed trace into a scored, decided run — isolating every plugin boundary.

A crashing scorer is logged with the trace id, counted, and skipped: the run still
completes with the other scores. A crashing normaliser yields a minimal incomplete run
rather than losing the trace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from collector.model import fast_constructor
from scorers.assemble import ClosedTrace
from scorers.detect import DEFAULT_DETECTOR, Detector
from scorers.model import Run, ScoredRun, Scorer
from scorers.normalise import normalise
from scorers.rules import Rule, decide, reason_evidence, sample_design, sample_point
from scorers.session_ids import DEFAULT_SESSION_KEYS, SessionKeys

log = structlog.get_logger(__name__)

_new_scored_run = fast_constructor(ScoredRun)

OnError = Callable[[str, str, Exception], None]
"""``on_error(stage, name, exc)``: stage is ``scorer``, ``rule`` or ``normalise``."""


def score_run(
    run: Run, chain: tuple[tuple[str, Scorer], ...], on_error: OnError | None = None
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Apply every scorer of ``chain`` to ``run``.

    Returns:
        ``(scores, failed)``: scorer name to value for scorers with an opinion, and the
        names of scorers that raised.
    """
    scores: dict[str, float] = {}
    failed: list[str] = []
    for name, scorer in chain:
        try:
            score = scorer(run)
        except Exception as exc:  # noqa: BLE001 - plugin boundary: one scorer must not stop the stream
            failed.append(name)
            log.warning("scorer_failed", trace_id=run.trace_id, scorer=name, error=repr(exc))
            if on_error is not None:
                on_error("scorer", name, exc)
            continue
        if score is None:
            continue
        if type(score) is tuple:
            for one in score:
                scores[one.name] = float(one.value)
        else:
            scores[name] = float(score.value)  # type: ignore[union-attr]
    return scores, tuple(failed)


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Normalise → score → decide, built once at start-up.

    Attributes:
        chain: the scorer chain.
        rules: the compiled flag rules.
        sample_rate: the random sample rate.
        on_error: error callback (metrics).
        judge_scores: the LLM judge scores already known for a trace id (a re-score after
            late spans keeps the reasons its judges gave); never blocks.
        detector: the limit/block detection rules (:mod:`scorers.detect`).
        sessions: the attribute keys of the session and user ids (:mod:`scorers.session_ids`).
        rate_for: the random sample's rate in force for a run (a review budget or sampling where the
            prediction is least sure: :meth:`scorers.sampling.ReviewBudget.rate_of`); ``None``:
            ``sample_rate`` for every run.
    """

    chain: tuple[tuple[str, Scorer], ...]
    rules: tuple[Rule, ...]
    sample_rate: float
    on_error: OnError | None = None
    judge_scores: Callable[[str], Mapping[str, float]] | None = None
    detector: Detector = DEFAULT_DETECTOR
    sessions: SessionKeys = DEFAULT_SESSION_KEYS
    rate_for: Callable[[Run], float] | None = None

    def process(self, closed: ClosedTrace, feedback: Mapping[str, object] | None = None) -> ScoredRun:
        """Produce the :class:`ScoredRun` of one closed trace. Never raises for bad data."""
        return self.decide_run(self._normalise(closed), feedback, rescored=closed.rescore)

    def decide_run(
        self, run: Run, feedback: Mapping[str, object] | None = None, *, rescored: bool = False
    ) -> ScoredRun:
        """Score a normalised run and make its flag decision, with the evidence of every reason."""
        scores, failed = score_run(run, self.chain, self.on_error)
        judge = None if self.judge_scores is None else self.judge_scores(run.trace_id)
        rate = self.sample_rate if self.rate_for is None else self.rate_for(run)
        drawn = sample_point(run.trace_id) < rate  # one draw serves the rules and the recorded design
        flag = decide(
            run, scores, self.rules, rate, feedback=feedback, on_error=self._rule_error, judge=judge, drawn=drawn
        )
        evidence = () if flag is None else reason_evidence(run, flag, self.rules, scores, feedback, judge)
        design = sample_design(run.trace_id, rate, flag, drawn=drawn)
        return _new_scored_run(run, scores, flag, failed, rescored, evidence, design)

    def _normalise(self, closed: ClosedTrace) -> Run:
        try:
            return normalise(closed.spans, complete=closed.complete, detector=self.detector, sessions=self.sessions)
        except Exception as exc:  # noqa: BLE001 - a normaliser bug must not lose the trace
            log.error("normalise_failed", trace_id=closed.trace_id, error=repr(exc))
            if self.on_error is not None:
                self.on_error("normalise", "normalise", exc)
            return Run(trace_id=closed.trace_id, complete=False, span_count=len(closed.spans))

    def _rule_error(self, rule: str, exc: Exception) -> None:
        log.warning("rule_failed", rule=rule, error=repr(exc))
        if self.on_error is not None:
            self.on_error("rule", rule, exc)
