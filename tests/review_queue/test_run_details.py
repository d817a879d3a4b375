"""Run details (review_queue.details), their store operations and retention, the runs explorer's query,
"send to review", the stats buckets, and the server time of an item page with a 500-span run."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from collector.model import AttrValue, SpanEvent
from review_queue import details, explorer, listing
from review_queue.api import create_api_app
from review_queue.details import DetailsWriter, build_details, decode, encode
from review_queue.queries import InvalidCursorError
from review_queue.retention import apply_details_retention, apply_retention, purge_traces
from review_queue.services import build_services
from review_queue.store import SqlStore, upgrade_database
from review_queue.tables import review_events, review_items, run_details
from scorers.model import Message, Priority, Run, ScoredRun, Step, StepKind, ToolCall, run_bytes
from scorers.redact import Redactor
from tests.support.fixtures import Clock
from tests.support.review_queue import scored_run
from vigil.bench.page import bench_item_page

T = 1_700_000_000_000_000_000


@pytest.fixture
def store(tmp_path: Path) -> Any:
    """A migrated SQLite store with a settable clock (``store.clock``)."""
    url = f"sqlite:///{tmp_path / 'vigil.db'}"
    upgrade_database(url)
    clock = Clock(1_800_000_000.0)
    s = SqlStore(url, clock=clock)
    s.clock = clock  # type: ignore[attr-defined]
    yield s
    s.close()


def _steps(n: int, attrs: dict[str, Any] | None = None) -> tuple[Step, ...]:
    root = Step(f"{0:016x}", None, "invoke_agent a", StepKind.AGENT, T, T + 10**9, attributes=attrs or {})
    rest = tuple(
        Step(f"{i:016x}", f"{0:016x}", f"chat {i}", StepKind.LLM, T + i * 10**6, T + i * 10**6 + 5 * 10**5,
             model="gpt-4o-mini", input_tokens=100, output_tokens=20, attributes=attrs or {})
        for i in range(1, n)
    )  # fmt: skip
    return (root, *rest)


def _run(trace: int, reasons: tuple[str, ...] = (), **fields: Any) -> ScoredRun:
    defaults: dict[str, Any] = {
        "agent": "support",
        "steps": _steps(3),
        "span_count": 3,
        "start_ns": T,
        "end_ns": T + 10**9,
    }
    defaults.update(fields)
    return scored_run(f"{trace:032x}", reasons=list(reasons), priority=Priority.NORMAL, **defaults)


class TestDocument:
    """What the details document holds, and its bounds."""

    def test_attributes_redacted_filtered_bounded(self) -> None:
        """Secrets by value and by key are gone, long values are cut, extra attributes counted, events kept."""
        attrs: dict[str, Any] = {f"k{i}": i for i in range(details.MAX_ATTRIBUTES + 10)}
        attrs.update({"user.email": "write to bob@example.com", "db.password": "hunter2", "long": "x" * 10_000})
        event = SpanEvent("exception", T, {"exception.type": "ValueError", "exception.message": "bad bob@example.com"})
        step = Step("a" * 16, None, "tool", StepKind.TOOL, T, T + 1, error=True, attributes=attrs, events=(event,))
        doc = build_details(ScoredRun(Run(trace_id="1" * 32, steps=(step,)), {}, None), Redactor())
        span = doc["spans"][0]
        kept = span["attributes"]
        assert details.MAX_ATTRIBUTES == len(kept)
        assert "db.password" not in kept
        assert span["attributes_dropped"] >= 10
        text = str(decode(encode(doc)))
        assert "bob@example.com" not in text
        assert "hunter2" not in text
        assert "[REDACTED:email]" in span["events"][0]["attributes"]["exception.message"]

    def test_long_value_cut(self) -> None:
        """A value beyond MAX_VALUE_CHARS is cut and says how much is missing."""
        step = Step("a" * 16, None, "s", StepKind.OTHER, T, T + 1, attributes={"long": "y" * 10_000})
        doc = build_details(ScoredRun(Run(trace_id="1" * 32, steps=(step,)), {}, None), Redactor())
        value = doc["spans"][0]["attributes"]["long"]
        assert value.startswith("y" * details.MAX_VALUE_CHARS)
        assert value.endswith("more characters]")

    def test_document_size_bound(self) -> None:
        """A run past MAX_DOC_BYTES loses attributes from its last spans first and says it was truncated."""
        attrs = {f"a{i}": "z" * 2000 for i in range(100)}
        run = _run(1, steps=_steps(40, attrs)).run
        doc = build_details(ScoredRun(run, {}, None), Redactor())
        assert doc["truncated"]
        assert len(encode(doc)) < details.MAX_DOC_BYTES
        import orjson

        assert len(orjson.dumps(doc)) <= details.MAX_DOC_BYTES
        assert doc["spans"][0]["attributes"]
        assert not doc["spans"][-1]["attributes"]

    def test_cost_and_conversation_fallback(self) -> None:
        """Priced LLM spans carry an estimated cost; run-level messages and the final answer make the conversation."""
        from scorers.pricing import PriceTable

        scored = _run(1, messages=(Message("user", "hi"),), final_output="bye")
        doc = build_details(scored, Redactor(), PriceTable())
        assert doc["spans"][1]["cost_usd"] is not None
        assert doc["spans"][1]["cost_usd"] > 0
        assert [("message", "hi"), ("final", "bye")] == [(e["kind"], e["content"]) for e in doc["conversation"]]
        assert doc["content_captured"]
        bare = build_details(_run(2), Redactor())
        assert not bare["content_captured"]


class TestCompactForm:
    """The stored form: span arrays, attribute maps kept as they are only when nothing in them changes."""

    def test_stored_form_expands_to_the_document(self) -> None:
        """The stored body is version 2 (one array per span), compressed with Zstandard, and decodes to what
        build_details returns; bodies of the earlier codecs still decode."""
        scored = _run(1, tools=(ToolCall("0" * 16, "search", None, '{"q": 1}', "ok", None),), final_output="done")
        texts = details.Texts(Redactor())
        row = details.details_row(scored, Redactor(), None, 0.0, texts)
        import zlib

        import orjson
        import zstandard

        assert "zstd1+json" == row["codec"]
        plain = zstandard.ZstdDecompressor().decompress(row["body"])
        assert len(row["body"]) < len(plain)
        stored = orjson.loads(plain)
        assert decode(row["body"]) == decode(plain, "json") == decode(zlib.compress(plain, 1), "zlib1+json")
        assert details.DETAILS_VERSION == stored["details_version"]
        assert [len(details.SPAN_FIELDS)] * 3 == [len(span) for span in stored["spans"]]
        assert build_details(scored, Redactor()) == decode(row["body"])
        assert 0.5e-3 == decode(row["body"])["spans"][1]["duration_s"]

    def test_fast_path_still_redacts_and_filters(self) -> None:
        """Once a span's keys and values are remembered as clean, a span with a new secret value, a denied key,
        a value with NUL or a long value is still redacted, filtered and cut; known values are stored unchanged."""
        texts = details.Texts(Redactor())
        plain: dict[str, AttrValue] = {"gen_ai.tool.name": "search", "n": 3, "tags": ["a", "b"]}
        first, _ = details._attributes(plain, texts)
        again, _ = details._attributes(plain, texts)
        assert plain == first
        assert plain is again  # remembered: stored as it is, no copy
        fresh_id: dict[str, AttrValue] = {**plain, "gen_ai.tool.call.id": "call_5f3a9b2c1d4e"}
        assert fresh_id == details._attributes(fresh_id, texts)[0]
        hostile: list[tuple[dict[str, AttrValue], str, str]] = [
            ({**plain, "gen_ai.tool.name": "mail bob@example.com"}, "gen_ai.tool.name", "[REDACTED:email]"),
            ({**plain, "tags": ["a", "sk-proj-abcdefghijklmnopqrstuvwx"]}, "tags", "[REDACTED:api_key]"),
            ({**plain, "n": 2**70}, "n", str(2**70)),
            ({**plain, "x": "a\x00b"}, "x", "\ufffd"),
            ({**plain, "x": "y" * 5000}, "x", "more characters]"),
        ]
        for attrs, key, expected in hostile:
            stored, _ = details._attributes(attrs, texts)
            assert expected in str(stored[key]), attrs
            assert stored is not attrs
        secret: dict[str, AttrValue] = {**plain, "db.password": "hunter2"}
        stored, dropped = details._attributes(secret, texts)
        assert "db.password" not in stored
        assert 1 == dropped
        assert "hunter2" not in str(details.build_details(_run(2, steps=_steps(2, secret)), Redactor()))


class TestSampling:
    """Which runs' details the writer writes: every flagged run, a deterministic share of the others."""

    def test_share_and_flagged(self, store: SqlStore) -> None:
        """At 0.25 about a quarter of 400 unflagged runs, the same ones each time; flagged runs always."""
        runs = [_run(i) for i in range(1, 401)] + [_run(1000, ("tool_loop",))]
        picked = {r.run.trace_id for r in runs if details.details_sampled(r.run.trace_id, 0.25)}
        assert 60 <= len(picked) <= 140
        assert picked == {r.run.trace_id for r in runs if details.details_sampled(r.run.trace_id.upper(), 0.25)}
        assert all(details.details_sampled(r.run.trace_id, 1.0) for r in runs)
        assert not any(details.details_sampled(r.run.trace_id, 0.0) for r in runs)
        flagged = {runs[-1].run.trace_id}
        for keep, want in ((True, picked | flagged), (False, flagged)):
            written: list[str] = []
            writer = DetailsWriter(partial(_collect, written), Redactor(), keep_unflagged=keep, sample_rate=0.25)
            writer.start()
            writer.submit(runs)
            assert writer.shutdown(10)
            assert want == set(written)

    def test_settings_reach_the_writer(self, store: SqlStore, tmp_path: Path) -> None:
        """VIGIL_DETAILS_SAMPLE_RATE / _RETENTION_DAYS (defaults 1 and 7) set the role's writer; 0 days: flagged only;
        a rate outside [0, 1] refuses to start."""
        from prometheus_client import CollectorRegistry

        from collector.errors import SettingsError
        from vigil.scoring import details_writer
        from vigil.settings import Settings

        (tmp_path / "vigil.yaml").write_text("{}\n")

        def writer(env: dict[str, str]) -> DetailsWriter:
            settings = Settings.load(env, config_file=tmp_path / "vigil.yaml")
            return details_writer(settings, store, CollectorRegistry(), Redactor())

        assert 1.0 == writer({})._sample_rate
        assert 0.5 == writer({"VIGIL_DETAILS_SAMPLE_RATE": "0.5"})._sample_rate
        assert 0.0 == writer({"VIGIL_DETAILS_SAMPLE_RATE": "0.5", "VIGIL_DETAILS_RETENTION_DAYS": "0"})._sample_rate
        with pytest.raises(SettingsError, match="details_sample_rate"):
            writer({"VIGIL_DETAILS_SAMPLE_RATE": "1.5"})


