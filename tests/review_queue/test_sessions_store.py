"""Tests of the sessions table on SQLite and PostgreSQL: exact aggregates recomputed from runs,
replays, concurrent writers, feedback, the idle close, session signals, rules and metrics."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

import review_queue.sessions
from review_queue.api import create_api_app
from review_queue.errors import StoreUnavailableError
from review_queue.feedback import FeedbackStore
from review_queue.judges import SqlJudgeSink
from review_queue.model import FeedbackIn
from review_queue.session_close import SessionCloser, SessionMetrics, compile_session_rules
from review_queue.store import SqlStore
from review_queue.tables import review_events, review_items, runs, sessions
from scorers.judge.model import JudgeResult
from scorers.model import Flag, Message, Priority, RunStatus, ScoredRun, Step, StepKind
from scorers.pricing import PriceTable
from tests.support.review_queue import T0, Clock, scored_run

T = TypeVar("T")

S = 1_000_000_000


def _tid(n: int) -> str:
    return f"{n:032x}"


def turn(
    n: int,
    session: str | None,
    *,
    user: str | None = None,
    answer: str = "an answer",
    start: int = 0,
    status: RunStatus = RunStatus.OK,
    span_count: int = 3,
    reasons: tuple[str, ...] = (),
    **fields: Any,
) -> ScoredRun:
    """Turn ``n`` of ``session``: a root agent span and one LLM call (gpt-4o-mini, 1000/100 tokens); the
    user message is unlike any other turn's unless given."""
    start_ns = int(T0 * S) + start * S
    root = Step(f"{n:016x}", None, "invoke_agent support", StepKind.AGENT, start_ns, start_ns + 2 * S)
    llm = Step(
        f"{n + 1:016x}", root.span_id, "chat gpt-4o-mini", StepKind.LLM, start_ns, start_ns + S,
        model="gpt-4o-mini", input_tokens=1000, output_tokens=100,
    )  # fmt: skip
    return scored_run(
        _tid(n),
        reasons=reasons,
        agent="support",
        session_id=session,
        user_id=fields.pop("user_id", "u-1" if session else None),
        start_ns=start_ns,
        end_ns=start_ns + 2 * S,
        input_tokens=1000,
        output_tokens=100,
        llm_calls=1,
        status=status,
        errored=status is RunStatus.ERROR,
        safety_blocked=status is RunStatus.BLOCKED,
        hit_max_iterations=status is RunStatus.LIMIT_HIT,
        steps=(root, llm),
        messages=(Message("user", "earlier"), Message("assistant", "ok"), Message("user", user or f"topic{n} x{n}")),
        final_output=answer,
        span_count=span_count,
        **fields,
    )


@pytest.fixture
def priced(database_url: str, clock: Clock) -> Iterator[SqlStore]:
    """A store that prices runs (gpt-4o-mini: $0.15 / $0.60 per million)."""
    one = SqlStore(database_url, clock=clock, prices=PriceTable())
    yield one
    one.close()


def _session(store: SqlStore, session_id: str) -> dict[str, Any]:
    with store.engine.connect() as conn:
        row = conn.execute(sa.select(sessions).where(sessions.c.session_id == session_id)).mappings().first()
    assert row is not None
    return dict(row)


def _signals(row: dict[str, Any]) -> list[tuple[str, str, int]]:
    return [(s["signal"], s["trace_id"], s["turn"]) for s in row["signals"]]


def test_runs_store_their_session_and_user(priced: SqlStore) -> None:
    priced.write([turn(1, "s-1"), turn(3, None)])
    with priced.engine.connect() as conn:
        found = conn.execute(sa.select(runs.c.trace_id, runs.c.session_id, runs.c.user_id).order_by(runs.c.trace_id))
        assert [(_tid(1), "s-1", "u-1"), (_tid(3), None, None)] == [tuple(r) for r in found]
        assert 1 == conn.execute(sa.select(sa.func.count()).select_from(sessions)).scalar_one()


