"""The review queue's write side: claim with a lease, release, skip, requeue, assign, verdicts.

Every operation is one transaction and appends to the audit trail (``review_events``).
``claim_next`` is atomic: on PostgreSQL the candidate row is taken with
``FOR UPDATE SKIP LOCKED`` (concurrent claimers never wait for each other and never get the
same item); on SQLite the whole claim runs in a ``BEGIN IMMEDIATE`` write transaction.
Leases expire back to ``pending``: every claim first returns expired leases to the queue
(and :meth:`Workbench.expire_leases` does it on demand), so an abandoned item is never stuck.

An item needs ``reviews_required`` verdicts from distinct reviewers (default 1). Until the
last one lands the item goes back to ``pending`` after each verdict and verdicts are blind:
:meth:`Workbench.verdicts` shows a reviewer only their own (admins see all).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue.errors import ConflictError, InvalidInputError, NotFoundError
from review_queue.model import (
    DEFAULT_CATEGORIES,
    ItemState,
    Principal,
    Role,
    VerdictIn,
    VerdictTarget,
    VerdictValue,
)
from review_queue.store import guard, write_transaction
from review_queue.tables import judge_results, review_events, review_items, review_verdicts, runs, verdict_run
from scorers.model import Priority

__all__ = ["DEFAULT_LEASE_S", "Claim", "ReviewObserver", "Workbench"]

DEFAULT_LEASE_S = 900.0
"""Lease of a claim: 15 minutes."""

MAX_NOTES = 20_000
MAX_ANSWER = 200_000

_ITEMS = review_items


class ReviewObserver:
    """Callbacks for metrics; the default does nothing (see :class:`review_queue.metrics.ReviewMetrics`)."""

    def claimed(self) -> None:
        """An item was claimed."""

    def leases_expired(self, count: int) -> None:
        """``count`` leases expired back to pending."""

    def verdict(self, agent: str, verdict: str) -> None:
        """A verdict was recorded."""

    def sample_verdict(self, agent: str, verdict: str, weight: float) -> None:
        """The first verdict on a run of the random review sample was recorded (the unbiased pass rate's
        unit); ``weight``: the runs it stands for, 1 / the run's inclusion probability."""

    def completion_revoked(self, agent: str) -> None:
        """The first failing verdict on a run counted as a completed task (``scorers.slo``) was recorded."""


SAMPLE_ORDER: Final = sa.case(
    (_ITEMS.c.priority_rank == Priority.LOW.rank, sa.func.substr(_ITEMS.c.trace_id, 25, 8)), else_=""
)
"""The order of the low-priority lane: the trace id's last 8 hex digits — random in W3C trace ids and
in the time-prefixed ones some SDKs make (AWS X-Ray's), and independent of the sample's draw (a hash of
the whole id) and of how the run went; the other lanes tie on it and go oldest first."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed item.

    Attributes:
        item_id: the item.
        trace_id: its run.
        lease_expires_at: Unix epoch seconds when the lease lapses.
    """

    item_id: int
    trace_id: str
    lease_expires_at: float


