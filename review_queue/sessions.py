"""Sessions: the turns (runs) sharing a session id, their exact aggregates and their signals.

A **session** is a conversation: every run whose trace names the same session id
(``runs.session_id``) is one of its turns, ordered by start time. A run without a session id is a
session of one; it gets no ``sessions`` row (the API shows it as a one-turn session).

**Exact aggregates.** :func:`refresh` recomputes each touched session's row *from its runs* in the
transaction that wrote them (one read of the sessions' turns with window totals, one upsert), so a
replayed turn, a re-score or a scorer killed mid-session in Kafka mode (runs are upserted by trace
id) never counts a turn twice or loses one. On PostgreSQL the touched sessions are first locked
(transaction-scoped advisory locks, in one order): two scorers writing turns of one session
serialise, and the second reads the first's committed turn.

**Idle close.** A session is ``open`` while its turns arrive and closes when no turn has ended for
``idle_s`` (:data:`DEFAULT_IDLE_S`, 30 minutes: the inactivity timeout of web analytics sessions —
Google Analytics and Matomo both end a visit after 30 minutes without a hit — and the span in
which a user who comes back is still in the same conversation), measured from the last turn's end
(the trace's clock) to the closer's clock. A turn arriving after the close (its end later than the
session's last) reopens it, and it is closed (and counted) again later.
:class:`review_queue.session_close.SessionCloser` closes idle sessions.

**Signals** (deterministic, each naming the turn's trace id, its 1-based position and a span):

* ``reask`` — the turn's user message repeats or rephrases the user message of an earlier turn
  that was answered. Either (a) the Jaccard similarity of the two normalised word sets (lower-cased
  alphanumeric words of two characters or more, a small stop list removed) is at or above
  ``reask_threshold`` (:data:`DEFAULT_REASK_THRESHOLD`): a repeat or a close rephrase; or (b) the
  message opens a *repair* — it carries a marker of the vocabulary :data:`DEFAULT_REASK_MARKERS`
  ("sorry", "I mean", "again", "as I said", …, plus ``session_signals.reask_markers``) — and shares
  a content word with the earlier question: a rephrase in other words ("What is the weather in
  Paris?" … "Sorry, so how warm is it in Paris right now?") that no word measure sees. Word sets
  rather than character n-grams: a rephrase keeps the content words and changes their order and
  the function words, which a set ignores. The sets are stored hashed (:func:`turn_features`), never
  as text.
* ``human_request`` — the user message contains a phrase of the vocabulary
  (:data:`DEFAULT_HUMAN_PHRASES` plus ``session_signals.human_phrases`` in ``vigil.yaml``).
* ``thumbs_down`` — the turn has thumbs-down feedback (:mod:`review_queue.feedback`).
* ``abandoned`` — at close: the last turn failed (errored), was blocked, hit a limit or was cut
  off (incomplete), and then the user went away.

The first three update as turns (and feedback) arrive; ``abandoned`` is set at close.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from zlib import crc32

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from review_queue.tables import feedback, runs, sessions, upsert
from scorers import content
from scorers.dialects.base import as_json
from scorers.dialects.genai import INPUT, message_of
from scorers.model import Message, Run, Step, StepKind

__all__ = [
    "DEFAULT_HUMAN_PHRASES",
    "DEFAULT_IDLE_S",
    "DEFAULT_REASK_THRESHOLD",
    "ClosedSession",
    "SessionConfig",
    "SessionRefresher",
    "jaccard",
    "recount_flagged",
    "session_signals",
    "turn_features",
    "user_message",
    "user_message_step",
    "word_set",
]

DEFAULT_IDLE_S = 1800.0
"""Seconds without a new turn after which a session closes (web analytics' 30-minute inactivity timeout)."""

DEFAULT_REASK_THRESHOLD = 0.6
"""Jaccard similarity of two user messages' word sets from which the later one is a re-ask."""

DEFAULT_HUMAN_PHRASES: tuple[str, ...] = (
    "speak to a human",
    "talk to a human",
    "speak with a human",
    "talk with a human",
    "a real person",
    "a real human",
    "human agent",
    "live agent",
    "live person",
    "speak to someone",
    "talk to someone",
    "speak to a person",
    "talk to a person",
    "customer service",
    "customer support",
    "a representative",
    "speak to a manager",
    "talk to a manager",
    "connect me to",
    "transfer me to",
    "human operator",
    "get me a human",
    "need a human",
    "want a human",
    "speak to an agent",
    "talk to an agent",
    "speak to a real",
    "talk to a real",
    "escalate",
)
"""Phrases that ask for a human (matched on the normalised user message, at word boundaries)."""

DEFAULT_REASK_MARKERS: tuple[str, ...] = (
    "sorry",
    "i mean",
    "again",
    "as i said",
    "i asked",
    "i said",
    "rephrase",
    "in other words",
    "once more",
    "not what i asked",
    "i repeat",
)
"""Markers of a conversational repair (the user restating a question), matched like the human phrases."""

MAX_LLM_LOOKED = 4
"""LLM calls of a turn looked at for captured messages (content capture is a process-wide switch)."""

MAX_USER_CHARS = 500
"""Characters of the user message read (a question is short; a pasted document's opening says enough)."""

MAX_TERMS = 64
"""Distinct words of a user message kept (hashed) for the re-ask comparison."""

WINDOW = 200
"""Latest turns of a session read back per refresh (the database still sums all its turns, from the
``ix_runs_session`` index). Signals of older turns are kept as stored, and so are re-asks whose earlier
question left the window."""

_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "and",
        "or",
        "but",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "with",
        "as",
        "by",
        "do",
        "does",
        "did",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "she",
        "they",
        "them",
        "their",
        "please",
    ]
)
_WORD = re.compile(r"[^\W_]{2,}")
_ANY_WORD = re.compile(r"[^\W_]+")
_USER_ROLES = frozenset(("user", "human"))
_LOCK_CLASS = 0x56495353  # "VISS": the advisory-lock class of session refreshes (two-key form)

