"""Tests for scorers.worker and scorers.pipeline with fakes: flow, backpressure, isolation, drain."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from prometheus_client import CollectorRegistry

from collector.budget import Pressure
from collector.errors import BackpressureError
from collector.metrics import CollectorMetrics
from collector.model import Span, StatusCode, TraceBatch
from collector.stream import InProcessStream
from scorers.assemble import Assembler, ClosedTrace
from scorers.metrics import RunMetrics
from scorers.model import Run, Score, ScoredRun, WriteOutcome
from scorers.pipeline import Pipeline
from scorers.registry import build_chain
from scorers.rules import compile_rules
from scorers.worker import StreamWorker, chunks
from tests.support.fixtures import Clock, wait_until

ROOT = "0" * 15 + "1"


class ListSource:
    """A source fed by the test."""

    def __init__(self) -> None:
        self.items: list[TraceBatch] = []

    def get_many(self, max_items: int, timeout_s: float) -> list[TraceBatch]:
        out, self.items = self.items[:max_items], self.items[max_items:]
        return out


class FlakySink:
    """An idempotent in-memory sink that fails the first ``failures`` writes."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.rows: dict[str, ScoredRun] = {}
        self.flagged: set[str] = set()
        self.calls = 0
        self.sizes: list[int] = []  # runs per successful write

    def write(self, runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
        self.calls += 1
        if self.failures:
            self.failures -= 1
            raise BackpressureError(0.01)
        out = []
        for s in runs:
            tid = s.run.trace_id
            new_flag = s.flag is not None and tid not in self.flagged
            out.append(WriteOutcome(tid, tid not in self.rows, new_flag))
            self.rows[tid] = s
            if s.flag is not None:
                self.flagged.add(tid)
        self.sizes.append(len(runs))
        return out


def run_spans(trace: str, *, capped: bool = False) -> TraceBatch:
    attrs: dict[str, object] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}
    if capped:
        attrs["vigil.max_iterations_hit"] = True
    root = Span(trace, ROOT, None, "invoke_agent support", start_ns=1, end_ns=10**9, attributes=attrs)  # type: ignore[arg-type]
    llm = Span(
        trace, "0" * 15 + "2", ROOT, "chat gpt", start_ns=2, end_ns=3,
        attributes={"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5},
    )  # fmt: skip
    tool = Span(
        trace, "0" * 15 + "3", ROOT, "execute_tool search", start_ns=4, end_ns=5, status_code=StatusCode.ERROR,
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search", "error.type": "Timeout"},
    )  # fmt: skip
    return TraceBatch(trace, (tool, llm, root))


def boom(run: Run) -> Score | None:
    """A scorer that always crashes."""
    raise ZeroDivisionError("boom")


def make(
    sink: FlakySink, chain_names: Sequence[str] = ("tool_error_rate", "max_iterations_hit"), max_records: int = 512
) -> tuple:  # type: ignore[type-arg]
    from scorers.worker import StreamWorker

    registry = CollectorRegistry()
    metrics = RunMetrics(registry)
    clock = Clock(0.0)
    chain = (*build_chain(chain_names), ("boom", boom))
    pipeline = Pipeline(chain, compile_rules(None, chain_names), 0.0, on_error=metrics.error)
    source = ListSource()
    asm = Assembler(quiet_period_s=2.0, clock=clock, observer=metrics)
    worker = StreamWorker(
        source, asm, pipeline, sink, metrics, max_records=max_records, wall_clock_ns=lambda: 2 * 10**9
    )
    return worker, source, clock, registry


class TestFlow:
    """Records become scored, stored, counted runs."""

    def test_run_scored_stored_and_counted_once(self) -> None:
        """A capped run is written flagged high; counters move once even when re-delivered."""
        sink = FlakySink()
        worker, source, clock, registry = make(sink)
        trace = "a" * 32
        source.items.append(run_spans(trace, capped=True))
        assert 0 == worker.run_once()
        clock.now += 2.5
        assert 1 == worker.run_once()
        stored = sink.rows[trace]
        assert stored.flag is not None
        assert "high" == stored.flag.priority.value
        assert {"tool_error_rate": 1.0, "max_iterations_hit": 1.0} == dict(stored.scores)
        labels = {"agent": "support", "outcome": "limit_hit", "complete": "true"}
        assert 1.0 == registry.get_sample_value("vigil_runs_total", labels)
        assert 1.0 == registry.get_sample_value("vigil_flag_latency_seconds_count")
        # a redelivered copy of the same run after the closed cache forgot it: not counted again
        worker._assembler._closed.clear()
        source.items.append(run_spans(trace, capped=True))
        worker.run_once()
        clock.now += 2.5
        worker.run_once()
        assert 1.0 == registry.get_sample_value("vigil_runs_total", labels)
        assert 1.0 == registry.get_sample_value("vigil_flagged_runs_total", {"agent": "support", "priority": "high"})
        assert (1, 1) == (worker.new_runs, worker.new_flags)  # what vigil run logs at vigil_stopped

    def test_the_late_cache_age_is_read_at_scrape_time(self) -> None:
        """``vigil_late_cache_age_seconds``: 0 before a run is scored, then how long ago the run the late-span
        cache forgets next was scored."""
        worker, source, clock, registry = make(FlakySink())
        assert 0.0 == registry.get_sample_value("vigil_late_cache_age_seconds")
        source.items.append(run_spans("a" * 32))
        worker.run_once()
        clock.now += 2.5
        assert 1 == worker.run_once()
        clock.now += 30
        assert 30.0 == registry.get_sample_value("vigil_late_cache_age_seconds")

    def test_crashing_scorer_is_isolated_and_counted(self) -> None:
        """A scorer that raises is skipped, counted, and the run is still written."""
        sink = FlakySink()
        worker, source, clock, registry = make(sink)
        source.items.append(run_spans("b" * 32))
        worker.run_once()
        clock.now += 3
        worker.run_once()
        assert ("boom",) == sink.rows["b" * 32].scorer_errors
        assert 1.0 == registry.get_sample_value("vigil_scorer_errors_total", {"stage": "scorer", "name": "boom"})


class TestChunks:
    """Runs due together are scored and written a chunk at a time."""

    @staticmethod
    def closed(*sizes: int) -> list[ClosedTrace]:
        return [ClosedTrace(f"{i:032x}", (), True, size=size) for i, size in enumerate(sizes)]

    def test_cut_by_runs_and_bytes_in_order(self) -> None:
        """At most ``max_runs`` runs and ``max_bytes`` bytes a chunk; a run over ``max_bytes`` is alone."""
        runs = self.closed(10, 10, 10, 10, 10, 100, 5, 5)
        cut = chunks(runs, 3, 25)
        assert [[10, 10], [10, 10], [10], [100], [5, 5]] == [[r.size for r in c] for c in cut]
        assert runs == [r for c in cut for r in c]
        assert [[10, 10, 10], [10, 10, 100], [5, 5]] == [[r.size for r in c] for c in chunks(runs, 3, 10**9)]
        assert [] == chunks([], 3, 25)

    @staticmethod
    def ten_due_runs(sink: FlakySink) -> StreamWorker:
        """A worker writing to ``sink`` four runs a chunk, with ten runs ingested and all due."""
        worker, source, clock, _ = make(sink, max_records=4)
        source.items.extend(run_spans(f"{i:032x}") for i in range(10))
        for _ in range(3):
            worker.run_once()
        clock.now += 3
        return worker

    def test_due_runs_written_in_chunks(self) -> None:
        """Ten runs due in one tick are written as chunks of at most ``max_records`` runs, all of them."""
        sink = FlakySink()
        worker = self.ten_due_runs(sink)
        assert 10 == worker.run_once()
        assert [4, 4, 2] == sink.sizes
        assert 10 == len(sink.rows)

    def test_stopping_mid_tick_keeps_the_unwritten_chunks(self) -> None:
        """The store fails after the first chunk while the worker stops: that chunk counts as
        written and only the rest wait for the drain (nothing twice, nothing lost)."""
        sink = FlakySink()
        worker = self.ten_due_runs(sink)
        real_write = sink.write

        def first_then_fail(runs: Sequence[ScoredRun]) -> list[WriteOutcome]:
            if sink.sizes:
                worker._stop.set()  # the stop comes while the store is down
                raise BackpressureError(0.01)
            return real_write(runs)

        sink.write = first_then_fail  # type: ignore[method-assign]
        assert 4 == worker.run_once()
        pending = {c.trace_id for c in worker._pending_forced}
        assert 6 == len(pending)
        assert set() == pending & set(sink.rows)


class TestBackpressure:
    """An unavailable store pauses the worker; nothing is lost."""

    def test_retries_until_written(self) -> None:
        """Two failed writes are retried; the run lands once and errors are counted."""
        sink = FlakySink(failures=2)
        worker, source, clock, registry = make(sink)
        source.items.append(run_spans("c" * 32))
        worker.run_once()
        clock.now += 3
        assert 1 == worker.run_once()
        assert 3 == sink.calls
        assert ["c" * 32] == list(sink.rows)
        assert 2.0 == registry.get_sample_value("vigil_store_write_errors_total")
        assert worker.healthy


class TestShutdown:
    """SIGTERM drains."""

    def test_shutdown_writes_inflight_and_queued(self) -> None:
        """In-flight runs and records still in the source are scored and written."""
        sink = FlakySink()
        worker, source, _clock, _ = make(sink)
        source.items.append(run_spans("d" * 32))
        worker.run_once()
        source.items.append(run_spans("e" * 32))
        assert worker.shutdown(5.0)
        assert {"d" * 32, "e" * 32} == set(sink.rows)
        assert all(s.run.complete for s in sink.rows.values())

    def test_shutdown_with_save_keeps_unfinished_runs(self) -> None:
        """With ``save``, runs whose root ended are written; the others go to ``save``, unscored."""
        sink = FlakySink()
        worker, source, _clock, _ = make(sink)
        finished = run_spans("f" * 32)
        unfinished = TraceBatch("9" * 32, tuple(s for s in run_spans("9" * 32).spans if s.parent_span_id))
        source.items.extend([finished, unfinished])
        saved, save = _saver()
        assert worker.shutdown(5.0, save=save)
        assert {"f" * 32} == set(sink.rows)
        assert [["9" * 32]] == saved

    def test_stop_while_the_loop_retries_a_down_store_saves_its_runs(self) -> None:
        """SIGTERM while the worker thread backs off on a down store: its closed runs are saved, not lost.

        (The thread used to retry forever: ``shutdown`` timed out on the join and saved nothing.)
        """
        sink = FlakySink(failures=10_000)
        worker, source, clock, _ = make(sink)
        source.items.append(run_spans("6" * 32))
        _start_until_written(worker, clock, sink, calls=2)
        assert sink.calls >= 2
        saved, save = _saver()
        assert not worker.shutdown(1.0, save=save)
        assert [["6" * 32]] == saved

    def test_stop_while_the_store_recovers_writes_the_loops_runs(self) -> None:
        """Runs the loop could not write before the stop are written by the drain once the store is back."""
        sink = FlakySink(failures=3)
        worker, source, clock, _ = make(sink)
        source.items.append(run_spans("5" * 32))
        _start_until_written(worker, clock, sink, calls=1)
        saved, save = _saver()
        assert worker.shutdown(5.0, save=save)
        assert ["5" * 32] == list(sink.rows)
        assert [[]] == saved
        assert 1 == worker.new_runs

    def test_shutdown_writes_runs_evicted_by_the_last_records(self) -> None:
        """A run force-closed (in-flight cap) while the drain ingests the last records is written, not dropped."""
        sink = FlakySink()
        worker, source, _clock, _ = make(sink)
        worker._assembler._max_inflight = 1
        source.items.extend([run_spans("4" * 32), run_spans("3" * 32)])
        assert worker.shutdown(5.0)
        assert {"4" * 32, "3" * 32} == set(sink.rows)

    def test_shutdown_with_save_keeps_runs_the_store_refused(self) -> None:
        """When the store stays down past the deadline, finished runs are saved as unfinished work."""
        sink = FlakySink(failures=10_000)
        worker, source, _clock, _ = make(sink)
        source.items.append(run_spans("7" * 32))
        saved, save = _saver()
        assert not worker.shutdown(0.2, save=save)
        assert [["7" * 32]] == saved


def _saver() -> tuple[list[list[str]], Callable[[Assembler], None]]:
    """A ``save`` callback for ``shutdown`` and the trace ids of each state it was given."""
    saved: list[list[str]] = []
    return saved, lambda asm: saved.append([b.trace_id for b in asm.export_state()[0]])


def _start_until_written(worker: StreamWorker, clock: Clock, sink: FlakySink, calls: int) -> None:
    """Start the worker, let it close its run, and wait (5 s at most) for ``calls`` write attempts."""
    worker.start()
    _advance_when_ingested(worker, clock)
    wait_until(lambda: sink.calls >= calls, timeout_s=5)


def _advance_when_ingested(worker: StreamWorker, clock: Clock) -> None:
    """Once the worker thread assembles the run, move the clock past the quiet period."""
    wait_until(lambda: worker._assembler.inflight >= 1, timeout_s=5)
    clock.now += 3


class TestFeedbackLookup:
    """User feedback that arrived before the run reaches the rules."""

    def test_thumbs_down_flags_run(self) -> None:
        """A looked-up thumbs-down adds user_thumbs_down to the run's flag; others are untouched."""
        from scorers.worker import StreamWorker

        sink = FlakySink()
        worker, source, clock, _registry = make(sink)
        asked: list[list[str]] = []

        def lookup(trace_ids: Sequence[str]) -> dict[str, dict[str, object]]:
            asked.append(list(trace_ids))
            return {"f" * 32: {"count": 1, "thumbs_down": True}}

        worker = StreamWorker(source, worker._assembler, worker._pipeline, sink, worker._metrics, feedback=lookup)
        source.items.extend([run_spans("f" * 32, capped=True), run_spans("9" * 32)])
        worker.run_once()
        clock.now += 3
        assert 2 == worker.run_once()
        flag = sink.rows["f" * 32].flag
        assert flag is not None
        assert ("hit_max_iterations", "user_thumbs_down") == flag.reasons
        assert sink.rows["9" * 32].flag is None
        assert [sorted(["f" * 32, "9" * 32])] == [sorted(a) for a in asked]

    def test_lookup_outage_scores_without_feedback(self) -> None:
        """A lookup that raises BackpressureError does not stop the run from being written."""
        from scorers.worker import StreamWorker

        sink = FlakySink()
        worker, source, clock, _registry = make(sink)

        def lookup(trace_ids: Sequence[str]) -> dict[str, dict[str, object]]:
            raise BackpressureError(1.0)

        worker = StreamWorker(source, worker._assembler, worker._pipeline, sink, worker._metrics, feedback=lookup)
        source.items.append(run_spans("8" * 32))
        worker.run_once()
        clock.now += 3
        assert 1 == worker.run_once()
        assert ["8" * 32] == list(sink.rows)


class TestPressure:
    """The worker's assembler and the in-process stream share one Pressure (``vigil run``, issue 25 item 3):
    past the in-flight caps the intake refuses rather than a run still receiving spans being cut."""

    def make(self, sink: FlakySink) -> tuple[StreamWorker, InProcessStream, Clock, CollectorRegistry]:
        registry = CollectorRegistry()
        metrics = RunMetrics(registry)
        clock, pressure = Clock(0.0), Pressure()
        names = ("tool_error_rate", "max_iterations_hit")
        pipeline = Pipeline(build_chain(names), compile_rules(None, names), 0.0, on_error=metrics.error)
        stream = InProcessStream(100, 1.0, CollectorMetrics(registry), pressure=pressure)
        asm = Assembler(quiet_period_s=2.0, clock=clock, observer=metrics, max_inflight=2, pressure=pressure)
        return StreamWorker(stream, asm, pipeline, sink, metrics), stream, clock, registry

    def test_accepted_runs_are_scored_whole_while_the_cap_is_passed(self) -> None:
        """Three runs open against a cap of two: the pressure comes and goes with the roots already
        accepted; every run is written once, complete, with its spans."""
        sink = FlakySink()
        worker, stream, clock, registry = self.make(sink)
        runs = {t: run_spans(t, capped=True) for t in ("a" * 32, "b" * 32, "c" * 32)}
        stream.publish([TraceBatch(t, b.spans[:2]) for t, b in runs.items()])  # children first
        stream.publish([TraceBatch(t, b.spans[2:]) for t, b in runs.items()])  # then the roots
        worker.run_once()
        clock.now += 2.5
        worker.run_once()
        assert sorted(runs) == sorted(sink.rows)
        assert [(3, True, 1.0)] * 3 == [
            (s.run.span_count, s.run.complete, dict(s.scores)["max_iterations_hit"]) for s in sink.rows.values()
        ]
        assert 1.0 == registry.get_sample_value("vigil_assembler_events_total", {"event": "pressure_raised"})
        assert 0.0 == registry.get_sample_value("vigil_assembler_events_total", {"event": "evicted_inflight"})
        assert stream.pressure.raised is False

    def test_the_intake_refuses_until_runs_whose_spans_stopped_are_cut(self) -> None:
        sink = FlakySink()
        worker, stream, clock, registry = self.make(sink)
        stream.publish([TraceBatch(t, run_spans(t).spans[:2]) for t in ("a" * 32, "b" * 32, "c" * 32)])
        worker.run_once()
        assert (3, True) == (worker.assembler.inflight, stream.pressure.raised)
        with pytest.raises(BackpressureError):
            stream.publish([run_spans("d" * 32)])
        clock.now += 9.9
        assert 0 == worker.run_once()  # still fed recently: nothing cut, still refusing
        assert stream.pressure.raised
        clock.now += 0.2
        assert 1 == worker.run_once()  # idle for VIGIL_EVICT_IDLE_S: the least recently fed is cut
        assert (False, False) == (sink.rows["a" * 32].run.complete, stream.pressure.raised)
        stream.publish([run_spans("d" * 32)])
        assert 1.0 == registry.get_sample_value("vigil_assembler_events_total", {"event": "evicted_idle"})
        assert 3.0 == registry.get_sample_value("vigil_refused_total", {"stage": "stream", "reason": "inflight"})
