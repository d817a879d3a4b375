"""Fakes of the kafka-python clients, for unit tests (the real broker is :mod:`vigil.bench.broker`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class FakeFuture:
    """A produce future whose outcome the test decides (:meth:`succeed` / :meth:`fail`).

    Args:
        acked: already acknowledged: a callback added runs at once (as kafka-python's does).
    """

    def __init__(self, acked: bool = False) -> None:
        self._callbacks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._errbacks: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self._acked = acked

    def add_callback(self, fn: Callable[..., Any], *args: Any) -> FakeFuture:
        """Call ``fn(*args, metadata)`` on success (at once when already acknowledged)."""
        if self._acked:
            fn(*args, None)
            return self
        self._callbacks.append((fn, args))
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any) -> FakeFuture:
        """Call ``fn(*args, exc)`` on failure."""
        self._errbacks.append((fn, args))
        return self

    def succeed(self) -> None:
        """Acknowledge the record."""
        for fn, args in self._callbacks:
            fn(*args, None)

    def fail(self, exc: BaseException) -> None:
        """Fail the record."""
        for fn, args in self._errbacks:
            fn(*args, exc)


class FakeProducer:
    """Records ``send`` calls like ``KafkaProducer``; the test resolves the futures.

    Attributes:
        sent: ``(topic, key, value, future)`` per record, in order.
        options: the keyword options it was built with.
        fail_sends: when set, ``send`` raises it.
        ack_on_send: acknowledge each record as soon as it is sent (a broker that answers at once).
    """

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.sent: list[tuple[str, bytes | None, bytes, FakeFuture]] = []
        self.fail_sends: BaseException | None = None
        self.ack_on_send = False
        self.closed = False

    def send(self, topic: str, value: bytes, key: bytes | None = None) -> FakeFuture:
        """Queue one record."""
        if self.fail_sends is not None:
            raise self.fail_sends
        future = FakeFuture(acked=self.ack_on_send)
        self.sent.append((topic, key, value, future))
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Acknowledge every record."""
        for *_, future in self.sent:
            future.succeed()

    def close(self, timeout: float | None = None) -> None:
        """Mark closed."""
        self.closed = True


@dataclass(frozen=True)
class FakeRecord:
    """A consumed record (``offset``, ``value``, ``key``)."""

    offset: int
    value: bytes
    key: bytes | None = None


@dataclass(frozen=True)
class FakeTopicPartition:
    """Stand-in of ``kafka.TopicPartition``."""

    topic: str
    partition: int


class FakeConsumer:
    """A ``KafkaConsumer`` stand-in over in-memory partitions, with a group of one.

    ``subscribe`` assigns every partition (calling the listener); ``poll`` returns records
    from the positions of unpaused partitions; ``commit`` records what was committed.

    Attributes:
        log: per partition, the values appended with :meth:`append`.
        commits: every ``commit`` call's ``{partition: offset}``.
    """

    def __init__(self, partitions: int = 1, topic: str = "otlp_spans", **options: Any) -> None:
        self.options = options
        self.topic = topic
        self.tps = [FakeTopicPartition(topic, p) for p in range(partitions)]
        self.log: dict[FakeTopicPartition, list[bytes]] = {tp: [] for tp in self.tps}
        self.keys: dict[FakeTopicPartition, list[bytes | None]] = {tp: [] for tp in self.tps}
        self.position: dict[FakeTopicPartition, int] = dict.fromkeys(self.tps, 0)
        self.paused_set: set[FakeTopicPartition] = set()
        self.commits: list[dict[int, int]] = []
        self.listener: Any = None
        self.closed = False

    def append(self, partition: int, value: bytes, key: bytes | None = None) -> None:
        """Produce ``value`` (with ``key``) to ``partition``."""
        self.log[self.tps[partition]].append(value)
        self.keys[self.tps[partition]].append(key)

    def subscribe(self, topics: list[str], listener: Any = None) -> None:
        """Join the one-member group: every partition is assigned at once."""
        self.listener = listener
        if listener is not None:
            listener.on_partitions_assigned(list(self.tps))

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[FakeTopicPartition, list[FakeRecord]]:
        """Records from each unpaused partition's position on (up to ``max_records`` each)."""
        out: dict[FakeTopicPartition, list[FakeRecord]] = {}
        for tp in self.tps:
            if tp in self.paused_set:
                continue
            start = self.position[tp]
            values = self.log[tp][start : start + (max_records or 10**9)]
            if values:
                keys = self.keys[tp]  # values written straight into ``log`` have no key
                out[tp] = [
                    FakeRecord(start + i, v, keys[start + i] if start + i < len(keys) else None)
                    for i, v in enumerate(values)
                ]
                self.position[tp] = start + len(values)
        return out

    def commit(self, offsets: dict[Any, Any]) -> None:
        """Record a synchronous commit."""
        self.commits.append({tp.partition: meta.offset for tp, meta in offsets.items()})

    commit_async = commit

    def seek(self, tp: FakeTopicPartition, offset: int) -> None:
        """Read ``tp`` from ``offset`` on next."""
        self.position[tp] = offset

    def assignment(self) -> set[FakeTopicPartition]:
        """Every partition."""
        return set(self.tps)

    def pause(self, *tps: FakeTopicPartition) -> None:
        """Stop returning records of ``tps``."""
        self.paused_set.update(tps)

    def resume(self, *tps: FakeTopicPartition) -> None:
        """Return records of ``tps`` again."""
        self.paused_set.difference_update(tps)

    def paused(self) -> set[FakeTopicPartition]:
        """The paused partitions."""
        return set(self.paused_set)

    def highwater(self, tp: FakeTopicPartition) -> int:
        """The partition's log end."""
        return len(self.log[tp])

    def close(self, autocommit: bool = False) -> None:
        """Mark closed."""
        self.closed = True

    def committed_offset(self, partition: int) -> int | None:
        """The last committed offset of ``partition``."""
        found = [c[partition] for c in self.commits if partition in c]
        return found[-1] if found else None
