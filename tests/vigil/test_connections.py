"""Tests of vigil.connections' connection cap: which connections an idle flood over the cap costs."""

from __future__ import annotations

from dataclasses import dataclass, field

from vigil.connections import ConnectionGuard, ConnectionLimits


@dataclass(eq=False)
class _Transport:
    closed: bool = False

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


@dataclass(frozen=True, slots=True)
class _Cycle:
    """A request the app has (headers read, no body to come, no response yet)."""

    response_complete: bool = False
    more_body: bool = False


@dataclass(eq=False)
class _Connection:
    """What the guard reads of a uvicorn protocol: its transport and its request cycle (None: no request read)."""

    transport: _Transport = field(default_factory=_Transport)
    cycle: _Cycle | None = None


def _guard(cap: int, reasons: list[str]) -> ConnectionGuard:
    return ConnectionGuard(
        ConnectionLimits(header_timeout_s=60.0, max_connections=cap), reasons.append, clock=lambda: 0.0
    )


def test_a_client_accepted_with_a_flood_is_not_the_one_the_cap_closes() -> None:
    """A well-behaved client and a flood first seen in one sweep: its request may be unread in the socket
    buffer yet (no cycle), and closing it would reset it. The flood, still silent at the next sweep, is
    closed down to the cap then; the client, whose request was read meanwhile, never is."""
    reasons: list[str] = []
    guard = _guard(3, reasons)
    client = _Connection()
    flood = [_Connection() for _ in range(5)]
    assert 0 == guard.sweep([client, *flood])  # the client first: the order a set may iterate in
    assert not client.transport.closed
    client.cycle = _Cycle()  # the loop handed its request to the parser: the app has it
    assert 3 == guard.sweep([client, *flood])
    assert not client.transport.closed
    assert 3 == sum(c.transport.closed for c in flood)
    assert ["over_limit"] * 3 == reasons
    assert 0 == guard.sweep([client, *flood])  # at the cap


def test_the_cap_closes_the_longest_waiting_first() -> None:
    """Connections seen waiting by an earlier sweep go before later ones, whatever the iteration order."""
    reasons: list[str] = []
    clock = [0.0]
    guard = ConnectionGuard(
        ConnectionLimits(header_timeout_s=60.0, max_connections=4), reasons.append, clock=lambda: clock[0]
    )
    old = [_Connection() for _ in range(3)]
    assert 0 == guard.sweep(old)
    clock[0] = 0.2
    later = [_Connection() for _ in range(3)]
    assert 2 == guard.sweep([*later, *old])  # 6 over a cap of 4, but the later ones are new: only old ones go
    assert 2 == sum(c.transport.closed for c in old)
    assert not any(c.transport.closed for c in later)
    clock[0] = 0.4
    open_now = [c for c in [*later, *old] if not c.transport.closed]
    assert 0 == guard.sweep(open_now)  # at the cap: nothing more
    assert ["over_limit"] * 2 == reasons
