"""The judge service: selects runs after they are stored, judges them off the stream, records verdicts.

Isolation from the stream is the point of this module:

1. :meth:`JudgeService.submit` runs on the stream worker's thread once a batch is durably
   written. Per judge it evaluates the selector and the sample, then ``put_nowait`` on the
   judge's bounded queue. It never waits: a full queue drops the run and counts it
   (``vigil_judge_dropped_total{reason="queue_full"}``), and so does a run that would take the
   judges' queues past their byte budget (``reason="queue_bytes"``: the ``judge`` share of
   :class:`collector.budget.MemoryBudgets`, estimated by :func:`scorers.model.run_bytes`).
2. Each judge has ``concurrency`` worker threads of its own, so a slow or failing endpoint
   only delays that judge. A worker renders the request, serves it from the verdict cache
   when the same content was judged under the same rubric version and model, else reserves
   the spend budget (a spent budget skips the run, counted) and asks the model.
3. The verdict is stored with the run (:class:`~scorers.judge.model.JudgeSink`), and the
   rules are decided again with the judge scores known so far: a run can become flagged by
   its judge score (flags are sticky; new reasons are added; the review item is created if
   the run had none). An unreachable store is retried a few times, then the verdict is
   dropped and counted.

Lifecycle: :meth:`start`, :meth:`flush`, :meth:`shutdown`.
"""

from __future__ import annotations

import dataclasses
import itertools
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import structlog

from collector.budget import ByteAccount
from collector.errors import BackpressureError
from scorers.errors import JudgeCallError
from scorers.judge.budget import Reservation, SpendBudget, VerdictCache
from scorers.judge.client import JudgeClient, Judgement
from scorers.judge.config import JudgeSpec, selector_activation
from scorers.judge.metrics import JudgeMetrics
from scorers.judge.model import JudgeResult, JudgeSink
from scorers.judge.rubrics import JudgeInput, has_content, render
from scorers.model import Flag, Run, ScoredRun, run_bytes
from scorers.rules import EVAL_ERRORS, Rule, decide, reason_evidence, sample_point

log = structlog.get_logger(__name__)

STORE_ATTEMPTS = 5
"""Writes of one verdict tried while the store is unavailable before it is dropped."""

_Item = TypeVar("_Item")
_T = TypeVar("_T")
_RunItem = tuple[int, ScoredRun, int]
"""A queued run: ``(submission sequence, the run, its estimated bytes)``."""


