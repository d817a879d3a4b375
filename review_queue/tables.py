"""SQLAlchemy Core tables of the run index and the review queue.

This metadata mirrors the Alembic migrations under :mod:`review_queue.migrations`, which
are the only thing that creates or alters the schema; ``tests/review_queue/test_store.py``
checks that the two agree. Timestamps (``created_at``, ``updated_at``) are Unix epoch
seconds as doubles: portable, exact in keyset cursors, and directly usable for ages.
JSON columns are ``JSONB`` on PostgreSQL and ``JSON`` (text) elsewhere.
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

__all__ = [
    "JSON_TYPE",
    "api_tokens",
    "feedback",
    "judge_results",
    "metadata",
    "review_events",
    "review_items",
    "review_verdicts",
    "run_details",
    "runs",
    "session_judge_results",
    "sessions",
    "ui_sessions",
    "upsert",
    "verdict_run",
]

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
"""JSON column type: ``JSONB`` on PostgreSQL (indexable containment), ``JSON`` elsewhere."""

_ID_TYPE = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

metadata = sa.MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
    }
)
"""The metadata holding :data:`runs` and :data:`review_items`."""

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("agent", sa.String(256), nullable=False),
    sa.Column("service", sa.String(256), nullable=False),
    sa.Column("dialect", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("complete", sa.Boolean(), nullable=False),
    sa.Column("start_ns", sa.BigInteger(), nullable=False),
    sa.Column("end_ns", sa.BigInteger(), nullable=False),
    sa.Column("duration_s", sa.Double(), nullable=False),
    sa.Column("llm_calls", sa.Integer(), nullable=False),
    sa.Column("tool_calls", sa.Integer(), nullable=False),
    sa.Column("tool_errors", sa.Integer(), nullable=False),
    sa.Column("input_tokens", sa.BigInteger(), nullable=False),
    sa.Column("output_tokens", sa.BigInteger(), nullable=False),
    sa.Column("hit_max_iterations", sa.Boolean(), nullable=False),
    sa.Column("safety_blocked", sa.Boolean(), nullable=False),
    sa.Column("errored", sa.Boolean(), nullable=False),
    sa.Column("error_type", sa.String(256), nullable=True),
    sa.Column("scores", JSON_TYPE, nullable=False),
    sa.Column("scorer_errors", JSON_TYPE, nullable=False),
    sa.Column("flagged", sa.Boolean(), nullable=False),
    sa.Column("flag_priority", sa.String(16), nullable=True),
    sa.Column("flag_reasons", JSON_TYPE, nullable=True),
    sa.Column("sample_rate", sa.Double(), nullable=True),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("updated_at", sa.Double(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("span_count", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("evidence", JSON_TYPE, nullable=True),
    sa.Column("task_completed", sa.Boolean(), nullable=True),
    sa.Column("session_id", sa.String(256), nullable=True),
    sa.Column("user_id", sa.String(256), nullable=True),
    sa.Column("cost_usd", sa.Double(), nullable=True),
    sa.Column("session_turn", JSON_TYPE, nullable=True),
    sa.Column("sample_p", sa.Double(), nullable=True),
    sa.Column("sample_drawn", sa.Boolean(), nullable=True),
    sa.Column("rule_flagged", sa.Boolean(), nullable=True),
    sa.Column("sample_shed", sa.Boolean(), nullable=True),
    sa.Column("flag_added", JSON_TYPE, nullable=True),
    sa.Index("ix_runs_created", "created_at", "trace_id"),
    sa.Index("ix_runs_agent_flagged", "agent", "flagged", "created_at"),
    sa.Index("ix_runs_flagged_created", "flagged", "created_at"),
    sa.Index("ix_runs_session", "session_id", "start_ns"),
    sa.Index("ix_runs_user", "user_id"),
    sa.Index("ix_runs_design", "created_at", "agent", "rule_flagged", "sample_p", "sample_drawn", "task_completed"),
)
"""One row per run (trace id); ``version`` starts at 1 and grows by one per re-score.
``span_count``: the spans the stored scoring saw; a re-score from fewer spans (a re-delivered
tail of the trace) never replaces it (see :meth:`review_queue.store.SqlStore.write`).
``evidence``: why each headline signal and flag reason is set (:class:`scorers.model.Evidence` dicts).
``task_completed``: :func:`scorers.slo.task_completed` when scored (NULL for runs stored before
it existed); a failing verdict on such a run revokes its completion (``vigil_task_completions_revoked_total``).
``session_id``/``user_id`` (migration ``0010``): the conversation the run is one turn of and the end user,
read from the trace (NULL when the trace names none: the run is a session of one). ``ix_runs_session``
lists a session's turns in order (``session_id``, ``start_ns``). ``cost_usd``: the run's estimated LLM cost
(:meth:`scorers.pricing.PriceTable.run_cost`, NULL for runs stored before ``0010`` or by a store without
prices). ``session_turn``: what the session signals need of a turn, kept with it
(:func:`review_queue.sessions.turn_features`: hashed words of its user message, a request for a human,
the spans that show them; no text); NULL for runs without a session id.
``sample_p``/``sample_drawn``/``rule_flagged``/``sample_shed`` (migration ``0013``): the run's place in
the review sample's design (:class:`scorers.model.SampleDesign`) — its probability of entering the
random stratum (0 while the queue shed), whether it did, whether a rule flagged it, whether shedding
suspended the stratum — written by the run's first decision and never changed by a re-score or a late
flag; NULL for runs stored before ``0013``. ``ix_runs_design`` covers what the quality estimates count
per window (:mod:`review_queue.quality`): their scan of a week reads the index alone.
``flag_added`` (migration ``0014``): the flag reasons added to the run after scoring — by a session rule or
session judge (:func:`review_queue.session_close.flag_session`), a run judge
(:class:`review_queue.judges.SqlJudgeSink`) or a send-to-review — with their highest priority and, for a
session, its id (:func:`review_queue.snapshot.add_to_flag`); a re-score replaces the scorer's reasons and
keeps these (:meth:`review_queue.store.SqlStore.write`). NULL when nothing was added."""

run_details = sa.Table(
    "run_details",
    metadata,
    sa.Column("trace_id", sa.String(32), primary_key=True),
    sa.Column("span_count", sa.Integer(), nullable=False),
    sa.Column("codec", sa.String(16), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("final_output", sa.Text(), nullable=True),
    sa.Column("user_message", sa.Text(), nullable=True),
    sa.Index("ix_run_details_created", "created_at"),
)
"""The details document of a run (:mod:`review_queue.details`, migration ``0007``): compressed JSON
of its spans (attributes, events) and conversation. ``final_output`` and ``user_message`` (migration
``0015``): the final answer and what the user asked in the run, redacted and cut at 2,048 characters,
in the clear for the lists and the runs search (:mod:`review_queue.search`).
No foreign key: written after the run, by another thread; deleted with the run (purge, retention) and
earlier for unflagged runs (details retention)."""

review_items = sa.Table(
    "review_items",
    metadata,
    sa.Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column(
        "trace_id",
        sa.String(32),
        sa.ForeignKey("runs.trace_id", ondelete="CASCADE"),
        nullable=False,
        unique=True,
    ),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("priority", sa.String(16), nullable=False),
    sa.Column("priority_rank", sa.Integer(), nullable=False),
    sa.Column("reasons", JSON_TYPE, nullable=False),
    sa.Column("sample_rate", sa.Double(), nullable=False),
    sa.Column("snapshot", JSON_TYPE, nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("updated_at", sa.Double(), nullable=False),
    sa.Column("version", sa.Integer(), nullable=False),
    sa.Column("span_count", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("reviews_required", sa.Integer(), nullable=False, server_default="1"),
    sa.Column("reviews_done", sa.Integer(), nullable=False, server_default="0"),
    sa.Column("assigned_to", sa.String(128), nullable=True),
    sa.Column("claimed_by", sa.String(128), nullable=True),
    sa.Column("claimed_at", sa.Double(), nullable=True),
    sa.Column("lease_expires_at", sa.Double(), nullable=True),
    sa.Column("completed_at", sa.Double(), nullable=True),
    sa.Index("ix_review_items_lease", "state", "lease_expires_at"),
)
"""One review item per flagged run; ``snapshot`` is :func:`review_queue.snapshot.run_snapshot`.