def _collect(into: list[str], rows: list[dict[str, Any]]) -> None:
    into.extend(r["trace_id"] for r in rows)


class TestStore:
    """run_details rows: upsert, read, purge, retention, and send to review."""

    def test_round_trip_and_tail(self, store: SqlStore) -> None:
        """Written details read back; a re-delivered tail (fewer spans) does not replace them."""
        scored = _run(1, tools=(ToolCall("0" * 16, "search", None, '{"q": 1}', "ok", None),))
        store.write([scored])
        writer = DetailsWriter(store.write_details, Redactor())
        assert 1 == writer.write_now([scored])
        assert 3 == len((store.get_details(scored.run.trace_id) or {})["spans"])
        tail = _run(1, steps=_steps(1), span_count=1)
        writer.write_now([tail])
        assert 3 == len((store.get_details(scored.run.trace_id) or {})["spans"])
        assert store.get_details("f" * 32) is None

    def test_writer_thread_batches_and_drops(self, store: SqlStore) -> None:
        """Submitted batches are written by the thread; unflagged runs are skipped when only flagged are kept."""
        runs = [_run(i, ("tool_loop",) if i % 2 else ()) for i in range(1, 7)]
        store.write(runs)
        dropped: list[int] = []
        writer = DetailsWriter(store.write_details, Redactor(), keep_unflagged=False, on_dropped=dropped.append)
        writer.start()
        writer.submit(runs)
        assert writer.shutdown(10)
        with store.engine.connect() as conn:
            kept = {row[0] for row in conn.execute(sa.select(run_details.c.trace_id))}
        assert {r.run.trace_id for r in runs if r.flag} == kept
        full = DetailsWriter(store.write_details, Redactor(), max_batches=1, on_dropped=dropped.append)
        full.submit(runs[:2])
        full.submit(runs[2:])  # not started: the queue is full
        assert [4] == dropped
        assert 4 == full.dropped
        few = DetailsWriter(store.write_details, Redactor(), max_runs=3, on_dropped=dropped.append)
        few.submit(runs[:2])
        few.submit(runs[2:4])  # 4 runs waiting would pass the bound of 3
        assert [4, 2] == dropped

    def test_writer_bounded_in_bytes(self, store: SqlStore) -> None:
        """Runs waiting are bounded by their estimated bytes: a batch past the budget is dropped and
        counted, except into an empty writer; the bytes are given back once written."""
        big = [_run(i, ("tool_loop",), final_output="x" * 50_000) for i in range(1, 4)]
        small = [_run(i, ("tool_loop",), final_output="y" * 6_000) for i in range(4, 6)]
        store.write(big + small)
        dropped: list[int] = []
        writer = DetailsWriter(store.write_details, Redactor(), max_bytes=60_000, on_dropped=dropped.append)
        writer.submit(big[:1])  # over nothing held: taken
        held = writer.account.held
        assert held >= run_bytes(big[0].run) > 50_000
        writer.submit(big[1:])  # past the budget: dropped, counted
        writer.submit(small)  # also past it while the first waits
        assert [2, 2] == dropped
        assert held == writer.account.held
        writer.start()
        assert writer.shutdown(10)
        assert 0 == writer.account.held
        assert 1 == writer.written

    def test_purge_and_retention(self, store: SqlStore) -> None:
        """Purge deletes details; details retention deletes unflagged runs' old details only; run retention too."""
        clock = store.clock  # type: ignore[attr-defined]
        runs = [_run(1), _run(2, ("tool_loop",)), _run(3)]
        store.write(runs)
        DetailsWriter(store.write_details, Redactor(), clock=clock).write_now(runs)
        assert 1 == purge_traces(store.engine, [runs[2].run.trace_id])["run_details"]
        now = clock() + 8 * 86_400
        assert 0 == apply_details_retention(store.engine, now=clock() + 86_400, days=7)
        assert 1 == apply_details_retention(store.engine, now=now, days=7)
        assert store.get_details(runs[0].run.trace_id) is None
        assert store.get_details(runs[1].run.trace_id) is not None  # flagged: kept with the run
        assert 1 == apply_retention(store.engine, now=now + 30 * 86_400, days=30)["run_details"]

    def test_zero_days_keeps_flagged_only(self, store: SqlStore) -> None:
        """Details retention 0: every unflagged run's details go at once."""
        runs = [_run(1), _run(2, ("tool_loop",))]
        store.write(runs)
        DetailsWriter(store.write_details, Redactor()).write_now(runs)
        assert 1 == apply_details_retention(store.engine, now=0.0, days=0)

    def test_send_to_review(self, store: SqlStore) -> None:
        """An unflagged run gets a pending item with reason manual, once; the audit trail says who."""
        store.write([_run(1), _run(2, ("tool_loop",))])
        assert store.send_to_review("9" * 32, "alice") is None
        item_id, created = store.send_to_review(f"{1:032x}", "alice") or (0, False)
        assert created
        assert (item_id, False) == store.send_to_review(f"{1:032x}", "bob")
        run = store.get_run(f"{1:032x}") or {}
        assert ["manual"] == run["flag"]["reasons"]
        assert "pending" == run["review_item"]["state"]
        with store.engine.connect() as conn:
            events = conn.execute(sa.select(review_events.c.actor, review_events.c.action)).all()
            items = conn.execute(sa.select(sa.func.count()).select_from(review_items)).scalar()
        assert [("alice", "send_to_review")] == [tuple(e) for e in events]
        assert 2 == items
        existing = store.send_to_review(f"{2:032x}", "alice")
        assert existing is not None
        assert not existing[1]