ABANDONED, REASK, HUMAN, THUMBS_DOWN = "abandoned", "reask", "human_request", "thumbs_down"
_ORDER = {REASK: 0, HUMAN: 1, THUMBS_DOWN: 2, ABANDONED: 3}
"""The order of a turn's signals (as :func:`session_signals` lists them)."""


@dataclass(frozen=True, slots=True)
class SessionConfig:
    """The ``session_signals:`` block of ``vigil.yaml`` and the idle time.

    Attributes:
        idle_s: seconds without a new turn after which a session closes.
        reask_threshold: Jaccard similarity from which a user message is a re-ask.
        human_phrases: the vocabulary of a request for a human (defaults plus configured).
        reask_markers: the vocabulary of a repair (defaults plus configured).
    """

    idle_s: float = DEFAULT_IDLE_S
    reask_threshold: float = DEFAULT_REASK_THRESHOLD
    human_phrases: tuple[str, ...] = DEFAULT_HUMAN_PHRASES
    reask_markers: tuple[str, ...] = DEFAULT_REASK_MARKERS

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None, idle_s: float = DEFAULT_IDLE_S) -> SessionConfig:
        """Build from the ``session_signals:`` mapping (``reask_threshold``, ``human_phrases``; ``rules`` and
        ``sample_rate`` are read by :mod:`review_queue.session_review`).

        Raises:
            ValueError: naming the bad key.
        """
        data = data or {}
        unknown = set(data) - {"reask_threshold", "human_phrases", "reask_markers", "rules", "sample_rate"}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        threshold = data.get("reask_threshold", DEFAULT_REASK_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 < threshold <= 1:
            raise ValueError(f"reask_threshold must be a number in (0, 1], got {threshold!r}")
        human = _phrases(data, "human_phrases", DEFAULT_HUMAN_PHRASES)
        markers = _phrases(data, "reask_markers", DEFAULT_REASK_MARKERS)
        return cls(idle_s, float(threshold), human, markers)


def _phrases(data: Mapping[str, Any], key: str, defaults: tuple[str, ...]) -> tuple[str, ...]:
    """``defaults`` plus the configured phrases under ``key``, normalised.

    Raises:
        ValueError: ``key`` is not a list of non-empty strings.
    """
    phrases = data.get(key, [])
    if not isinstance(phrases, list | tuple) or not all(isinstance(p, str) and _normalise(p) for p in phrases):
        raise ValueError(f"{key} must be a list of non-empty strings")
    return tuple(dict.fromkeys((*defaults, *(_normalise(p) for p in phrases))))


def _normalise(text: str) -> str:
    """Lower-case words joined by single spaces (punctuation dropped)."""
    return " ".join(_ANY_WORD.findall(text.lower()))


def word_set(text: str) -> frozenset[str]:
    """The normalised word set of a message: lower-case words of ≥ 2 characters, stop words removed."""
    return frozenset(_WORD.findall(text.lower())) - _STOP


def jaccard(a: Sequence[int] | frozenset[Any], b: Sequence[int] | frozenset[Any]) -> float:
    """|a ∩ b| / |a ∪ b| of two word sets (0 when both are empty)."""
    one, two = set(a), set(b)
    union = len(one | two)
    return len(one & two) / union if union else 0.0


def _hash(word: str) -> int:
    """A word's stored form: CRC-32, stable across processes and ~10x cheaper than a cryptographic hash
    (it only has to tell words apart within one conversation, not resist an attacker)."""
    return zlib.crc32(word.encode())


def human_phrase(text: str, phrases: Sequence[str]) -> str | None:
    """The first vocabulary phrase the message contains at word boundaries, or ``None``."""
    return _phrase_in(f" {_normalise(text)} ", phrases)


def _phrase_in(padded: str, phrases: Sequence[str]) -> str | None:
    """The first of ``phrases`` in ``padded`` (normalised text with a space at each end), or ``None``.

    One compiled pass says whether any phrase is there (most messages hold none); only then are the
    phrases tried in vocabulary order, so the one named is the same as without the pass."""
    if not phrases or _any_phrase(tuple(phrases)).search(padded) is None:
        return None
    return next((p for p in phrases if f" {p} " in padded), None)


@functools.lru_cache(maxsize=16)
def _any_phrase(phrases: tuple[str, ...]) -> re.Pattern[str]:
    """Any of ``phrases`` between spaces (a lookahead, so that overlapping phrases are all tried)."""
    return re.compile(" (?:" + "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True)) + ")(?= )")


def turn_features(run: Run, config: SessionConfig) -> dict[str, Any] | None:
    """What the session signals need of one turn, stored in ``runs.session_turn``; ``None`` without a session id.

    Keys: ``terms`` (sorted CRC-32s of the user message's word set, at most :data:`MAX_TERMS`),
    ``human`` (the matched request-for-a-human phrase or ``None``), ``repair`` (the matched repair
    marker or ``None``), ``span`` (``[span_id, name]`` of the LLM call the user message was read from;
    the last LLM call when read from the run's conversation; else the root), ``root`` (``[span_id,
    name]`` of the root span), ``answered`` (the turn has a non-empty final answer).

    The user message (its first :data:`MAX_USER_CHARS` characters) is the turn's new one: the last user
    message in the input of the turn's *first* LLM call that captured messages (frameworks send the
    history before it; later calls of the turn add tool results, which some frameworks send with the
    user role), else of the run's conversation.
    """
    if run.session_id is None:
        return None
    root = next((s for s in run.steps if s.parent_id is None), run.steps[0] if run.steps else None)
    llm, user = user_message_step(run)
    llm = llm or root
    found = _ANY_WORD.findall(user[:MAX_USER_CHARS].lower())  # _normalise's words, kept for word_set's
    words = sorted({w for w in found if len(w) > 1} - _STOP)[:MAX_TERMS]
    padded = f" {' '.join(found)} "
    return {
        "terms": sorted({crc32(w.encode()) for w in words}),  # each word's _hash, inlined (a call a word)
        "human": _phrase_in(padded, config.human_phrases) if user else None,
        "repair": _phrase_in(padded, config.reask_markers) if user else None,
        "span": [llm.span_id, llm.name] if llm is not None else ["", ""],
        "root": [root.span_id, root.name] if root is not None else ["", ""],
        "answered": bool((run.final_output or "").strip()),
    }


def _last_user(found: Sequence[Message]) -> str | None:
    return next((m.content for m in reversed(found) if m.role.lower() in _USER_ROLES), None)


def _call_user(attributes: Mapping[str, Any]) -> tuple[bool, str | None]:
    """Whether one LLM call captured messages, and the last user message among them.

    A GenAI ``gen_ai.input.messages`` array is read from its end, without building the other messages
    (the output messages, which :func:`scorers.content.messages_of` reads too, never hold the user's
    turn); any other form goes through the dialect adapters."""
    decoded = as_json(attributes.get(INPUT))
    if isinstance(decoded, list) and decoded:
        for item in reversed(decoded):
            if isinstance(item, dict) and str(item.get("role", "")).lower() in _USER_ROLES:
                message = message_of(item)
                if message is not None:
                    return True, message.content
        return any(message_of(item) is not None for item in decoded), None
    found = content.messages_of(attributes)
    return bool(found), _last_user(found) if found else None


def user_message(run: Run) -> str:
    """What the user asked in ``run`` (``""`` when no span captured it): a turn's own message, not the history.

    The last user message in the input of the run's first LLM call that captured messages, else of the
    run's conversation (:func:`user_message_step`)."""
    return user_message_step(run)[1]


def user_message_step(run: Run) -> tuple[Step | None, str]:
    """The LLM step the turn's user message was read from (or ``None``) and the message (``""`` when none)."""
    last_llm = next((s for s in reversed(run.steps) if s.kind is StepKind.LLM), None)
    looked = 0
    for step in run.steps:
        if step is last_llm:
            break  # its messages are run.messages, already parsed (scorers.normalise)
        if step.kind is StepKind.LLM:
            found, text = _call_user(step.attributes)
            if text is not None:
                return step, text
            looked += 1
            if found or looked == MAX_LLM_LOOKED:
                break
    return last_llm, _last_user(run.messages) or ""


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn as the refresh reads it (a ``runs`` row of the session)."""

    trace_id: str
    position: int
    status: str
    complete: bool
    thumbs_down: bool
    features: Mapping[str, Any] | None


def _signal(name: str, turn: Turn, span: Sequence[str], source: str, value: str) -> dict[str, Any]:
    span_id, span_name = [*span, "", ""][:2]
    return {
        "signal": name,
        "trace_id": turn.trace_id,
        "turn": turn.position,
        "span_id": span_id,
        "span_name": span_name,
        "source": source,
        "value": value,
    }


def _reask(
    terms: Sequence[int], repair: str | None, answered: Sequence[tuple[Turn, Sequence[int]]], threshold: float
) -> str | None:
    """Why a user message with ``terms`` re-asks an earlier answered question, or ``None``."""
    for earlier, earlier_terms in answered:
        similarity = jaccard(terms, earlier_terms)
        if similarity >= threshold:
            return f"repeats turn {earlier.position} (Jaccard {similarity:.2f})"
    if repair:
        mine = set(terms)
        for earlier, earlier_terms in reversed(answered):
            if not mine.isdisjoint(earlier_terms):
                return f"rephrases turn {earlier.position} (repair marker {repair!r})"
    return None


def session_signals(turns: Sequence[Turn], threshold: float, *, closed: bool) -> list[dict[str, Any]]:
    """The signals of a session's turns (in order), ``abandoned`` only when ``closed``.

    Each signal is ``{signal, trace_id, turn, span_id, span_name, source, value}``.
    """
    out: list[dict[str, Any]] = []
    answered: list[tuple[Turn, Sequence[int]]] = []
    for turn in turns:
        feats = turn.features or {}
        span, root = feats.get("span") or ["", ""], feats.get("root") or ["", ""]
        terms = feats.get("terms") or []
        if terms:
            value = _reask(terms, feats.get("repair"), answered, threshold)
            if value is not None:
                out.append(_signal(REASK, turn, span, "user_message", value))
        if feats.get("human"):
            out.append(_signal(HUMAN, turn, span, "user_message", str(feats["human"])))
        if turn.thumbs_down:
            out.append(_signal(THUMBS_DOWN, turn, root, "feedback", "thumbs down"))
        if terms and feats.get("answered"):
            answered.append((turn, terms))
    if closed and turns:
        last = turns[-1]
        if last.status != "ok" or not last.complete:
            root = (last.features or {}).get("root") or ["", ""]
            value = last.status if last.status != "ok" else "incomplete"
            out.append(_signal(ABANDONED, last, root, "status", value))
    return out


_KEPT = frozenset(("session_id", "sample_p", "sample_drawn", "rule_flagged"))
"""Columns a refresh never rewrites: the key, and the sample design its first close recorded
(:mod:`review_queue.session_close`)."""


@dataclass(frozen=True, slots=True)
class ClosedSession:
    """A session closed by this refresh: its new row and its last turn's trace id."""

    row: Mapping[str, Any]
    last_trace_id: str


class SessionRefresher:
    """Recomputes ``sessions`` rows from their runs inside a caller's write transaction.

    Args:
        dialect: ``sqlite`` or ``postgresql``.
        config: the re-ask threshold.
    """

    def __init__(self, dialect: str, config: SessionConfig | None = None) -> None:
        self._dialect = dialect
        self._config = config or SessionConfig()
        self.upsert = upsert(dialect, sessions, ("session_id",), kept=_KEPT)
        self._turns = _turns_query(dialect)
        self._stored = sa.select(sessions.c.session_id).where(_in_ids(sessions.c.session_id, dialect))
        self._down = (
            sa.select(feedback.c.trace_id).distinct().where(_in_ids(feedback.c.trace_id, dialect), *_THUMBS_DOWN)
        )

    @property
    def config(self) -> SessionConfig:
        """The session settings in force."""
        return self._config

    def refresh(
        self,
        conn: sa.Connection,
        session_ids: Sequence[str],
        now: float,
        *,
        close_before_ns: int | None = None,
        inserted: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> tuple[list[dict[str, Any]], list[ClosedSession]]:
        """Recompute the rows of ``session_ids`` from their runs; ``(rows to upsert, sessions closed now)``.

        A session whose last turn ended before ``close_before_ns`` (the close sweep) is closed now.
        The caller upserts the rows (``self.upsert``) in the same transaction.

        ``inserted``: the ``runs`` rows this transaction inserted (as written), by session id. A session
        with no stored row has no other runs (every run write stores its session's row in the same
        transaction), so its turns are exactly those rows: the turns query's rows are made from them
        (:func:`_fresh_turns`) instead of read back, and the same :meth:`_row` builds the session. The
        caller leaves out any session with a run updated (not inserted) in the transaction.
        """
        ids = sorted(set(session_ids))
        if not ids:
            return [], []
        if self._dialect == "postgresql":
            conn.execute(_PG_LOCK, {"ids": ids, "cls": _LOCK_CLASS})
        by_session: dict[str, list[Any]] = {}
        if inserted:
            fresh = [sid for sid in ids if sid in inserted]
            if fresh:
                stored = {sid for (sid,) in self._select_ids(conn, self._stored, fresh)}
                fresh = [sid for sid in fresh if sid not in stored]
            if fresh:
                traces = [str(row["trace_id"]) for sid in fresh for row in inserted[sid]]
                down = {tid for (tid,) in self._select_ids(conn, self._down, traces)}
                for sid in fresh:
                    by_session[sid] = _fresh_turns(inserted[sid], down)
        rest = [sid for sid in ids if sid not in by_session]
        for turn in self._select_ids(conn, self._turns, rest):
            by_session.setdefault(turn.session_id, []).append(turn)
        rows: list[dict[str, Any]] = []
        closed: list[ClosedSession] = []
        long = [sid for sid, turn_rows in by_session.items() if turn_rows[0].s_status and turn_rows[0].n > WINDOW]
        older = _stored_signals(conn, long) if long else {}
        for session_id, turn_rows in by_session.items():
            row, now_closed = self._row(session_id, turn_rows, older.get(session_id, []), now, close_before_ns)
            rows.append(row)
            if now_closed:
                closed.append(ClosedSession(row, turn_rows[-1].trace_id))
        return rows, closed

    def _select_ids(self, conn: sa.Connection, query: sa.Select[Any], ids: Sequence[str]) -> list[Any]:
        """The rows of ``query`` for ``ids`` (its ``:ids`` parameter), 900 ids a statement."""
        out: list[Any] = []
        for start in range(0, len(ids), 900):
            chunk = list(ids[start : start + 900])
            out.extend(
                conn.execute(query, {"ids": chunk if self._dialect == "postgresql" else orjson.dumps(chunk).decode()})
            )
        return out

    def _row(
        self, session_id: str, turn_rows: list[Any], stored_signals: list[Any], now: float, close_before_ns: int | None
    ) -> tuple[dict[str, Any], bool]:
        turn_rows.sort(key=lambda r: r.rn, reverse=True)  # oldest first
        latest = turn_rows[-1]
        total = int(latest.n)
        turns = [
            Turn(r.trace_id, total - int(r.rn) + 1, r.status, bool(r.complete), bool(r.down), _features(r.turn_json))
            for r in turn_rows
        ]
        last_ns = int(latest.last_ns)
        if latest.s_status == "closed" and last_ns <= int(latest.s_last):  # a replay: stays closed
            status, closed_at, now_closed = "closed", latest.s_closed, False
        elif close_before_ns is not None and last_ns < close_before_ns:
            status, closed_at, now_closed = "closed", now, True
        else:
            status, closed_at, now_closed = "open", None, False
        signals = session_signals(turns, self._config.reask_threshold, closed=status == "closed")
        if stored_signals:  # keep what older turns (outside the window) showed, and re-asks of older questions
            window = {t.trace_id for t in turns}
            fresh = {(s["signal"], s["trace_id"]) for s in signals}
            kept = [
                s
                for s in stored_signals
                if (s["trace_id"] not in window and s["signal"] != ABANDONED)
                or (s["signal"] == REASK and (REASK, s["trace_id"]) not in fresh)
            ]
            signals = sorted(kept + signals, key=lambda s: (s["turn"], _ORDER.get(s["signal"], 9)))
        first_ns = int(latest.first_ns)
        row = {
            "session_id": session_id,
            "agent": latest.agent,
            "user_id": latest.user_id if latest.user_id is not None else latest.any_user,
            "first_ns": first_ns,
            "last_ns": last_ns,
            "turns": total,
            "duration_s": max(0, last_ns - first_ns) / 1e9,
            "input_tokens": int(latest.input_tokens),
            "output_tokens": int(latest.output_tokens),
            "cost_usd": float(latest.cost_usd),
            "turns_flagged": int(latest.turns_flagged),
            "limit_hits": int(latest.limit_hits),
            "blocks": int(latest.blocks),
            "errors": int(latest.errors),
            "thumbs_down": int(latest.thumbs_down),
            "signals": signals,
            "status": status,
            "closed_at": closed_at,
            "updated_at": now,
        }
        return row, now_closed


def _features(text: str | Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A stored ``session_turn`` read as text (cheaper than the driver's JSON decoding of every row), or the
    features themselves (a run row written through SQLAlchemy keeps its value)."""
    if text is None or isinstance(text, Mapping):
        return text
    found = orjson.loads(text)
    return found if isinstance(found, dict) else None


def _stored_signals(conn: sa.Connection, session_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The stored signals of sessions longer than :data:`WINDOW` (their older turns are not re-read)."""
    query = sa.select(sessions.c.session_id, sessions.c.signals).where(sessions.c.session_id.in_(session_ids))
    return {str(sid): list(signals or []) for sid, signals in conn.execute(query)}


def recount_flagged(conn: sa.Connection, session_id: str, now: float) -> None:
    """Recount a session's ``turns_flagged`` from its runs, in ``conn``'s transaction: for a writer that
    flags a turn's run outside :meth:`SessionRefresher.refresh` (a session rule, a judge, a reviewer), so
    the stored row stays what a refresh computes and a replayed turn moves nothing. On PostgreSQL the
    session's lock (the refresh's) is taken first, so the count reads the turns a concurrent writer committed."""
    if conn.dialect.name == "postgresql":
        conn.execute(_PG_LOCK, {"ids": [session_id], "cls": _LOCK_CLASS})
    conn.execute(_RECOUNT_FLAGGED, {"id": session_id, "now": now})


_RECOUNT_FLAGGED = (
    sa.update(sessions)
    .where(sessions.c.session_id == sa.bindparam("id"))
    .values(
        turns_flagged=sa.select(sa.func.count())
        .select_from(runs)
        .where(runs.c.session_id == sa.bindparam("id"), runs.c.flagged.is_(True))
        .scalar_subquery(),
        updated_at=sa.bindparam("now"),
    )
)


_PG_LOCK = sa.text(
    "SELECT pg_advisory_xact_lock(:cls, k) FROM "
    "(SELECT DISTINCT hashtext(id) AS k FROM unnest(CAST(:ids AS text[])) AS id ORDER BY k) AS keys"
)
"""Lock each session id (its hash) for the transaction, in one order so writers never deadlock."""


_THUMBS_DOWN: Final = (feedback.c.kind == "thumbs", feedback.c.score < 0.5)
"""A turn's feedback that is a thumbs-down (the ``thumbs_down`` signal and count)."""


def _in_ids(column: sa.ColumnElement[str], dialect: str) -> sa.ColumnElement[bool]:
    """``column`` is one of the ``:ids`` parameter: a text array on PostgreSQL; one JSON text on SQLite
    (``json_each``: an expanding IN list would re-render the statement for every batch size)."""
    if dialect == "postgresql":
        return column == sa.any_(sa.bindparam("ids", type_=postgresql.ARRAY(sa.String)))
    return column.in_(sa.select(sa.column("value", sa.String)).select_from(sa.func.json_each(sa.bindparam("ids"))))


@dataclass(frozen=True, slots=True)
class _FreshTurn:
    """A turns-query row made from a run row this transaction inserted (same names, see :func:`_turns_query`)."""

    session_id: str
    trace_id: str
    agent: str
    user_id: str | None
    status: str
    complete: bool
    turn_json: str | Mapping[str, Any] | None
    down: int
    rn: int
    n: int
    any_user: str | None
    first_ns: int
    last_ns: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    turns_flagged: int
    limit_hits: int
    blocks: int
    errors: int
    thumbs_down: int
    s_status: None = None
    s_last: None = None
    s_closed: None = None


def _fresh_turns(inserted: Sequence[Mapping[str, Any]], down: set[str]) -> list[Any]:
    """What :func:`_turns_query` reads for a new session whose runs are ``inserted`` (the rows as written,
    JSON columns as text): the latest :data:`WINDOW` turns, each with the session's totals."""
    order = sorted(inserted, key=lambda r: (r["start_ns"], r["trace_id"]), reverse=True)
    users = [r["user_id"] for r in order if r["user_id"] is not None]
    totals: dict[str, Any] = {
        "n": len(order),
        "any_user": max(users) if users else None,
        "first_ns": min(r["start_ns"] for r in order),
        "last_ns": max(r["end_ns"] for r in order),
        "input_tokens": sum(r["input_tokens"] for r in order),
        "output_tokens": sum(r["output_tokens"] for r in order),
        "cost_usd": sum(r["cost_usd"] or 0.0 for r in order),
        "turns_flagged": sum(r["flagged"] is True for r in order),
        "limit_hits": sum(r["hit_max_iterations"] is True for r in order),
        "blocks": sum(r["safety_blocked"] is True for r in order),
        "errors": sum(r["errored"] is True for r in order),
        "thumbs_down": sum(r["trace_id"] in down for r in order),
    }
    return [
        _FreshTurn(
            session_id=r["session_id"],
            trace_id=r["trace_id"],
            agent=r["agent"],
            user_id=r["user_id"],
            status=r["status"],
            complete=r["complete"],
            turn_json=r["session_turn"],
            down=int(r["trace_id"] in down),
            rn=rn,
            **totals,
        )
        for rn, r in enumerate(order[:WINDOW], start=1)
    ]


def _count(column: sa.ColumnElement[Any]) -> sa.ColumnElement[int]:
    return sa.case((column.is_(True), 1), else_=0)


def _turns_query(dialect: str) -> sa.Select[Any]:
    """The latest :data:`WINDOW` turns of each session in ``:ids``, each with its session's totals and its
    stored ``status``/``last_ns``/``closed_at`` (``s_status``, ``s_last``, ``s_closed``; NULL when new)."""
    where = _in_ids(runs.c.session_id, dialect)
    down = sa.exists().where(feedback.c.trace_id == runs.c.trace_id, *_THUMBS_DOWN)
    inner = (
        sa.select(
            runs.c.session_id,
            runs.c.trace_id,
            runs.c.agent,
            runs.c.user_id,
            runs.c.status,
            runs.c.complete,
            runs.c.start_ns,
            runs.c.end_ns,
            runs.c.input_tokens,
            runs.c.output_tokens,
            runs.c.cost_usd,
            sa.cast(runs.c.session_turn, sa.Text).label("turn_json"),
            _count(runs.c.flagged).label("flag"),
            _count(runs.c.hit_max_iterations).label("lim"),
            _count(runs.c.safety_blocked).label("blk"),
            _count(runs.c.errored).label("err"),
            sa.case((down, 1), else_=0).label("down"),
        )
        .where(where)
        .subquery("turns")
    )
    sid = inner.c.session_id
    order = (inner.c.start_ns.desc(), inner.c.trace_id.desc())
    windowed = sa.select(
        inner.c.session_id, inner.c.trace_id, inner.c.agent, inner.c.user_id, inner.c.status, inner.c.complete,
        inner.c.turn_json, inner.c.down,
        sa.func.row_number().over(partition_by=inner.c.session_id, order_by=order).label("rn"),
        sa.func.count().over(partition_by=sid).label("n"),
        sa.func.max(inner.c.user_id).over(partition_by=sid).label("any_user"),
        sa.func.min(inner.c.start_ns).over(partition_by=sid).label("first_ns"),
        sa.func.max(inner.c.end_ns).over(partition_by=sid).label("last_ns"),
        sa.func.sum(inner.c.input_tokens).over(partition_by=sid).label("input_tokens"),
        sa.func.sum(inner.c.output_tokens).over(partition_by=sid).label("output_tokens"),
        sa.func.sum(sa.func.coalesce(inner.c.cost_usd, 0.0)).over(partition_by=sid).label("cost_usd"),
        sa.func.sum(inner.c.flag).over(partition_by=sid).label("turns_flagged"),
        sa.func.sum(inner.c.lim).over(partition_by=sid).label("limit_hits"),
        sa.func.sum(inner.c.blk).over(partition_by=sid).label("blocks"),
        sa.func.sum(inner.c.err).over(partition_by=sid).label("errors"),
        sa.func.sum(inner.c.down).over(partition_by=sid).label("thumbs_down"),
    ).subquery("windowed")  # fmt: skip
    stored = sa.select(
        windowed,
        sessions.c.status.label("s_status"),
        sessions.c.last_ns.label("s_last"),
        sessions.c.closed_at.label("s_closed"),
    ).select_from(windowed.outerjoin(sessions, sessions.c.session_id == windowed.c.session_id))
    return stored.where(windowed.c.rn <= WINDOW)