def test_aggregates_are_recomputed_from_runs(priced: SqlStore) -> None:
    priced.write([turn(1, "s-1", start=0), turn(3, "s-1", start=60, status=RunStatus.ERROR, reasons=("errored",))])
    priced.write([turn(5, "s-1", start=120, status=RunStatus.BLOCKED), turn(7, "s-2", start=5)])
    row = _session(priced, "s-1")
    expected = {
        "session_id": "s-1", "agent": "support", "user_id": "u-1", "turns": 3, "first_ns": int(T0 * S),
        "last_ns": int(T0 * S) + 122 * S, "duration_s": 122.0, "input_tokens": 3000, "output_tokens": 300,
        "turns_flagged": 1, "limit_hits": 0, "blocks": 1, "errors": 1, "thumbs_down": 0, "status": "open",
        "closed_at": None,
    }  # fmt: skip
    assert expected == {k: row[k] for k in expected}
    assert 3 * (1000 * 0.15 + 100 * 0.60) / 1e6 == pytest.approx(row["cost_usd"])
    assert 1 == _session(priced, "s-2")["turns"]


def test_replays_and_rescores_count_each_turn_once(priced: SqlStore) -> None:
    batch = [turn(1, "s-1", start=0), turn(3, "s-1", start=60)]
    priced.write(batch)
    priced.write(batch)  # a replay
    priced.write([turn(3, "s-1", start=60, span_count=1)])  # a re-delivered tail: fewer spans
    priced.write([batch[0], batch[0]])  # the same trace twice in one call
    row = _session(priced, "s-1")
    assert (2, 2000, 200) == (row["turns"], row["input_tokens"], row["output_tokens"])


@pytest.mark.parametrize("writers", [4])
def test_concurrent_writers_of_one_session_lose_no_turn(database_url: str, writers: int) -> None:
    """Turns of one session written at once by several stores (Kafka partitions): every turn counted."""
    stores = [SqlStore(database_url) for _ in range(writers)]
    per_writer = 12
    barrier = threading.Barrier(writers)
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            barrier.wait()
            for k in range(per_writer):
                n = 2 * (index * per_writer + k) + 1
                stores[index].write([turn(n, "shared", start=n), turn(n + 10_000, f"own-{k % 3}", start=n)])
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert [] == errors
        assert writers * per_writer == _session(stores[0], "shared")["turns"]
        assert writers * per_writer == sum(_session(stores[0], f"own-{k}")["turns"] for k in range(3))
    finally:
        for one in stores:
            one.close()


def test_reask_and_human_request_update_as_turns_arrive(store: SqlStore) -> None:
    store.write([turn(1, "s-1", user="How do I reset my password?", start=0)])
    assert [] == _session(store, "s-1")["signals"]
    store.write([turn(3, "s-1", user="how can I reset my password", start=60)])
    store.write([turn(5, "s-1", user="Let me talk to a human, please!", start=120)])
    row = _session(store, "s-1")
    assert [("reask", _tid(3), 2), ("human_request", _tid(5), 3)] == _signals(row)
    reask, human = row["signals"]
    assert (f"{4:016x}", "chat gpt-4o-mini", "user_message") == (reask["span_id"], reask["span_name"], reask["source"])
    assert reask["value"].startswith("repeats turn 1")
    assert "talk to a human" == human["value"]


def test_a_question_after_an_unanswered_turn_is_not_a_reask(store: SqlStore) -> None:
    store.write([turn(1, "s-1", user="reset my password", answer="", start=0)])
    store.write([turn(3, "s-1", user="reset my password", start=60)])
    assert [] == _signals(_session(store, "s-1"))


