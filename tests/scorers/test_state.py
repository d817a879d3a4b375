"""Tests for scorers.state: saving and restoring the assembler across a clean restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.model import Span, TraceBatch
from collector.otlp import decode_protobuf, encode_batch
from scorers.assemble import Assembler, ClosedTrace
from scorers.state import StateFileError, load_state, save_state
from tests.support.fixtures import Clock
from tests.support.spans import agent_run


def _batch(spans: list[Span] | tuple[Span, ...]) -> TraceBatch:
    return TraceBatch(spans[0].trace_id, tuple(spans), 0)


def _asm(clock: Clock) -> Assembler:
    return Assembler(quiet_period_s=2.0, max_idle_s=300.0, clock=clock)


def test_round_trip_resumes_unfinished_runs_and_late_span_cache(tmp_path: Path) -> None:
    """An unfinished run resumes with its spans; a scored run's late span re-scores the whole run."""
    path = tmp_path / "vigil.state"
    clock = Clock(0.0)
    before = _asm(clock)
    done = _batch(agent_run(llm_calls=1))
    before.add(done)
    clock.now = 10.0
    (closed,) = before.due()
    unfinished = _batch(agent_run(llm_calls=2))
    children = tuple(s for s in unfinished.spans if s.parent_span_id is not None)
    root = next(s for s in unfinished.spans if s.parent_span_id is None)
    before.add(_batch(children))
    assert (1, 1) == save_state(path, before)

    clock2 = Clock(0.0)
    after = _asm(clock2)
    assert (1, 1) == load_state(path, after)
    assert not path.exists()
    assert 1 == after.inflight
    after.add(_batch((root,)))
    clock2.now = 5.0
    (resumed,) = after.due()
    assert (unfinished.trace_id, True) == (resumed.trace_id, resumed.complete)
    assert {s.span_id for s in unfinished.spans} == {s.span_id for s in resumed.spans}

    late = Span(done.trace_id, "00000000000000ee", closed.spans[0].span_id, "execute_tool late", start_ns=1, end_ns=2)
    after.add(_batch((late,)))
    clock2.now = 10.0
    (rescored,) = after.due()
    assert rescored.rescore
    assert len(closed.spans) + 1 == len(rescored.spans)


def test_missing_file_is_empty_state(tmp_path: Path) -> None:
    """No file: nothing restored, no error."""
    assert (0, 0) == load_state(tmp_path / "absent", _asm(Clock(0.0)))


@pytest.mark.parametrize(
    "content", [b"not a state file", b"VIGILST1P\x00\x00\x00\x09abc", b"VIGILST1X\x00\x00\x00\x00"]
)
def test_bad_file_is_refused_and_kept(tmp_path: Path, content: bytes) -> None:
    """A foreign, truncated or corrupt file raises a clear error and is left for inspection."""
    path = tmp_path / "vigil.state"
    path.write_bytes(content)
    with pytest.raises(StateFileError, match=r"vigil\.state"):
        load_state(path, _asm(Clock(0.0)))
    assert path.exists()


def test_rootless_flood_state_file_stays_within_the_byte_budgets(tmp_path: Path) -> None:
    """Issue 20 finding 4: traces whose root never comes no longer pile up in the state file; it holds
    at most what the in-flight and late budgets allow (in wire bytes, fewer than the estimates count)."""
    path = tmp_path / "vigil.state"
    budget = 200_000
    asm = Assembler(
        quiet_period_s=2.0, max_idle_s=300.0, clock=Clock(0.0), inflight_bytes=budget, closed_cache_bytes=budget
    )
    content = "x" * 1500
    forced = 0
    for i in range(2000):
        trace_id = f"{i + 1:032x}"
        spans = tuple(
            Span(trace_id, f"{j + 2:016x}", "0" * 15 + "1", "chat", start_ns=1, end_ns=2, attributes={"m": content})
            for j in range(3)
        )
        payload = encode_batch(TraceBatch(trace_id, spans))
        (decoded,) = decode_protobuf(payload).batches  # sized as the receivers size it
        forced += len(asm.add(decoded))
    assert forced > 1900
    save_state(path, asm)
    assert path.stat().st_size <= 2 * budget
    after = Assembler(quiet_period_s=2.0, max_idle_s=300.0, clock=Clock(0.0), inflight_bytes=budget)
    taken: list[ClosedTrace] = []
    load_state(path, after, taken.extend)
    assert after.inflight_account.held <= budget


def test_loading_into_smaller_budgets_hands_the_excess_over(tmp_path: Path) -> None:
    """Runs a smaller budget cannot hold are force-closed at load and handed to ``on_forced`` to be written."""
    path = tmp_path / "vigil.state"
    before = _asm(Clock(0.0))
    for i in range(10):
        before.add(_batch([Span(f"{i + 1:032x}", "00000000000000a2", "00000000000000a1", "chat", end_ns=2)]))
    assert (10, 0) == save_state(path, before)
    after = Assembler(quiet_period_s=2.0, max_idle_s=300.0, clock=Clock(0.0), inflight_bytes=1)
    taken: list[ClosedTrace] = []
    assert (10, 0) == load_state(path, after, taken.extend)
    assert (1, 9) == (after.inflight, len(taken))
    assert all(not c.complete for c in taken)


def test_max_bytes_keeps_runs_in_flight_and_the_newest_closed_runs(tmp_path: Path) -> None:
    """The file is bounded: runs in flight are always written, the late-span cache fills the rest, newest first."""
    path = tmp_path / "vigil.state"
    clock = Clock(0.0)
    asm = _asm(clock)
    for i in range(20):
        asm.add(
            _batch([Span(f"{i + 1:032x}", "00000000000000a1", None, "root", end_ns=2, attributes={"m": "x" * 500})])
        )
    clock.now = 10.0
    assert 20 == len(asm.due())
    asm.add(_batch([Span("f" * 32, "00000000000000a2", "00000000000000a1", "child", end_ns=2)]))
    assert (1, 5) == save_state(path, asm, max_bytes=3500)
    assert path.stat().st_size <= 3500
    after = _asm(Clock(0.0))
    assert (1, 5) == load_state(path, after)
    in_flight, closed = after.export_state()
    assert ["f" * 32] == [b.trace_id for b in in_flight]
    assert [f"{i + 1:032x}" for i in range(15, 20)] == [b.trace_id for b in closed]
