"""Test doubles and builders for code that writes to or reads from the review queue.

- :class:`InMemoryRunSink`: a :class:`review_queue.model.RunSink` fake with the same
  outcome semantics as :class:`review_queue.store.SqlStore`, plus failure injection.
- :func:`scored_run`: a terse :class:`scorers.model.ScoredRun` builder.
- :func:`postgres_scratch_url`: an isolated PostgreSQL schema for one test (or session).
- :func:`postgres_unreachable`: why a PostgreSQL URL cannot be used, for skip messages.
- :class:`Clock`, :data:`T0`: the settable clock of :mod:`tests.support.fixtures`, re-exported.
- :func:`login`: log a test client in through the UI's form.
- :func:`assert_unauthorized`: a request without a valid bearer token gets 401 and the challenge.
"""

from __future__ import annotations

import re
import secrets
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from review_queue.errors import StoreUnavailableError
from review_queue.model import WriteOutcome
from scorers.model import OUTCOME_FIELDS, Flag, Priority, Run, ScoredRun
from scorers.rules import DEFAULT_SAMPLE_RATE
from tests.support.fixtures import T0, Clock
from vigil.bench.postgres import postgres_scratch_url, postgres_unreachable

__all__ = [
    "T0",
    "TRUTH_FIELDS",
    "Clock",
    "InMemoryRunSink",
    "assert_unauthorized",
    "login",
    "postgres_scratch_url",
    "postgres_unreachable",
    "scored_run",
]

TRUTH_FIELDS = ("agent", *OUTCOME_FIELDS)
"""Run fields an end-to-end test compares one to one between an agent's ground truth (what its
driver or the demo fleet observed) and the run Vigil stored (``GET /api/v1/runs/{trace_id}``)."""


_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def login(client: Any, token: str) -> str:
    """Log ``client`` (a Starlette ``TestClient`` of the UI) in through the form with ``token``;
    return the CSRF token of the new session (read from the queue page)."""
    csrf = _CSRF.search(client.get("/login").text)
    assert csrf is not None, "no CSRF field on /login"
    response = client.post("/login", data={"token": token, "csrf": csrf.group(1)}, follow_redirects=False)
    assert 303 == response.status_code, response.text
    found = _CSRF.search(client.get("/queue").text)
    assert found is not None, "no CSRF field on /queue after login"
    return found.group(1)


def assert_unauthorized(client: Any, path: str, authorization: str | None) -> None:
    """GET ``path`` with that ``Authorization`` header (None: without one) answers 401 with the
    ``WWW-Authenticate: Bearer`` challenge (RFC 6750, section 3)."""
    headers = {} if authorization is None else {"Authorization": authorization}
    response = client.get(path, headers=headers)
    assert 401 == response.status_code
    assert "Bearer" == response.headers["WWW-Authenticate"]


def scored_run(
    trace_id: str | None = None,
    *,
    scores: Mapping[str, float] | None = None,
    reasons: Sequence[str] = (),
    priority: Priority = Priority.NORMAL,
    sample_rate: float = DEFAULT_SAMPLE_RATE,
    **run_fields: Any,
) -> ScoredRun:
    """Build a :class:`ScoredRun`; it is flagged when ``reasons`` is not empty.

    Args:
        trace_id: 32 hex chars; random when omitted.
        scores: scorer name to value (default empty).
        reasons: flag reasons; empty means not flagged.
        priority: the flag priority.
        sample_rate: the flag's sample rate.
        **run_fields: any other :class:`scorers.model.Run` field.
    """
    run = Run(trace_id=trace_id or secrets.token_hex(16), **run_fields)
    flag = Flag(tuple(reasons), priority, sample_rate) if reasons else None
    return ScoredRun(run=run, scores=dict(scores or {}), flag=flag)


class InMemoryRunSink:
    """A thread-safe in-memory :class:`review_queue.model.RunSink`.

    Mirrors :meth:`review_queue.store.SqlStore.write`: idempotent on trace id, a flag is
    sticky across re-scores, ``new_run``/``new_flag`` are reported once per trace id.

    Attributes:
        runs: the latest scored run per trace id.
        flags: the latest flag per trace id that was ever flagged (the review items).
        versions: the write count per trace id.
        batches: every successful ``write`` call's runs, in order.
    """

    def __init__(self) -> None:
        self.runs: dict[str, ScoredRun] = {}
        self.flags: dict[str, Flag] = {}
        self.versions: dict[str, int] = {}
        self.batches: list[tuple[ScoredRun, ...]] = []
        self._failures = 0
        self._retry_after = 0.0
        self._lock = threading.Lock()

    def fail_next(self, count: int = 1, retry_after: float = 0.1) -> None:
        """Make the next ``count`` writes raise :class:`StoreUnavailableError` (nothing written)."""
        with self._lock:
            self._failures = count
            self._retry_after = retry_after

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Store ``runs`` and return one outcome per run, in order.

        Raises:
            StoreUnavailableError: while failures injected by :meth:`fail_next` remain.
        """
        with self._lock:
            if self._failures > 0:
                self._failures -= 1
                raise StoreUnavailableError(self._retry_after, "injected failure")
            outcomes = [self._write_one(scored) for scored in runs]
            self.batches.append(tuple(runs))
            return outcomes

    def flagged(self) -> list[str]:
        """Return the trace ids with a review item, in the order they were first flagged."""
        with self._lock:
            return list(self.flags)

    def _write_one(self, scored: ScoredRun) -> WriteOutcome:
        trace_id = scored.run.trace_id
        new_run = trace_id not in self.runs
        new_flag = scored.flag is not None and trace_id not in self.flags
        self.runs[trace_id] = scored
        self.versions[trace_id] = self.versions.get(trace_id, 0) + 1
        if scored.flag is not None:
            self.flags[trace_id] = scored.flag
        return WriteOutcome(trace_id, new_run, new_flag)