def test_thumbs_down_before_and_after_the_turn(store: SqlStore, clock: Clock) -> None:
    fb = FeedbackStore(store.engine, (), 0.0, clock=clock, sessions=store)
    fb.record(FeedbackIn(_tid(3), "thumbs", 0.0, "", "app", "f-1"))  # before its run
    store.write([turn(1, "s-1", start=0), turn(3, "s-1", start=60)])
    assert [("thumbs_down", _tid(3), 2)] == _signals(_session(store, "s-1"))
    fb.record(FeedbackIn(_tid(1), "thumbs", 0.0, "", "app", "f-2"))  # after
    row = _session(store, "s-1")
    assert 2 == row["thumbs_down"]
    assert [("thumbs_down", _tid(1), 1), ("thumbs_down", _tid(3), 2)] == _signals(row)
    assert f"{1:016x}" == row["signals"][0]["span_id"]


def test_idle_sessions_close_with_abandonment_and_reopen_on_a_new_turn(store: SqlStore, clock: Clock) -> None:
    registry = CollectorRegistry()
    closer = SessionCloser(store, (), idle_s=1800, metrics=SessionMetrics(registry), clock=clock)
    store.write([turn(1, "gone", start=0), turn(3, "gone", start=60, status=RunStatus.ERROR)])
    store.write([turn(5, "fine", start=0), turn(7, "later", start=1000)])
    clock.now += 1800 + 100
    assert ["fine", "gone"] == sorted(c.row["session_id"] for c in closer.close_idle())
    assert [] == closer.close_idle()  # closed once
    gone = _session(store, "gone")
    assert ("closed", clock()) == (gone["status"], gone["closed_at"])
    assert [("abandoned", _tid(3), 2)] == _signals(gone)
    assert "error" == gone["signals"][0]["value"]
    assert "open" == _session(store, "later")["status"]
    store.write([turn(3, "gone", start=60, status=RunStatus.ERROR)])  # a replay keeps it closed
    assert "closed" == _session(store, "gone")["status"]
    store.write([turn(9, "gone", start=2000)])  # a new turn reopens it
    reopened = _session(store, "gone")
    assert ("open", None, 3, []) == (reopened["status"], reopened["closed_at"], reopened["turns"], reopened["signals"])
    sample = registry.get_sample_value
    assert 2 == sample("vigil_sessions_closed_total", {"agent": "support"})
    assert 1 == sample("vigil_sessions_abandoned_total", {"agent": "support"})
    assert 1 == sample("vigil_sessions_completed_total", {"agent": "support"})
    assert 2 == sample("vigil_session_turns_count", {"agent": "support"})
    assert 3 == sample("vigil_session_turns_sum", {"agent": "support"})
    from prometheus_client.openmetrics.exposition import generate_latest

    exposition = generate_latest(registry).decode()  # the abandoned session's exemplar: its last turn
    assert f'vigil_sessions_abandoned_total{{agent="support"}} 1.0 # {{trace_id="{_tid(3)}"}}' in exposition


def test_a_flagged_session_becomes_one_item_on_its_last_turn(store: SqlStore, clock: Clock) -> None:
    rules = compile_session_rules({"session_random_sample": {"enabled": False}})
    closer = SessionCloser(store, rules, idle_s=60, clock=clock)
    store.write([turn(1, "s-1", start=0), turn(3, "s-1", start=10, status=RunStatus.BLOCKED, reasons=("blocked",))])
    store.write([turn(5, "s-2", start=0, user="talk to a human"), turn(7, "s-2", start=10)])
    store.write([turn(9, "quiet", start=0)])
    clock.now += 600
    assert 3 == len(closer.close_idle())
    with store.engine.connect() as conn:
        items = {r["trace_id"]: r for r in conn.execute(sa.select(review_items)).mappings()}
        events = conn.execute(sa.select(review_events.c.action)).scalars().all()
    assert {_tid(3), _tid(7)} == set(items)
    assert ["blocked", "session_abandoned"] == items[_tid(3)]["reasons"]  # the turn's own item gains the reason
    assert ["session_human_request"] == items[_tid(7)]["reasons"]
    assert ("session", "s-2", "pending", 0.05) == (
        items[_tid(7)]["snapshot"]["subject"],
        items[_tid(7)]["snapshot"]["session_id"],
        items[_tid(7)]["state"],
        items[_tid(7)]["sample_rate"],
    )
    assert ["session_flag", "session_flag"] == events