class Workbench:
    """Queue operations over the review tables.

    Thread-safe; every method blocks on database I/O.

    Args:
        engine: the store's engine (:attr:`review_queue.store.SqlStore.engine`).
        clock: Unix epoch seconds (injected in tests to expire leases).
        lease_s: lease length of a claim.
        categories: the failure taxonomy verdicts may use.
        observer: metric callbacks.
        retry_after_s: ``retry_after`` of :class:`~review_queue.errors.StoreUnavailableError`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Callable[[], float] = time.time,
        lease_s: float = DEFAULT_LEASE_S,
        categories: Sequence[str] = DEFAULT_CATEGORIES,
        observer: ReviewObserver | None = None,
        retry_after_s: float = 2.0,
    ) -> None:
        if lease_s <= 0:
            raise InvalidInputError(f"lease must be > 0 s, got {lease_s}")
        self._engine = engine
        self._clock = clock
        self._lease = lease_s
        self.categories: tuple[str, ...] = tuple(categories)
        self._observer = observer or ReviewObserver()
        self._retry_after = retry_after_s
        self._postgres = engine.dialect.name == "postgresql"

    def claim_next(self, reviewer: str, *, priority: str | None = None) -> Claim | None:
        """Claim the most urgent item ``reviewer`` may take: highest priority, then oldest.

        Low-priority items (the random review sample's lane) come out in the order of a key read from
        their trace id (:data:`SAMPLE_ORDER`), not oldest first: reviewers who fall behind then review
        a random part of the waiting sample rather than its oldest runs, so the sample's reviewed runs
        stay a random part of it in every window (what the quality estimates assume of them within a
        rule stratum; :mod:`review_queue.quality`).

        Eligible: pending, unassigned or assigned to ``reviewer``, not already reviewed or
        skipped by ``reviewer``. Expired leases return to pending first.

        Returns:
            The claim, or ``None`` when nothing is eligible.
        """
        claim = None
        with self._write("claim_next") as conn:
            now = self._clock()
            expired = self._expire(conn, now)
            query = _next_query(reviewer, priority)
            if self._postgres:
                query = query.with_for_update(skip_locked=True)
            item_id = conn.execute(query).scalar_one_or_none()
            if item_id is not None:
                claim = self._take(conn, int(item_id), reviewer, now)
        self._committed(expired, claim)
        return claim

    def next_for(self, reviewer: str) -> int | None:
        """The item :meth:`claim_next` would give ``reviewer`` now, without claiming it (nothing is written:
        "submit and next" opens it unclaimed, so a reviewer who walks away holds no lease); ``None`` when none."""
        with guard("next_for", self._retry_after), self._engine.connect() as conn:
            found = conn.execute(_next_query(reviewer, None)).scalar_one_or_none()
        return None if found is None else int(found)

    def claim(self, item_id: int, reviewer: str) -> Claim:
        """Claim one item by id (from the queue view).

        Raises:
            NotFoundError: no such item.
            ConflictError: it is leased to someone else, done, assigned to another reviewer, or
                ``reviewer`` already reviewed it.
        """
        with self._write("claim") as conn:
            now = self._clock()
            expired = self._expire(conn, now)
            row = self._item(conn, item_id, lock=True)
            held = row["state"] == ItemState.CLAIMED.value and row["claimed_by"] == reviewer
            if not held:
                if row["state"] != ItemState.PENDING.value:
                    raise ConflictError(f"item {item_id} is {row['state']}")
                if row["assigned_to"] not in (None, reviewer):
                    raise ConflictError(f"item {item_id} is assigned to {row['assigned_to']}")
                if _has_verdict(conn, item_id, reviewer):
                    raise ConflictError(f"{reviewer} already reviewed item {item_id}")
            claim = self._take(conn, item_id, reviewer, now)
        self._committed(expired, claim)
        return claim

    def release(self, item_id: int, reviewer: str) -> None:
        """Give a claimed item back to the queue.

        Raises:
            NotFoundError / ConflictError: no such item, or ``reviewer`` does not hold its lease.
        """
        self._drop_lease(item_id, reviewer, "release")

    def skip(self, item_id: int, reviewer: str) -> None:
        """Release and never offer the item to ``reviewer`` again through :meth:`claim_next`."""
        self._drop_lease(item_id, reviewer, "skip")

    def requeue(self, item_id: int, actor: str, *, reviews_required: int | None = None) -> None:
        """Put an item back to pending (admin): a done item then needs one more verdict.

        Args:
            item_id: the item.
            actor: who did it (audit).
            reviews_required: the new number of verdicts needed (default: one more than given).

        Raises:
            NotFoundError: no such item.
            InvalidInputError: ``reviews_required`` is not above the verdicts already given.
        """
        with self._write("requeue") as conn:
            row = self._item(conn, item_id, lock=True)
            required = reviews_required if reviews_required is not None else row["reviews_done"] + 1
            if required <= row["reviews_done"]:
                raise InvalidInputError(f"reviews_required must exceed the {row['reviews_done']} verdicts given")
            values = {"reviews_required": required, "completed_at": None, **_NO_LEASE}
            self._update(conn, item_id, state=ItemState.PENDING.value, **values)
            self._event(conn, item_id, actor, "requeue", {"reviews_required": required, "was": row["state"]})

    def assign(self, item_id: int, actor: str, assignee: str | None) -> None:
        """Reserve an item for one reviewer (``None`` unassigns). Records who did it.

        Raises:
            NotFoundError: no such item.
        """
        with self._write("assign") as conn:
            self._item(conn, item_id, lock=True)
            self._update(conn, item_id, assigned_to=assignee)
            self._event(conn, item_id, actor, "assign", {"assignee": assignee})

    def set_reviews_required(self, item_id: int, actor: str, count: int) -> None:
        """Set how many distinct reviewers must judge an item (≥ 1, ≥ verdicts given + 1 if not done).

        Raises:
            NotFoundError: no such item.
            InvalidInputError: ``count`` < 1.
        """
        if count < 1:
            raise InvalidInputError("reviews_required must be ≥ 1")
        with self._write("set_reviews_required") as conn:
            row = self._item(conn, item_id, lock=True)
            values: dict[str, Any] = {"reviews_required": count}
            if row["state"] == ItemState.DONE.value and count > row["reviews_done"]:
                values.update(state=ItemState.PENDING.value, completed_at=None)
            self._update(conn, item_id, **values)
            self._event(conn, item_id, actor, "set_reviews_required", {"reviews_required": count})

    def submit_verdict(self, item_id: int, reviewer: str, verdict: VerdictIn) -> str:
        """Record ``reviewer``'s verdict on the item they hold; returns the item's new state.

        The item is done once ``reviews_required`` distinct reviewers judged it; before that
        it returns to pending for the next reviewer.

        **Targets.** A verdict on a run item judges its run (``target`` ``run``, the default). A
        verdict on a session item (snapshot ``subject: "session"``) judges the whole session
        (``session``, the default there) or one of its turns (``turn`` with the turn's trace id).
        Each reviewer still gives one verdict per item. A verdict *applies to* a run
        (:data:`review_queue.tables.verdict_run`): a failing ``run`` or ``turn`` verdict revokes
        that run's task completion, and a ``turn`` verdict's corrected answer is that turn's answer
        in ``vigil eval add --from-session``. A ``session`` verdict applies to no run: it judges the
        conversation (continuity, the user giving up, a human asked for), and blaming every turn —
        revoking each turn's completion — would count failures no reviewer saw; a reviewer who can
        name the turn at fault gives that turn the verdict. So a session verdict revokes nothing
        and takes no corrected answer (an answer belongs to one turn).

        Raises:
            InvalidInputError: unknown category, categories on a pass, text too long, a target
                the item does not have, a turn not in the item's session, a corrected answer
                on a session verdict.
            NotFoundError: no such item.
            ConflictError: ``reviewer`` does not hold the item's lease.
        """
        self._validate(verdict)
        with self._write("verdict") as conn:
            now = self._clock()
            row = self._item(conn, item_id, lock=True)
            if row["state"] != ItemState.CLAIMED.value or row["claimed_by"] != reviewer:
                raise ConflictError(f"item {item_id} is not claimed by {reviewer}; claim it first")
            target, turn = _target(conn, row, verdict)
            applies_to = {VerdictTarget.RUN: row["trace_id"], VerdictTarget.TURN: turn}.get(target)
            agent = conn.execute(sa.select(runs.c.agent).where(runs.c.trace_id == row["trace_id"])).scalar_one()
            revoke = (
                verdict.verdict is VerdictValue.FAIL and applies_to is not None and _first_failure(conn, applies_to)
            )
            sampled = None if applies_to is None else _first_sample_verdict(conn, applies_to)
            values = {
                **_verdict_row(row, agent, reviewer, verdict, now),
                "target": target.value,
                "target_trace_id": applies_to,
            }
            conn.execute(sa.insert(review_verdicts).values(values))
            done = row["reviews_done"] + 1
            state = ItemState.DONE if done >= row["reviews_required"] else ItemState.PENDING
            completed = now if state is ItemState.DONE else None
            self._update(conn, item_id, state=state.value, reviews_done=done, completed_at=completed, **_NO_LEASE)
            detail = {"verdict": verdict.verdict.value, "state": state.value}
            if target is not VerdictTarget.RUN:
                detail.update(target=target.value, **({"target_trace_id": turn} if turn else {}))
            self._event(conn, item_id, reviewer, "verdict", detail)
        self._observer.verdict(agent, verdict.verdict.value)
        if sampled is not None:
            self._observer.sample_verdict(agent, verdict.verdict.value, sampled)
        if revoke:
            self._observer.completion_revoked(agent)
        return state.value

    def expire_leases(self) -> int:
        """Return every expired lease to pending now; returns how many."""
        with self._write("expire_leases") as conn:
            expired = self._expire(conn, self._clock())
        self._committed(expired, None)
        return expired

    def verdicts(self, item_id: int, viewer: Principal) -> list[dict[str, Any]]:
        """The item's verdicts that ``viewer`` may see (blind review: only their own until done, admins all)."""
        with guard("verdicts", self._retry_after), self._engine.connect() as conn:
            row = self._item(conn, item_id)
            query = sa.select(review_verdicts).where(review_verdicts.c.item_id == item_id)
            if row["state"] != ItemState.DONE.value and viewer.role is not Role.ADMIN:
                query = query.where(review_verdicts.c.reviewer == viewer.name)
            return [_verdict_dict(v) for v in conn.execute(query.order_by(review_verdicts.c.id)).mappings()]

    def events(self, item_id: int, viewer: Principal) -> list[dict[str, Any]]:
        """The audit trail of an item that ``viewer`` may see, oldest first.

        Blind review, as :meth:`verdicts`: until the item is done, a non-admin sees the other
        reviewers' ``verdict`` events without their verdict (``detail`` keeps only the item's state
        and ``blind: true``); their own events and every other action are shown whole.
        """
        with guard("events", self._retry_after), self._engine.connect() as conn:
            row = self._item(conn, item_id)
            blind = row["state"] != ItemState.DONE.value and viewer.role is not Role.ADMIN
            query = sa.select(review_events).where(review_events.c.item_id == item_id).order_by(review_events.c.id)
            found = []
            for e in conn.execute(query).mappings():
                detail = e["detail"]
                if blind and e["action"] == "verdict" and e["actor"] != viewer.name:
                    detail = {"state": (detail or {}).get("state"), "blind": True}
                found.append({"actor": e["actor"], "action": e["action"], "detail": detail, "at": e["at"]})
            return found

    def item(self, item_id: int) -> dict[str, Any]:
        """The item's queue fields (no snapshot).

        Raises:
            NotFoundError: no such item.
        """
        with guard("item", self._retry_after), self._engine.connect() as conn:
            row = self._item(conn, item_id)
            return {k: row[k] for k in _ITEM_FIELDS}

    def claims_of(self, reviewer: str) -> list[int]:
        """Ids of the items ``reviewer`` holds a live lease on, highest priority first."""
        with guard("claims_of", self._retry_after), self._engine.connect() as conn:
            query = (
                sa.select(_ITEMS.c.id)
                .where(
                    _ITEMS.c.state == ItemState.CLAIMED.value,
                    _ITEMS.c.claimed_by == reviewer,
                    _ITEMS.c.lease_expires_at > self._clock(),
                )
                .order_by(_ITEMS.c.priority_rank.desc(), _ITEMS.c.created_at, _ITEMS.c.id)
            )
            return [int(i) for i in conn.execute(query).scalars()]

    def _validate(self, verdict: VerdictIn) -> None:
        unknown = [c for c in verdict.categories if c not in self.categories]
        if unknown:
            raise InvalidInputError(f"unknown categories {unknown}; known: {list(self.categories)}")
        if verdict.categories and verdict.verdict is VerdictValue.PASS:
            raise InvalidInputError("categories describe failures: only a fail verdict takes them")
        if len(verdict.notes) > MAX_NOTES or len(verdict.corrected_answer or "") > MAX_ANSWER:
            raise InvalidInputError("notes or corrected answer too long")

    def _drop_lease(self, item_id: int, reviewer: str, action: str) -> None:
        with self._write(action) as conn:
            row = self._item(conn, item_id, lock=True)
            if row["state"] != ItemState.CLAIMED.value or row["claimed_by"] != reviewer:
                raise ConflictError(f"item {item_id} is not claimed by {reviewer}")
            self._update(conn, item_id, state=ItemState.PENDING.value, **_NO_LEASE)
            self._event(conn, item_id, reviewer, action, {})

    def _take(self, conn: sa.Connection, item_id: int, reviewer: str, now: float) -> Claim:
        expires = now + self._lease
        self._update(
            conn, item_id, state=ItemState.CLAIMED.value, claimed_by=reviewer, claimed_at=now, lease_expires_at=expires
        )
        self._event(conn, item_id, reviewer, "claim", {"lease_expires_at": expires})
        trace_id = conn.execute(sa.select(_ITEMS.c.trace_id).where(_ITEMS.c.id == item_id)).scalar_one()
        return Claim(item_id, str(trace_id), expires)

    def _committed(self, expired: int, claim: Claim | None) -> None:
        """Tell the observer what a committed transaction did (never before the commit)."""
        if expired:
            self._observer.leases_expired(expired)
        if claim is not None:
            self._observer.claimed()

    def _expire(self, conn: sa.Connection, now: float) -> int:
        expired = (
            sa.update(_ITEMS)
            .where(_ITEMS.c.state == ItemState.CLAIMED.value, _ITEMS.c.lease_expires_at <= now)
            .values(state=ItemState.PENDING.value, updated_at=now, **_NO_LEASE)
            .returning(_ITEMS.c.id)
        )
        ids = [int(i) for i in conn.execute(expired).scalars()]
        for item_id in ids:
            self._event(conn, item_id, "system", "lease_expired", {})
        return len(ids)

    def _item(self, conn: sa.Connection, item_id: int, *, lock: bool = False) -> sa.RowMapping:
        query = sa.select(_ITEMS).where(_ITEMS.c.id == item_id)
        if lock and self._postgres:
            query = query.with_for_update()
        row = conn.execute(query).mappings().first()
        if row is None:
            raise NotFoundError(f"review item {item_id} not found")
        return row

    def _update(self, conn: sa.Connection, item_id: int, **values: Any) -> None:
        conn.execute(sa.update(_ITEMS).where(_ITEMS.c.id == item_id).values(updated_at=self._clock(), **values))

    def _event(self, conn: sa.Connection, item_id: int, actor: str, action: str, detail: dict[str, Any]) -> None:
        row = {"item_id": item_id, "actor": actor, "action": action, "detail": detail, "at": self._clock()}
        conn.execute(sa.insert(review_events).values(row))

    @contextmanager
    def _write(self, operation: str) -> Iterator[sa.Connection]:
        with guard(operation, self._retry_after), self._engine.connect() as conn, write_transaction(conn):
            yield conn


_NO_LEASE: dict[str, Any] = {"claimed_by": None, "claimed_at": None, "lease_expires_at": None}

_ITEM_FIELDS = (
    "id",
    "trace_id",
    "state",
    "priority",
    "reasons",
    "sample_rate",
    "reviews_required",
    "reviews_done",
    "assigned_to",
    "claimed_by",
    "claimed_at",
    "lease_expires_at",
    "completed_at",
    "created_at",
)


def _next_query(reviewer: str, priority: str | None) -> sa.Select[Any]:
    """The most urgent pending item ``reviewer`` may take (:meth:`Workbench.claim_next`'s order)."""
    query = (
        sa.select(_ITEMS.c.id)
        .where(_ITEMS.c.state == ItemState.PENDING.value, *_eligible(reviewer))
        .order_by(_ITEMS.c.priority_rank.desc(), SAMPLE_ORDER, _ITEMS.c.created_at.asc(), _ITEMS.c.id.asc())
        .limit(1)
    )
    return query if priority is None else query.where(_ITEMS.c.priority == priority)


def _eligible(reviewer: str) -> list[sa.ColumnElement[bool]]:
    skipped = sa.exists().where(
        review_events.c.item_id == _ITEMS.c.id,
        review_events.c.actor == reviewer,
        review_events.c.action == "skip",
    )
    reviewed = sa.exists().where(review_verdicts.c.item_id == _ITEMS.c.id, review_verdicts.c.reviewer == reviewer)
    assigned = sa.or_(_ITEMS.c.assigned_to.is_(None), _ITEMS.c.assigned_to == reviewer)
    return [assigned, ~skipped, ~reviewed]


def _first_sample_verdict(conn: sa.Connection, trace_id: str) -> float | None:
    """``1 / p`` when the run is in the random review sample (drawn with probability ``p``) and has no
    verdict applying to it yet; else ``None``."""
    row = conn.execute(sa.select(runs.c.sample_drawn, runs.c.sample_p).where(runs.c.trace_id == trace_id)).first()
    if row is None or not row.sample_drawn or not row.sample_p:
        return None
    first = conn.execute(sa.select(review_verdicts.c.id).where(verdict_run == trace_id).limit(1)).first() is None
    return 1.0 / float(row.sample_p) if first else None


def _first_failure(conn: sa.Connection, trace_id: str) -> bool:
    """Whether the run was counted as a completed task and has no failing verdict yet, human or LLM judge.

    A failing verdict applying to it now is the one that revokes its completion (counted once).
    """
    completed = conn.execute(sa.select(runs.c.task_completed).where(runs.c.trace_id == trace_id)).scalar()
    if not completed:
        return False
    reviewed = sa.select(review_verdicts.c.trace_id).where(verdict_run == trace_id, review_verdicts.c.verdict == "fail")
    judged = sa.select(judge_results.c.trace_id).where(
        judge_results.c.trace_id == trace_id, judge_results.c.passed.is_(False)
    )
    return conn.execute(reviewed.union_all(judged).limit(1)).first() is None


def _target(conn: sa.Connection, item: sa.RowMapping, verdict: VerdictIn) -> tuple[VerdictTarget, str | None]:
    """What the verdict on ``item`` judges, and the turn's trace id for a turn verdict.

    Raises:
        InvalidInputError: the target does not fit the item (see :meth:`Workbench.submit_verdict`).
    """
    snapshot = item["snapshot"] or {}
    session_id = snapshot.get("session_id") if snapshot.get("subject") == "session" else None
    if session_id is None:
        if verdict.target not in (None, VerdictTarget.RUN) or verdict.target_trace_id is not None:
            raise InvalidInputError(f"item {item['id']} is one run, not a session: its verdicts judge the run")
        return VerdictTarget.RUN, None
    target = verdict.target or VerdictTarget.SESSION
    if target is VerdictTarget.RUN:
        raise InvalidInputError(f"item {item['id']} is a session: a verdict judges the session or one turn")
    if target is VerdictTarget.SESSION:
        if verdict.target_trace_id is not None:
            raise InvalidInputError("a session verdict names no turn; target 'turn' to judge one")
        if verdict.corrected_answer:
            raise InvalidInputError("a corrected answer is one turn's answer: give the verdict to that turn")
        return target, None
    turn = (verdict.target_trace_id or "").strip().lower()
    if not turn:
        raise InvalidInputError("a turn verdict needs the turn's trace id")
    member = sa.select(runs.c.trace_id).where(runs.c.trace_id == turn[:32], runs.c.session_id == str(session_id))
    if len(turn) > 32 or conn.execute(member).first() is None:
        raise InvalidInputError(f"trace {turn[:32]!r} is not a turn of session {str(session_id)[:256]!r}")
    return target, turn


def _has_verdict(conn: sa.Connection, item_id: int, reviewer: str) -> bool:
    query = sa.select(review_verdicts.c.id).where(
        review_verdicts.c.item_id == item_id, review_verdicts.c.reviewer == reviewer
    )
    return conn.execute(query).first() is not None


def _verdict_row(item: sa.RowMapping, agent: str, reviewer: str, verdict: VerdictIn, now: float) -> dict[str, Any]:
    return {
        "item_id": item["id"],
        "trace_id": item["trace_id"],
        "agent": agent,
        "reviewer": reviewer,
        "verdict": verdict.verdict.value,
        "categories": list(verdict.categories),
        "notes": verdict.notes,
        "corrected_answer": verdict.corrected_answer,
        "created_at": now,
    }


def _verdict_dict(row: sa.RowMapping) -> dict[str, Any]:
    return {
        "reviewer": row["reviewer"],
        "target": row["target"],
        "target_trace_id": row["target_trace_id"],
        "verdict": row["verdict"],
        "categories": list(row["categories"]),
        "notes": row["notes"],
        "corrected_answer": row["corrected_answer"],
        "created_at": row["created_at"],
    }
