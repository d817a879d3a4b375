"""``vigil demo``: a fleet of simulated LLM agents sending realistic traces to any OTLP endpoint.

:class:`DemoFleet` embeds a scripted :class:`~collector.demo.fakeopenai.FakeOpenAI`, instruments
itself with :func:`collector.instrument.vigil_setup` and plays runs of the scenarios of
:mod:`collector.demo.plan` on a small thread pool at a steady rate: mostly good runs, some
inefficient, looping to their iteration cap, content-filtered, guardrail-blocked, with tool
failures, slow, raising to the caller, or earning a thumbs-down. Runs are the turns of
conversations (:func:`collector.demo.plan.conversations`): a conversation plays on one worker, its
turns in order with the chat history and a user's pause (:data:`~collector.demo.plan.THINK_S`)
between them, all with the conversation's session id. It knows what every run was meant to be
(:class:`DemoRun`; :func:`session_truths` per session), so a test can compare Vigil's verdicts with
the truth.

Example::

    fleet = DemoFleet("http://127.0.0.1:4318", rate_per_s=5, runs=100, seed=1)
    truth = fleet.run()          # blocks; fleet.shutdown(timeout) from another thread ends it early
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import structlog

from collector.demo.agent import DemoAgent, Observed, latency_client, openai_instrumented
from collector.demo.fakeopenai import FakeOpenAI, Served
from collector.demo.plan import THINK_S, RunPlan, conversations, expected, failed, scenarios
from collector.demo.progress import FleetStats, LiveProgress
from collector.instrument import vigil_setup
from collector.instrument.content import OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT

__all__ = ["DemoFleet", "DemoRun", "session_truths"]

log = structlog.get_logger(__name__)

KEEP_RUNS: Final = 10_000
"""Ground-truth records an endless fleet keeps (the most recent); a bounded one keeps all."""

SERVED_LOG_MAX: Final = 1_000
"""Requests the embedded fake server remembers (it is a test double that logs every request)."""


@dataclass(frozen=True, slots=True)
class DemoRun:
    """The ground truth of one demo run.

    Attributes:
        trace_id: the run's trace id (32 hex digits).
        agent: the agent name.
        kind: what the run was meant to be (a :class:`~collector.demo.plan.Kind` value).
        expected: what Vigil should derive (see :func:`collector.demo.plan.expected`):
            ``agent``, ``llm_calls``, ``tool_calls``, ``tool_errors``, ``input_tokens``,
            ``output_tokens``, ``hit_max_iterations``, ``safety_blocked``, ``errored``,
            ``feedback``, ``optimal_steps``.
        scenario: the scripted scenario played.
        tag: the run's tag (its conversation's in the fake server's log).
        outcome: ``ok``, or the type of the exception that reached the caller.
        session_id: the run's ``gen_ai.conversation.id``.
        turn: its 1-based position in the session.
        act: what the user did in it (a :class:`~collector.demo.plan.Act` value).
        signals: the session signals it should raise (:attr:`collector.demo.plan.RunPlan.signals`).
        failed: it should end errored, blocked or at its cap (ending a session with it is abandonment).
    """

    trace_id: str
    agent: str
    kind: str
    expected: dict[str, Any]
    scenario: str = ""
    tag: str = ""
    outcome: str = "ok"
    session_id: str = ""
    turn: int = 1
    act: str = "open"
    signals: tuple[str, ...] = ()
    failed: bool = False


def session_truths(runs: Sequence[DemoRun]) -> dict[str, dict[str, Any]]:
    """What Vigil should find in each session of ``runs`` (played turns, any order): session id →
    ``{turns, reask, human_request, thumbs_down}`` (1-based turn positions) and ``abandoned`` (the last
    turn played failed). See :func:`collector.demo.plan.session_truth`."""
    by_session: dict[str, list[DemoRun]] = {}
    for run in runs:
        by_session.setdefault(run.session_id, []).append(run)
    out: dict[str, dict[str, Any]] = {}
    for session_id, turns in by_session.items():
        turns.sort(key=lambda r: r.turn)
        truth: dict[str, Any] = {"turns": len(turns), "reask": [], "human_request": [], "thumbs_down": []}
        for run in turns:
            for signal in run.signals:
                truth[signal].append(run.turn)
        truth["abandoned"] = turns[-1].failed
        out[session_id] = truth
    return out


class _BoundedFake(FakeOpenAI):
    """The fake server with a bounded request log, for fleets that run for days."""

    def answer(
        self, path: str, body: Mapping[str, Any], scenario_header: str | None = None
    ) -> tuple[int, dict[str, Any] | Iterator[bytes]]:
        """Answer as :class:`FakeOpenAI` does, then forget all but the newest log entries."""
        result = super().answer(path, body, scenario_header)
        with self._lock:
            served: list[Served] = self._served
            if len(served) > 2 * SERVED_LOG_MAX:
                del served[:-SERVED_LOG_MAX]
        return result


class DemoFleet:
    """Simulated agents sending runs to ``endpoint`` at ``rate_per_s``.

    Args:
        endpoint: OTLP endpoint (``http://HOST:4318`` for HTTP, ``http://HOST:4317`` for gRPC).
        rate_per_s: runs started per second (steady: run ``i`` starts at ``i / rate``).
        duration_s: stop starting runs after this long (None: no limit).
        runs: stop after this many runs (None: no limit). With neither limit the fleet
            runs until :meth:`shutdown`.
        seed: makes the sequence of runs reproducible.
        protocol: ``http/protobuf`` or ``grpc``.
        pace: multiplier on simulated model and tool latencies (1 = realistic, 0 = none).
        workers: worker threads (default: enough for the rate at this pace).
        progress: live display on stderr (None: only when stderr is a terminal).
        service_name: ``service.name`` of the fleet's spans.
        headers: OTLP request headers (an ingest token); None reads ``OTEL_EXPORTER_OTLP_HEADERS``.
        capture_content: record the conversation — the user's input and the model's turns on the
            chat spans (the OpenAI instrumentation's ``span_only`` capture, see
            :func:`openai_capture_content`), tool arguments and results (so Vigil can see loops of
            identical calls); None follows ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
        on_feedback: called ``(trace_id, feedback)`` on the worker thread right after a run
            whose user gives feedback (``"thumbs_down"``) — e.g. a POST to Vigil's
            ``/api/v1/feedback``. An exception it raises is logged and the fleet goes on.

    Raises:
        ValueError: a non-positive rate or duration, a negative run count or pace.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        rate_per_s: float,
        duration_s: float | None = None,
        runs: int | None = None,
        seed: int,
        protocol: str = "http/protobuf",
        pace: float = 1.0,
        workers: int | None = None,
        progress: bool | None = None,
        service_name: str = "vigil-demo",
        headers: Mapping[str, str] | None = None,
        capture_content: bool | None = True,
        on_feedback: Callable[[str, str], None] | None = None,
    ) -> None:
        if not rate_per_s > 0 or (duration_s is not None and not duration_s > 0) or (runs is not None and runs < 0):
            raise ValueError(f"need rate_per_s > 0, duration_s > 0, runs >= 0: {rate_per_s}, {duration_s}, {runs}")
        if pace < 0:
            raise ValueError(f"pace must be >= 0, got {pace}")
        self.endpoint = endpoint
        self.rate_per_s = rate_per_s
        self.duration_s = duration_s
        self.runs = runs
        self.seed = seed
        self.protocol = protocol
        self.pace = pace
        # a conversation holds its worker through its turns and the user's pauses between them
        self.workers = workers or min(256, max(4, math.ceil(rate_per_s * (1 + (12 + THINK_S[1]) * pace))))
        self.progress = progress
        self.service_name = service_name
        self.headers = headers
        self.capture_content = capture_content
        self.on_feedback = on_feedback
        self.stats = FleetStats(rate_per_s)
        self._stop = threading.Event()
        self._began = threading.Event()
        self._finished = threading.Event()
        self._lock = threading.Lock()
        self._truth: deque[tuple[int, DemoRun]] = deque(maxlen=None if runs is not None else KEEP_RUNS)

    def run(self) -> list[DemoRun]:
        """Send runs until a limit is reached or :meth:`shutdown` is called; flush; return the truth.

        Blocks the calling thread; call it once per fleet. The spans of every finished run
        are flushed before it returns.

        Returns:
            The ground truth of every finished run in start order (the newest
            :data:`KEEP_RUNS` for an endless fleet).

        Raises:
            SettingsError: an ``OTEL_*`` variable has an unsupported value.
        """
        self._began.set()
        try:
            return self._run()
        finally:
            self._finished.set()

    def _run(self) -> list[DemoRun]:
        """Set up tracing, the fake model and the workers; schedule; tear down in reverse."""
        self.stats.restart()
        if self.capture_content:
            openai_capture_content(os.environ)
        tracing = vigil_setup(
            service_name=self.service_name,
            endpoint=self.endpoint,
            protocol=self.protocol,
            headers=self.headers,
            capture_content=self.capture_content,
            set_global=False,  # every span has its provider passed in; never trace the host process
        )
        fake = _BoundedFake({s.name: s.turns for s in scenarios(self.seed)}).start()
        client = latency_client(fake.base_url, self.pace, self.seed, sleep=self._stop.wait)
        fallback = not openai_instrumented()  # a plain install lacks the OpenAI instrumentation
        provider = tracing.tracer_provider
        agent = DemoAgent(
            client,
            pace=self.pace,
            tracer_provider=provider,
            llm_spans=fallback,
            capture_content=tracing.capture_content,
            sleep=self._stop.wait,
        )
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="vigil-demo")
        log.info(
            "demo_started", endpoint=self.endpoint, rate_per_s=self.rate_per_s, seed=self.seed, own_llm_spans=fallback
        )
        try:
            with LiveProgress(self.stats, self.progress):
                self._schedule(pool, agent)
                pool.shutdown(wait=True)  # in-flight runs finish (quickly after shutdown())
        except BaseException:
            self._stop.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            tracing.force_flush()
            tracing.shutdown()
            if tracing.export_counts is not None:
                self.stats.exports(tracing.export_counts.exported, tracing.export_counts.failed)
            client.close()
            fake.shutdown()
            log.info("demo_stopped", summary=self.stats.summary())
        with self._lock:
            return [run for _, run in sorted(self._truth, key=lambda pair: pair[0])]

    def start(self) -> None:
        """:meth:`run` on a daemon thread (as a :class:`collector.lifecycle.Component`)."""
        threading.Thread(target=self.run, name="vigil-demo", daemon=True).start()

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Start no more runs, cut simulated waits short, and wait for :meth:`run` to flush.

        Safe from any thread, and before or after :meth:`run`. Returns True when the fleet
        finished (or never ran) within ``timeout_s``.
        """
        self._stop.set()
        return self._finished.wait(timeout_s) if self._began.is_set() else True

    def _schedule(self, pool: ThreadPoolExecutor, agent: DemoAgent) -> None:
        """Submit conversations on time until a limit or :meth:`shutdown`; at most ``2 × workers`` pending.

        Run ``i`` is due ``i / rate`` seconds after the start, so a conversation starts when its first
        run is due and the next one waits for as many slots as it has turns: runs per second stay at
        the rate. When every slot is busy the fleet waits, so the rate sags instead of the backlog
        growing, and resumes the rate afterwards without a burst to catch up. A run limit cuts the
        conversation it falls in.
        """
        start = time.monotonic()
        slots = threading.BoundedSemaphore(2 * self.workers)
        for conversation in conversations(self.seed):
            first = conversation[0].index
            if self.runs is not None and first >= self.runs:
                return
            offset = first / self.rate_per_s
            if self.duration_s is not None and offset >= self.duration_s:
                return
            now = time.monotonic()
            if now > start + offset + 1.0:  # fell behind (every worker busy): no catch-up burst
                start = now - offset
            if self._stop.wait(max(0.0, start + offset - now)):
                return
            while not slots.acquire(timeout=0.1):
                if self._stop.is_set():
                    return
            turns = tuple(p for p in conversation if self.runs is None or p.index < self.runs)
            pool.submit(self._converse, agent, turns, start, slots)

    def _converse(
        self, agent: DemoAgent, turns: tuple[RunPlan, ...], start: float, slots: threading.BoundedSemaphore
    ) -> None:
        """Play one conversation's turns in order on a worker thread, the user pausing between them."""
        pause = random.Random(f"{self.seed}/{turns[0].session_id}")
        history: list[dict[str, str]] = []
        try:
            for plan in turns:
                if plan.turn and self._stop.wait(pause.uniform(*THINK_S) * self.pace):
                    return
                if self.duration_s is not None and time.monotonic() - start >= self.duration_s:
                    return
                seen = self._play(agent, plan, history)
                history.append({"role": "user", "content": plan.user_message})
                if seen.output:
                    history.append({"role": "assistant", "content": seen.output})
        finally:
            slots.release()

    def _play(self, agent: DemoAgent, plan: RunPlan, history: Sequence[Mapping[str, str]]) -> Observed:
        """Play one run and record its ground truth."""
        s = plan.scenario
        self.stats.sent(s.kind)
        seen = agent.run(plan, history)
        truth = DemoRun(
            trace_id=seen.trace_id,
            agent=s.agent.name,
            kind=s.kind.value,
            expected=expected(s),
            scenario=s.name,
            tag=plan.conversation or plan.tag,
            outcome=seen.exception or "ok",
            session_id=plan.session_id,
            turn=plan.turn + 1,
            act=plan.act.value,
            signals=plan.signals,
            failed=failed(s),
        )
        with self._lock:
            self._truth.append((plan.index, truth))
        self.stats.done(s.kind, raised=seen.errored)
        if s.feedback and self.on_feedback is not None:
            _give_feedback(self.on_feedback, seen.trace_id, s.feedback)
        return seen


def openai_capture_content(environ: MutableMapping[str, str]) -> bool:
    """Make the official OpenAI instrumentation record prompts and answers on its spans.

    That instrumentation reads only ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` (on each
    call), so a demo that captures content sets it to ``span_only`` — unless it is already set, in
    which case the user's choice stands. Returns True when this call set it.
    """
    if environ.get(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT, "").strip():
        return False
    environ[OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT] = "span_only"
    log.info("demo_content_capture_enabled", variable=OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT)
    return True


def _give_feedback(callback: Callable[[str, str], None], trace_id: str, feedback: str) -> None:
    """Hand one run's user feedback to the callback; a failure is logged, never raised."""
    try:
        callback(trace_id, feedback)
    except Exception as exc:  # noqa: BLE001 - the user's callback must not stop the fleet
        log.warning("demo_feedback_failed", trace_id=trace_id, error=repr(exc))
