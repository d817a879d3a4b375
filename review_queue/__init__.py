"""Durable run index and review queue, the REST API, and the ``vigil`` CLI (composition root).

Public surface: the sink contract and item states.
"""

from __future__ import annotations

from review_queue.model import ItemState, RunSink, WriteOutcome

__all__ = ["ItemState", "RunSink", "WriteOutcome"]