class TestExplorer:
    """The explorer's filters, order and cursor."""

    def _ids(self, store: SqlStore, q: explorer.RunQuery, cursor: str | None = None) -> list[str]:
        with store.engine.connect() as conn:
            rows, _ = explorer.explore(conn, q, cursor)
        return [r["trace_id"][-2:] for r in rows]

    def test_filters(self, store: SqlStore) -> None:
        """Each filter keeps exactly the matching runs; payloads are plain values."""
        runs = [
            _run(1, agent="a", errored=True, final_output="Refund issued"),
            _run(2, agent="b", safety_blocked=True, final_output="I cannot help"),
            _run(3, ("tool_loop",), agent="a", hit_max_iterations=True),
        ]
        runs[0] = ScoredRun(runs[0].run, {"quality": 0.2}, None)
        runs[1] = ScoredRun(runs[1].run, {"quality": 0.9}, None)
        store.write(runs)
        DetailsWriter(store.write_details, Redactor()).write_now(runs)
        assert ["03", "01"] == self._ids(store, explorer.RunQuery(agent="a"))
        assert ["01"] == self._ids(store, explorer.RunQuery(signals=(("errored", True),)))
        assert ["02"] == self._ids(store, explorer.RunQuery(signals=(("safety_blocked", True),)))
        assert ["03"] == self._ids(store, explorer.RunQuery(flagged=True, reason="tool_loop"))
        assert ["02"] == self._ids(store, explorer.RunQuery(score="quality", score_min=0.5))
        assert ["01"] == self._ids(store, explorer.RunQuery(score="quality", score_max=0.5))
        assert ["01"] == self._ids(store, explorer.RunQuery(text="refund"))
        assert [] == self._ids(store, explorer.RunQuery(text="%"))
        assert [] == self._ids(store, explorer.RunQuery(agent="a' OR '1'='1"))
        assert [] == self._ids(store, explorer.RunQuery(trace="zz"))
        assert ["01"] == self._ids(store, explorer.RunQuery(trace=f"{1:032x}"))
        with pytest.raises(ValueError, match="score name"):
            self._ids(store, explorer.RunQuery(score="x') --", score_min=1))

    def test_sort_and_cursor(self, store: SqlStore) -> None:
        """Pages in duration order, each run once; a cursor of another order is refused."""
        runs = [_run(i, end_ns=T + (i * 7 % 5 + 1) * 10**8) for i in range(1, 8)]
        store.write(runs)
        seen: list[str] = []
        cursor = None
        q = explorer.RunQuery(sort="duration", descending=False, limit=3)
        while True:
            with store.engine.connect() as conn:
                rows, cursor = explorer.explore(conn, q, cursor)
            seen.extend(r["trace_id"] for r in rows)
            if cursor is None:
                break
            with pytest.raises(InvalidCursorError), store.engine.connect() as conn:
                explorer.explore(conn, explorer.RunQuery(), cursor)
        durations = {r.run.trace_id: r.run.duration_s for r in runs}
        assert sorted(durations) == sorted(seen)
        assert sorted(durations.values()) == [durations[t] for t in seen]


