# mypy: ignore-errors
"""What late spans cost to merge: re-scoring CPU against first-scoring CPU (BENCHMARKS.md, "session 21").

Heavy-content runs (``vigil/bench/heavy.py``) are scored with some of their spans held back; the held
spans then come late, one per run every ``GAP`` seconds (longer than the 2 s quiet period: a trickle, as
an exporter's retries of refused bodies bring them). The clock is simulated, the CPU is real: each run
that closes is normalised, scored, decided and its details document built, in one thread, as the worker
and the details writer do. Prints the re-scores, their CPU against the first scorings', and whether every
run's last scoring held all its spans. Runs on any tree whose Assembler takes ``quiet_period_s`` and ``clock``:

    PYTHONPATH=. .venv/bin/python scripts/late_merge.py [runs] [late spans a run] [gap s]
    PYTHONPATH=/tmp/base .venv/bin/python scripts/late_merge.py ...   # the same on another checkout
"""

import sys
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from collector.model import TraceBatch
from review_queue.details import Texts, details_row
from scorers.assemble import Assembler
from scorers.redact import Redactor
from tests.support.fixtures import Clock
from vigil.bench.heavy import heavy_traces
from vigil.bench.pipeline import _settings, build
from vigil.run import tune_gc

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
LATE = int(sys.argv[2]) if len(sys.argv) > 2 else 10
GAP = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0


tune_gc()
traces = heavy_traces(N)
early: dict[str, list] = {}
late: dict[str, list] = {}
for trace_id, spans in traces.items():
    children = [s for s in spans if s.parent_span_id]
    held = children[-LATE:] if len(children) > LATE else children[1:]
    ids = {s.span_id for s in held}
    early[trace_id] = [s for s in spans if s.span_id not in ids]
    late[trace_id] = held
with tempfile.TemporaryDirectory() as tmp:
    emb = build(_settings(Path(tmp) / "late.db"), CollectorRegistry())
    pipeline = emb.worker._pipeline
    redactor = Redactor()
    texts = Texts(redactor)
    clock = Clock(1000.0)
    asm = Assembler(quiet_period_s=2.0, clock=clock, closed_cache_size=10 * N)
    cpu = {"first": 0.0, "rescore": 0.0}
    count = {"first": 0, "rescore": 0}
    last_size: dict[str, int] = {}

    def release() -> None:
        for closed in asm.due():
            t = time.process_time()
            scored = pipeline.process(closed)
            details_row(scored, redactor, None, 0.0, texts)
            stage = "rescore" if closed.rescore else "first"
            cpu[stage] += time.process_time() - t
            count[stage] += 1
            last_size[closed.trace_id] = len(closed.spans)

    for trace_id, spans in early.items():
        asm.add(TraceBatch(trace_id, tuple(spans)))
    clock.now += 3.0
    release()
    rounds = max(len(v) for v in late.values())
    for i in range(rounds):
        for trace_id, held in late.items():
            if i < len(held):
                asm.add(TraceBatch(trace_id, (held[i],)))
        clock.now += GAP
        release()
    clock.now += 3600.0
    release()
    emb.store.close()
late_spans = sum(len(v) for v in late.values())
whole = sum(1 for t, s in traces.items() if last_size.get(t) == len(s))
print(
    f"{N} runs, {sum(len(s) for s in traces.values()) / N:.1f} spans a run; {late_spans} late spans "
    f"({LATE} a run, one every {GAP:g} s)"
)
print(f"first scorings: {count['first']}, {cpu['first'] / count['first'] * 1e6:,.0f} µs a run")
print(
    f"re-scores: {count['rescore']} ({count['rescore'] / late_spans:.2f} a late span), "
    f"{cpu['rescore'] * 1e6 / late_spans:,.0f} µs a late span; "
    f"re-scoring / first scoring CPU: {cpu['rescore'] / cpu['first']:.2f}"
)
print(f"runs whose last scoring held every span: {whole}/{N}")
