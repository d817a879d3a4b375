"""Tests for vigil.bench.heavy: the heavy-content workload is what its docstring says."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.lifecycle import name_os_thread
from vigil.bench.heavy import (
    MAIN_THREADS,
    HeavyResult,
    heavy_bodies,
    heavy_runs,
    sender_payloads,
    thread_shares,
    thread_split,
)
from vigil.cli import parser
from vigil.process import process_name, thread_cpu_seconds


def _attrs(span: object) -> dict[str, object]:
    out: dict[str, object] = {}
    for kv in span.attributes:  # type: ignore[attr-defined]
        value = kv.value
        out[kv.key] = value.string_value if value.HasField("string_value") else value.int_value
    return out


def test_runs_carry_content_and_their_truth() -> None:
    """Model spans carry up to 2 KB of captured input messages (1-2 KB once the history fills the window);
    caps end on a tool request and no answer; blocks on a content filter."""
    runs = heavy_runs(200, seed=3)
    assert 200 == len({r.trace_id for r in runs})
    assert 0 < sum(r.capped for r in runs) < 200
    assert 0 < sum(r.blocked for r in runs)
    sizes: list[int] = []
    for run in runs:
        chats = [s for s in run.spans if s.name.startswith("chat ")]
        assert chats
        for span in chats:
            messages = _attrs(span)["gen_ai.input.messages"]
            assert isinstance(messages, str)
            assert len(messages) <= 2048
            assert "system" == json.loads(messages)[0]["role"]
            sizes.append(len(messages))
        root = run.spans[-1]
        assert root.name.startswith("invoke_agent ")
        assert not root.parent_span_id
        reasons = [v.string_value for kv in chats[-1].attributes if kv.key == "gen_ai.response.finish_reasons"
                   for v in kv.value.array_value.values]  # fmt: skip
        if run.capped:
            assert ["tool_calls"] == reasons
            assert "gen_ai.output.messages" not in _attrs(root)
        elif run.blocked:
            assert ["content_filter"] == reasons
        else:
            assert ["stop"] == reasons
    assert 1024 <= sorted(sizes)[len(sizes) // 2]


def test_bodies_interleave_runs_children_before_roots() -> None:
    """Every span is sent once, 250 to a body, a run's root after its children, most runs across bodies."""
    runs = heavy_runs(300, seed=5)
    seen: dict[str, list[int]] = {}
    order: list[bytes] = []
    for index, data in enumerate(heavy_bodies(runs)):
        request = ExportTraceServiceRequest.FromString(data)
        spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
        assert len(spans) <= 250
        for span in spans:
            seen.setdefault(span.trace_id.hex(), []).append(index)
            order.append(span.span_id)
    assert sum(len(r.spans) for r in runs) == len(order) == len(set(order))
    assert {r.trace_id for r in runs} == set(seen)
    position = {span_id: i for i, span_id in enumerate(order)}
    for run in runs:
        root = run.spans[-1].span_id
        assert all(position[s.span_id] < position[root] for s in run.spans[:-1])
    split = sum(len(set(bodies)) > 1 for bodies in seen.values())
    assert split > len(runs) // 10


def _without_conversation(span: object) -> bytes:
    copy = type(span)()  # type: ignore[operator]
    copy.CopyFrom(span)
    kept = [kv for kv in copy.attributes if kv.key != "gen_ai.conversation.id"]
    del copy.attributes[:]
    copy.attributes.extend(kept)
    copy.start_time_unix_nano = copy.end_time_unix_nano = 0  # each call places its runs before "now"
    return bytes(copy.SerializeToString())


def test_session_turns_change_only_the_conversation_id() -> None:
    """``session_turns``: 1 gives every run its own id, K groups K consecutive runs, 0 leaves the id out;
    everything else is the same run (what sessions cost is measured as the difference)."""
    variants = {k: heavy_runs(30, seed=9, session_turns=k) for k in (0, 1, 4)}
    ids = {k: [_attrs(r.spans[-1]).get("gen_ai.conversation.id") for r in runs] for k, runs in variants.items()}
    assert [None] * 30 == ids[0]
    assert 30 == len(set(ids[1]))
    assert 8 == len(set(ids[4]))  # 30 runs: 7 sessions of 4 turns and one of 2
    assert all(ids[4][i] == ids[4][i - i % 4] for i in range(30))
    for runs in variants.values():
        assert all(r.spans[-1].name.startswith("invoke_agent ") for r in runs)
    for a, b in zip(variants[0], variants[4], strict=True):
        assert a.trace_id == b.trace_id
        assert [_without_conversation(s) for s in a.spans] == [_without_conversation(s) for s in b.spans]