class TestStatsBuckets:
    """Hour buckets start on whole UTC hours: flags of the current hour are under its label."""

    def test_window(self) -> None:
        """At 22:55 the last bucket is [22:00, 23:00)."""
        now = datetime(2026, 11, 24, 22, 55, tzinfo=UTC).timestamp()
        since, until = listing.bucket_window(now, 3600, 24)
        assert datetime(2026, 11, 24, 23, tzinfo=UTC).timestamp() == until
        assert 24 * 3600 == until - since

    def test_page_labels(self, store: SqlStore) -> None:
        """A flag at 22:50 is counted under "22", one at 21:10 under "21" (a fixed clock)."""
        at = {h: datetime(2026, 11, 24, h, m, tzinfo=UTC).timestamp() for h, m in ((21, 10), (22, 50))}
        for n, (_hour, when) in enumerate(sorted(at.items()), start=1):
            store.clock.now = when  # type: ignore[attr-defined]
            store.write([_run(n, ("tool_loop",))])
        now = datetime(2026, 11, 24, 22, 55, tzinfo=UTC).timestamp()
        services = build_services(store, admin_token="adm", clock=lambda: now)
        client = TestClient(create_api_app(store, admin_token="adm", services=services))
        page = client.get("/stats", headers={"Authorization": "Bearer adm"}).text
        import re

        heads = re.findall(r'<th data-start="(\d+)">(\d\d)</th>', page)
        assert "22" == heads[-1][1]
        assert "21" == heads[-2][1]
        row = re.search(r'<tr data-reason="tool_loop">(.*?)</tr>', page, re.S)
        assert row is not None
        cells = re.findall(r"<td[^>]*>(\d+)</td>", row.group(1))
        assert ["1", "1", "2"] == cells[-3:]  # 21:00, 22:00, total
        assert "<polyline" in page


