"""The heavy-content workload and bench row: realistic agent runs carrying their conversations.

``vigil bench --heavy`` (BENCHMARKS.md, "heavy-content row"): runs shaped like production agent
traffic with content capture on — an ``invoke_agent`` root, ``chat`` spans carrying 1–2 KB of
captured messages in the OTel GenAI attributes (``gen_ai.input.messages`` /
``gen_ai.output.messages``, https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/),
``execute_tool`` spans with arguments and results, sometimes a nested sub-agent; about 20 spans
and 22 KB a run. Spans leave the agent as a ``BatchSpanProcessor`` sends them: in the order they
end (children before their root), several runs in flight at once, 250 spans an OTLP/protobuf body,
so most runs are split across bodies.

The bench starts a real ``vigil run`` (defaults, SQLite, a fresh database), sends every body over
``connections`` keep-alive connections (a 503 is retried after its ``Retry-After``, as every OTel
exporter does: the sender's later bodies wait behind it), waits until every run and its details are
stored, and reports spans per CPU-second of the server process (all its threads, and by thread),
peak RSS (VmHWM), and what was stored against the driver's truth: runs stored complete, runs with
details, iteration-cap hits and safety blocks; and the assembler's events
(``vigil_assembler_events_total``: runs closed early, evicted, the intake pressure raised) read from
``/metrics`` before the server stops.

With several connections the bodies are, by default, one stream dealt out in turn, so nearly every run
has spans on two connections — a run whose agents live in different processes. A connection held back
by its 503s falls behind the others, and with it the spans of those runs: they trail their root by as
long as it lags. ``own_runs`` gives each connection its own runs instead (an agent process per
connection, each with its batch processor): a run's spans then arrive in their order, whatever the
retries (:func:`sender_payloads`).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import httpx
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from prometheus_client.parser import text_string_to_metric_families

from collector.model import Span as DecodedSpan
from collector.otlp import decode_protobuf
from vigil.bench.synth import _kv, body
from vigil.process import cpu_seconds, process_name, spawn_vigil, status_mib, thread_cpu_seconds

__all__ = [
    "PINNED_NOW_NS",
    "HeavyResult",
    "HeavyRun",
    "bench_heavy",
    "heavy_bodies",
    "heavy_runs",
    "heavy_traces",
    "main",
]

PINNED_NOW_NS: Final = 1_795_000_000_000_000_000
"""A fixed ``now_ns`` for :func:`heavy_runs` (2026-11-18): the instruction counts of
``scripts/pipeline_instr.py`` and ``scripts/session_cost.py`` process the same bytes on every pass."""

AGENTS = ("support", "research", "billing", "travel", "triage", "coder")
TOOLS = ("search_orders", "lookup_customer", "refund", "web_search", "fetch_url", "run_sql", "calculator", "send_email")
SUB_AGENTS = ("researcher", "planner", "summariser")
_OWN: Final = "\x00own"
"""A run's conversation id: one drawn for the run alone (a session of one turn)."""

