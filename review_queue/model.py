"""Review-queue data model: what the store returns and the pipeline needs to know.

Imports only the standard library and the other packages' ``model`` modules. The sink
contract (:class:`RunSink`, :class:`WriteOutcome`) lives in :mod:`scorers.model` so the
stream worker can depend on it without importing this higher layer; it is re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from scorers.model import RunSink, WriteOutcome

__all__ = [
    "DEFAULT_CATEGORIES",
    "FeedbackIn",
    "ItemState",
    "Principal",
    "Role",
    "RunSink",
    "VerdictIn",
    "VerdictTarget",
    "VerdictValue",
    "WriteOutcome",
]


class ItemState(str, Enum):
    """State of a review item."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"


class Role(str, Enum):
    """What a token (and the session made from it) may do.

    ``admin`` everything; ``reviewer`` read, claim and judge; ``viewer`` read only;
    ``ingest`` send traces and user feedback only.
    """

    ADMIN = "admin"
    REVIEWER = "reviewer"
    VIEWER = "viewer"
    INGEST = "ingest"


class VerdictValue(str, Enum):
    """A reviewer's judgement of a run."""

    PASS = "pass"
    FAIL = "fail"


DEFAULT_CATEGORIES: tuple[str, ...] = (
    "wrong_tool",
    "wrong_arguments",
    "hallucination",
    "unsafe_output",
    "loop",
    "gave_up",
    "bad_tone",
    "other",
)
"""The failure taxonomy used when ``review_categories`` is not configured."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: a token's name and role.

    Attributes:
        name: the token name (the reviewer's identity in verdicts and the audit trail).
        role: the token's role.
        token_id: the database id of the token, ``None`` for the bootstrap admin token.
    """

    name: str
    role: Role
    token_id: int | None = None


class VerdictTarget(str, Enum):
    """What a verdict judges: the item's run, a whole session (a session item), or one turn of it."""

    RUN = "run"
    SESSION = "session"
    TURN = "turn"


@dataclass(frozen=True, slots=True)
class VerdictIn:
    """A verdict as submitted.

    Attributes:
        verdict: pass or fail.
        categories: failure categories from the taxonomy (only with ``fail``).
        notes: free text.
        corrected_answer: what the agent should have answered, if given.
        target: what it judges; ``None``: the item's own subject (its run, or its session).
        target_trace_id: the turn judged, with ``target`` ``turn`` only.
    """

    verdict: VerdictValue
    categories: tuple[str, ...] = ()
    notes: str = ""
    corrected_answer: str | None = None
    target: VerdictTarget | None = None
    target_trace_id: str | None = None


@dataclass(frozen=True, slots=True)
class FeedbackIn:
    """One piece of user feedback as received.

    Attributes:
        trace_id: the run it is about (lower-case hex).
        kind: ``thumbs`` (score 1 up, 0 down) or ``score`` (a number).
        score: the value.
        comment: the user's comment.
        source: where it came from (``web``, ``slack``…).
        feedback_id: the client's idempotency key.
    """

    trace_id: str
    kind: str
    score: float
    comment: str
    source: str
    feedback_id: str
