"""Admission of OTLP/HTTP requests to the intake budget (:mod:`collector.admission`)."""

from __future__ import annotations

import asyncio

import pytest

from collector.admission import COMPRESSION_ESTIMATE, Admission, admission_bytes, refuse_at_once
from collector.limits import IntakeBudget

LIMIT = 20 * 1024 * 1024


@pytest.mark.parametrize(
    ("declared", "compressed", "expected"),
    [
        (1000, False, 1000),
        (1000, True, 1000 * COMPRESSION_ESTIMATE),
        (LIMIT // 2, True, LIMIT),
        (-1, False, LIMIT),
        (-1, True, LIMIT),
        (0, True, 0),
    ],
)
def test_admission_bytes(declared: int, compressed: bool, expected: int) -> None:
    """The Content-Length of a plain body, the estimate of a compressed one, the limit without one."""
    assert expected == admission_bytes(declared, compressed, LIMIT)


@pytest.mark.parametrize(
    ("size", "ahead", "waiting", "expected"),
    [
        (70, 0, 0, False),  # first in line: waits for the ones in flight
        (70, 70, 1, True),  # the one ahead fills the budget with it: it cannot fit soon
        (10, 70, 1, False),
        (500, 0, 0, False),  # larger than the budget: passes alone, so it may wait at the head
        (500, 1, 1, True),
        (1, 0, 4, True),  # the queue is full
    ],
)
def test_refuse_at_once(size: int, ahead: int, waiting: int, expected: bool) -> None:
    """Refused without waiting when the queue is full or the requests ahead fill the budget."""
    assert expected == refuse_at_once(size, ahead, waiting, budget=128, max_waiting=4)


def test_unlimited_budget_never_refuses() -> None:
    """A budget of 0 is no budget."""
    assert False is refuse_at_once(10**12, 10**12, 10**6, budget=0, max_waiting=0)


def _run(admission: Admission, intake: IntakeBudget, sizes: list[int], hold_s: float) -> list[bool | None]:
    """Admit ``sizes`` in this order, each holding its bytes for ``hold_s`` once admitted."""

    async def one(size: int) -> bool | None:
        reservation = intake.reservation()
        admitted = await admission.admit(reservation, size)
        if admitted is not None:
            await asyncio.sleep(hold_s)
        reservation.release()
        admission.wake()
        return admitted

    async def all_of() -> list[bool | None]:
        tasks = []
        for size in sizes:
            tasks.append(asyncio.create_task(one(size)))
            await asyncio.sleep(0)  # in arrival order
        return list(await asyncio.gather(*tasks))

    return asyncio.run(all_of())


def test_admitted_in_arrival_order_refused_when_the_line_is_full() -> None:
    """Budget 100, three of 70: the first at once, the second after the first, the third refused at
    once (the second would fill the budget with it); nothing stays reserved."""
    intake = IntakeBudget(100)
    assert [False, True, None] == _run(Admission(intake, wait_s=5), intake, [70, 70, 70], hold_s=0.05)
    assert 0 == intake.reserved


def test_a_small_request_does_not_overtake_a_waiting_large_one() -> None:
    """Budget 100: 60 in flight, 70 waits; a 10 arriving after it waits behind it (not admitted at once
    although it fits) and both are admitted once the first is done."""
    intake = IntakeBudget(100)
    assert [False, True, True] == _run(Admission(intake, wait_s=5), intake, [60, 70, 10], hold_s=0.05)


def test_wait_is_bounded() -> None:
    """A request that does not fit within ``wait_s`` is refused, and the queue is empty again."""
    intake = IntakeBudget(100)
    admission = Admission(intake, wait_s=0.1)
    assert [False, None] == _run(admission, intake, [70, 70], hold_s=0.5)
    assert 0 == admission.waiting