_SYSTEM = (
    "You are a customer support agent for an online retailer. Answer politely and concisely. Use the tools "
    "to look up orders, customers and refunds before you answer; never invent an order status. If the "
    "customer asks for something outside your remit, say so and offer to hand over to a human colleague. "
    "Quote amounts with their currency and dates as YYYY-MM-DD."
)
_ASKS = (
    "Hi, my order {order} was supposed to arrive on {date} but the tracking page has not moved for days.",
    "I was charged {amount} twice for order {order}, can you check and refund the duplicate?",
    "Can you tell me whether the refund for {order} went through? It has been a week since {date}.",
    "Please change the delivery address of {order} to {street}, the courier has not picked it up yet.",
    "My email is {email} and I never got the invoice for {order}; could you resend it?",
    "Call me back on {phone} about order {order}, the parcel arrived damaged.",
    "Which of my orders since {date} are still open, and what is the total I owe?",
    "The product page said {amount} but I paid more at checkout for {order}. Why?",
)
_SAY = (
    "I checked order {order}: it left the warehouse on {date} and is with the courier now.",
    "The payment of {amount} on {date} appears twice; I have opened a refund for the duplicate.",
    "Your refund for {order} was issued on {date} and should reach your account within 3-5 business days.",
    "I updated the delivery address for {order}; you will get a confirmation email shortly.",
    "There are 2 open orders since {date}: {order} and another one awaiting payment, {amount} in total.",
    "I am sorry about the damage. I have arranged a replacement for {order}, shipping on {date}.",
)
_RESULT = (
    '{{"order_id": "{order}", "status": "in_transit", "carrier": "DHL", "shipped": "{date}", "total": "{amount}", '
    '"items": [{{"sku": "SKU-{n}", "qty": 1, "price": "{amount}"}}], "events": ["label created", "picked up", '
    '"departed facility {n}", "arrived at hub"]}}',
    '{{"customer_id": "C{n}", "name": "Jordan Miller", "email": "{email}", "tier": "gold", "orders": 14, '
    '"since": "{date}", "notes": "prefers email contact; last complaint closed {date}"}}',
    '{{"refund_id": "R-{n}", "order_id": "{order}", "amount": "{amount}", "state": "issued", "issued_at": "{date}", '
    '"method": "original payment method"}}',
    '{{"results": [{{"title": "Shipping times and delays", "url": "https://example.com/help/shipping/{n}", '
    '"snippet": "Most parcels arrive within 3-5 business days of {date}."}}, {{"title": "Refund policy", '
    '"url": "https://example.com/help/refunds", "snippet": "Refunds are issued within 14 days."}}]}}',
    '{{"rows": [["{order}", "{date}", "{amount}", "open"], ["ORD-{n}", "{date}", "12.50", "closed"]], '
    '"row_count": 2, "elapsed_ms": {n3}}}',
)


def _fill(rng: random.Random, template: str) -> str:
    n = rng.randint(10_000, 99_999)
    return template.format(
        order=f"ORD-{rng.randint(100_000, 999_999)}",
        date=f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        amount=f"${rng.randint(5, 900)}.{rng.randint(0, 99):02d}",
        street=f"{rng.randint(1, 300)} Market Street, Springfield",
        email=f"customer{n}@example.org",
        phone=f"+1 415 555 {rng.randint(1000, 9999)}",
        n=n,
        n3=rng.randint(1, 999),
    )