class JudgeRuntime(Generic[_Item]):
    """One configured judge at run time: its queue, client, budget, cache and threads.

    The queue holds what its service judges (runs here, sessions in :mod:`scorers.judge.session`);
    :meth:`ask` is the part every judge shares: the cache, else the budget, else the model.
    """

    def __init__(self, spec: JudgeSpec, metrics: JudgeMetrics, clock: Callable[[], float]) -> None:
        cfg = spec.config
        self.spec = spec
        self.name = spec.name
        self.metrics = metrics
        self.queue: queue.Queue[_Item] = queue.Queue(cfg.queue_size)
        self.budget = SpendBudget(cfg.budget.tokens_per_hour, cfg.budget.usd_per_hour, clock=clock)
        self.cache = VerdictCache(cfg.cache_size)
        attempts = metrics.attempts
        latency = metrics.latency.labels(spec.name)

        def on_attempt(outcome: str, seconds: float) -> None:
            attempts.labels(spec.name, outcome).inc()
            latency.observe(seconds)

        self.client = JudgeClient(cfg, spec.api_key, on_attempt=on_attempt)
        self.threads: list[threading.Thread] = []
        self.exhausted_window = -1  # the budget window already logged as exhausted
        program = spec.selector
        self.variables = frozenset(program.variables()) if program is not None else frozenset()
        self.select_all = program is not None and cfg.select.strip() == "true"
        self.dropped_full = metrics.dropped.labels(spec.name, "queue_full")
        self.dropped_bytes = metrics.dropped.labels(spec.name, "queue_bytes")
        self.dropped_empty = metrics.dropped.labels(spec.name, "no_content")

    def drop_queued(self, release: Callable[[_Item], None] | None = None) -> None:
        """Drop what is still queued at a stop, each counted (``shutdown``) and handed to ``release``."""
        shutdown = self.metrics.dropped.labels(self.name, "shutdown")
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            if release is not None:
                release(item)
            self.queue.task_done()
            shutdown.inc()

    def close(self, join_s: float = 0.5) -> None:
        """Join the judge's threads (each for up to ``join_s``) and close its client."""
        for t in self.threads:
            t.join(join_s)
        self.client.close()

    def selects(self, scored: ScoredRun) -> bool:
        """Whether this judge wants the run (selector, then the deterministic sample). Cheap: stream thread."""
        program = self.spec.selector
        if program is None:
            chosen = scored.flag is not None
        elif self.select_all:
            chosen = True
        else:
            sampled = scored.design is not None and scored.design.drawn
            act = selector_activation(scored.run, scored.scores, scored.flag, self.variables, sampled=sampled)
            try:
                chosen = program.execute(act) is True
            except EVAL_ERRORS:
                chosen = False  # bad data for this selector (a missing key): not selected
            except Exception:  # CEL boundary on the stream thread: never raise into the stream (logged)
                log.warning("judge_selector_failed", judge=self.name, trace_id=scored.run.trace_id, exc_info=True)
                chosen = False
        return chosen and self.sampled(scored.run.trace_id)

    def sampled(self, key: str) -> bool:
        """The deterministic ``sample_rate`` draw for ``key`` (a trace id, a session id)."""
        rate = self.spec.config.sample_rate
        return rate >= 1.0 or sample_point(f"{self.name}:{key}") < rate

    def ask(self, request: JudgeInput, base: JudgeResult, stop: threading.Event) -> JudgeResult | None:
        """The verdict on ``request``: from the cache, else (budget permitting) from the model.

        ``base`` carries the subject's identity (trace id, judge, rubric, model, content hash).
        Returns None when not judged: the budget is spent (counted) or shutdown cut the request
        short (counted as dropped). A failed request is a result with ``error`` set (counted).
        """
        spec, cfg, metrics = self.spec, self.spec.config, self.metrics
        key = (spec.rubric.label, cfg.model, request.content_hash)
        cached = self.cache.get(key)
        if cached is not None:
            metrics.requests.labels(self.name, "cached").inc()
            return _reused(cached, base.trace_id)
        estimate = request.estimated_tokens
        reservation = self.budget.try_reserve(estimate + cfg.max_tokens, spec.price.cost(estimate, cfg.max_tokens))
        if reservation is None:
            self._exhausted()
            return None
        try:
            judgement = self.client.judge(request, stop.wait)
        except JudgeCallError as exc:
            cost = self._charge(reservation, exc.input_tokens, exc.output_tokens)
            if stop.is_set():  # cut short by shutdown: not the judge's error
                metrics.dropped.labels(self.name, "shutdown").inc()
                return None
            metrics.requests.labels(self.name, exc.outcome).inc()
            log.warning("judge_error", judge=self.name, trace_id=base.trace_id, outcome=exc.outcome, error=str(exc))
            return dataclasses.replace(
                base,
                error=str(exc)[:1000],
                input_tokens=exc.input_tokens,
                output_tokens=exc.output_tokens,
                cost_usd=cost,
            )
        cost = self._charge(reservation, judgement.input_tokens, judgement.output_tokens)
        result = _verdict_result(base, judgement, cost, cfg.pass_threshold)
        self.cache.put(key, result)
        metrics.requests.labels(self.name, "ok").inc()
        metrics.score.labels(self.name).observe(judgement.verdict.score)
        return result

    def _exhausted(self) -> None:
        self.metrics.budget_exhausted.labels(self.name).inc()
        if self.budget.window != self.exhausted_window:  # log once per window
            self.exhausted_window = self.budget.window
            log.warning("judge_budget_exhausted", judge=self.name, spent=self.budget.spent)

    def _charge(self, reservation: Reservation, input_tokens: int, output_tokens: int) -> float:
        """Settle the budget with the real usage, count tokens and cost; return the cost."""
        cost = self.spec.price.cost(input_tokens, output_tokens)
        self.budget.settle(reservation, input_tokens + output_tokens, cost)
        m = self.metrics
        if input_tokens:
            m.tokens.labels(self.name, "input").inc(input_tokens)
        if output_tokens:
            m.tokens.labels(self.name, "output").inc(output_tokens)
        if cost:
            m.cost.labels(self.name).inc(cost)
        return cost


