"""The reviewer's item page for a large run: server time of ``GET /items/{id}`` (a ``vigil bench`` row).

A flagged run of ``spans`` spans with ``attributes`` attributes each (~100 characters a value) is
written to a fresh SQLite store with its run details, then the page is requested through the ASGI
test client (server time plus the in-process client, no sockets): one warm-up request, then
``repeat`` timed ones. Issue 16's target is a median under 300 ms for 500 spans.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from review_queue.api import create_api_app
from review_queue.details import DetailsWriter
from review_queue.services import build_services
from review_queue.store import SqlStore, upgrade_database
from scorers.model import Flag, Message, Priority, Run, ScoredRun, Step, StepKind
from scorers.redact import Redactor

__all__ = ["PageTiming", "bench_item_page", "large_run"]

_T0 = 1_700_000_000_000_000_000
_TOKEN = "bench-admin"


@dataclass(frozen=True, slots=True)
class PageTiming:
    """One page measurement: ``median_s`` / ``max_s`` of the timed requests, the page's size, its span rows."""

    median_s: float
    max_s: float
    page_bytes: int
    span_rows: int


def large_run(spans: int = 500, attributes: int = 20) -> ScoredRun:
    """A flagged run: an agent root and ``spans - 1`` chat spans, each with ``attributes`` attributes."""
    attrs = {f"gen_ai.attr.{i}": f"value {i} " * 8 for i in range(attributes)}
    root = Step(f"{0:016x}", None, "invoke_agent bench", StepKind.AGENT, _T0, _T0 + 10**9, attributes=attrs)
    chats = tuple(
        Step(f"{i:016x}", root.span_id, f"chat {i}", StepKind.LLM, _T0 + i * 10**6, _T0 + i * 10**6 + 5 * 10**5,
             model="gpt-4o-mini", input_tokens=100, output_tokens=20, attributes=attrs)
        for i in range(1, spans)
    )  # fmt: skip
    run = Run(
        trace_id=f"{1:032x}",
        agent="bench",
        steps=(root, *chats),
        span_count=spans,
        start_ns=_T0,
        end_ns=_T0 + 10**9,
        messages=(Message("user", "q"),),
    )
    return ScoredRun(run=run, scores={}, flag=Flag(("tool_loop",), Priority.NORMAL, 1.0))


def bench_item_page(spans: int = 500, repeat: int = 7, attributes: int = 20) -> PageTiming:
    """Time ``GET /items/1`` for :func:`large_run` (``repeat`` requests after one warm-up)."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'page.db'}"
        upgrade_database(url)
        store = SqlStore(url)
        try:
            scored = large_run(spans, attributes)
            store.write([scored])
            DetailsWriter(store.write_details, Redactor()).write_now([scored])
            app = create_api_app(store, admin_token=_TOKEN, services=build_services(store, admin_token=_TOKEN))
            client = TestClient(app)
            headers = {"Authorization": f"Bearer {_TOKEN}"}
            response = client.get("/items/1", headers=headers)  # warm the template cache
            response.raise_for_status()
            times: list[float] = []
            for _ in range(repeat):
                start = time.perf_counter()
                response = client.get("/items/1", headers=headers)
                times.append(time.perf_counter() - start)
                response.raise_for_status()
        finally:
            store.close()
    text = response.text
    return PageTiming(statistics.median(times), max(times), len(text.encode()), text.count('class="span-row'))
