"""Session judge verdicts in SQL, and the conversation a session judge reads.

* :class:`SqlSessionJudgeSink` implements :class:`scorers.judge.model.SessionJudgeSink`: it upserts
  ``session_judge_results`` (one row per session and judge, migration ``0012``) and, for a failing
  verdict, adds the judge's reason to the session's review item
  (:func:`review_queue.session_close.flag_session`: the item of its last turn), in one transaction.
* :class:`ConversationLoader` gives a session's conversation (:class:`scorers.judge.session.Conversation`):
  per turn, what the user said in it and the agent's answer, read from the turn's details document
  (else its review snapshot), so redacted and bounded exactly as the run page shows them.
* :func:`review_queue.session_queries.session_results_for` reads them back (API and page).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from review_queue import details as run_details_doc
from review_queue.judges import result_row
from review_queue.session_close import flag_session
from review_queue.session_queries import fresh_entries
from review_queue.sessions import ClosedSession
from review_queue.store import guard, write_transaction
from review_queue.tables import review_items, run_details, runs, session_judge_results, sessions, upsert
from review_queue.views import snapshot_conversation
from scorers.judge.model import JudgeResult, TranscriptTurn
from scorers.judge.session import Conversation
from scorers.model import Priority
from scorers.rules import DEFAULT_SAMPLE_RATE

__all__ = ["MAX_JUDGED_TURNS", "ConversationLoader", "SqlSessionJudgeSink", "transcript"]

MAX_JUDGED_TURNS = 200
"""Turns of a session read for its judges (the first ones; the rendering keeps fewer, see
:func:`scorers.judge.rubrics.session_document`)."""


class SqlSessionJudgeSink:
    """Stores session judge verdicts and flags sessions that fail one.

    Args:
        engine: the store's engine.
        sample_rate: the session sample rate recorded on an item a verdict creates (as the closer does).
        clock: Unix epoch seconds.
        retry_after_s: the ``retry_after`` of :class:`~review_queue.errors.StoreUnavailableError`.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        sample_rate: float = DEFAULT_SAMPLE_RATE,
        clock: Callable[[], float] = time.time,
        retry_after_s: float = 2.0,
    ) -> None:
        self._engine = engine
        self._rate = sample_rate
        self._clock = clock
        self._retry_after = retry_after_s
        self._upsert = upsert(engine.dialect.name, session_judge_results, ("session_id", "judge"), kept=("created_at",))

    def write_session_judgement(
        self, session_id: str, result: JudgeResult, reason: str | None, priority: Priority
    ) -> None:
        """Upsert the verdict; with ``reason``, flag the session as its last turn's item (one transaction).

        A session deleted meanwhile (retention) stores nothing. On PostgreSQL the last turn's run row is
        locked first, so concurrent verdicts on one session merge their reasons (SQLite: ``BEGIN IMMEDIATE``).

        Raises:
            StoreUnavailableError: the database cannot be reached; nothing was written.
        """
        now = self._clock()
        with guard("session_judgement", self._retry_after), self._engine.connect() as conn, write_transaction(conn):
            if reason is not None and conn.dialect.name == "postgresql":
                # Judges of one session flag the same item concurrently: lock its run row first (the
                # order every writer takes, run then item), so no judge's reason overwrites another's.
                last = sa.select(runs.c.trace_id).where(runs.c.trace_id == result.trace_id)
                conn.execute(last.with_for_update())
            row = conn.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
            if row is None:
                return
            conn.execute(self._upsert, [{**result_row(result, now), "session_id": session_id}])
            if reason is not None:
                flag_session(
                    conn, ClosedSession(dict(row), result.trace_id), [reason], priority, rate=self._rate, now=now
                )


class ConversationLoader:
    """A session's conversation for its judges, read from the store (``ConversationSource``).

    Args:
        engine: the store's engine.
        retry_after_s: the ``retry_after`` of :class:`~review_queue.errors.StoreUnavailableError`.
        max_turns: turns read (the first ones).
    """

    def __init__(self, engine: Engine, *, retry_after_s: float = 2.0, max_turns: int = MAX_JUDGED_TURNS) -> None:
        self._engine = engine
        self._retry_after = retry_after_s
        self._max_turns = max_turns

    def __call__(self, session_id: str) -> Conversation | None:
        """The conversation, or None when the session is unknown.

        Raises:
            StoreUnavailableError: the database cannot be reached.
        """
        turns = (
            sa.select(runs.c.trace_id, runs.c.agent, run_details.c.body, run_details.c.codec, review_items.c.snapshot)
            .select_from(
                runs.outerjoin(run_details, run_details.c.trace_id == runs.c.trace_id).outerjoin(
                    review_items, review_items.c.trace_id == runs.c.trace_id
                )
            )
            .where(runs.c.session_id == session_id)
            .order_by(runs.c.start_ns, runs.c.trace_id)
            .limit(self._max_turns)
        )
        with guard("session_conversation", self._retry_after), self._engine.connect() as conn:
            found = conn.execute(turns).all()
        if not found:
            return None
        conversations = [
            run_details_doc.decode(body, codec).get("conversation") or []
            if body is not None
            else snapshot_conversation(snapshot or {})
            for _, _, body, codec, snapshot in found
        ]
        traced = [str(row[0]) for row in found]
        return Conversation(str(found[-1][1]), transcript(traced, conversations))


def transcript(
    trace_ids: Sequence[str], conversations: Sequence[Sequence[Mapping[str, Any]]]
) -> tuple[TranscriptTurn, ...]:
    """Each turn's own user messages and answer, from the turns' conversation entries. Pure.

    A turn's conversation repeats the turns before it (each LLM call carries the history):
    :func:`review_queue.session_queries.fresh_entries` keeps what the turn added. Its user messages
    are the ``user`` messages it added; its answer is its final answer (``final`` entry, or the
    assistant message marked final), else the last assistant message it added.
    """
    out = []
    previous: Sequence[Mapping[str, Any]] = []
    for number, (trace_id, entries) in enumerate(zip(trace_ids, conversations, strict=True), 1):
        fresh, _ = fresh_entries(previous, entries)
        user = tuple(
            str(e.get("content", ""))
            for e in fresh
            if e.get("kind") == "message" and e.get("role") == "user" and str(e.get("content", "")).strip()
        )
        out.append(TranscriptTurn(number, trace_id, user, _answer(fresh)))
        previous = entries or previous
    return tuple(out)


def _answer(entries: Sequence[Mapping[str, Any]]) -> str | None:
    said = [
        e for e in entries if e.get("kind") == "final" or (e.get("kind") == "message" and e.get("role") == "assistant")
    ]
    final = next((e for e in reversed(said) if e.get("kind") == "final" or e.get("final")), None)
    chosen = final if final is not None else (said[-1] if said else None)
    return None if chosen is None else str(chosen.get("content", ""))
