"""Review-queue data model: what the store returns and the pipeline needs to know.

Imports only the standard library and the other packages' ``model`` modules. The sink
contract (:class:`RunSink`, :class:`WriteOutcome`) lives in :mod:`scorers.model` so the
stream worker can depend on it without importing this higher layer; it is re-exported here.
"""

from __future__ import annotations

from enum import Enum

from scorers.model import RunSink, WriteOutcome

__all__ = ["ItemState", "RunSink", "WriteOutcome"]


class ItemState(str, Enum):
    """State of a review item."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
