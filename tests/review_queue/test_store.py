"""Tests of review_queue.store (SqlStore, migrations) on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from review_queue import store as store_module
from review_queue.errors import StoreUnavailableError
from review_queue.model import ItemState, WriteOutcome
from review_queue.snapshot import DESIGN_COLUMNS, item_row, run_row
from review_queue.store import MIGRATIONS_DIR, InvalidCursorError, SqlStore, create_store_engine, upgrade_database
from review_queue.tables import metadata, review_items, review_verdicts, runs, verdict_run
from scorers.model import Message, Priority, RunStatus, SampleDesign, ScoredRun, Step, StepKind, ToolCall
from tests.support.review_queue import (
    T0,
    Clock,
    InMemoryRunSink,
    postgres_scratch_url,
    postgres_unreachable,
    scored_run,
)

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

CLOSED_PORT_URL = "postgresql+psycopg://postgres@127.0.0.1:1/test"


def _head() -> str:
    """The newest revision of the shipped migrations (the chain grows with each issue)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


@contextmanager
def _disposing(engine: sa.Engine) -> Iterator[sa.Engine]:
    try:
        yield engine
    finally:
        engine.dispose()


def _tid(n: int) -> str:
    return f"{n:032x}"


def _set_state(store: SqlStore, trace_id: str, state: ItemState) -> None:
    with store.engine.begin() as conn:
        conn.execute(sa.update(review_items).where(review_items.c.trace_id == trace_id).values(state=state.value))


def _count(store: SqlStore, table: sa.Table) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def _upsert_paths(backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[bool, SqlStore]]:
    """A fresh migrated store for each upsert path, the driver-level one first (``raw`` True), then
    SQLAlchemy's executemany (the raw upsert disabled); each is closed when the caller is done with it."""
    with ExitStack() as stack:
        for name, raw in (("raw", True), ("sqlalchemy", False)):
            if backend == "sqlite":
                url = f"sqlite:///{tmp_path / name}.db"
            else:
                reason = postgres_unreachable(POSTGRES_URL)
                assert reason is None, f"PostgreSQL at {POSTGRES_URL} is unreachable: {reason}"
                url = stack.enter_context(postgres_scratch_url(POSTGRES_URL))
            upgrade_database(url)
            if not raw:
                monkeypatch.setattr(store_module._RawUpsert, "build", classmethod(lambda *_: None))
            one = SqlStore(url, clock=Clock())
            try:
                yield raw, one
            finally:
                one.close()


def _write_at_old_revision(engine: sa.Engine, scored: ScoredRun) -> None:
    """Insert ``scored``'s run and item rows with the columns the database's (older) schema has."""
    old = sa.MetaData()
    old.reflect(engine, only=["runs", "review_items"])
    assert scored.flag is not None
    item = item_row(scored, scored.flag, 1.0)
    rows = ((old.tables["runs"], run_row(scored, 1.0)), (old.tables["review_items"], item))
    with engine.begin() as conn:
        for table, row in rows:
            conn.execute(sa.insert(table).values({k: v for k, v in row.items() if k in table.c}))


