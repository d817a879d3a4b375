"""Privacy on the write path: redaction of run content before it reaches the store.

:class:`RedactingSink` wraps the real sink (:class:`review_queue.store.SqlStore`) and
hands it copies of the scored runs whose free text went through a
:class:`scorers.redact.Redactor`. Only a flagged run's content is persisted (its review
item's snapshot), so only flagged runs are copied in full; every run's ``error_type`` and
``evidence`` (run-index columns that quote status messages and outputs) are redacted too.
Nothing unredacted is written, so nothing unredacted can be shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from scorers.model import RunSink, ScoredRun, WriteOutcome
from scorers.redact import Redactor

__all__ = ["RedactingSink"]


class RedactingSink:
    """A :class:`~scorers.model.RunSink` that redacts run content before delegating.

    Args:
        inner: the sink that persists.
        redactor: the compiled patterns and attribute filters.
    """

    def __init__(self, inner: RunSink, redactor: Redactor) -> None:
        self._inner = inner
        self._redactor = redactor

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Redact, then write through the inner sink (same outcomes, same errors)."""
        return self._inner.write([self._redact(s) for s in runs])

    def _redact(self, scored: ScoredRun) -> ScoredRun:
        run = scored.run
        evidence = self._redactor.evidence(scored.evidence)
        if scored.flag is not None:
            return dataclasses.replace(scored, run=self._redactor.run(run), evidence=evidence)
        if run.error_type or run.evidence or scored.evidence:
            plain = dataclasses.replace(
                run, error_type=self._redactor.maybe(run.error_type), evidence=self._redactor.evidence(run.evidence)
            )
            return dataclasses.replace(scored, run=plain, evidence=evidence)
        return scored
