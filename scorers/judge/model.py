"""The LLM judge's data model: rubrics, judge results, the sink and agreement figures.

Imports only the standard library and :mod:`scorers.model`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from scorers.model import Flag, Priority, ScoredRun


@dataclass(frozen=True, slots=True)
class Rubric:
    """What a judge is asked, versioned: change the text, bump the version.

    Attributes:
        name: rubric name (``task_completion``, ``groundedness``, ``safety`` or your own).
        version: version string; part of the cache key and of the agreement labels.
        instructions: the system prompt: what a score of 1 and of 0 mean.
    """

    name: str
    version: str
    instructions: str

    @property
    def label(self) -> str:
        """``name@version``: the ``rubric_version`` stored with a result and used as a metric label."""
        return f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True)
class JudgeResult:
    """One judge's verdict on one run (or the error that replaced it).

    Attributes:
        trace_id: the run.
        judge: the judge name.
        rubric_version: :attr:`Rubric.label`.
        model: the model asked.
        score: in [0, 1], higher is better (complete, grounded, safe); None on error.
        passed: ``score >= pass_threshold``; None on error. Compared with human verdicts.
        reasoning: the judge's short justification (attacker-influenced text: escape it).
        error: why there is no score (``malformed: …``, ``timeout: …``), else None.
        input_tokens / output_tokens: tokens the request(s) used (0 for a cache hit).
        cost_usd: estimated cost of this verdict (0 for a cache hit).
        latency_s: wall time of the request(s), retries included.
        content_hash: hash of the judged content (the cache key's third part).
        cached: served from the verdict cache.
    """

    trace_id: str
    judge: str
    rubric_version: str
    model: str
    score: float | None
    passed: bool | None
    reasoning: str
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    content_hash: str = ""
    cached: bool = False


@dataclass(frozen=True, slots=True)
class TranscriptTurn:
    """One turn of a session as a session judge reads it (already redacted, as the run page shows it).

    Attributes:
        number: the turn's 1-based position in the session.
        trace_id: the turn's run.
        user: what the user said in this turn (the messages the turn added, in order).
        answer: the assistant's answer of the turn, or None when it gave none.
    """

    number: int
    trace_id: str
    user: tuple[str, ...]
    answer: str | None


class JudgeSink(Protocol):
    """Where judge results go: stored with the run, and the run's flag updated.

    Implemented by ``review_queue.judges.SqlJudgeSink``; ``tests.support.judge.InMemoryJudgeSink``
    is the fake.
    """

    def write_judgement(self, result: JudgeResult, scored: ScoredRun, flag: Flag | None) -> bool:
        """Upsert ``result`` (keyed by trace id and judge) and, with ``flag``, merge it into the run's flag.

        Merging is a union of reasons with the highest priority; a run not flagged before
        gets its review item (snapshot of ``scored``). Flags stay sticky. One transaction.

        Returns:
            True when the run was not flagged before and is now (count it as a new flag).

        Raises:
            collector.errors.BackpressureError: the database cannot be reached; nothing written.
        """
        ...


class SessionJudgeSink(Protocol):
    """Where session judges' verdicts go (``review_queue.session_judges.SqlSessionJudgeSink``)."""

    def write_session_judgement(
        self, session_id: str, result: JudgeResult, reason: str | None, priority: Priority
    ) -> None:
        """Upsert ``result`` keyed by (session id, judge); with ``reason``, add it (at ``priority``) to
        the session's review item, creating the item when the session was not flagged.

        ``result.trace_id`` is the session's last turn (the run whose item is the session's item).

        Raises:
            collector.errors.BackpressureError: the database cannot be reached; nothing written.
        """
        ...


@dataclass(frozen=True, slots=True)
class VerdictPair:
    """A run judged both by an LLM judge and by a human reviewer.

    Attributes:
        judge: the judge name.
        rubric_version: the judge's rubric label.
        judge_pass: the judge's pass/fail.
        human_pass: the reviewer's pass/fail.
    """

    judge: str
    rubric_version: str
    judge_pass: bool
    human_pass: bool


class VerdictPairSource(Protocol):
    """Runs that have both a judge verdict and a human verdict (one pair per run and judge)."""

    def verdict_pairs(self) -> Iterable[VerdictPair]:
        """Every (judge verdict, human verdict) pair.

        Raises:
            collector.errors.BackpressureError: the database cannot be reached.
        """
        ...


@dataclass(frozen=True, slots=True)
class Agreement:
    """How often a judge agrees with the human reviewers.

    Attributes:
        judge / rubric_version: the group.
        n: runs with both verdicts.
        agreed: runs where both said the same.
        rate: ``agreed / n``.
        kappa: Cohen's kappa; NaN when undefined (both raters used one class only).
    """

    judge: str
    rubric_version: str
    n: int
    agreed: int
    rate: float
    kappa: float