``version`` is 1 when the item is created and grows by one per flag decision written to it.
"""

sa.Index(
    "ix_review_items_queue",
    review_items.c.state,
    review_items.c.priority_rank.desc(),
    review_items.c.created_at,
    review_items.c.id,
)


def _verdict_columns() -> list[sa.Column[object]]:
    """The columns of an LLM judge verdict (:class:`scorers.judge.model.JudgeResult`) after its subject's key."""
    return [
        sa.Column("judge", sa.String(64), nullable=False),
        sa.Column("rubric_version", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("reasoning", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("cached", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("updated_at", sa.Double(), nullable=False),
    ]


judge_results = sa.Table(
    "judge_results",
    metadata,
    sa.Column("trace_id", sa.String(32), sa.ForeignKey("runs.trace_id", ondelete="CASCADE"), nullable=False),
    *_verdict_columns(),
    sa.PrimaryKeyConstraint("trace_id", "judge"),
    sa.Index("ix_judge_results_judge", "judge", "rubric_version"),
)
"""The latest verdict of each LLM judge on each run (migration ``0003``); ``score`` and
``passed`` are NULL when ``error`` says why the judge gave none."""

review_verdicts = sa.Table(
    "review_verdicts",
    metadata,
    sa.Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column("item_id", _ID_TYPE, sa.ForeignKey("review_items.id", ondelete="CASCADE"), nullable=False),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("agent", sa.String(256), nullable=False),
    sa.Column("reviewer", sa.String(128), nullable=False),
    sa.Column("verdict", sa.String(8), nullable=False),
    sa.Column("categories", JSON_TYPE, nullable=False),
    sa.Column("notes", sa.Text(), nullable=False),
    sa.Column("corrected_answer", sa.Text(), nullable=True),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("target", sa.String(8), nullable=False, server_default="run"),
    sa.Column("target_trace_id", sa.String(32), nullable=True),
    sa.UniqueConstraint("item_id", "reviewer", name="uq_review_verdicts_item_id"),
    sa.Index("ix_review_verdicts_created", "created_at"),
)
"""One verdict per (item, reviewer): ``pass``/``fail``, categories, notes, optional corrected answer.

``target`` says what it judges (migration ``0011``): ``run`` (the item's run), ``session`` (a session
item's whole conversation) or ``turn`` (one turn of that session). ``target_trace_id`` is the run the
verdict applies to — the item's run for a ``run`` verdict, the turn's for a ``turn`` verdict, null for
a ``session`` verdict — while ``trace_id`` stays the item's run."""

verdict_run = review_verdicts.c.target_trace_id
"""The run a verdict applies to (task completion, eval cases, judge–human agreement): null for a
``session`` verdict (see :meth:`review_queue.workbench.Workbench.submit_verdict`)."""

review_events = sa.Table(
    "review_events",
    metadata,
    sa.Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column("item_id", _ID_TYPE, sa.ForeignKey("review_items.id", ondelete="CASCADE"), nullable=False),
    sa.Column("actor", sa.String(128), nullable=False),
    sa.Column("action", sa.String(32), nullable=False),
    sa.Column("detail", JSON_TYPE, nullable=False),
    sa.Column("at", sa.Double(), nullable=False),
    sa.Index("ix_review_events_item", "item_id", "at"),
)
"""The audit trail: who did what to which item, when (append-only)."""

feedback = sa.Table(
    "feedback",
    metadata,
    sa.Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column("feedback_id", sa.String(128), nullable=False, unique=True),
    sa.Column("trace_id", sa.String(32), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),
    sa.Column("score", sa.Double(), nullable=False),
    sa.Column("comment", sa.Text(), nullable=False),
    sa.Column("source", sa.String(64), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("joined_at", sa.Double(), nullable=True),
    sa.Index("ix_feedback_trace", "trace_id"),
    sa.Index("ix_feedback_joined", "joined_at"),
)
"""User feedback by trace id (no foreign key: it may arrive before the run).

``joined_at`` is set once the rules were re-evaluated against the stored run.
"""

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", _ID_TYPE, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("prefix", sa.String(16), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("last_used_at", sa.Double(), nullable=True),
    sa.Column("revoked_at", sa.Double(), nullable=True),
)
"""API tokens: SHA-256 of the secret, never the secret; ``revoked_at`` set on revocation."""

ui_sessions = sa.Table(
    "ui_sessions",
    metadata,
    sa.Column("id_hash", sa.String(64), primary_key=True),
    sa.Column("token_id", _ID_TYPE, nullable=True),
    sa.Column("name", sa.String(128), nullable=False),
    sa.Column("role", sa.String(16), nullable=False),
    sa.Column("created_at", sa.Double(), nullable=False),
    sa.Column("expires_at", sa.Double(), nullable=False),
    sa.Column("ended_at", sa.Double(), nullable=True),
    sa.Index("ix_ui_sessions_token", "token_id"),
    sa.Index("ix_ui_sessions_expires", "expires_at"),
)
"""Reviewer UI sessions (migration ``0007``): SHA-256 of the random session id the signed cookie
carries, never the id; ``ended_at`` set on logout and when the session's token is revoked.
A cookie whose row is missing, ended or expired opens nothing, even if its signature is good."""

sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("session_id", sa.String(256), primary_key=True),
    sa.Column("agent", sa.String(256), nullable=False),
    sa.Column("user_id", sa.String(256), nullable=True),
    sa.Column("first_ns", sa.BigInteger(), nullable=False),
    sa.Column("last_ns", sa.BigInteger(), nullable=False),
    sa.Column("turns", sa.Integer(), nullable=False),
    sa.Column("duration_s", sa.Double(), nullable=False),
    sa.Column("input_tokens", sa.BigInteger(), nullable=False),
    sa.Column("output_tokens", sa.BigInteger(), nullable=False),
    sa.Column("cost_usd", sa.Double(), nullable=False),
    sa.Column("turns_flagged", sa.Integer(), nullable=False),
    sa.Column("limit_hits", sa.Integer(), nullable=False),
    sa.Column("blocks", sa.Integer(), nullable=False),
    sa.Column("errors", sa.Integer(), nullable=False),
    sa.Column("thumbs_down", sa.Integer(), nullable=False),
    sa.Column("signals", JSON_TYPE, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("closed_at", sa.Double(), nullable=True),
    sa.Column("updated_at", sa.Double(), nullable=False),
    sa.Column("sample_p", sa.Double(), nullable=True),
    sa.Column("sample_drawn", sa.Boolean(), nullable=True),
    sa.Column("rule_flagged", sa.Boolean(), nullable=True),
    sa.Index("ix_sessions_last", "last_ns"),
    sa.Index("ix_sessions_agent", "agent"),
    sa.Index("ix_sessions_user", "user_id"),
    sa.Index("ix_sessions_status", "status"),
)
"""One row per conversation (migration ``0010``; not the reviewer logins, which are :data:`ui_sessions`).

Recomputed from its runs (``runs.session_id``) in the transaction that writes them
(:mod:`review_queue.sessions`), so every aggregate is exact under replays and re-scores: ``turns``
(runs), ``first_ns``/``last_ns`` (earliest start, latest end), ``duration_s`` (``last_ns - first_ns``
in seconds), token sums, ``cost_usd`` (sum of the runs' ``cost_usd`` column), ``turns_flagged``,
``limit_hits`` (turns that hit max iterations), ``blocks`` (safety-blocked turns), ``errors`` (errored
turns), ``thumbs_down`` (turns with negative feedback). ``agent``/``user_id``: of the latest turn
(``user_id``: of another turn when the latest names none).
``signals``: list of ``{signal, trace_id, turn, span_id, span_name, source, value}`` (``turn`` is the
1-based position of the turn by start time) — the session signals with the turn and span that show them.
``status``: ``open`` while turns may arrive, ``closed`` after the idle time (``closed_at`` set).
Runs without a session id are sessions of one and have no row here.
``sample_p``/``sample_drawn``/``rule_flagged`` (migration ``0013``): the session's place in the session
review sample, set by its first close (the session sample rate, whether the session id's point fell
below it, whether a session rule other than ``session_random_sample`` flagged it) and kept when it
reopens and closes again; NULL for sessions closed before ``0013``."""

session_judge_results = sa.Table(
    "session_judge_results",
    metadata,
    sa.Column("session_id", sa.String(256), sa.ForeignKey("sessions.session_id", ondelete="CASCADE"), nullable=False),
    sa.Column("trace_id", sa.String(32), nullable=False),
    *_verdict_columns(),
    sa.PrimaryKeyConstraint("session_id", "judge"),
    sa.Index("ix_session_judge_results_judge", "judge", "rubric_version"),
)
"""The latest verdict of each session judge on each closed session (migration ``0012``;
:mod:`scorers.judge.session`): the columns of :data:`judge_results`, keyed by session id instead of
a run. ``trace_id`` is the session's last turn when it was judged (where its review item is); it is
no foreign key, a retention sweep may delete that turn while the session stays."""


def upsert(dialect: str, table: sa.Table, keys: Collection[str], kept: Collection[str] = ()) -> sa.Insert:
    """``INSERT … ON CONFLICT (keys) DO UPDATE`` of ``table`` in ``dialect`` (``postgresql`` or ``sqlite``):
    a conflicting row takes every new column but the ``keys`` and the ``kept`` ones."""
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table)
    return stmt.on_conflict_do_update(
        index_elements=[table.c[k] for k in keys],
        set_={c.name: stmt.excluded[c.name] for c in table.c if c.name not in keys and c.name not in kept},
    )
