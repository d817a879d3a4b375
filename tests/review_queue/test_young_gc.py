"""Tests for the periodic young-generation collection of the scoring processes (issue 8 memory)."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator

import pytest

from tests.support.fixtures import runs_until_shutdown, wait_until
from vigil.run import YoungCollector


class _Node:
    """An object in a reference cycle (only the cyclic collector frees it)."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def gc_disabled() -> Iterator[None]:
    """Automatic collection off (like GC_THRESHOLDS that are never reached), restored afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _garbage(n: int) -> list[weakref.ref[_Node]]:
    return [weakref.ref(_Node()) for _ in range(n)]


@pytest.mark.usefixtures("gc_disabled")
def test_cyclic_garbage_is_freed_without_thresholds_being_reached() -> None:
    """Cycles left behind are freed within a few intervals even though no automatic collection
    runs (the memory creep of the soak: garbage piling up between rare collections)."""
    refs = _garbage(1000)
    time.sleep(0.2)
    assert all(r() is not None for r in refs)  # nobody frees them on their own
    young = YoungCollector(0.05)
    young.start()
    try:
        wait_until(lambda: all(r() is None for r in refs), poll_s=0.05)
    finally:
        assert young.shutdown(5.0)
    assert all(r() is None for r in refs)


def test_collects_young_generations_until_stopped() -> None:
    """It collects generation 1 (0 and 1) periodically, and stops."""
    calls: list[int] = []
    young = YoungCollector(0.01, collect=lambda generation: calls.append(generation) or 0, trim=lambda: None)
    runs_until_shutdown(young, lambda: len(calls), 3)
    assert set(calls) == {1}


def test_trims_the_c_heap_after_each_collection() -> None:
    """Each tick collects, then gives the C allocator's free pages back (:func:`trim_malloc`)."""
    order: list[str] = []
    young = YoungCollector(
        0.01, collect=lambda generation: order.append(f"collect {generation}") or 0, trim=lambda: order.append("trim")
    )
    runs_until_shutdown(young, lambda: len(order), 6)
    pairs = len(order) // 2
    assert ["collect 1", "trim"] * pairs == order[: 2 * pairs]