class JudgePool(Generic[_Item]):
    """What the run and the session judge services share: one :class:`JudgeRuntime` per judge, and
    the lifecycle — ``pending`` / ``flush`` / ``shutdown(timeout) -> bool``."""

    _thread_name = "vigil-judge"
    """The worker threads' names: ``{_thread_name}-{judge}-{i}``."""

    def __init__(self, specs: Sequence[JudgeSpec], metrics: JudgeMetrics, clock: Callable[[], float]) -> None:
        self._judges: list[JudgeRuntime[_Item]] = [JudgeRuntime(spec, metrics, clock) for spec in specs]
        self._stop = threading.Event()
        self._accepting = True
        for judge in self._judges:
            metrics.init_judge(judge.name)

    @property
    def names(self) -> tuple[str, ...]:
        """The judge names."""
        return tuple(j.name for j in self._judges)

    def start(self) -> None:
        """Start every judge's worker threads."""
        for judge in self._judges:
            for i in range(judge.spec.config.concurrency):
                name = f"{self._thread_name}-{judge.name}-{i}"
                t = threading.Thread(target=self._work, args=(judge,), name=name, daemon=True)
                judge.threads.append(t)
                t.start()

    def pending(self) -> int:
        """Items (runs or sessions) queued or being judged, counted once per judge."""
        return sum(j.queue.unfinished_tasks for j in self._judges)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every queued item is judged and recorded; True if done within ``timeout_s``."""
        return wait_idle(self.pending, timeout_s)

    def shutdown(self, timeout_s: float = 10.0) -> bool:
        """Stop accepting, judge what is queued within ``timeout_s``, drop (and count) the rest."""
        self._accepting = False
        done = self.flush(timeout_s)
        self._stop.set()
        for judge in self._judges:
            judge.drop_queued(self._release_item)
        for judge in self._judges:
            judge.close()
        return done

    def _work(self, judge: JudgeRuntime[_Item]) -> None:
        """A worker thread of ``judge``: judge its queued items until shutdown."""
        while not self._stop.is_set():
            try:
                item = judge.queue.get(timeout=0.1)
            except queue.Empty:
                continue
            try:
                self._judge_item(judge, item)
            except Exception:  # noqa: BLE001 - plugin boundary: one bad item must not kill the judge (_failed logs it)
                self._failed(judge, item)
            finally:
                self._release_item(item)
                judge.queue.task_done()

    def _judge_item(self, judge: JudgeRuntime[_Item], item: _Item) -> None:
        """Judge one queued ``item`` and record the verdict."""
        raise NotImplementedError

    def _failed(self, judge: JudgeRuntime[_Item], item: _Item) -> None:
        """Log that judging ``item`` raised (called in the ``except`` block)."""
        log.exception("judge_failed", judge=judge.name)

    def _release_item(self, item: _Item) -> None:
        """Release what a queued ``item`` held once it is judged or dropped at shutdown (nothing by default)."""


class JudgeService(JudgePool[_RunItem]):
    """Runs the configured judges beside the stream.

    Args:
        specs: the validated judges.
        sink: where verdicts are stored (and flags merged).
        rules: the compiled flag rules (with the judges' ``flag_below`` rules).
        sample_rate: the random review sample rate (the rules' ``random_sample``).
        metrics: judge metrics.
        on_new_flag: called with a run the judges flagged that was not flagged before
            (``RunMetrics.observe_flag``).
        clock: Unix seconds for the budget windows (injected in tests).
        max_tracked_runs: runs whose judge scores are kept for re-decisions.
        prepare: applied to a run on the judge's thread before its content is rendered for
            the model (redaction: the model, and the reasoning stored from its answer, never
            see what the store would not hold).
        max_queue_bytes: byte budget of every judge's queue together (runs queued or being
            judged, :func:`scorers.model.run_bytes`); 0: unbounded.
    """

    def __init__(
        self,
        specs: Sequence[JudgeSpec],
        sink: JudgeSink,
        *,
        rules: tuple[Rule, ...],
        sample_rate: float,
        metrics: JudgeMetrics,
        on_new_flag: Callable[[ScoredRun], None] | None = None,
        clock: Callable[[], float] = time.time,
        max_tracked_runs: int = 20_000,
        prepare: Callable[[Run], Run] | None = None,
        max_queue_bytes: int = 0,
    ) -> None:
        self._sink = sink
        self.account = ByteAccount(max_queue_bytes)
        """Estimated bytes of the runs queued for (or being judged by) every judge."""
        self._account_lock = threading.Lock()
        self._prepare = prepare
        self._rules = rules
        self._sample_rate = sample_rate
        self._metrics = metrics
        self._on_new_flag = on_new_flag
        super().__init__(specs, metrics, clock)
        self._scores: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._latest: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._seq = itertools.count(1)
        self._max_tracked = max_tracked_runs
        self._lock = threading.Lock()

    @property
    def metrics(self) -> JudgeMetrics:
        """The judge metrics (the process's session judges count into the same ones)."""
        return self._metrics

    def submit(self, runs: Sequence[ScoredRun]) -> None:
        """Queue the selected runs for their judges. Never blocks; full queues drop and count."""
        if not self._accepting:
            return
        for judge in self._judges:
            for scored in runs:
                if not judge.selects(scored):
                    continue
                if not has_content(scored.run):
                    judge.dropped_empty.inc()
                    continue
                size = run_bytes(scored.run)
                with self._account_lock:
                    if not self.account.fits(size):
                        judge.dropped_bytes.inc()
                        continue
                    self.account.add(size)
                seq = next(self._seq)
                try:
                    judge.queue.put_nowait((seq, scored, size))
                except queue.Full:
                    self._release(size)
                    judge.dropped_full.inc()
                    continue
                self._newest(scored.run.trace_id, judge.name, seq)

    def judge_scores(self, trace_id: str) -> Mapping[str, float]:
        """The latest score of each judge that scored ``trace_id`` (empty when none). Thread-safe."""
        with self._lock:
            found = self._scores.get(trace_id)
            return dict(found) if found else {}

    def _release_item(self, item: _RunItem) -> None:
        self._release(item[2])

    def _judge_item(self, judge: JudgeRuntime[_RunItem], item: _RunItem) -> None:
        seq, scored, _ = item
        self._judge_one(judge, scored, seq)

    def _failed(self, judge: JudgeRuntime[_RunItem], item: _RunItem) -> None:
        log.exception("judge_failed", judge=judge.name, trace_id=item[1].run.trace_id)

    def _release(self, size: int) -> None:
        with self._account_lock:
            self.account.sub(size)

    def _judge_one(self, judge: JudgeRuntime[_RunItem], scored: ScoredRun, seq: int) -> None:
        """Cache, else budget, else ask the model; then record whatever came out."""
        if self._superseded(scored.run.trace_id, judge.name, seq):  # a newer version is queued: skip the request
            self._metrics.dropped.labels(judge.name, "superseded").inc()
            return
        run = scored.run if self._prepare is None else self._prepare(scored.run)
        request = render(run, judge.spec.rubric, judge.spec.config.max_content_chars)
        result = judge.ask(request, base_result(judge.spec, scored.run.trace_id, request.content_hash), self._stop)
        if result is not None:
            self._record(judge, result, scored, seq)

    def _newest(self, trace_id: str, judge: str, seq: int) -> None:
        """Remember the newest accepted submission of (run, judge): older verdicts must not overwrite it."""
        with self._lock:
            self._latest[(trace_id, judge)] = seq
            self._latest.move_to_end((trace_id, judge))
            while len(self._latest) > self._max_tracked:
                self._latest.popitem(last=False)

    def _superseded(self, trace_id: str, judge: str, seq: int) -> bool:
        with self._lock:
            return self._latest.get((trace_id, judge), seq) > seq

    def _record(self, judge: JudgeRuntime[_RunItem], result: JudgeResult, scored: ScoredRun, seq: int) -> None:
        """Store the verdict and, when the judge scores add flag reasons, the new flag.

        A verdict on an older version of the run (re-scored after late spans, and queued again
        meanwhile) is dropped as ``superseded``: with concurrency > 1 it could finish last.
        """
        if self._superseded(result.trace_id, judge.name, seq):
            self._metrics.dropped.labels(judge.name, "superseded").inc()
            return
        flag = None
        if result.score is not None:
            scores = self._remember(result.trace_id, judge.name, result.score)
            flag = self._redecide(scored, scores)
            if flag is not None:  # the new reasons' evidence (the judge score that matched) joins the snapshot
                evidence = reason_evidence(scored.run, flag, self._rules, scored.scores, judge=scores)
                scored = dataclasses.replace(scored, evidence=evidence)
        new_flag = self._write(judge, result, scored, flag)
        if new_flag and flag is not None and self._on_new_flag is not None:
            self._on_new_flag(dataclasses.replace(scored, flag=flag))
        if flag is not None:
            log.info("run_flagged_by_judge", judge=judge.name, trace_id=result.trace_id, reasons=list(flag.reasons))

    def _remember(self, trace_id: str, judge: str, score: float) -> dict[str, float]:
        with self._lock:
            scores = self._scores.setdefault(trace_id, {})
            scores[judge] = score
            self._scores.move_to_end(trace_id)
            while len(self._scores) > self._max_tracked:
                self._scores.popitem(last=False)
            return dict(scores)

    def _redecide(self, scored: ScoredRun, judge_scores: Mapping[str, float]) -> Flag | None:
        """The new decision when it adds a reason to the run's flag, else None."""
        rate = self._sample_rate if scored.design is None else scored.design.rate  # the rate of its first decision
        decision = decide(scored.run, scored.scores, self._rules, rate, judge=judge_scores)
        if decision is None:
            return None
        known = set(scored.flag.reasons) if scored.flag is not None else set()
        return decision if set(decision.reasons) - known else None

    def _write(self, judge: JudgeRuntime[_RunItem], result: JudgeResult, scored: ScoredRun, flag: Flag | None) -> bool:
        return store_with_retries(lambda: self._sink.write_judgement(result, scored, flag), judge, self._stop) is True


def wait_idle(pending: Callable[[], int], timeout_s: float) -> bool:
    """Poll ``pending`` until it is 0; True if it got there within ``timeout_s`` (a judge service's flush)."""
    deadline = time.monotonic() + timeout_s
    while pending():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def store_with_retries(write: Callable[[], _T], judge: JudgeRuntime[Any], stop: threading.Event) -> _T | None:
    """``write()`` retried with backoff while the store is unavailable (:data:`STORE_ATTEMPTS` times,
    or until shutdown); then None, counted as ``store_unavailable``."""
    backoff = 0.2
    for _ in range(STORE_ATTEMPTS):
        try:
            return write()
        except BackpressureError as exc:
            log.warning("judge_store_unavailable", judge=judge.name, retry_in=backoff, error=str(exc))
            if stop.wait(backoff):
                break
            backoff = min(backoff * 2, 5.0)
    judge.metrics.dropped.labels(judge.name, "store_unavailable").inc()
    return None


def _reused(cached: JudgeResult, trace_id: str) -> JudgeResult:
    """A cached verdict applied to another run (or a re-score): free and instant."""
    return dataclasses.replace(
        cached, trace_id=trace_id, cached=True, input_tokens=0, output_tokens=0, cost_usd=0.0, latency_s=0.0
    )


def _verdict_result(base: JudgeResult, judgement: Judgement, cost: float, pass_threshold: float) -> JudgeResult:
    score = judgement.verdict.score
    return dataclasses.replace(
        base,
        score=score,
        passed=score >= pass_threshold,
        reasoning=judgement.verdict.reasoning,
        input_tokens=judgement.input_tokens,
        output_tokens=judgement.output_tokens,
        cost_usd=cost,
        latency_s=judgement.latency_s,
    )


def base_result(spec: JudgeSpec, trace_id: str, content_hash: str) -> JudgeResult:
    """A result of ``spec`` on ``trace_id`` with no verdict yet (what :meth:`JudgeRuntime.ask` fills in)."""
    return JudgeResult(
        trace_id=trace_id,
        judge=spec.name,
        rubric_version=spec.rubric.label,
        model=spec.config.model,
        score=None,
        passed=None,
        reasoning="",
        content_hash=content_hash,
    )