class TestMigration:
    """The Alembic migration is the only thing that creates the schema."""

    def test_creates_tables_at_head(self, database_url: str) -> None:
        """After upgrade_database both tables and the alembic version row exist."""
        engine = create_store_engine(database_url)
        with engine.connect() as conn:
            names = set(sa.inspect(conn).get_table_names())
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        engine.dispose()
        assert {"runs", "review_items", "alembic_version"} <= names
        assert _head() == version

    def test_schema_matches_tables_module(self, database_url: str) -> None:
        """Autogenerate finds no difference between the migrated schema and tables.py."""
        engine = create_store_engine(database_url)
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    "include_name": lambda name, kind, _parent: name != "ix_runs_flag_reasons",
                },
            )
            diffs = compare_metadata(context, metadata)
        engine.dispose()
        assert [] == diffs

    @pytest.mark.integration
    def test_snapshots_compressed_with_lz4_on_postgresql(self) -> None:
        """PostgreSQL stores new review snapshots with lz4 (cheaper than pglz)."""
        reason = postgres_unreachable(POSTGRES_URL)
        assert reason is None, f"PostgreSQL at {POSTGRES_URL} is unreachable: {reason}"
        with postgres_scratch_url(POSTGRES_URL) as url:
            upgrade_database(url)
            self._check_lz4(url)

    @staticmethod
    def _check_lz4(database_url: str) -> None:
        store = SqlStore(database_url)
        store.write([scored_run(_tid(7), reasons=["r"], final_output="x" * 20_000)])  # large enough for TOAST
        with store.engine.connect() as conn:
            column = conn.execute(
                sa.text(
                    "SELECT attcompression FROM pg_attribute"
                    " WHERE attrelid = 'review_items'::regclass AND attname = 'snapshot'"
                )
            ).scalar_one()
            method = conn.execute(
                sa.text("SELECT pg_column_compression(snapshot) FROM review_items WHERE trace_id = :t"), {"t": _tid(7)}
            ).scalar_one()
        store.close()
        assert ("l", "lz4") == (column, method)

    @pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
    def test_verdicts_before_0011_stay_run_verdicts(self, backend: str, tmp_path: Path) -> None:
        """A verdict stored at revision 0010 is, after 0011, a ``run`` verdict applying to its item's run."""
        with ExitStack() as stack:
            url = f"sqlite:///{tmp_path / 'old.db'}"
            if backend == "postgresql":
                url = stack.enter_context(postgres_scratch_url(POSTGRES_URL))
            engine = stack.enter_context(_disposing(create_store_engine(url)))
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "0010")
            _write_at_old_revision(engine, scored_run(_tid(1), reasons=["r"]))
            with engine.begin() as conn:
                conn.execute(
                    sa.text(
                        "INSERT INTO review_verdicts (item_id, trace_id, agent, reviewer, verdict, categories, notes, "
                        "created_at) VALUES (1, :t, 'a', 'alice', 'fail', '[]', '', 1.0)"
                    ),
                    {"t": _tid(1)},
                )
            upgrade_database(url)
            with engine.connect() as conn:
                rows = conn.execute(sa.select(review_verdicts.c.target, verdict_run)).all()
        assert [("run", _tid(1))] == [tuple(r) for r in rows]

    def test_upgrade_is_idempotent(self, database_url: str) -> None:
        """Running the migration again changes nothing and does not fail."""
        upgrade_database(database_url)
        store = SqlStore(database_url)
        assert store.ping()
        store.close()

    def test_head_revision_is_alembic_head(self) -> None:
        """The revision the start-up check compares with is the newest shipped migration."""
        assert _head() == store_module.HEAD_REVISION

    def test_current_database_is_not_handed_to_alembic(self, tmp_path: Path) -> None:
        """A process whose database is current never imports Alembic; a new one is migrated by a child."""
        url = f"sqlite:///{tmp_path / 'v.db'}"
        check = (
            "import sys; from review_queue.store import upgrade_database_in_child as up, upgrade_database as up2;"
            f"a = up({url!r}); b = up({url!r}); up2({url!r}); print(a, b, 'alembic' in sys.modules)"
        )
        done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True, timeout=120)
        assert "True False False" == done.stdout.strip().splitlines()[-1]
        engine = create_store_engine(url)
        with engine.connect() as conn:
            version = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()
        engine.dispose()
        assert _head() == version

    def test_database_behind_is_migrated_by_the_child(self, tmp_path: Path) -> None:
        """A database at an older revision is brought to the head by the child, its rows kept."""
        url = f"sqlite:///{tmp_path / 'old.db'}"
        with _disposing(create_store_engine(url)) as engine:
            config = Config()
            config.set_main_option("script_location", str(MIGRATIONS_DIR))
            with engine.begin() as conn:
                config.attributes["connection"] = conn
                command.upgrade(config, "0010")
            with engine.begin() as conn:
                conn.execute(sa.text("UPDATE alembic_version SET version_num = '0010'"))
            assert store_module.upgrade_database_in_child(url) is True
            with engine.connect() as conn:
                assert _head() == conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one()

    def test_unreachable_database_in_child_path(self) -> None:
        """An unreachable database is a StoreUnavailableError, as with the in-process migration."""
        with pytest.raises(StoreUnavailableError, match="cannot migrate"):
            store_module.upgrade_database_in_child(CLOSED_PORT_URL)

    def test_in_memory_sqlite_via_store_upgrade(self) -> None:
        """SqlStore.upgrade migrates an in-memory SQLite database the store can then use."""
        store = SqlStore("sqlite://")
        assert store.ping() is False
        store.upgrade()
        assert [WriteOutcome(_tid(1), True, False)] == store.write([scored_run(_tid(1))])
        store.close()


