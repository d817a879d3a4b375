"""Session judges: LLM verdicts on a closed conversation (contradiction, completeness, knowledge retention).

What no deterministic session signal sees — an answer that contradicts an earlier one, requests
left unmet by the end, something the user said that the agent forgot — a judge reading the whole
conversation can. :class:`SessionJudgeService` runs the ``session_judges`` of ``vigil.yaml`` beside
the idle-session closer, through the run judges' machinery (:class:`~scorers.judge.service.JudgeRuntime`:
the same client, spend budget, verdict cache, deterministic sample and metrics):

1. :meth:`SessionJudgeService.submit` runs on the closer's thread once the close is committed. Per
   judge it evaluates the selector (CEL over the session rule variables) and the sample (on the
   session id), then ``put_nowait`` on the judge's bounded queue; a full queue drops the session
   and counts it. It never waits and never reads the store.
2. A judge's worker loads the conversation (``load``: each turn's user messages and answer,
   redacted as the run page shows them; loaded once per session whatever the number of judges),
   renders it bounded (:func:`~scorers.judge.rubrics.render_session`) and asks
   :meth:`~scorers.judge.service.JudgeRuntime.ask`: cache, else budget, else the model.
3. The verdict is stored keyed by (session id, judge) (:class:`~scorers.judge.model.SessionJudgeSink`);
   a score below the judge's ``flag_below`` (default 0.5) adds the reason ``judge_<name>`` to the
   session's review item.

Lifecycle: :meth:`start`, :meth:`flush`, :meth:`shutdown` (as :class:`~scorers.judge.service.JudgeService`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from scorers.judge.config import JudgeSpec
from scorers.judge.metrics import JudgeMetrics
from scorers.judge.model import JudgeResult, SessionJudgeSink, TranscriptTurn
from scorers.judge.rubrics import render_session, sent_turns, transcript_has_content
from scorers.judge.service import JudgePool, JudgeRuntime, base_result, store_with_retries
from scorers.rules import EVAL_ERRORS

log = structlog.get_logger(__name__)

__all__ = ["Conversation", "ConversationSource", "SessionJudgeService", "flag_reason"]


@dataclass(frozen=True, slots=True)
class Conversation:
    """A closed session as its judges read it.

    Attributes:
        agent: the session's agent.
        turns: its turns in order (at most what the loader bounds them to).
    """

    agent: str
    turns: tuple[TranscriptTurn, ...]


ConversationSource = Callable[[str], Conversation | None]
"""Loads a session's conversation by session id (None: the session is gone). May raise
:class:`collector.errors.BackpressureError` while the store is down."""


def flag_reason(judge: str) -> str:
    """The review reason a failing session judge adds: ``judge_<name>``."""
    return f"judge_{judge}"


class _Closed:
    """A closed session queued for its judges: the conversation is loaded once, by the first worker."""

    def __init__(self, session_id: str, last_trace_id: str) -> None:
        self.session_id = session_id
        self.last_trace_id = last_trace_id
        self._lock = threading.Lock()
        self._loaded = False
        self._conversation: Conversation | None = None

    def conversation(self, load: ConversationSource, max_chars: int) -> Conversation | None:
        """Loaded by the first judge to ask, then shared; only the turns a judge can be sent are kept
        (``max_chars``: the largest ``max_content_chars``), so a queued session holds a bounded text."""
        with self._lock:
            if not self._loaded:
                found = load(self.session_id)
                if found is not None:
                    found = Conversation(found.agent, tuple(sent_turns(found.turns, max_chars)))
                self._conversation = found
                self._loaded = True
            return self._conversation


class SessionJudgeService(JudgePool[_Closed]):
    """Runs the session judges beside the idle-session closer.

    Args:
        specs: the validated session judges (:func:`scorers.judge.config.parse_session_judges`).
        sink: where verdicts are stored (and failing ones flag the session).
        load: the conversation of a session id.
        metrics: the judge metrics (shared with the run judges of the process: ``judge`` is the name).
        clock: Unix seconds for the budget windows (injected in tests).
    """

    _thread_name = "vigil-session-judge"

    def __init__(
        self,
        specs: Sequence[JudgeSpec],
        sink: SessionJudgeSink,
        load: ConversationSource,
        *,
        metrics: JudgeMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._sink = sink
        self._load = load
        super().__init__(specs, metrics, clock)
        self._max_chars = max((spec.config.max_content_chars for spec in specs), default=0)

    def submit(self, session_id: str, last_trace_id: str, variables: Mapping[str, Any]) -> None:
        """Queue a closed session for the judges whose selector and sample take it. Never blocks."""
        if not self._accepting:
            return
        closed = _Closed(session_id, last_trace_id)
        for judge in self._judges:
            if not self._selects(judge, variables) or not judge.sampled(session_id):
                continue
            try:
                judge.queue.put_nowait(closed)
            except queue.Full:
                judge.dropped_full.inc()

    @staticmethod
    def _selects(judge: JudgeRuntime[_Closed], variables: Mapping[str, Any]) -> bool:
        program = judge.spec.selector
        if program is None:
            return True
        try:
            return program.execute({k: variables[k] for k in program.variables() if k in variables}) is True
        except EVAL_ERRORS:
            return False  # bad data for this selector: not selected
        except Exception:  # CEL boundary on the closer's thread: never raise into the upkeep (logged)
            log.warning("session_judge_selector_failed", judge=judge.name, exc_info=True)
            return False

    def _failed(self, judge: JudgeRuntime[_Closed], item: _Closed) -> None:
        log.exception("session_judge_failed", judge=judge.name, session_id=item.session_id)

    def _judge_item(self, judge: JudgeRuntime[_Closed], closed: _Closed) -> None:
        loaded = store_with_retries(lambda: (closed.conversation(self._load, self._max_chars),), judge, self._stop)
        if loaded is None:  # the store stayed unavailable (counted)
            return
        conversation = loaded[0]
        if conversation is None or not transcript_has_content(conversation.turns):
            judge.dropped_empty.inc()
            return
        cfg = judge.spec.config
        request = render_session(conversation.agent, conversation.turns, judge.spec.rubric, cfg.max_content_chars)
        base = base_result(judge.spec, closed.last_trace_id, request.content_hash)
        result = judge.ask(request, base, self._stop)
        if result is None:
            return
        reason = flag_reason(judge.name) if _fails(judge.spec, result) else None
        store_with_retries(
            lambda: self._sink.write_session_judgement(closed.session_id, result, reason, cfg.priority),
            judge,
            self._stop,
        )
        if reason is not None:
            log.info("session_flagged_by_judge", judge=judge.name, session_id=closed.session_id, score=result.score)


def _fails(spec: JudgeSpec, result: JudgeResult) -> bool:
    below = spec.config.flag_below
    return result.score is not None and below is not None and result.score < below