def test_a_flagged_session_row_counts_its_last_turn_and_stays_exact_under_replay(
    priced: SqlStore, clock: Clock
) -> None:
    """The session rule flags the last turn's run; the stored row counts it at once, a replay of every turn
    (and of the last one again) leaves every column as it was, and the API's flagged filter agrees."""
    rules = compile_session_rules({"session_random_sample": {"enabled": False}})
    closer = SessionCloser(priced, rules, idle_s=60, clock=clock)
    gone = [turn(1, "gone", start=0), turn(3, "gone", start=10, status=RunStatus.ERROR)]  # no run flag: 0 -> 1
    human = [turn(5, "human", start=0, reasons=("errored",)), turn(7, "human", start=10, user="talk to a human")]
    quiet = [turn(9, "quiet", start=0)]
    for batch in (gone, human, quiet):
        priced.write(batch)
    clock.now += 600
    assert 3 == len(closer.close_idle())
    closed_at = clock()
    start = int(T0 * S)
    expected_gone = {
        "session_id": "gone", "agent": "support", "user_id": "u-1", "first_ns": start, "last_ns": start + 12 * S,
        "turns": 2, "duration_s": 12.0, "input_tokens": 2000, "output_tokens": 200,
        "cost_usd": pytest.approx(2 * (1000 * 0.15 + 100 * 0.60) / 1e6), "turns_flagged": 1, "limit_hits": 0,
        "blocks": 0, "errors": 1, "thumbs_down": 0, "status": "closed", "closed_at": closed_at,
        "updated_at": closed_at, "sample_p": 0.05, "sample_drawn": False, "rule_flagged": True,
    }  # fmt: skip
    gone_row = _session(priced, "gone")
    assert set(gone_row) == {c.name for c in sessions.c}
    assert expected_gone == {k: v for k, v in gone_row.items() if k != "signals"}
    assert [("abandoned", _tid(3), 2)] == _signals(gone_row)
    before = {sid: _session(priced, sid) for sid in ("gone", "human", "quiet")}
    assert (1, 2, 0) == tuple(before[sid]["turns_flagged"] for sid in ("gone", "human", "quiet"))

    def flagged_runs(session_id: str) -> int:
        with priced.engine.connect() as conn:
            query = sa.select(sa.func.count()).where(runs.c.session_id == session_id, runs.c.flagged.is_(True))
            return int(conn.execute(query).scalar_one())

    client = TestClient(create_api_app(priced, admin_token=None))

    def listed(flagged: str) -> list[str]:
        page = client.get("/api/v1/sessions", params={"flagged": flagged})
        assert 200 == page.status_code
        return sorted(s["session_id"] for s in page.json()["items"])

    for replay in (gone + human + quiet, [gone[-1]], [human[-1]], [gone[-1], human[-1]]):
        clock.now += 5
        priced.write(replay)
        assert [] == closer.close_idle()  # a replay keeps the sessions closed: nothing closes twice
        for sid, row in before.items():
            if any(one.run.session_id == sid for one in replay):
                row["updated_at"] = clock()  # the replay rewrote the row: the same, newly stamped
            assert row == _session(priced, sid)
            assert flagged_runs(sid) == row["turns_flagged"]
        assert (["gone", "human"], ["quiet"]) == (listed("true"), listed("false"))


