"""Errors of the review_queue package (one root: :class:`ReviewQueueError`)."""

from __future__ import annotations


class ReviewQueueError(Exception):
    """Root of every error raised by :mod:`review_queue`."""


class StoreUnavailableError(ReviewQueueError):
    """The database cannot be reached; retry after ``retry_after`` seconds. Nothing was written."""

    def __init__(self, retry_after: float, message: str = "database unavailable") -> None:
        self.retry_after = retry_after
        super().__init__(message)


class NotFoundError(ReviewQueueError, LookupError):
    """The requested run or item does not exist."""