def _text_part(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


@dataclass(frozen=True, slots=True)
class HeavyRun:
    """One generated run and its truth, counted by the driver."""

    trace_id: str
    spans: tuple[Span, ...]
    capped: bool
    blocked: bool
    tool_errors: int


@dataclass
class _Conversation:
    """The growing message history of one agent (what each ``chat`` span captures, bounded to 1–2 KB)."""

    rng: random.Random
    messages: list[dict[str, object]] = field(default_factory=list)

    def window(self) -> str:
        """The captured input of the next model call: system, the user's ask, then the latest turns (1-2 KB)."""
        budget = self.rng.randint(1024, 2048)
        head, tail = self.messages[:2], self.messages[2:]
        out = list(head)
        size = len(json.dumps(out))
        kept: list[dict[str, object]] = []
        for message in reversed(tail):
            grown = len(json.dumps(message)) + 2
            if size + grown > budget:
                break
            kept.append(message)
            size += grown
        return json.dumps(out + kept[::-1], separators=(",", ":"))


def _run(rng: random.Random, end_ns: int, conversation: str | None = _OWN) -> HeavyRun:  # noqa: PLR0915 (one run's script)
    """One agent run (spans in the order they end: children before parents, the root last).

    ``conversation`` is the root's ``gen_ai.conversation.id``: :data:`_OWN` draws one of its own
    (a session of one turn), ``None`` leaves the attribute out. The draw happens either way, so the
    rest of the run is the same whichever is chosen."""
    trace_id = rng.randbytes(16)
    root_id = rng.randbytes(8)
    agent = rng.choice(AGENTS)
    turns = rng.randint(4, 9)
    capped = rng.random() < 0.2
    blocked = not capped and rng.random() < 0.03
    with_sub = rng.random() < 0.6
    conv = _Conversation(rng)
    conv.messages.append({"role": "system", "parts": [_text_part(_SYSTEM)]})
    conv.messages.append({"role": "user", "parts": [_text_part(_fill(rng, rng.choice(_ASKS)))]})
    spans: list[Span] = []
    errors = 0
    t = end_ns - 60_000_000_000

    def chat(parent: bytes, reason: str, outputs: list[dict[str, object]]) -> None:
        nonlocal t
        attrs = [
            _kv("gen_ai.operation.name", "chat"),
            _kv("gen_ai.provider.name", "openai"),
            _kv("gen_ai.request.model", "gpt-4.1-mini"),
            _kv("gen_ai.response.model", "gpt-4.1-mini-2025-04-14"),
            _kv("gen_ai.response.id", f"chatcmpl-{rng.getrandbits(96):024x}"),
            _kv("gen_ai.usage.input_tokens", rng.randint(400, 3000)),
            _kv("gen_ai.usage.output_tokens", rng.randint(20, 400)),
            _kv("gen_ai.response.finish_reasons", [reason]),
            _kv("server.address", "api.openai.com"),
            _kv("gen_ai.input.messages", conv.window()),
            _kv("gen_ai.output.messages", json.dumps(outputs, separators=(",", ":"))),
        ]
        spans.append(
            Span(
                trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=parent, name="chat gpt-4.1-mini",
                kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=t, end_time_unix_nano=t + 900_000_000,
                attributes=attrs,
            )
        )  # fmt: skip
        t += 1_000_000_000

    def tool(parent: bytes, name: str, call_id: str, arguments: str) -> tuple[str, bool]:
        nonlocal t, errors
        failed = rng.random() < 0.04
        result = _fill(rng, rng.choice(_RESULT)) if not failed else "TimeoutError: upstream did not answer in 10 s"
        attrs = [
            _kv("gen_ai.operation.name", "execute_tool"),
            _kv("gen_ai.tool.name", name),
            _kv("gen_ai.tool.type", "function"),
            _kv("gen_ai.tool.call.id", call_id),
            _kv("gen_ai.tool.call.arguments", arguments),
            _kv("gen_ai.tool.call.result", result),
        ]
        if failed:
            attrs.append(_kv("error.type", "TimeoutError"))
            errors += 1
        spans.append(
            Span(
                trace_id=trace_id, span_id=rng.randbytes(8), parent_span_id=parent, name=f"execute_tool {name}",
                kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=t, end_time_unix_nano=t + 300_000_000,
                attributes=attrs,
                status=Status(code=Status.STATUS_CODE_ERROR, message="upstream timed out") if failed else None,
            )
        )  # fmt: skip
        t += 400_000_000
        return result, failed

    def tool_turn(parent: bytes) -> None:
        calls = []
        for _ in range(rng.choice((1, 1, 2, 2, 2, 3))):
            name = rng.choice(TOOLS)
            arguments = _fill(rng, '{{"order_id": "{order}", "since": "{date}", "note": "customer asked twice"}}')
            calls.append((name, f"call_{rng.getrandbits(96):024x}", arguments))
        parts = [{"type": "tool_call", "id": c, "name": n, "arguments": json.loads(a)} for n, c, a in calls]
        out: list[dict[str, object]] = [{"role": "assistant", "parts": parts, "finish_reason": "tool_call"}]
        chat(parent, "tool_calls", out)
        conv.messages.append({"role": "assistant", "parts": parts})
        for name, call_id, arguments in calls:
            result, _ = tool(parent, name, call_id, arguments)
            response = {"type": "tool_call_response", "id": call_id, "response": result}
            conv.messages.append({"role": "tool", "parts": [response]})

    sub_at = rng.randint(0, turns - 2) if with_sub else -1
    for i in range(turns - 1):
        tool_turn(root_id)
        if i == sub_at:  # a sub-agent, invoked as a tool call, with its own model calls and tools
            sub_id = rng.randbytes(8)
            sub = rng.choice(SUB_AGENTS)
            start = t
            for _ in range(rng.randint(1, 2)):
                tool_turn(sub_id)
            answer = _fill(rng, rng.choice(_SAY))
            chat(sub_id, "stop", [{"role": "assistant", "parts": [_text_part(answer)], "finish_reason": "stop"}])
            spans.append(
                Span(
                    trace_id=trace_id, span_id=sub_id, parent_span_id=root_id, name=f"invoke_agent {sub}",
                    kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start, end_time_unix_nano=t,
                    attributes=[_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", sub)],
                )
            )  # fmt: skip
    final: str | None = None
    if capped:  # cut off at its turn limit: the last model call asked for tools, nothing answered
        tool_turn(root_id)
    elif blocked:
        chat(root_id, "content_filter", [{"role": "assistant", "parts": [], "finish_reason": "content_filter"}])
    else:
        final = _fill(rng, rng.choice(_SAY))
        chat(root_id, "stop", [{"role": "assistant", "parts": [_text_part(final)], "finish_reason": "stop"}])
    own = f"conv-{rng.getrandbits(64):016x}"
    conversation = own if conversation is _OWN else conversation
    root_attrs = [_kv("gen_ai.operation.name", "invoke_agent"), _kv("gen_ai.agent.name", agent)]
    if conversation is not None:
        root_attrs.append(_kv("gen_ai.conversation.id", conversation))
    if final is not None:
        message = [{"role": "assistant", "parts": [_text_part(final)]}]
        root_attrs.append(_kv("gen_ai.output.messages", json.dumps(message)))
    spans.append(
        Span(
            trace_id=trace_id, span_id=root_id, name=f"invoke_agent {agent}", kind=Span.SPAN_KIND_INTERNAL,
            start_time_unix_nano=end_ns - 60_000_000_000, end_time_unix_nano=max(t, end_ns - 1), attributes=root_attrs,
        )
    )  # fmt: skip
    return HeavyRun(trace_id.hex(), tuple(spans), capped, blocked, errors)


def heavy_runs(n_runs: int, seed: int = 25, session_turns: int = 1, *, now_ns: int | None = None) -> list[HeavyRun]:
    """``n_runs`` generated runs (deterministic for a seed; the same bytes for a seed and ``now_ns``).

    ``now_ns``: the time the runs end before (None: now, as a sender's clock would; the instruction
    counts of ``scripts/pipeline_instr.py`` and ``scripts/session_cost.py`` pin it, so that two passes
    process the same bytes).

    ``session_turns``: how many consecutive runs share a ``gen_ai.conversation.id`` — 1 (the default):
    each run opens a session of its own, the worst case for the session write (one ``sessions`` row per
    run); ``K`` > 1: sessions of ``K`` turns; 0: no session id at all (what sessions cost is the
    difference, ``vigil bench --heavy --session-turns 0 --session-turns 1``). Only the id differs
    between the choices: the runs are otherwise the same."""
    if session_turns < 0:
        raise ValueError(f"session_turns must be >= 0, got {session_turns}")
    rng = random.Random(seed)
    now = time.time_ns() if now_ns is None else now_ns

    def conversation(i: int) -> str | None:
        if session_turns == 1:
            return _OWN
        return None if session_turns == 0 else f"conv-{seed:x}-{i // session_turns:08x}"

    return [_run(rng, now - (n_runs - i) * 1_000_000, conversation(i)) for i in range(n_runs)]


def heavy_bodies(
    runs: Sequence[HeavyRun], spans_per_body: int = 250, in_flight: int = 16, seed: int = 25
) -> Iterator[bytes]:
    """OTLP/protobuf bodies of ``runs`` as an SDK's batch processor sends them: ``in_flight`` runs
    interleaved, each run's spans in their order, ``spans_per_body`` spans a body."""
    rng = random.Random(seed + 1)
    pending = iter(runs)
    active: list[list[Span]] = []
    batch: list[Span] = []
    exhausted = False
    while True:
        while not exhausted and len(active) < in_flight:
            nxt = next(pending, None)
            if nxt is None:
                exhausted = True
            else:
                active.append(list(nxt.spans)[::-1])
        if not active:
            break
        i = rng.randrange(len(active))
        batch.append(active[i].pop())
        if not active[i]:
            active.pop(i)
        if len(batch) >= spans_per_body:
            yield body(batch, "support-fleet")
            batch = []
    if batch:
        yield body(batch, "support-fleet")


def sender_payloads(runs: Sequence[HeavyRun], senders: int, *, own_runs: bool = False) -> list[list[bytes]]:
    """The bodies each of ``senders`` connections sends, in order: one stream of bodies dealt out in
    turn (default), or, with ``own_runs``, each connection's own runs as a batch processor sends them."""
    if own_runs:
        return [list(heavy_bodies(runs[i::senders])) for i in range(senders)]
    payload = list(heavy_bodies(runs))
    return [payload[i::senders] for i in range(senders)]


@dataclass(frozen=True)
class HeavyResult:
    """One round of the heavy row."""

    spans: int
    runs: int
    cpu_s: float
    send_wall_s: float
    peak_rss_mb: float
    stored: int
    complete: int
    with_details: int
    capped_truth: int
    capped_stored: int
    blocked_truth: int
    blocked_stored: int
    refused: int
    events: Mapping[str, float] = field(default_factory=dict)
    """``vigil_assembler_events_total`` by event; ``refused:<reason>``: ``vigil_refused_total{stage="stream"}``."""
    threads: Mapping[str, float] = field(default_factory=dict)
    """The server's CPU seconds over the measured span (:attr:`cpu_s`) by thread name (:func:`thread_split`)."""

    @property
    def spans_per_cpu_s(self) -> float:
        """Spans per CPU-second of the server process."""
        return self.spans / self.cpu_s if self.cpu_s else 0.0

    @property
    def late_dropped(self) -> int:
        """Spans answered 200 and then dropped: they came after their run had left the late-span cache."""
        return int(self.events.get("late_evicted", 0))


def heavy_traces(n_runs: int, *, session_turns: int = 1) -> dict[str, list[DecodedSpan]]:
    """The spans of ``n_runs`` heavy runs (clock pinned, :data:`PINNED_NOW_NS`) as the receiver decodes
    them from :func:`heavy_bodies`, by trace id: what the instruction scripts hand the pipeline."""
    traces: dict[str, list[DecodedSpan]] = {}
    for payload in heavy_bodies(heavy_runs(n_runs, session_turns=session_turns, now_ns=PINNED_NOW_NS)):
        for batch in decode_protobuf(payload).batches:
            traces.setdefault(batch.trace_id, []).extend(batch.spans)
    return traces


def _counts(db: Path) -> tuple[int, int, int, int, int]:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            runs = conn.execute(
                "SELECT count(*), coalesce(sum(complete), 0), coalesce(sum(hit_max_iterations), 0),"
                " coalesce(sum(safety_blocked), 0) FROM runs"
            ).fetchone()
            try:
                details = conn.execute("SELECT count(*) FROM run_details").fetchone()[0]
            except sqlite3.OperationalError:  # a tree from before run details
                details = 0
        return int(runs[0]), int(runs[1]), int(details), int(runs[2]), int(runs[3])
    except sqlite3.Error:
        return 0, 0, 0, 0, 0


def _events(metrics_url: str) -> dict[str, float]:
    """The assembler's events, the stream's refusals (``refused:<reason>``), the refused spans the ledger
    stopped waiting for (``owed_forgotten:<reason>``) and the runs re-scored after late spans (``rescored``)
    on ``/metrics`` (empty if unreadable)."""
    try:
        text = httpx.get(metrics_url, timeout=10).text
    except httpx.HTTPError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "vigil_assembler_events_total":
                out[sample.labels["event"]] = sample.value
            elif sample.name == "vigil_runs_rescored_total":  # runs re-scored after late spans
                out["rescored"] = sample.value
            elif sample.name == "vigil_owed_spans_forgotten_total":
                out[f"owed_forgotten:{sample.labels['reason']}"] = sample.value
            elif sample.name == "vigil_refused_total" and sample.labels.get("stage") == "stream":
                out[f"refused:{sample.labels['reason']}"] = sample.value
    return out


def _send(url: str, payload: Sequence[bytes], refused: list[int], lock: threading.Lock) -> None:
    with httpx.Client(headers={"Content-Type": "application/x-protobuf"}, timeout=60) as http:
        for data in payload:
            while True:
                reply = http.post(url, content=data)
                if reply.status_code == 200:
                    break
                if reply.status_code not in (429, 503):
                    raise RuntimeError(f"body refused: {reply.status_code} {reply.text[:200]}")
                with lock:
                    refused[0] += 1
                time.sleep(float(reply.headers.get("Retry-After", "1")))


def bench_heavy(
    runs: Sequence[HeavyRun],
    payload: Sequence[bytes],
    *,
    connections: int = 1,
    env: Mapping[str, str] | None = None,
    settle_s: float = 3.0,
    timeout_s: float = 600.0,
    command: Sequence[str] = (sys.executable, "-m", "vigil.cli"),
    per_sender: Sequence[Sequence[bytes]] | None = None,
) -> HeavyResult:
    """One round: a fresh ``vigil run`` (``env`` overrides its defaults; ``PYTHONPATH`` picks the tree),
    every body sent, every run stored; see the module docstring. ``per_sender``: the bodies of each
    connection (:func:`sender_payloads`; ``payload`` and ``connections`` are then not used)."""
    senders = list(per_sender) if per_sender is not None else [payload[i::connections] for i in range(connections)]
    spans = sum(len(r.spans) for r in runs)
    with tempfile.TemporaryDirectory(prefix="vigil-heavy-") as tmp:
        workdir = Path(tmp)
        proc = spawn_vigil(workdir, env, command=command)
        try:
            proc.wait_ready(port=proc.http_port)
            pid = proc.process.pid
            url = f"{proc.otlp_endpoint}/v1/traces"
            refused, lock = [0], threading.Lock()
            main, threads0 = process_name(pid), thread_cpu_seconds(pid)
            cpu0, wall0 = cpu_seconds(pid), time.perf_counter()
            threads = [threading.Thread(target=_send, args=(url, bodies, refused, lock)) for bodies in senders]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            send_wall = time.perf_counter() - wall0
            db = workdir / "vigil.db"
            last, cpu_at_last, changed = (-1, -1, -1, -1, -1), cpu_seconds(pid), time.monotonic()
            threads_at_last = thread_cpu_seconds(pid)
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                counts = _counts(db)
                now = time.monotonic()
                if counts != last:
                    last, cpu_at_last, changed = counts, cpu_seconds(pid), now
                    threads_at_last = thread_cpu_seconds(pid)
                elif (counts[0] >= len(runs) and now - changed >= settle_s) or now - changed >= 60:
                    break  # everything stored, or nothing moved for a minute (reported as stored)
                time.sleep(0.25)
            peak = status_mib(pid, "VmHWM")
            events = _events(proc.metrics_url)
        finally:
            proc.stop(60)
    stored, complete, with_details, capped, blocked = last
    return HeavyResult(
        spans=spans, runs=len(runs), cpu_s=cpu_at_last - cpu0, send_wall_s=send_wall, peak_rss_mb=peak,
        stored=stored, complete=complete, with_details=with_details,
        capped_truth=sum(r.capped for r in runs), capped_stored=capped,
        blocked_truth=sum(r.blocked for r in runs), blocked_stored=blocked, refused=refused[0], events=events,
        threads=thread_split(threads0, threads_at_last, main=main),
    )  # fmt: skip


MAIN_THREADS = "event loop & pools"
"""How :func:`thread_split` names the main thread and the threads nobody named (the event loop, the
request handlers' and executors' pools): they all carry the process's own name."""


def thread_split(before: Mapping[str, float], after: Mapping[str, float], *, main: str) -> dict[str, float]:
    """CPU seconds by thread name between two :func:`~vigil.process.thread_cpu_seconds`
    readings, largest first; ``main`` (the process's name) is reported as :data:`MAIN_THREADS`."""
    spent = {name: seconds - before.get(name, 0.0) for name, seconds in after.items()}
    named = {(MAIN_THREADS if name == main else name): seconds for name, seconds in spent.items() if seconds > 0}
    return dict(sorted(named.items(), key=lambda item: -item[1]))


def thread_shares(threads: Mapping[str, float], *, least: float = 0.01) -> str:
    """``name share · name share …`` of the threads with at least ``least`` of the CPU (empty if none)."""
    total = sum(threads.values())
    if total <= 0:
        return ""
    return " · ".join(f"{name} {seconds / total:.0%}" for name, seconds in threads.items() if seconds / total >= least)


def _tree(label: str) -> dict[str, Any]:
    """``env`` and ``command`` of ``vigil run`` from another checkout (its compiled decoder built in place)."""
    if label == ".":
        return {}
    root = Path(label).resolve()
    if (root / "vigil" / "cli.py").exists():
        module = "vigil.cli"
    elif (root / "review_queue" / "app" / "cli.py").exists():  # the layout before vigil/ (a0a69dd and older)
        module = "review_queue.app.cli"
    else:
        module = "review_queue.cli"
    return {"env": {"PYTHONPATH": str(root)}, "command": (sys.executable, "-m", module)}


def main(
    n_runs: int,
    repeat: int,
    connections: int = 1,
    trees: Sequence[str] = (),
    session_turns: Sequence[int] = (),
    *,
    server_env: Sequence[tuple[str, str]] = (),
    own_runs: bool = False,
) -> int:
    """``vigil bench --heavy``: ``repeat`` rounds per tree (this one, or each of ``trees``) and per workload
    variant (``session_turns``, see :func:`heavy_runs`; default: one session per run), all interleaved;
    ``server_env``: settings of every measured ``vigil run`` (``VIGIL_*`` name, value); ``own_runs``: each
    connection sends its own runs (:func:`sender_payloads`)."""
    from rich.console import Console
    from rich.table import Table

    variants = list(dict.fromkeys(session_turns)) or [1]
    workloads = {k: heavy_runs(n_runs, session_turns=k) for k in variants}
    payloads = {k: sender_payloads(runs, connections, own_runs=own_runs) for k, runs in workloads.items()}
    runs, payload = workloads[variants[0]], [body for bodies in payloads[variants[0]] for body in bodies]
    size = sum(len(b) for b in payload)
    console = Console()
    if not console.is_terminal:  # a log file or a pipe: wide enough for the table (rich assumes 80 columns)
        console = Console(width=220)
    console.print(
        f"heavy workload: {n_runs:,} runs, {sum(len(r.spans) for r in runs):,} spans, {len(payload)} bodies, "
        f"{size / 2**20:.1f} MiB, {connections} connection(s)"
        + (", each with its own runs" if own_runs and connections > 1 else "")
    )
    labels = [(tree, k) for tree in (list(trees) or ["."]) for k in variants]

    def name(tree: str, k: int) -> str:
        return tree if len(variants) == 1 else f"{tree} · {k} turn(s)/session"

    results: dict[tuple[str, int], list[HeavyResult]] = {label: [] for label in labels}
    for _ in range(repeat):
        for tree, k in labels:
            spawn = _tree(tree)
            spawn["env"] = {**spawn.get("env", {}), **dict(server_env)}
            result = bench_heavy(workloads[k], (), per_sender=payloads[k], **spawn)
            results[tree, k].append(result)
            console.print(f"  {name(tree, k)}: {result.spans_per_cpu_s:,.0f} spans/CPU-s, {result}")
    table = Table(title=f"heavy-content row ({os.cpu_count()} cores, {n_runs:,} runs × {repeat}, medians)")
    for column in ("tree", "spans / server CPU-s", "bodies answered (s)", "peak RSS MB", "complete", "details",
                   "caps stored/truth", "blocks stored/truth", "503s", "late spans dropped"):  # fmt: skip
        table.add_column(column, justify="right")
    for (tree, k), rounds in results.items():
        med = statistics.median
        table.add_row(
            name(tree, k),
            " · ".join(f"{r.spans_per_cpu_s:,.0f}" for r in rounds)
            + f" (median {med(r.spans_per_cpu_s for r in rounds):,.0f})",
            f"{med(r.send_wall_s for r in rounds):.2f}",
            f"{med(r.peak_rss_mb for r in rounds):.0f}",
            f"{med(r.complete for r in rounds):,.0f}/{n_runs:,}",
            f"{med(r.with_details for r in rounds):,.0f}",
            f"{med(r.capped_stored for r in rounds):,.0f}/{rounds[0].capped_truth:,}",
            f"{med(r.blocked_stored for r in rounds):,.0f}/{rounds[0].blocked_truth:,}",
            f"{med(r.refused for r in rounds):,.0f}",
            " · ".join(f"{r.late_dropped:,}" for r in rounds),  # every round's: one loss is one too many
        )
    console.print(table)
    for (tree, k), rounds in results.items():  # where the CPU went, in the median round
        middle = sorted(rounds, key=lambda r: r.spans_per_cpu_s)[len(rounds) // 2]
        if middle.threads:
            console.print(f"  {name(tree, k)}, CPU by thread: {thread_shares(middle.threads)}")
    return 0