def test_item_page_with_500_spans_renders_every_span(store: SqlStore) -> None:
    """A flagged 500-span run with details (20 attributes a span) renders all 500 span rows.

    Its server time is a benchmark, not a test: ``vigil bench`` prints the median
    (:func:`vigil.bench.page.bench_item_page`, recorded in BENCHMARKS.md)."""
    attrs = {f"gen_ai.attr.{i}": f"value {i} " * 8 for i in range(20)}
    steps = _steps(500, attrs)
    scored = _run(1, ("tool_loop",), steps=steps, span_count=500, messages=(Message("user", "q"),))
    store.write([scored])
    DetailsWriter(store.write_details, Redactor()).write_now([scored])
    services = build_services(store, admin_token="adm")
    client = TestClient(create_api_app(store, admin_token="adm", services=services))
    response = client.get("/items/1", headers={"Authorization": "Bearer adm"})
    assert 200 == response.status_code
    assert 500 == response.text.count('class="span-row')
    assert f"{499:016x}" in response.text  # the last span's row is there, not cut by the size bound


def test_item_page_bench_measures_the_page() -> None:
    """The bench's run is the page it times: every span row rendered, ordered timings, a real page size."""
    timing = bench_item_page(spans=50, repeat=3, attributes=5)
    assert 50 == timing.span_rows
    assert 0 < timing.median_s <= timing.max_s
    assert timing.page_bytes > 50 * 5 * 40  # at least the attribute values of every span


