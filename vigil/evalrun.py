"""``vigil eval run`` / ``score``: run an agent over an eval set through an in-process Vigil, and score it.

:class:`EvalHarness` is a small Vigil inside the process: the production OTLP/HTTP receiver
(:func:`collector.receiver.create_otlp_app`) on a free local port, whose decoded spans are kept by
trace; the OpenTelemetry SDK's global tracer provider exports to it (OTLP/HTTP protobuf, the
exporter every instrumentor uses), and ``OTEL_EXPORTER_OTLP_*`` point there for agents that set up
their own. So any agent Vigil can read — a LangGraph or OpenAI Agents SDK agent with its
OpenInference instrumentor, the OTel GenAI instrumentation, Vigil's own helpers — is evaluated
without an adapter.

For each case (with bounded concurrency) every turn calls the agent with the user's message (and,
when the callable takes a second argument, the conversation so far as ``[{"role", "content"}]``);
a sync callable runs in a worker thread, an async one on the loop. Every span started while a turn
runs — and every span of the same traces — gets ``vigil.eval.case_id``, ``vigil.eval.set_id``,
``vigil.eval.turn`` and ``gen_ai.conversation.id``, so one turn is one trace and a multi-turn case is
one trace per turn sharing the case id and conversation id, in time order. After the call the
provider is flushed (the export is acknowledged once the receiver has decoded the spans), the
turn's traces go through the configured normalise → score → decide pipeline, and the case is
scored (:func:`scorers.eval.evaluate.evaluate_case`).

``vigil eval score`` reads captured OTLP files instead and scores the runs that carry
``vigil.eval.case_id`` (or whose first user message is a case's).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import inspect
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client import CollectorRegistry

from collector.instrument.setup import join_eval_harness
from collector.metrics import CollectorMetrics
from collector.model import Span as VigilSpan
from collector.model import TraceBatch
from collector.receiver import create_otlp_app
from scorers.eval.actual import CASE_ID, CONVERSATION_ID, EVAL_SET_ID, TURN, group_by_case, turn_of
from scorers.eval.criteria import ActualTurn
from scorers.eval.evaluate import CaseResult, evaluate_case
from scorers.eval.judged import EvalJudge
from scorers.eval.model import EvalCase, EvalConfig, EvalSet
from scorers.eval.online import case_index, match_run
from scorers.model import Run
from scorers.normalise import normalise
from scorers.pipeline import Pipeline
from vigil.components import HttpServer
from vigil.explain import load_traces
from vigil.process import free_port

__all__ = ["AgentError", "EvalHarness", "judge_closed", "load_agent", "score_traces"]

Agent = Callable[..., Any]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_TAGS: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar("vigil_eval_turn", default=None)


def _blocking(function: Callable[_P, Coroutine[Any, Any, _R]]) -> Callable[_P, _R]:
    """The blocking twin of an ``async def`` (a method too): the same arguments, run to completion on a
    new event loop (``asyncio.run``)."""

    @functools.wraps(function)
    def blocking(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return asyncio.run(function(*args, **kwargs))

    blocking.__doc__ = f"As :meth:`{function.__name__}`, blocking: on a new event loop (``asyncio.run``)."
    return blocking


class AgentError(ValueError):
    """``--agent`` does not name a callable (``module:callable``); the message says why."""


def load_agent(spec: str, search: Sequence[str] = (".",)) -> Agent:
    """Import ``module:callable`` (``module:object.attr`` too); the current directory is on the path.

    Raises:
        AgentError: malformed spec, module not importable, attribute missing or not callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentError(f"--agent must be module:callable, got {spec!r}")
    for entry in reversed(search):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise AgentError(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AgentError(f"{module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise AgentError(f"{spec} is not callable")
    return obj  # type: ignore[no-any-return]


@dataclass
class _Turn:
    """The tags of one running turn and the traces it started."""

    tags: dict[str, str | int]
    traces: set[str] = field(default_factory=set)


class _Tagger(SpanProcessor):
    """Stamps the eval tags on every span started during a turn (or in a trace a turn started)."""

    def __init__(self) -> None:
        self._by_trace: dict[int, _Turn] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        turn = _TAGS.get()
        trace_id = span.context.trace_id
        with self._lock:
            if turn is None:
                turn = self._by_trace.get(trace_id)
            if turn is None:
                return
            self._by_trace[trace_id] = turn
            turn.traces.add(f"{trace_id:032x}")
        for key, value in turn.tags.items():
            span.set_attribute(key, value)

    def forget(self, traces: Iterable[str]) -> None:
        with self._lock:
            for t in traces:
                self._by_trace.pop(int(t, 16), None)

    def on_end(self, span: ReadableSpan) -> None:
        return

    def shutdown(self) -> None:
        return

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class _Switchable(SpanProcessor):
    """Forwards to its processors until :meth:`detach` (the SDK cannot remove a processor from a provider)."""

    def __init__(self, *processors: SpanProcessor) -> None:
        self._processors = processors
        self.active = True

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        if self.active:
            for p in self._processors:
                p.on_start(span, parent_context)

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            for p in self._processors:
                p.on_end(span)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self._processors) if self.active else True

    def detach(self) -> None:
        """Flush, then forward nothing more, and shut the processors down."""
        self.force_flush()
        self.active = False
        for p in self._processors:
            p.shutdown()

    def shutdown(self) -> None:
        if self.active:
            self.detach()


class _Capture:
    """The receiver's publisher: keeps every decoded span by trace id."""

    def __init__(self) -> None:
        self._spans: dict[str, list[VigilSpan]] = {}
        self._lock = threading.Condition()

    def publish(self, batches: Sequence[TraceBatch]) -> None:
        with self._lock:
            for b in batches:
                self._spans.setdefault(b.trace_id, []).extend(b.spans)
            self._lock.notify_all()

    def take(self, trace_ids: Iterable[str], timeout_s: float) -> dict[str, list[VigilSpan]]:
        """The spans of ``trace_ids``, waiting up to ``timeout_s`` for each to have a root span that ended."""
        wanted = set(trace_ids)
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                if all(_has_root(self._spans.get(t, ())) for t in wanted):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(left)
            found = {t: self._spans.pop(t, []) for t in wanted}
        # an agent that adds its own exporter to the same provider sends every span twice
        return {t: list({s.span_id: s for s in spans}.values()) for t, spans in found.items()}


def _has_root(spans: Iterable[VigilSpan]) -> bool:
    return any(s.parent_span_id is None and s.end_ns for s in spans)


@dataclass(frozen=True)
class RunOptions:
    """How ``vigil eval run`` runs: concurrency, repeats, the per-turn wait for spans."""

    concurrency: int = 4
    repeat: int = 1
    span_timeout_s: float = 10.0


class EvalHarness:
    """The in-process Vigil an agent's spans are exported to. Use as a context manager.

    Args:
        pipeline: the configured normalise → score → decide pipeline (``Scoring.pipeline``).
        service_name: ``service.name`` of the provider the harness installs when none is set.
    """

    def __init__(self, pipeline: Pipeline, *, service_name: str = "vigil-eval") -> None:
        self.pipeline = pipeline
        self._capture = _Capture()
        self._tagger = _Tagger()
        self._service = service_name
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vigil-eval-receiver", daemon=True)
        self._server: HttpServer | None = None
        self.endpoint = ""
        self.provider: TracerProvider | None = None
        self._processors: _Switchable | None = None
        self._env: dict[str, str | None] = {}
        self._active = 0
        self._active_lock = threading.Lock()

    def __enter__(self) -> EvalHarness:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the receiver, point the global tracer provider (and the OTLP variables) at it."""
        app = create_otlp_app(
            self._capture, CollectorMetrics(CollectorRegistry()), max_body_bytes=64 << 20, retry_after_s=1
        )
        port = free_port()
        self._thread.start()
        self._server = HttpServer(app, "127.0.0.1", port, self._loop, stop_grace_s=1.0)
        self._server.start()
        if not self._server.wait_listening():
            raise RuntimeError(f"the eval receiver could not listen on 127.0.0.1:{port}")
        self.endpoint = f"http://127.0.0.1:{port}"
        current = otel_trace.get_tracer_provider()
        if isinstance(current, TracerProvider):
            self.provider = current
        else:
            self.provider = TracerProvider(resource=Resource.create({"service.name": self._service}))
            otel_trace.set_tracer_provider(self.provider)
        export = BatchSpanProcessor(
            OTLPSpanExporter(endpoint=self.endpoint + "/v1/traces"),
            schedule_delay_millis=200,
            max_export_batch_size=512,
        )
        self._processors = _Switchable(self._tagger, export)
        self.provider.add_span_processor(self._processors)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """While inside: ``OTEL_EXPORTER_OTLP_*`` point at this Vigil and ``vigil_setup()`` joins its
        provider (an agent module that sets itself up at import is imported inside). Reentrant."""
        with self._active_lock:
            self._active += 1
            if self._active == 1:
                for key, value in (
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", self.endpoint),
                    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", self.endpoint + "/v1/traces"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                ):
                    self._env[key] = os.environ.get(key)
                    os.environ[key] = value
                join_eval_harness(self.provider)
        try:
            yield
        finally:
            with self._active_lock:
                self._active -= 1
                if self._active == 0:
                    join_eval_harness(None)
                    for key, previous in self._env.items():
                        if previous is None:
                            os.environ.pop(key, None)
                        else:
                            os.environ[key] = previous
                    self._env.clear()

    def shutdown(self) -> None:
        """Flush and stop the receiver."""
        if self._processors is not None:
            self._processors.detach()
        if self._server is not None:
            self._server.shutdown(5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)

    # -- running ------------------------------------------------------------------------------

    async def run_async(
        self,
        eval_set: EvalSet,
        agent: Agent,
        config: EvalConfig,
        *,
        options: RunOptions = RunOptions(),
        judge: EvalJudge | None = None,
        on_result: Callable[[CaseResult], None] | None = None,
    ) -> list[CaseResult]:
        """Run every case with a conversation ``options.repeat`` times, score each; results in case order.

        On the caller's event loop; :meth:`run` is the blocking form (same arguments, on a new loop).
        """
        gate = asyncio.Semaphore(options.concurrency)
        cases = [c for c in eval_set.eval_cases if c.turns]

        async def one(case: EvalCase, repeat: int) -> CaseResult:
            async with gate:
                turns, error = await self._run_case(eval_set.eval_set_id, case, agent, options)
            result = await asyncio.to_thread(
                evaluate_case,
                case,
                turns,
                config,
                eval_set_id=eval_set.eval_set_id,
                judge=judge,
                error=error,
                repeat=repeat,
            )
            if on_result is not None:
                on_result(result)
            return result

        jobs = [one(case, r) for r in range(options.repeat) for case in cases]
        with self.active():
            return list(await asyncio.gather(*jobs))

    run = _blocking(run_async)

    async def _run_case(
        self, set_id: str, case: EvalCase, agent: Agent, options: RunOptions
    ) -> tuple[list[ActualTurn], str | None]:
        conversation_id = uuid.uuid4().hex
        history: list[dict[str, str]] = []
        turns: list[ActualTurn] = []
        takes_history = _takes_history(agent)
        for n, expected in enumerate(case.turns):
            message = expected.user_text
            tags: dict[str, str | int] = {
                CASE_ID: case.eval_id,
                EVAL_SET_ID: set_id,
                TURN: n,
                CONVERSATION_ID: conversation_id,
            }
            turn = _Turn(tags)
            args: tuple[Any, ...] = (message, list(history)) if takes_history else (message,)
            error = None
            returned: Any = None
            token = _TAGS.set(turn)
            try:
                if _is_async(agent):
                    returned = await agent(*args)
                else:
                    returned = await asyncio.to_thread(agent, *args)
                    if inspect.isawaitable(returned):
                        returned = await returned
            except Exception as exc:  # noqa: BLE001 - the agent's failure is the case's result, not ours
                error = f"turn {n + 1}: the agent raised {type(exc).__name__}: {exc}"[:500]
            finally:
                _TAGS.reset(token)
            actual = await asyncio.to_thread(self._collect, turn, message, options.span_timeout_s)
            if not actual.response and isinstance(returned, str):
                actual = replace(actual, response=returned)
            turns.append(actual)
            if error is not None:
                return turns, error
            if not turn.traces:
                return turns, f"turn {n + 1}: no span was started while the agent ran (is it instrumented?)"
            history += [{"role": "user", "content": message}, {"role": "assistant", "content": actual.response}]
        return turns, None

    def _collect(self, turn: _Turn, message: str, timeout_s: float) -> ActualTurn:
        """Flush the export, wait for the turn's traces, and read the turn from their runs."""
        if self._processors is not None:
            self._processors.force_flush()
        found = self._capture.take(turn.traces, timeout_s)
        self._tagger.forget(turn.traces)
        runs = []
        for spans in found.values():
            if spans:
                run = normalise(
                    spans, complete=_has_root(spans), detector=self.pipeline.detector, sessions=self.pipeline.sessions
                )
                runs.append(self.pipeline.decide_run(run).run)
        return merge_turn(runs, message)


def _is_async(agent: Agent) -> bool:
    """An ``async def`` function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(type(agent).__dict__.get("__call__"))


def _takes_history(agent: Agent) -> bool:
    try:
        params = list(inspect.signature(agent).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


def merge_turn(runs: Sequence[Run], message: str = "") -> ActualTurn:
    """One turn from the runs (traces) it produced, in start order: tool calls joined, the answer of the
    last trace that captured one (an empty answer included: an earlier trace's never stands in for it)."""
    ordered = sorted(runs, key=lambda r: r.start_ns)
    if not ordered:
        return ActualTurn(message)
    turns = [turn_of(r) for r in ordered]
    response = next((r.final_output for r in reversed(ordered) if r.final_output is not None), "")
    calls = tuple(c for t in turns for c in t.tool_calls)
    return ActualTurn(
        turns[0].user_text or message,
        calls,
        response,
        ordered[0].trace_id,
        steps=sum(t.steps for t in turns),
        tokens=sum(t.tokens for t in turns),
        latency_ms=max(0, max(r.end_ns for r in ordered) - ordered[0].start_ns) / 1e6,
        tool_errors=sum(t.tool_errors for t in turns),
        system_prompt=next((t.system_prompt for t in turns if t.system_prompt), ""),
    )


def score_traces(
    paths: Iterable[Path],
    sets: Sequence[EvalSet],
    config: EvalConfig,
    pipeline: Pipeline,
    judge: EvalJudge | None = None,
) -> list[CaseResult]:
    """Score already captured traces against ``sets`` (matched by ``vigil.eval.case_id``, else first message).

    Cases with no matching trace are reported as errors.

    Raises:
        vigil.explain.ExplainError: a file is not OTLP.
        FileNotFoundError: a path does not exist.
    """
    runs = []
    for spans in load_traces(paths).values():
        run = normalise(spans, complete=_has_root(spans), detector=pipeline.detector, sessions=pipeline.sessions)
        runs.append(pipeline.decide_run(run).run)
    grouped = group_by_case(runs)
    index = case_index(sets)
    for run in runs:
        if CASE_ID in run.attributes:
            continue
        found = match_run(index, run)
        if found is not None and found.turn == 0:
            grouped.setdefault(found.case.eval_id, []).append(run)
    results = []
    for s in sets:
        for case in s.eval_cases:
            if not case.turns:
                continue
            mine = grouped.get(case.eval_id, [])
            error = None if mine else f"no trace carries {CASE_ID}={case.eval_id!r} or its first user message"
            turns = [turn_of(r) for r in mine]
            results.append(evaluate_case(case, turns, config, eval_set_id=s.eval_set_id, judge=judge, error=error))
    return results


def judge_from(config: EvalConfig, environ: Mapping[str, str]) -> EvalJudge | None:
    """The judge of the config's judged criteria, or None when there are none.

    Raises:
        ValueError: judged criteria but no ``judge`` section, or its ``api_key_env`` is not set.
    """
    if not config.judged:
        return None
    if config.judge is None:
        raise ValueError(f"criteria {', '.join(config.judged)} need a 'judge' section in the eval config")
    key = "unused"
    if config.judge.api_key_env:
        key = environ.get(config.judge.api_key_env, "")
        if not key:
            raise ValueError(f"judge.api_key_env: environment variable {config.judge.api_key_env} is not set")
    return EvalJudge(config.judge, key)


@contextlib.contextmanager
def judge_closed(judge: EvalJudge | None) -> Iterator[None]:
    """Close ``judge`` (from :func:`judge_from`; None: nothing to close) when the block is left."""
    try:
        yield
    finally:
        if judge is not None:
            judge.close()


_shared: dict[str, EvalHarness] = {}
_shared_lock = threading.Lock()


def shared_harness() -> EvalHarness:
    """One harness per process (the global tracer provider is set once), started on first use and
    stopped at exit; its pipeline is the default configuration (``vigil.yaml`` if present)."""
    with _shared_lock:
        if "harness" not in _shared:
            import atexit

            from vigil.scoring import Scoring
            from vigil.settings import Settings

            settings = Settings.load(overrides={"eval_sets": ()})
            harness = EvalHarness(Scoring.from_settings(settings).pipeline(None, None))
            harness.start()
            atexit.register(harness.shutdown)
            _shared["harness"] = harness
        return _shared["harness"]
