"""Review-queue data model: what the store returns and the pipeline needs to know.

Imports only the standard library and the other packages' ``model`` modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from scorers.model import ScoredRun


class ItemState(str, Enum):
    """State of a review item."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """What one idempotent run write changed.

    Attributes:
        trace_id: the run.
        new_run: the run was not in the index before (count it in run counters).
        new_flag: the run had no review item before and has one now (count it in flag counters).
    """

    trace_id: str
    new_run: bool
    new_flag: bool


class RunSink(Protocol):
    """Where scored runs go: the run index and the review queue.

    ``write`` is idempotent on trace id: writing the same run again updates the stored
    row and never creates a second run row or review item. All runs of one call are
    committed in one transaction; when it returns they are durable.
    """

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        """Upsert ``runs`` and return one outcome per run, in order.

        Raises:
            review_queue.errors.StoreUnavailableError: the database cannot be reached;
                nothing was written and the caller should retry later.
        """
        ...
