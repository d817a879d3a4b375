"""Memory in bytes: one limit (``VIGIL_MEMORY_LIMIT_MB``) split into a byte budget per structure.

Every structure that holds spans (or what was made of them) between the intake and the store is
bounded by bytes, not by a count of records or runs: a run of a few spans and a run carrying
kilobytes of captured prompts per span differ a hundredfold in memory. :meth:`MemoryBudgets.from_limit`
splits the limit into one share per structure (see :data:`SHARES`); the rest of the limit is left
to the interpreter, the libraries, the store's caches and the allocator's slack, which the
shares do not count.

What is counted is an **estimate**, computed once when the spans are decoded and then carried
with them (:attr:`collector.model.TraceBatch.size`): a batch's share of the decompressed body
plus :data:`SPAN_OVERHEAD_BYTES` per span, the measured cost of the Python objects a decoded span
is made of beyond its wire bytes (``tracemalloc`` over synthetic agent runs, with and without
1–2 KB of message content per LLM span: 430 bytes a span). Nothing walks objects with
``sys.getsizeof``: adding and subtracting a number is all a structure does per record.

Each structure keeps a :class:`ByteAccount` (bytes held, its budget); :class:`MemoryMetrics`
publishes every account as ``vigil_memory_held_bytes{structure}`` (read at scrape time) and
``vigil_memory_budget_bytes{structure}``. What a structure does when its budget is spent is its
own (the in-process stream refuses with 503 + Retry-After, the assembler closes early the runs
whose root has ended and, when that is not enough, raises a :class:`Pressure` the stream refuses on,
the late-span cache evicts its oldest run, a judge queue drops the run, the spool refuses), and each
counts it in its own metric.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from prometheus_client import CollectorRegistry, Gauge

from collector.model import TraceBatch

__all__ = [
    "SHARES",
    "SPAN_OVERHEAD_BYTES",
    "STRUCTURES",
    "ByteAccount",
    "MemoryBudgets",
    "MemoryMetrics",
    "Pressure",
    "Structure",
    "batch_bytes",
    "span_bytes",
]

SPAN_OVERHEAD_BYTES = 512
"""Bytes a decoded span costs beyond its wire size (its objects, dicts and strings' headers)."""

Structure = Literal["intake", "stream", "inflight", "late", "judge", "spool", "details"]
STRUCTURES: tuple[Structure, ...] = ("intake", "stream", "inflight", "late", "judge", "spool", "details")
"""The ``structure`` label values, one per field of :class:`MemoryBudgets`."""

SHARES: dict[Structure, float] = {
    "intake": 0.25,
    "stream": 0.025,
    "inflight": 0.06,
    "late": 0.04,
    "judge": 0.02,
    "spool": 0.03,
    "details": 0.03,
}
"""The fraction of the memory limit each structure may hold (45.5 % in all; see :class:`MemoryBudgets`)."""


def span_bytes(body_bytes: int, spans: int) -> int:
    """The estimated memory of one span decoded from a body of ``body_bytes`` holding ``spans`` spans."""
    return SPAN_OVERHEAD_BYTES + (body_bytes // spans if spans > 0 else 0)


def batch_bytes(batch: TraceBatch) -> int:
    """The memory estimate of ``batch``: its :attr:`~collector.model.TraceBatch.size`, or
    :data:`SPAN_OVERHEAD_BYTES` per span when the batch was not built by a decoder."""
    return batch.size or SPAN_OVERHEAD_BYTES * len(batch.spans)


@dataclass(frozen=True, slots=True)
class MemoryBudgets:
    """The byte budget of each structure; 0 means unbounded (the limit is off).

    Attributes:
        intake: request bodies being read, inflated and decoded by the receivers (25 %; reserved
            here, enforced by the receivers' admission).
        stream: records waiting in the in-process stream for the worker (2.5 %): a few seconds of
            traffic at the highest rate the worker sustains (25 MiB at the default limit: ~60
            bodies of 250 heavy-content spans, ~4 s of the worker's work on the development
            machine); when spent, publishes are refused with 503 + Retry-After. Half the earlier
            5 %: the worker was never starved for it, and the 4-connection heavy flood's peak RSS
            is about 20–30 MB lower; it waited until the runs of refused bodies were kept for their
            retries (:mod:`collector.owed`), as a smaller stream refuses more (BENCHMARKS.md,
            sessions 11 and 12).
        inflight: spans of runs being assembled (6 %): runs waiting for their quiet period, and
            runs whose root has not arrived; when spent, the assembler closes the runs whose root
            has ended before their quiet period is over (complete), then force-closes runs whose
            spans stopped coming, and, when it is still spent, raises its :class:`Pressure`: the
            in-process stream refuses new bodies (503 + Retry-After) until it is back within
            budget (:mod:`scorers.assemble`). The state file saved at a clean stop holds these and
            the late cache, so it stays within ``inflight + late``. 4 % (with the late cache at 1.5 %)
            cut the 4-connection heavy flood's peak RSS by ~40 MB, but one round in seven with runs
            dealt over the connections then dropped late spans (BENCHMARKS.md, "session 16").
        late: spans of recently scored runs kept to merge late spans into (4 %); when spent, the
            oldest run is forgotten, or, while spans are seen coming late, packed to an eighth of its
            size (:mod:`scorers.assemble`).
        judge: scored runs queued for the LLM judges (2 %); when spent, a run selected for a
            judge is dropped and counted.
        spool: bodies accepted by the spool but not yet written to its segment file (3 %);
            when spent, the spool refuses with 503 + Retry-After. (Its disk budget is
            ``VIGIL_SPOOL_MAX_MB``.)
        details: scored runs waiting for the run-details writer (3 %); when spent, the batch's
            details are not written, counted in ``vigil_run_details_dropped_total``.
    """

    intake: int = 0
    stream: int = 0
    inflight: int = 0
    late: int = 0
    judge: int = 0
    spool: int = 0
    details: int = 0

    @classmethod
    def from_limit(cls, limit_bytes: int) -> MemoryBudgets:
        """Split ``limit_bytes`` by :data:`SHARES`; a limit of 0 (or less) leaves every budget unbounded.

        With the default limit of 1,024 MiB: intake 256 MiB, stream 25 MiB, in flight 61 MiB,
        late cache 40 MiB, judges 20 MiB, spool 30 MiB, details writer 30 MiB (rounded down).
        """
        if limit_bytes <= 0:
            return cls()
        return cls(**{name: int(limit_bytes * share) for name, share in SHARES.items()})

    def of(self, structure: Structure) -> int:
        """The budget of ``structure`` in bytes (0: unbounded)."""
        value: int = getattr(self, structure)
        return value

    def items(self) -> list[tuple[Structure, int]]:
        """``(structure, budget)`` pairs in :data:`STRUCTURES` order."""
        return [(f.name, getattr(self, f.name)) for f in fields(self)]  # type: ignore[misc]


class ByteAccount:
    """The bytes one structure holds against its budget. Cheap: an integer added to and subtracted from.

    Not locked: each structure updates its account under its own lock (or from its one thread);
    readers (the metrics scrape) may see a value a few updates old.

    Args:
        budget: the byte budget; 0 means unbounded (:meth:`fits` always true, :meth:`over` false).
    """

    __slots__ = ("budget", "held")

    def __init__(self, budget: int = 0) -> None:
        if budget < 0:
            raise ValueError(f"a byte budget cannot be negative, got {budget}")
        self.budget = budget
        self.held = 0

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes stay within the budget."""
        return not self.budget or self.held + size <= self.budget

    def over(self) -> bool:
        """Whether the bytes held exceed the budget."""
        return bool(self.budget) and self.held > self.budget

    def add(self, size: int) -> None:
        """Count ``size`` more bytes held."""
        self.held += size

    def sub(self, size: int) -> None:
        """Count ``size`` bytes released."""
        self.held -= size


class Pressure:
    """A flag a structure raises while it holds more than its caps and cannot shed without mangling
    what it holds (the assembler: runs still receiving spans); the intake refuses new bodies while it
    is raised, so that the senders' retries carry the data until there is room.

    Raised and lowered by one thread (the structure's), read by others (the receivers' admission):
    a plain attribute, a reader may act on a value one update old.

    Attributes:
        raised: whether the structure asks the intake to refuse now.
    """

    __slots__ = ("raised",)

    def __init__(self) -> None:
        self.raised = False


class MemoryMetrics:
    """``vigil_memory_held_bytes{structure}`` and ``vigil_memory_budget_bytes{structure}`` on one registry.

    Args:
        registry: where both gauges are registered.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.held = Gauge(
            "vigil_memory_held_bytes",
            "Estimated bytes held by each bounded structure (read at scrape time).",
            ["structure"],
            registry=registry,
        )
        self.budget = Gauge(
            "vigil_memory_budget_bytes",
            "Byte budget of each bounded structure (0: unbounded), from VIGIL_MEMORY_LIMIT_MB.",
            ["structure"],
            registry=registry,
        )

    def bind(self, structure: Structure, account: ByteAccount) -> None:
        """Publish ``account`` under ``structure``: its bytes held at scrape time, and its budget."""
        self.held.labels(structure).set_function(lambda: float(account.held))
        self.budget.labels(structure).set(account.budget)

    def budgets(self, budgets: MemoryBudgets) -> None:
        """Publish every budget (structures this process does not run show their budget and nothing held)."""
        for structure, value in budgets.items():
            self.budget.labels(structure).set(value)
            self.held.labels(structure)