def test_a_pinned_clock_gives_the_same_bytes() -> None:
    """With ``now_ns`` the generated runs are byte for byte the same on every call (what the instruction
    counts of scripts/pipeline_instr.py rely on); without it they end before the sender's clock."""
    first = [bytes(b) for b in heavy_bodies(heavy_runs(20, seed=4, now_ns=10**18))]
    assert first == [bytes(b) for b in heavy_bodies(heavy_runs(20, seed=4, now_ns=10**18))]
    assert first != [bytes(b) for b in heavy_bodies(heavy_runs(20, seed=4, now_ns=10**18 + 1))]


def test_server_settings_are_parsed_and_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """``--server-env VIGIL_NAME=VALUE`` reaches the measured vigil run; anything else is a usage error."""
    args = parser().parse_args(
        ["bench", "--heavy", "--server-env", "VIGIL_RETRY_AFTER_S=10", "--server-env", "VIGIL_SAMPLE_RATE=0"]
    )
    assert [("VIGIL_RETRY_AFTER_S", "10"), ("VIGIL_SAMPLE_RATE", "0")] == args.server_env
    with pytest.raises(SystemExit):
        parser().parse_args(["bench", "--heavy", "--server-env", "PATH=/tmp"])
    assert "expected VIGIL_NAME=VALUE" in capsys.readouterr().err


def test_late_dropped_reads_the_assemblers_late_evicted_spans() -> None:
    """The table's loss column is the server's ``late_evicted`` count (0 when the server never said)."""
    base = {"spans": 10, "runs": 1, "cpu_s": 1.0, "send_wall_s": 1.0, "peak_rss_mb": 1.0, "stored": 1, "complete": 1,
            "with_details": 1, "capped_truth": 0, "capped_stored": 0, "blocked_truth": 0, "blocked_stored": 0,
            "refused": 0}  # fmt: skip
    assert HeavyResult(**base, events={"late_evicted": 44135.0, "late_spans": 9.0}).late_dropped == 44135
    assert HeavyResult(**base).late_dropped == 0


def test_thread_split_names_the_main_threads_and_keeps_what_was_spent() -> None:
    """The server's CPU by thread over the measured span: differences, largest first, the process's own name
    (main thread, pools) reported as one row; threads that spent nothing (or started after) left out."""
    before = {"python": 2.0, "stream-worker": 0.5, "details": 0.25}
    after = {"python": 3.0, "stream-worker": 4.5, "details": 2.25, "young-gc": 0.0}
    split = thread_split(before, after, main="python")
    assert list(split) == ["stream-worker", "details", MAIN_THREADS]
    assert split == {"stream-worker": 4.0, "details": 2.0, MAIN_THREADS: 1.0}
    assert thread_shares(split) == f"stream-worker 57% · details 29% · {MAIN_THREADS} 14%"
    assert thread_shares(split, least=0.2) == "stream-worker 57% · details 29%"
    assert thread_shares({}) == ""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_thread_cpu_seconds_reads_each_named_thread_of_a_process() -> None:
    stop = threading.Event()

    def spin() -> None:
        name_os_thread()
        while not stop.is_set():
            sum(range(10_000))

    thread = threading.Thread(target=spin, name="vigil-bench-spin")
    thread.start()
    try:
        deadline = time.monotonic() + 10
        seen = 0.0
        while seen < 0.05 and time.monotonic() < deadline:
            seen = thread_cpu_seconds(os.getpid()).get("bench-spin", 0.0)
            time.sleep(0.02)
        assert seen >= 0.05
        assert process_name(os.getpid()) in thread_cpu_seconds(os.getpid())  # the main thread, by the process's name
    finally:
        stop.set()
        thread.join(5)


def _senders_of_runs(per_sender: list[list[bytes]]) -> dict[str, set[int]]:
    senders: dict[str, set[int]] = {}
    for sender, bodies in enumerate(per_sender):
        for data in bodies:
            request = ExportTraceServiceRequest.FromString(data)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        senders.setdefault(span.trace_id.hex(), set()).add(sender)
    return senders


def test_senders_share_one_stream_or_own_their_runs() -> None:
    """Dealt out in turn, most runs have spans on two connections; with ``own_runs`` each run is on one
    connection, the runs are shared out evenly, and every span is still sent once."""
    runs = heavy_runs(200, seed=7)
    dealt = sender_payloads(runs, 4)
    own = sender_payloads(runs, 4, own_runs=True)
    assert all(dealt)
    assert all(own)
    across = _senders_of_runs(dealt)
    assert sum(len(s) > 1 for s in across.values()) > len(runs) // 2
    alone = _senders_of_runs(own)
    assert set(alone) == {r.trace_id for r in runs}
    assert all(len(s) == 1 for s in alone.values())
    per_sender = [sum(1 for s in alone.values() if s == {i}) for i in range(4)]
    assert per_sender == [50, 50, 50, 50]
    sent = sum(
        len(ExportTraceServiceRequest.FromString(d).resource_spans[0].scope_spans[0].spans) for b in own for d in b
    )
    assert sent == sum(len(r.spans) for r in runs)
