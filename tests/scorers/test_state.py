"""Tests for scorers.state: saving and restoring the assembler across a clean restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.model import Span, TraceBatch
from scorers.assemble import Assembler
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