def test_a_judge_or_a_reviewer_flagging_a_turn_keeps_its_session_row_exact(priced: SqlStore, clock: Clock) -> None:
    """A failing judge verdict and a send-to-review flag a turn's run outside the session refresh: the row
    counts the turn at once, and a replay of the turns leaves it as it is."""
    batch = [turn(1, "s-1", start=0), turn(3, "s-1", start=10), turn(5, "s-1", start=20)]
    priced.write(batch)
    verdict = JudgeResult(_tid(1), "groundedness", "groundedness@1", "judge-model", 0.1, False, "unsupported")
    assert SqlJudgeSink(priced.engine).write_judgement(
        verdict, batch[0], Flag(("judge_groundedness",), Priority.HIGH, 1.0)
    )
    assert 1 == _session(priced, "s-1")["turns_flagged"]
    assert priced.send_to_review(_tid(3), "reviewer") is not None
    after = _session(priced, "s-1")
    assert 2 == after["turns_flagged"]
    clock.now += 5
    priced.write(batch)  # a replay: the same turns, counted the same
    assert {**after, "updated_at": clock()} == _session(priced, "s-1")


def test_random_sampling_is_per_session_and_deterministic(store: SqlStore, clock: Clock) -> None:
    closer = SessionCloser(store, compile_session_rules(None), sample_rate=0.5, idle_s=60, clock=clock)
    store.write([turn(2 * n + 1, f"s-{n}", start=0) for n in range(40)])
    clock.now += 600
    closer.close_idle()
    with store.engine.connect() as conn:
        items = conn.execute(sa.select(review_items.c.reasons, review_items.c.sample_rate)).all()
    from scorers.rules import sample_point

    expected = sum(1 for n in range(40) if sample_point(f"s-{n}") < 0.5)
    assert 0 < expected < 40
    assert expected == len(items)
    assert all((["session_random_sample"], 0.5) == (list(r), rate) for r, rate in items)