class TestWrite:
    """SqlStore.write is an idempotent, transactional upsert keyed by trace id."""

    def test_same_run_three_times(self, store: SqlStore) -> None:
        """Three writes of one flagged run give one row, one item and new_* only the first time."""
        run = scored_run(_tid(1), reasons=["rule_a"])
        outcomes = [store.write([run])[0] for _ in range(3)]
        assert [
            WriteOutcome(_tid(1), True, True),
            WriteOutcome(_tid(1), False, False),
            WriteOutcome(_tid(1), False, False),
        ] == outcomes
        assert 1 == _count(store, runs)
        assert 1 == _count(store, review_items)

    def test_sample_design_is_the_first_decisions(self, store: SqlStore) -> None:
        """The design columns are written by the first decision; a re-score or a late flag never changes
        them, and a run first written without a design takes the first one it gets."""

        def design(trace_id: str) -> tuple[object, ...]:
            with store.engine.connect() as conn:
                row = conn.execute(sa.select(*(runs.c[n] for n in DESIGN_COLUMNS)).where(runs.c.trace_id == trace_id))
                return tuple(row.one())

        first = dataclasses.replace(scored_run(_tid(7)), design=SampleDesign(0.05, True, False))
        store.write([first])
        later = scored_run(_tid(7), reasons=["judge_low"], span_count=3)
        store.write([dataclasses.replace(later, design=SampleDesign(0.0, False, True, True))])
        assert (0.05, True, False, False) == design(_tid(7))
        store.write([scored_run(_tid(8))])
        assert (None, None, None, None) == design(_tid(8))
        store.write([dataclasses.replace(scored_run(_tid(8)), design=SampleDesign(0.1, False, False))])
        assert (0.1, False, False, False) == design(_tid(8))

    def test_empty_batch(self, store: SqlStore) -> None:
        """An empty batch writes nothing and returns no outcomes."""
        assert [] == store.write([])

    def test_rescore_updates_fields_and_version(self, store: SqlStore, clock: Clock) -> None:
        """A re-score replaces the fields, bumps version and keeps created_at."""
        store.write([scored_run(_tid(2), scores={"latency": 0.1}, tool_calls=1)])
        clock.now += 10
        store.write([scored_run(_tid(2), scores={"latency": 0.9}, tool_calls=4, status=RunStatus.ERROR)])
        run = store.get_run(_tid(2))
        assert run is not None
        fields = ("version", "tool_calls", "status", "scores")
        assert (2, 4, "error", {"latency": 0.9}) == tuple(run[name] for name in fields)
        assert T0 == run["created_at"].timestamp()
        assert T0 + 10 == run["updated_at"].timestamp()

    def test_flag_added_on_rescore(self, store: SqlStore) -> None:
        """A run first unflagged, then flagged on re-score reports new_flag once."""
        first = store.write([scored_run(_tid(3))])
        second = store.write([scored_run(_tid(3), reasons=["slow"], priority=Priority.HIGH)])
        third = store.write([scored_run(_tid(3), reasons=["slow"], priority=Priority.HIGH)])
        assert [
            WriteOutcome(_tid(3), True, False),
            WriteOutcome(_tid(3), False, True),
            WriteOutcome(_tid(3), False, False),
        ] == [*first, *second, *third]
        assert 1 == _count(store, review_items)

    def test_rescore_replaces_decision_keeps_done_state(self, store: SqlStore) -> None:
        """A re-scored flagged run takes the new reasons and priority; a done item stays done."""
        store.write([scored_run(_tid(4), reasons=["random_sample"], priority=Priority.LOW)])
        _set_state(store, _tid(4), ItemState.DONE)
        store.write([scored_run(_tid(4), reasons=["loop", "random_sample"], priority=Priority.HIGH)])
        item = (store.get_run(_tid(4)) or {})["review_item"]
        assert ("done", "high", ["loop", "random_sample"]) == tuple(item[k] for k in ("state", "priority", "reasons"))

    def test_flag_is_sticky(self, store: SqlStore) -> None:
        """A re-score without a flag keeps the earlier flag and its item."""
        store.write([scored_run(_tid(5), reasons=["loop"], priority=Priority.HIGH, sample_rate=0.1)])
        outcome = store.write([scored_run(_tid(5))])
        run = store.get_run(_tid(5)) or {}
        assert [WriteOutcome(_tid(5), False, False)] == outcome
        assert {"reasons": ["loop"], "priority": "high", "sample_rate": 0.1} == run["flag"]
        assert run["review_item"] is not None

    def test_duplicates_in_one_batch(self, store: SqlStore) -> None:
        """The same trace twice in one call is applied in order, like two calls."""
        outcomes = store.write([scored_run(_tid(6)), scored_run(_tid(7)), scored_run(_tid(6), reasons=["x"])])
        assert [
            WriteOutcome(_tid(6), True, False),
            WriteOutcome(_tid(7), True, False),
            WriteOutcome(_tid(6), False, True),
        ] == outcomes
        assert 2 == (store.get_run(_tid(6)) or {})["version"]

    def test_snapshot_holds_normalised_run(self, store: SqlStore) -> None:
        """The item snapshot keeps steps, tool calls with arguments/results/errors, messages and output."""
        run = scored_run(
            _tid(8),
            reasons=["tool_errors"],
            scores={"tool_error_rate": 0.5},
            final_output="It is sunny.",
            steps=(Step("s1", None, "chat", StepKind.LLM, model="gpt-4o", finish_reasons=("stop",)),),
            tools=(
                ToolCall("s2", "weather", "c1", '{"city":"Paris"}', "sunny"),
                ToolCall("s3", "weather", "c2", '{"city":""}', None, "ValueError: empty city"),
            ),
            messages=(Message("user", "Weather in Paris?"),),
        )
        store.write([run])
        snapshot = (store.get_run(_tid(8)) or {})["review_item"]["snapshot"]
        assert "ValueError: empty city" == snapshot["tools"][1]["error"]
        assert '{"city":"Paris"}' == snapshot["tools"][0]["arguments"]
        assert [{"role": "user", "content": "Weather in Paris?"}] == snapshot["messages"]
        assert ("It is sunny.", {"tool_error_rate": 0.5}) == (snapshot["final_output"], snapshot["scores"])
        assert ["llm", ["stop"]] == [snapshot["steps"][0]["kind"], snapshot["steps"][0]["finish_reasons"]]

    def test_outcomes_match_in_memory_fake(self, store: SqlStore) -> None:
        """InMemoryRunSink reports the same outcomes as SqlStore for the same writes."""
        fake = InMemoryRunSink()
        batches = [
            [scored_run(_tid(10)), scored_run(_tid(11), reasons=["a"])],
            [scored_run(_tid(10), reasons=["b"]), scored_run(_tid(11)), scored_run(_tid(12))],
            [scored_run(_tid(12)), scored_run(_tid(12), reasons=["c"]), scored_run(_tid(10))],
        ]
        for batch in batches:
            assert fake.write(batch) == store.write(batch)
        assert [_tid(11), _tid(10), _tid(12)] == fake.flagged()

    def test_bad_values_do_not_fail_the_batch(self, store: SqlStore) -> None:
        """Over-long or NUL-bearing text is cut or replaced and NaN scores dropped, not a failed write."""
        tools = (ToolCall("s1", "read", result="bin\x00ary"),)
        scores = {"ok": 1.0, "bad": float("nan")}
        store.write([scored_run(_tid(13), agent="a\x00" * 200, scores=scores, reasons=["r"], tools=tools)])
        run = store.get_run(_tid(13)) or {}
        assert (256, "a\ufffd", {"ok": 1.0}) == (len(run["agent"]), run["agent"][:2], run["scores"])
        assert "bin\ufffdary" == run["review_item"]["snapshot"]["tools"][0]["result"]

    def test_json_beyond_orjson(self) -> None:
        """Values orjson refuses (huge ints, lone surrogates, non-string keys) are encoded by the stdlib."""
        for value in ({"big": 2**70}, ["half \ud800 pair"], {1: "one"}, {"nul": "a\x00b", "x": [1.5, None, True]}):
            text = store_module._dumps(value)
            assert json.loads(text) == json.loads(json.dumps(_without_nul_for_test(value)))
            assert "\\u0000" not in text
            assert " " not in text.replace("half \ud800 pair", "")

    @pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
    def test_raw_path_stores_what_sqlalchemy_stores(
        self, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The driver-level upsert (SQLite executemany, PostgreSQL executemany on a raw cursor)
        leaves exactly the rows and outcomes SQLAlchemy's executemany leaves."""
        tools = (ToolCall("s1", "read", result="bin\x00ary", error="E: x"),)
        batches = [
            [scored_run(_tid(20), reasons=["r"], tools=tools), scored_run(_tid(21), agent="b" * 300)],
            [scored_run(_tid(21), reasons=["s", "t"]), scored_run(_tid(20)), scored_run(_tid(22), scores={"x": 0.5})],
            [scored_run(_tid(n), reasons=["r"] if n % 2 else ()) for n in range(30, 37)]
            + [scored_run(_tid(22), scores={"x": 0.25}), scored_run(_tid(22))],
        ]
        tables = []
        for raw, one in _upsert_paths(backend, tmp_path, monkeypatch):
            outcomes = [one.write(batch) for batch in batches]
            assert raw is all(path is not None for path in one._raw.values())  # the path under test was taken
            with one.engine.connect() as conn:
                rows = [
                    conn.exec_driver_sql(f"SELECT * FROM {t} ORDER BY trace_id").fetchall()
                    for t in ("runs", "review_items")
                ]
            tables.append((outcomes, rows))
        assert tables[0] == tables[1]
        assert 10 == len(tables[0][1][0])

    @pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
    def test_details_raw_path_stores_what_sqlalchemy_stores(
        self, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """run_details rows go through the driver-level upsert too and leave exactly what SQLAlchemy's
        executemany leaves: bodies byte for byte, a tail (fewer spans) ignored, more spans replacing."""

        def row(n: int, spans: int, body: bytes, final: str | None = None) -> dict[str, object]:
            return {
                "final_output": final,
                "trace_id": _tid(n),
                "span_count": spans,
                "codec": "json",
                "body": body,
                "created_at": 1.5 + spans,
            }

        batches = [
            [row(1, 5, b'{"a":1}', "bye"), row(2, 3, bytes(range(256)))],
            [row(1, 2, b'{"tail":1}'), row(3, 1, b"{}")],
            [row(2, 4, b'{"more":1}', "x\u00e9"), row(1, 5, b'{"same":1}')],
        ]
        tables = []
        for raw, one in _upsert_paths(backend, tmp_path, monkeypatch):
            for batch in batches:
                one.write_details([dict(r) for r in batch])
            assert raw is all(path is not None for path in one._raw.values())  # the path under test was taken
            with one.engine.connect() as conn:
                rows = conn.exec_driver_sql(
                    "SELECT trace_id, span_count, codec, body, created_at, final_output FROM run_details"
                    " ORDER BY trace_id"
                ).fetchall()
            tables.append([tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows])
        assert tables[0] == tables[1]
        expected = [
            (_tid(1), 5, "json", b'{"same":1}', 6.5, None),
            (_tid(2), 4, "json", b'{"more":1}', 5.5, "x\u00e9"),
            (_tid(3), 1, "json", b"{}", 2.5, None),
        ]
        assert expected == tables[0]

    def test_fewer_spans_never_replace_a_stored_scoring(self, store: SqlStore) -> None:
        """A re-delivered tail (fewer spans) changes neither the run nor its item; more spans do."""
        tid = _tid(40)
        full = scored_run(tid, reasons=["r"], span_count=12, llm_calls=5, agent="full")
        tail = scored_run(tid, reasons=["s"], span_count=3, llm_calls=1, agent="tail")
        more = scored_run(tid, reasons=["t"], span_count=13, llm_calls=6, agent="more")
        assert [WriteOutcome(tid, True, True)] == store.write([full])
        before = store.get_run(tid) or {}
        assert [WriteOutcome(tid, False, False)] == store.write([tail])
        run = store.get_run(tid) or {}
        assert ("full", 5, 2, ["r"]) == (run["agent"], run["llm_calls"], run["version"], run["flag"]["reasons"])
        assert before["review_item"]["snapshot"] == run["review_item"]["snapshot"]
        assert [WriteOutcome(tid, False, False)] == store.write([more])
        run = store.get_run(tid) or {}
        assert ("more", 6, 3, ["t"]) == (run["agent"], run["llm_calls"], run["version"], run["flag"]["reasons"])
        assert before["review_item"]["snapshot"] != run["review_item"]["snapshot"]

    def test_tail_never_creates_an_item(self, store: SqlStore) -> None:
        """A flagged tail of a run stored unflagged from more spans creates no review item."""
        tid = _tid(41)
        store.write([scored_run(tid, span_count=12)])
        assert [WriteOutcome(tid, False, False)] == store.write([scored_run(tid, reasons=["r"], span_count=2)])
        run = store.get_run(tid) or {}
        assert (None, None) == (run["flag"], run.get("review_item"))

    def test_concurrent_writers(self, store: SqlStore) -> None:
        """Threads writing overlapping batches leave one row per trace id and lose no update."""
        batches = [[scored_run(_tid(n), reasons=["r"]) for n in range(k, k + 20)] for k in range(0, 80, 10)]
        with ThreadPoolExecutor(4) as pool:
            outcomes = [o for result in pool.map(store.write, batches) for o in result]
        assert (160, 90, 90) == (len(outcomes), sum(o.new_run for o in outcomes), sum(o.new_flag for o in outcomes))
        assert (90, 90) == (_count(store, runs), _count(store, review_items))


class TestQueue:
    """list_queue returns pending items by priority, then age."""

    def test_priority_then_age(self, store: SqlStore, clock: Clock) -> None:
        """High before normal before low; within a priority the oldest first; done items excluded."""
        plan = [(1, Priority.LOW), (2, Priority.HIGH), (3, Priority.NORMAL), (4, Priority.HIGH), (5, Priority.LOW)]
        for n, priority in plan:
            clock.now += 1
            store.write([scored_run(_tid(n), reasons=["r"], priority=priority)])
        _set_state(store, _tid(5), ItemState.DONE)
        items, cursor = store.list_queue(limit=10)
        assert [_tid(2), _tid(4), _tid(3), _tid(1)] == [item["trace_id"] for item in items]
        assert cursor is None

    def test_cursor_pages_without_gaps(self, store: SqlStore, clock: Clock) -> None:
        """Paging the queue three at a time returns every pending item once, in order."""
        for n in range(11):
            clock.now += n % 3
            store.write([scored_run(_tid(n), reasons=["r"], priority=list(Priority)[n % 3])])
        expected = [item["trace_id"] for item in store.list_queue(limit=100)[0]]
        seen, cursor = [], None
        while True:
            items, cursor = store.list_queue(limit=3, cursor=cursor)
            seen += [item["trace_id"] for item in items]
            if cursor is None:
                break
        assert expected == seen
        assert 11 == len(set(seen))

    def test_queue_stats(self, store: SqlStore, clock: Clock) -> None:
        """queue_stats counts items and finds the oldest per state and priority."""
        for n, priority in [(1, Priority.HIGH), (2, Priority.HIGH), (3, Priority.LOW)]:
            clock.now += 5
            store.write([scored_run(_tid(n), reasons=["r"], priority=priority)])
        _set_state(store, _tid(3), ItemState.DONE)
        stats = {(s.state, s.priority): (s.count, s.oldest_created_at) for s in store.queue_stats()}
        assert {
            (ItemState.PENDING, Priority.HIGH): (2, T0 + 5),
            (ItemState.DONE, Priority.LOW): (1, T0 + 15),
        } == stats


class TestListRuns:
    """list_runs pages newest first with a keyset cursor and filters."""

    def _fill(self, store: SqlStore, clock: Clock, count: int) -> None:
        for start in range(0, count, 4):
            clock.now += 1  # four runs share each created_at: ties break on trace id
            store.write([scored_run(_tid(n), agent=f"a{n % 2}") for n in range(start, min(count, start + 4))])

    def test_pages_have_no_duplicates_or_gaps(self, store: SqlStore, clock: Clock) -> None:
        """Walking 23 runs five at a time yields each run exactly once, newest first."""
        self._fill(store, clock, 23)
        seen, cursor, pages = [], None, 0
        while True:
            items, cursor = store.list_runs(limit=5, cursor=cursor)
            seen += [item["trace_id"] for item in items]
            pages += 1
            if cursor is None:
                break
        assert 5 == pages
        assert sorted(seen, key=lambda t: (-(int(t, 16) // 4), -int(t, 16))) == seen
        assert {_tid(n) for n in range(23)} == set(seen)
        assert 23 == len(seen)

    def test_stable_under_inserts(self, store: SqlStore, clock: Clock) -> None:
        """Runs inserted between pages neither repeat nor hide older runs."""
        self._fill(store, clock, 10)
        first, cursor = store.list_runs(limit=4)
        clock.now += 100
        store.write([scored_run(_tid(n)) for n in range(100, 105)])
        rest = []
        while cursor is not None:
            items, cursor = store.list_runs(limit=4, cursor=cursor)
            rest += items
        assert {_tid(n) for n in range(10)} == {item["trace_id"] for item in first + rest}
        assert 10 == len(first + rest)

    def test_filters(self, store: SqlStore, clock: Clock) -> None:
        """agent, flagged and reason filters select the matching runs only."""
        self._fill(store, clock, 6)
        store.write([scored_run(_tid(1), agent="a1", reasons=["loop", "slow"])])
        store.write([scored_run(_tid(2), agent="a0", reasons=["slow"])])

        def ids(agent: str | None = None, flagged: bool | None = None, reason: str | None = None) -> set[str]:
            return {item["trace_id"] for item in store.list_runs(agent, flagged, reason, limit=50)[0]}

        assert {_tid(1), _tid(3), _tid(5)} == ids(agent="a1")
        assert {_tid(1), _tid(2)} == ids(flagged=True)
        assert {_tid(0), _tid(3), _tid(4), _tid(5)} == ids(flagged=False)
        assert {_tid(1)} == ids(reason="loop")
        assert {_tid(1), _tid(2)} == ids(reason="slow")
        assert {_tid(2)} == ids(reason="slow", agent="a0")
        assert set() == ids(reason="missing")

    def test_invalid_cursor(self, store: SqlStore) -> None:
        """A cursor that was not issued by list_runs raises InvalidCursorError."""
        with pytest.raises(InvalidCursorError):
            store.list_runs(cursor="not-a-cursor!")
        store.write([scored_run(_tid(1), reasons=["r"]), scored_run(_tid(2), reasons=["r"])])
        _items, queue_cursor = store.list_queue(limit=1)
        assert queue_cursor is not None
        with pytest.raises(InvalidCursorError):
            store.list_runs(cursor=queue_cursor)

    def test_get_run_missing(self, store: SqlStore) -> None:
        """get_run of an unknown trace id returns None."""
        assert store.get_run(_tid(999)) is None


class TestUnavailable:
    """A database that cannot be reached raises StoreUnavailableError and writes nothing."""

    def test_closed_port(self) -> None:
        """Writes and reads on a closed PostgreSQL port raise StoreUnavailableError; ping is False."""
        store = SqlStore(CLOSED_PORT_URL, retry_after_s=3.0)
        with pytest.raises(StoreUnavailableError) as info:
            store.write([scored_run(_tid(1))])
        with pytest.raises(StoreUnavailableError):
            store.get_run(_tid(1))
        assert (3.0, False) == (info.value.retry_after, store.ping())
        store.close()

    def test_upgrade_closed_port(self) -> None:
        """upgrade_database on a closed port raises StoreUnavailableError."""
        with pytest.raises(StoreUnavailableError):
            upgrade_database(CLOSED_PORT_URL)

    def test_sqlite_unopenable(self, tmp_path: Path) -> None:
        """A SQLite file in a missing directory is unavailable, not a crash."""
        store = SqlStore(f"sqlite:///{tmp_path / 'missing' / 'vigil.db'}")
        with pytest.raises(StoreUnavailableError):
            store.write([scored_run(_tid(1))])
        store.close()

    def test_unmigrated_sqlite_is_not_an_outage(self, tmp_path: Path) -> None:
        """A missing table is a deployment error: it propagates and ping reports not ready."""
        store = SqlStore(f"sqlite:///{tmp_path / 'empty.db'}")
        with pytest.raises(sa.exc.OperationalError):
            store.write([scored_run(_tid(1))])
        assert store.ping() is False
        store.close()

    def test_in_memory_fake_failure(self) -> None:
        """InMemoryRunSink.fail_next raises StoreUnavailableError, then writes again."""
        sink = InMemoryRunSink()
        sink.fail_next(1, retry_after=0.5)
        with pytest.raises(StoreUnavailableError):
            sink.write([scored_run(_tid(1))])
        assert [WriteOutcome(_tid(1), True, False)] == sink.write([scored_run(_tid(1))])


def _without_nul_for_test(value: object) -> object:
    """What the store keeps of a value: NUL replaced by U+FFFD (PostgreSQL JSONB refuses NUL)."""
    return json.loads(json.dumps(value).replace("\\u0000", "\\ufffd"))
