"""Errors of the review_queue package (one root: :class:`ReviewQueueError`)."""

from __future__ import annotations

from collector.errors import BackpressureError


class ReviewQueueError(Exception):
    """Root of every error raised by :mod:`review_queue`."""


class StoreUnavailableError(ReviewQueueError, BackpressureError):
    """The database cannot be reached; retry after ``retry_after`` seconds. Nothing was written.

    It is a :class:`collector.errors.BackpressureError`, so the stream worker pauses on it.
    """

    def __init__(self, retry_after: float, message: str = "database unavailable") -> None:
        BackpressureError.__init__(self, retry_after)
        self.args = (message,)


class NotFoundError(ReviewQueueError, LookupError):
    """The requested run or item does not exist."""


class ConflictError(ReviewQueueError):
    """The item is not in a state that allows the operation (not yours, already done, reviewed twice)."""


class OverCapacityError(ReviewQueueError):
    """A bounded backlog is full; the request was refused (HTTP 429), retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: float = 60.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidInputError(ReviewQueueError, ValueError):
    """A verdict, feedback or token request is malformed (unknown category, bad score, bad role)."""
