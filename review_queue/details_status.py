"""Why a run page shows no conversation or span attributes: the run details' status, decided once.

A run's details document (:mod:`review_queue.details`) is written for every flagged run and for a
deterministic share of the others (:func:`review_queue.details.details_sampled` at
``VIGIL_DETAILS_SAMPLE_RATE``), and deleted ``VIGIL_DETAILS_RETENTION_DAYS`` after it was written
for unflagged runs (0: flagged runs only). A page without a document must say which of these it
was, and never blame the agent's instrumentation for what Vigil chose not to keep:
:func:`details_status` is that decision, a pure function of the run, the clock and the
configuration (:class:`DetailsPolicy`, passed in by the composition root: this module reads no
settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from review_queue.details import DEFAULT_DETAILS_RETENTION_DAYS, DEFAULT_DETAILS_SAMPLE_RATE, details_sampled
from review_queue.store import MANUAL_REASON

__all__ = [
    "DAY_S",
    "WRITE_GRACE_S",
    "DetailsPolicy",
    "DetailsStatus",
    "details_status",
    "flagged_when_stored",
]

DAY_S: Final = 86_400.0
WRITE_GRACE_S: Final = 60.0
"""Seconds after a run is stored during which a missing document is "not written yet": the writer
works off the scoring path, a moment behind the store (under load, a few seconds)."""


class DetailsStatus(StrEnum):
    """What a run page can say about the run's details (the value is the page's ``data-reason``)."""

    KEPT = "kept"
    """The document exists and carries content: nothing to explain."""
    NOT_CAPTURED = "not_captured"
    """The document exists but no prompt, completion or tool argument was on the spans: the agent did
    not capture content (the only case where the content-capture advice is right)."""
    NOT_SAMPLED = "not_sampled"
    """Unflagged and outside the details sample rate: never written."""
    FLAGGED_ONLY = "flagged_only"
    """Unflagged while details retention is 0 (details of flagged runs only): never written."""
    EXPIRED = "expired"
    """Unflagged, kept, and deleted by the details retention."""
    PENDING = "pending"
    """Should be kept, stored less than :data:`WRITE_GRACE_S` ago: the writer may not have written it yet."""
    DROPPED = "dropped"
    """Should be kept and within retention, but there is no document: the writer dropped it (queue or
    memory budget full, a failed write; ``vigil_run_details_dropped_total``) or Vigil stopped first."""


@dataclass(frozen=True)
class DetailsPolicy:
    """Which run details Vigil keeps: the configured ``VIGIL_DETAILS_SAMPLE_RATE`` and ``VIGIL_DETAILS_RETENTION_DAYS``.

    Attributes:
        sample_rate: share of unflagged runs whose details are written, in [0, 1].
        retention_days: days an unflagged run's details are kept; 0: flagged runs only.
    """

    sample_rate: float = DEFAULT_DETAILS_SAMPLE_RATE
    retention_days: float = DEFAULT_DETAILS_RETENTION_DAYS


def details_status(
    *,
    present: bool,
    content_captured: bool,
    flagged: bool,
    trace_id: str,
    created_at: float,
    now: float,
    sample_rate: float,
    retention_days: float,
) -> DetailsStatus:
    """Why a run has (or lacks) its details, as the page should say it.

    The writer keeps a flagged run's details with the run; an unflagged run's only when details
    retention is above 0 and the run is in the sample (:func:`review_queue.details.details_sampled`),
    and then for ``retention_days``. A run that should have a document and has none was dropped
    (after a short grace: :data:`WRITE_GRACE_S`). The current configuration is all there is to go
    on: a run stored under another rate or retention is judged by today's.

    Args:
        present: a details document exists for the run.
        content_captured: the document's ``content_captured`` (ignored without a document).
        flagged: the run was flagged when it was stored (:func:`flagged_when_stored`).
        trace_id: the run's trace id (the sample is a function of it).
        created_at: when the run was stored (Unix seconds).
        now: the current time (Unix seconds).
        sample_rate: ``VIGIL_DETAILS_SAMPLE_RATE``.
        retention_days: ``VIGIL_DETAILS_RETENTION_DAYS``.

    Returns:
        The status; :attr:`DetailsStatus.KEPT` or :attr:`DetailsStatus.NOT_CAPTURED` whenever a document exists.
    """
    if present:
        return DetailsStatus.KEPT if content_captured else DetailsStatus.NOT_CAPTURED
    if not flagged:
        if retention_days <= 0:
            return DetailsStatus.FLAGGED_ONLY
        if not details_sampled(trace_id, sample_rate):
            return DetailsStatus.NOT_SAMPLED
        if now - created_at > retention_days * DAY_S:
            return DetailsStatus.EXPIRED
    if now - created_at < WRITE_GRACE_S:
        return DetailsStatus.PENDING
    return DetailsStatus.DROPPED


def flagged_when_stored(flag: Mapping[str, Any] | None) -> bool:
    """Whether a run (its API ``flag``) was flagged when it was stored, as far as the run row tells.

    A run whose only reason is ``manual`` was sent to review by hand
    (:meth:`review_queue.store.SqlStore.send_to_review`) after it was stored unflagged: its details
    were decided as an unflagged run's. An LLM judge's flag also
    comes after the run was stored, but its reasons are rule names like any other: such a run
    counts as flagged when stored.
    """
    if not flag:
        return False
    return any(reason != MANUAL_REASON for reason in flag.get("reasons") or ())
