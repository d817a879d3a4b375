"""Tests of collector.lifecycle: start in order, shut down in reverse within one deadline."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from collector.lifecycle import (
    OS_THREAD_NAME_CHARS,
    Closing,
    Component,
    Components,
    Hooks,
    Periodic,
    Together,
    name_os_thread,
    os_thread_name,
)
from tests.support.fixtures import runs_until_shutdown


class Recorder:
    """A component that records its calls in a shared journal and stops as told."""

    def __init__(self, name: str, journal: list[str], *, clean: bool = True, takes_s: float = 0.0) -> None:
        self.name = name
        self.journal = journal
        self.clean = clean
        self.takes_s = takes_s
        self.timeouts: list[float] = []

    def start(self) -> None:
        self.journal.append(f"start {self.name}")

    def shutdown(self, timeout: float) -> bool:
        self.timeouts.append(timeout)
        self.journal.append(f"stop {self.name}")
        time.sleep(min(self.takes_s, timeout))
        return self.clean and self.takes_s <= timeout


def test_starts_in_order_and_stops_in_reverse() -> None:
    """One list: started front to back, shut down back to front, each with its own budget."""
    journal: list[str] = []
    c = Components()
    first = c.add("a", Recorder("a", journal), 1.0)
    c.add("b", Recorder("b", journal), 2.0)
    c.add("c", Recorder("c", journal))
    assert isinstance(first, Component)
    assert 3.0 == c.budget_s
    c.start()
    assert c.shutdown(10.0)
    assert ["start a", "start b", "start c", "stop c", "stop b", "stop a"] == journal
    assert [1.0] == first.timeouts
    assert {"a": True, "b": True, "c": True} == c.clean


def test_an_unclean_stop_is_reported_and_the_others_still_stop() -> None:
    """A component that fails or raises makes the result False; the rest are shut down anyway."""
    journal: list[str] = []

    def boom(_: float) -> bool:
        raise RuntimeError("boom")

    c = Components()
    c.add("a", Recorder("a", journal))
    c.add("b", Hooks(on_shutdown=boom))
    c.add("c", Recorder("c", journal, clean=False))
    c.start()
    assert not c.shutdown(5.0)
    assert {"a": True, "b": False, "c": False} == c.clean
    assert "stop a" == journal[-1]


def test_one_overall_deadline() -> None:
    """Components after a slow one get only what is left of the overall timeout."""
    journal: list[str] = []
    c = Components()
    last = c.add("last", Recorder("last", journal), 5.0)
    c.add("slow", Recorder("slow", journal, takes_s=0.3), 5.0)
    c.start()
    assert c.shutdown(0.5)
    assert last.timeouts[0] <= 0.25


def test_a_failed_start_stops_what_was_started() -> None:
    """Components started before the failure are shut down; the error propagates."""
    journal: list[str] = []

    def fail() -> None:
        raise ValueError("bad config")

    c = Components()
    c.add("a", Recorder("a", journal))
    c.add("b", Hooks(on_start=fail))
    c.add("c", Recorder("c", journal))
    with pytest.raises(ValueError, match="bad config"):
        c.start()
    assert ["start a", "stop a"] == journal


def test_names_are_unique() -> None:
    """The same name twice is a wiring mistake."""
    c = Components()
    c.add("a", Hooks())
    with pytest.raises(ValueError, match="twice"):
        c.add("a", Hooks())


def test_together_stops_members_at_the_same_time() -> None:
    """Members of a Together shut down side by side: the group takes the longest, not the sum."""
    journal: list[str] = []
    group = Together(Recorder("x", journal, takes_s=0.3), Recorder("y", journal, takes_s=0.3))
    group.start()
    began = time.monotonic()
    assert group.shutdown(2.0)
    assert time.monotonic() - began < 0.55
    assert not Together(Recorder("z", journal, clean=False)).shutdown(1.0)


def test_closing_closes() -> None:
    """Closing closes the resource at shutdown."""
    closed = threading.Event()

    class Resource:
        def close(self) -> None:
            closed.set()

    component = Closing(Resource())
    component.start()
    assert component.shutdown(0.0)
    assert closed.is_set()


def test_periodic_ticks_until_shut_down_and_survives_a_failing_tick() -> None:
    """Ticks every interval (the first at once when asked), goes on after a tick raises, stops."""
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) == 2:
            raise RuntimeError("one bad pass")

    runs_until_shutdown(Periodic("vigil-test", tick, 0.01, immediately=True), lambda: len(ticks), 4)
    assert Periodic("vigil-never-started", tick, 1.0).shutdown(0.0)


def _comm_of(thread: threading.Thread) -> str:
    return Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc are Linux's")
def test_a_named_thread_is_named_for_the_system_too() -> None:
    """``top -H`` tells Vigil's threads apart: the Python name without ``vigil-``, cut to 15 characters."""
    named = threading.Event()
    done = threading.Event()
    outcome: list[bool] = []

    def body() -> None:
        outcome.append(name_os_thread())
        named.set()
        done.wait(5)

    thread = threading.Thread(target=body, name="vigil-stream-worker-of-a-long-name")
    thread.start()
    try:
        assert named.wait(5)
        assert outcome == [True]
        assert _comm_of(thread) == "stream-worker-o"
    finally:
        done.set()
        thread.join(5)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names in /proc are Linux's")
def test_a_periodic_task_runs_on_a_named_thread() -> None:
    ticked = threading.Event()
    periodic = Periodic("vigil-upkeep", ticked.set, 0.01, immediately=True)
    periodic.start()
    try:
        assert ticked.wait(5)
        thread = next(t for t in threading.enumerate() if t.name == "vigil-upkeep")
        assert _comm_of(thread) == "upkeep"
    finally:
        assert periodic.shutdown(5)


def test_system_names_are_short_and_ascii() -> None:
    assert os_thread_name("vigil-details") == "details"
    assert os_thread_name("AnyIO worker thread") == "AnyIO worker th"
    assert os_thread_name("vigil-é") == "?"
    assert len(os_thread_name("x" * 40)) == OS_THREAD_NAME_CHARS