class TestStatsSeries:
    """Queue depth and pass rate over time (the stats charts)."""

    def test_depth_and_pass_rate(self, store: SqlStore) -> None:
        """Open items counted at each bucket end until done; pass rate and categories per day."""
        from review_queue.tables import review_verdicts

        day = 86_400.0
        start = 1_800_000_000.0 - 1_800_000_000.0 % day
        for n, (agent, created) in enumerate((("a", start + 100), ("b", start + day + 100)), start=1):
            store.clock.now = created  # type: ignore[attr-defined]
            store.write([_run(n, ("tool_loop",), agent=agent)])
        with store.engine.begin() as conn:
            conn.execute(
                sa.update(review_items)
                .where(review_items.c.id == 1)
                .values(state="done", completed_at=start + day + 200)
            )
            rows = [
                (1, "a", "pass", [], start + 500),
                (1, "a", "fail", ["loop"], start + day + 500),
                (2, "b", "fail", ["loop", "wrong_tool"], start + day + 600),
            ]
            for i, (item, agent, verdict, categories, at) in enumerate(rows):
                conn.execute(
                    sa.insert(review_verdicts).values(
                        item_id=item, trace_id=f"{item:032x}", agent=agent, reviewer=f"r{i}", verdict=verdict,
                        categories=categories, notes="", corrected_answer=None, created_at=at,
                    )
                )  # fmt: skip
            depth = listing.depth_over_time(conn, start, start + 3 * day, day)
            rates = listing.verdicts_over_time(conn, start, start + 3 * day, day)
        assert [1, 1, 1] == depth["total"]  # a open on day 1, done on day 2 (b opened), b still open on day 3
        assert {"a": [1, 0, 0], "b": [0, 1, 1]} == depth["agents"]
        assert [1.0, 0.0, None] == rates["pass_rate"]
        assert {"a": [1.0, 0.0, None], "b": [None, 0.0, None]} == rates["agents"]
        assert {"loop": [0, 2, 0], "wrong_tool": [0, 1, 0]} == rates["categories"]


def test_run_page_says_what_the_trace_cannot_show(store: SqlStore) -> None:
    """An unflagged run whose model span records no finish reason and no tokens, without content: the run
    page lists what its trace cannot show (and a run whose trace shows everything lists nothing)."""
    bare = (
        Step(f"{0:016x}", None, "invoke_agent a", StepKind.AGENT, T, T + 10**9),
        Step(f"{1:016x}", f"{0:016x}", "chat", StepKind.LLM, T + 10**6, T + 2 * 10**6),
    )
    seen = tuple(replace(s, finish_reasons=("stop",)) if s.kind is StepKind.LLM else s for s in _steps(3))
    runs = [
        _run(1, steps=bare, span_count=2, llm_calls=1),
        _run(2, steps=seen, llm_calls=2, messages=(Message("user", "q"),)),
    ]
    store.write(runs)
    services = build_services(store, admin_token="adm")
    DetailsWriter(store.write_details, Redactor()).write_now(runs)
    client = TestClient(create_api_app(store, admin_token="adm", services=services))
    page = client.get(f"/runs/{1:032x}", headers={"Authorization": "Bearer adm"}).text
    assert 'id="cannot-show"' in page
    assert "this trace cannot show token usage or cost, because its LLM spans record none" in page
    assert "content capture is off and no guardrail span was recorded" in page
    assert 'id="cannot-show"' not in client.get(f"/runs/{2:032x}", headers={"Authorization": "Bearer adm"}).text