def test_signals_of_turns_older_than_the_window_are_kept(
    database_url: str, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from review_queue import sessions as sessions_module

    monkeypatch.setattr(sessions_module, "WINDOW", 2)  # before the store builds its query
    store = SqlStore(database_url, clock=clock)
    try:
        store.write([turn(1, "s", user="reset my password", start=0)])
        store.write([turn(3, "s", user="reset my password please", start=10)])
        for n in (5, 7, 9):
            store.write([turn(n, "s", start=10 * n)])
        row = _session(store, "s")
        assert (5, [("reask", _tid(3), 2)]) == (row["turns"], _signals(row))
    finally:
        store.close()


def test_purged_turns_leave_their_sessions_exact(store: SqlStore) -> None:
    from review_queue.retention import purge_traces

    store.write([turn(1, "s", start=0), turn(3, "s", start=10, user="talk to a human"), turn(5, "t", start=0)])
    assert 0 == purge_traces(store.engine, [_tid(3)])["sessions"]  # recomputed, not deleted
    row = _session(store, "s")
    assert (1, 1000, []) == (row["turns"], row["input_tokens"], row["signals"])  # its signal went with it
    assert 2 == purge_traces(store.engine, [_tid(1), _tid(5)])["sessions"]
    with store.engine.connect() as conn:
        assert 0 == conn.execute(sa.select(sa.func.count()).select_from(sessions)).scalar_one()


def test_the_upkeep_tick_closes_idle_sessions(store: SqlStore, clock: Clock) -> None:
    from review_queue.maintenance import Maintenance
    from review_queue.services import build_services

    services = build_services(store, clock=clock)
    closer = SessionCloser(store, (), idle_s=60, clock=clock)
    store.write([turn(1, "s", start=0)])
    clock.now += 600
    Maintenance(services.workbench, services.feedback, sessions=closer).tick()
    assert "closed" == _session(store, "s")["status"]


def _until_sqlite_lets_go(call: Callable[[], T], sqlite: bool) -> T:
    """``call()``, again while SQLite answers "database is locked" (up to 60 s).

    SQLite's busy handler is not fair: a writer committing in a loop can keep the one write lock past the
    other connection's busy timeout. That is a refusal the caller retries (the upkeep on its next tick, the
    worker after its back-off), not a deadlock: ``BEGIN IMMEDIATE`` takes the lock up front, so SQLite has
    no lock cycle. On PostgreSQL nothing is retried: a deadlock abort fails the test.
    """
    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except StoreUnavailableError as exc:
            if not sqlite or "database is locked" not in str(exc) or time.monotonic() > deadline:
                raise


def test_closing_while_last_turns_are_rescored_never_deadlocks(database_url: str, clock: Clock) -> None:
    """A scorer re-writing the last turns (a Kafka re-delivery) while the upkeep closes and flags their
    sessions: both finish, whatever the interleaving (PostgreSQL would abort one on a lock cycle)."""
    writer_store, closer_store = SqlStore(database_url, clock=clock), SqlStore(database_url, clock=clock)
    closer = SessionCloser(closer_store, compile_session_rules({"all": {"expr": "turns >= 1"}}), idle_s=60, clock=clock)
    sqlite = database_url.startswith("sqlite")
    errors: list[BaseException] = []
    try:
        for round_ in range(4):
            batch = [turn(100_000 * (round_ + 1) + 2 * k + 1, f"r{round_}-{k}", start=0) for k in range(40)]
            writer_store.write(batch)
            clock.now += 600
            stop = threading.Event()

            def rewrite(batch: list[ScoredRun] = batch, stop: threading.Event = stop) -> None:
                try:
                    while not stop.is_set():
                        _until_sqlite_lets_go(lambda: writer_store.write(batch), sqlite)
                except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                    errors.append(exc)

            thread = threading.Thread(target=rewrite)
            thread.start()
            try:
                assert 40 == len(_until_sqlite_lets_go(closer.close_idle, sqlite))
            finally:
                stop.set()
                thread.join()
            assert [] == errors
    finally:
        writer_store.close()
        closer_store.close()


def test_a_session_keeps_its_user_when_the_latest_turn_names_none(store: SqlStore) -> None:
    store.write([turn(1, "s", start=0), turn(3, "s", start=10, user_id=None)])
    assert ("u-1", 2) == (_session(store, "s")["user_id"], _session(store, "s")["turns"])


def _recomputed(store: SqlStore, session_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The rows the turns query gives for ``session_ids`` (the full recompute), without writing them."""
    with store.engine.connect() as conn:
        rows, _ = store.sessions.refresh(conn, session_ids, 0.0)
        conn.rollback()
    return {row["session_id"]: {k: v for k, v in row.items() if k != "updated_at"} for row in rows}


def test_new_sessions_built_from_their_inserted_runs_equal_the_recompute(
    priced: SqlStore, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session new in a write is built from the runs the write inserted, not read back: the stored row
    equals what the turns query recomputes, for every aggregate, user, signal and turn order, whether the
    session is new, continued, holds a thumbs-down recorded before its run, or a run written twice."""
    fb = FeedbackStore(priced.engine, (), 0.0, clock=clock, sessions=priced)
    fb.record(FeedbackIn(_tid(21), "thumbs", 0.0, "", "app", "f-early"))  # before its run arrives
    priced.write([turn(1, "old", start=0)])
    batch = [
        turn(3, "old", start=30, user="topic1 x1"),  # continues a stored session (read back)
        turn(5, "a", start=0, user_id=None),
        turn(7, "a", start=40, status=RunStatus.ERROR, reasons=("errored",), user_id="u-7"),
        turn(9, "a", start=20, user="topic5 x5", user_id="u-2"),  # between the others: a re-ask of turn 1
        turn(11, "a", start=40, status=RunStatus.BLOCKED),  # same start as turn 7: ordered by trace id
        turn(13, "b", start=5, status=RunStatus.LIMIT_HIT, user="can i talk to a human please"),
        turn(15, "c", start=0),
        turn(15, "c", start=0),  # the same trace twice in one call
        turn(17, None, start=0),
        turn(21, "d", start=3),
    ]
    built: list[str] = []
    fresh_turns = review_queue.sessions._fresh_turns

    def spy(inserted: Any, down: set[str]) -> list[Any]:
        built.append(inserted[0]["session_id"])
        return fresh_turns(inserted, down)

    monkeypatch.setattr(review_queue.sessions, "_fresh_turns", spy)
    priced.write(batch)
    assert ["a", "b", "d"] == sorted(built)  # "old" is stored, "c" had a run written twice: read back
    ids = ["a", "b", "c", "d", "old"]
    recomputed = _recomputed(priced, ids)
    assert set(ids) == set(recomputed)
    for session_id in ids:
        kept = ("updated_at", "sample_p", "sample_drawn", "rule_flagged")  # the design: set at close, never recomputed
        stored = {k: v for k, v in _session(priced, session_id).items() if k not in kept}
        assert recomputed[session_id] == stored, session_id
    a = _session(priced, "a")
    assert (4, "u-1", 1, 1, 1) == (a["turns"], a["user_id"], a["errors"], a["blocks"], a["turns_flagged"])
    assert [("reask", _tid(9), 2)] == _signals(a)
    assert [("human_request", _tid(13), 1)] == _signals(_session(priced, "b"))
    assert 1 == _session(priced, "c")["turns"]
    assert [("thumbs_down", _tid(21), 1)] == _signals(_session(priced, "d"))
    assert 2 == _session(priced, "old")["turns"]


def _flag_state(store: SqlStore, trace_id: str) -> tuple[Any, ...]:
    with store.engine.connect() as conn:
        run = conn.execute(
            sa.select(runs.c.flagged, runs.c.flag_reasons, runs.c.flag_priority).where(runs.c.trace_id == trace_id)
        ).one()
        item = conn.execute(
            sa.select(review_items.c.reasons, review_items.c.priority, review_items.c.snapshot).where(
                review_items.c.trace_id == trace_id
            )
        ).one()
    return (*run, item.reasons, item.priority, item.snapshot.get("subject"), item.snapshot.get("session_id"))


@pytest.mark.parametrize("more_spans", [0, 2], ids=["same-trace", "late-spans"])
def test_a_rescored_last_turn_keeps_the_reasons_added_after_scoring(
    priced: SqlStore, clock: Clock, more_spans: int
) -> None:
    """Reasons added outside the scorer — a session rule, a run judge, a reviewer's send-to-review —
    survive a re-score of the run (its trace re-sent, or late spans): the scorer's reasons are replaced by
    the re-score's, the added ones stay, and the session item stays the session's."""
    rules = compile_session_rules({"session_random_sample": {"enabled": False}})
    closer = SessionCloser(priced, rules, idle_s=60, clock=clock)
    human = [turn(1, "human", start=0), turn(3, "human", start=10, user="talk to a human", reasons=("errored",))]
    judged = [turn(5, "judged", start=0, reasons=("tool_errors",))]
    manual = [turn(7, "manual", start=0)]
    priced.write(human + judged + manual)
    verdict = JudgeResult(_tid(5), "groundedness", "groundedness@1", "judge-model", 0.1, False, "unsupported")
    assert not SqlJudgeSink(priced.engine).write_judgement(
        verdict, judged[0], Flag(("judge_groundedness",), Priority.HIGH, 1.0)
    )
    sent = priced.send_to_review(_tid(7), "reviewer")
    assert sent is not None
    assert sent[1]
    clock.now += 600
    closer.close_idle()
    session_state = (True, ["errored", "session_human_request"], "normal")
    assert (*session_state, ["errored", "session_human_request"], "normal", "session", "human") == _flag_state(
        priced, _tid(3)
    )
    clock.now += 5
    rescored = [
        turn(3, "human", start=10, user="talk to a human", reasons=("loop",), span_count=3 + more_spans),
        turn(5, "judged", start=0, reasons=("tool_errors",), span_count=3 + more_spans),
        turn(7, "manual", start=0, reasons=("slow",), span_count=3 + more_spans),
    ]
    priced.write(rescored)
    assert (True, ["loop", "session_human_request"], "normal", ["loop", "session_human_request"], "normal") == (
        _flag_state(priced, _tid(3))[:5]
    )
    assert ("session", "human") == _flag_state(priced, _tid(3))[5:]
    assert (True, ["tool_errors", "judge_groundedness"], "high") == _flag_state(priced, _tid(5))[:3]
    assert (["tool_errors", "judge_groundedness"], "high", None) == _flag_state(priced, _tid(5))[3:6]
    assert (True, ["slow", "manual"]) == _flag_state(priced, _tid(7))[:2]
    assert ["slow", "manual"] == _flag_state(priced, _tid(7))[3]
    assert 1 == _session(priced, "human")["turns_flagged"]


def test_migration_0014_fills_flag_added_from_the_audit_trail(
    priced: SqlStore, clock: Clock, database_url: str
) -> None:
    """A database flagged by a session rule, a run judge and a send-to-review before ``0014`` gets the
    ``flag_added`` the live code writes, read back from the review events and judge verdicts."""
    from alembic import command
    from alembic.config import Config

    from review_queue.store import MIGRATIONS_DIR, upgrade_database

    rules = compile_session_rules({"session_random_sample": {"enabled": False}})
    batch = [turn(1, "human", start=0, user="talk to a human", reasons=("errored",)), turn(5, "j"), turn(7, "m")]
    priced.write(batch)
    verdict = JudgeResult(_tid(5), "groundedness", "groundedness@1", "judge-model", 0.1, False, "unsupported")
    SqlJudgeSink(priced.engine).write_judgement(verdict, batch[1], Flag(("judge_groundedness",), Priority.HIGH, 1.0))
    priced.send_to_review(_tid(7), "reviewer")
    clock.now += 600
    SessionCloser(priced, rules, idle_s=60, clock=clock).close_idle()

    def added() -> dict[str, Any]:
        with priced.engine.connect() as conn:
            return {str(tid): extra for tid, extra in conn.execute(sa.select(runs.c.trace_id, runs.c.flag_added))}

    live = added()
    assert {
        _tid(1): {"reasons": ["session_human_request"], "priority": "normal", "session_id": "human"},
        _tid(5): {"reasons": ["judge_groundedness"], "priority": "high"},
        _tid(7): {"reasons": ["manual"], "priority": "normal"},
    } == live
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with priced.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0013")
    upgrade_database(database_url)
    assert live == added()


class TestDemoSeeds:
    """``vigil run --demo`` draws a seed whose session ids the database has not stored."""

    def test_has_session_prefix(self, store: SqlStore) -> None:
        """A range of the session index: the prefix matches, its neighbours do not."""
        store.write([scored_run(session_id="s41c7"), scored_run(session_id="s4c1")])
        assert store.has_session_prefix("s41c")
        assert store.has_session_prefix("s4c")
        assert not store.has_session_prefix("s42c")
        assert not store.has_session_prefix("s41d")
        assert not store.has_session_prefix("s1c")

    def test_taken_seed_drawn_again(self, store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> None:
        """A seed an earlier start played is drawn again; a fixed ``--demo-seed`` is kept as given."""
        from collector.demo import plan
        from vigil.run import demo_seed_for

        store.write([scored_run(session_id=f"{plan.session_prefix(7)}0")])
        draws = iter([7, 7, 8])
        monkeypatch.setattr(plan.secrets, "randbelow", lambda _n: next(draws))
        assert 8 == demo_seed_for(store, None)
        assert 7 == demo_seed_for(store, 7)
