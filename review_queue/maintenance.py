"""Background upkeep of the review queue: lapsed leases back to pending, late feedback joined to runs
(or dropped when its run never came), idle sessions closed (:class:`review_queue.session_close.SessionCloser`).

Claims expire lazily anyway (every claim first returns lapsed leases), and feedback is joined
when it arrives; this loop covers the quiet cases — nobody claiming, or a run that was written
after its feedback by another process — so queue gauges and flags stay current.
"""

from __future__ import annotations

import structlog

from collector.lifecycle import Periodic
from review_queue.errors import StoreUnavailableError
from review_queue.feedback import FeedbackStore
from review_queue.session_close import SessionCloser
from review_queue.workbench import Workbench

__all__ = ["Maintenance"]

log = structlog.get_logger(__name__)


class Maintenance:
    """Runs :meth:`tick` every ``interval_s`` on a daemon thread.

    Args:
        workbench: whose leases to expire.
        feedback: whose pending feedback to join.
        interval_s: seconds between ticks.
        sessions: closes idle sessions each tick (``None``: no session upkeep in this process).
    """

    def __init__(
        self,
        workbench: Workbench,
        feedback: FeedbackStore,
        *,
        interval_s: float = 5.0,
        sessions: SessionCloser | None = None,
    ) -> None:
        self._workbench = workbench
        self._feedback = feedback
        self._sessions = sessions
        # Upkeep must never die: a failed tick is logged and the next one retries.
        self._periodic = Periodic("vigil-review-maintenance", self.tick, interval_s, event="review_maintenance_failed")

    def tick(self) -> tuple[int, int]:
        """One pass: ``(leases expired, runs re-evaluated with feedback)``; (0, 0) while the database is down.
        Feedback that waited too long for its run is dropped on the way."""
        try:
            joined = self._feedback.join_pending()
            self._feedback.expire_pending()
            if self._sessions is not None:
                self._sessions.close_idle()
            return self._workbench.expire_leases(), joined
        except StoreUnavailableError as exc:
            log.warning("review_maintenance_skipped", error=str(exc))
            return 0, 0

    def start(self) -> None:
        """Start the thread."""
        self._periodic.start()

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Stop the thread; True when it ended within ``timeout_s`` (:class:`collector.lifecycle.Component`)."""
        return self._periodic.shutdown(timeout_s)
