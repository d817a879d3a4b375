"""Tests of review_queue.workbench: claim/lease/release/skip/requeue/assign, verdicts, blind review, audit.

Every test runs on SQLite and on the local PostgreSQL.
"""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from review_queue.errors import ConflictError, InvalidInputError, NotFoundError
from review_queue.model import Principal, Role, VerdictIn, VerdictTarget, VerdictValue
from review_queue.store import SqlStore, upgrade_database
from review_queue.workbench import ReviewObserver, Workbench
from scorers.model import Priority, RunStatus
from tests.support.review_queue import Clock, postgres_scratch_url, postgres_unreachable, scored_run
from tests.support.sessions import flagged_session

ADMIN = Principal("root", Role.ADMIN)

POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
PASS = VerdictIn(VerdictValue.PASS)


@pytest.fixture
def bench(store: SqlStore, clock: Clock) -> Workbench:
    """A workbench with a 60 s lease on the store's engine."""
    return Workbench(store.engine, clock=clock, lease_s=60.0)


def _tid(n: int) -> str:
    return f"{n:032x}"


def _flag(store: SqlStore, clock: Clock, n: int, priority: Priority = Priority.NORMAL, agent: str = "a") -> int:
    store.write([scored_run(_tid(n), reasons=["r"], priority=priority, agent=agent)])
    clock.now += 1
    run = store.get_run(_tid(n))
    assert run is not None
    return int(run["review_item"]["id"])


class TestClaim:
    """claim_next: order, atomicity, eligibility."""

    def test_priority_then_age(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Items come out highest priority first, oldest first within a priority."""
        low = _flag(store, clock, 1, Priority.LOW)
        normal_old = _flag(store, clock, 2, Priority.NORMAL)
        high = _flag(store, clock, 3, Priority.HIGH)
        normal_new = _flag(store, clock, 4, Priority.NORMAL)
        got = [bench.claim_next("alice") for _ in range(5)]
        assert [high, normal_old, normal_new, low] == [c.item_id for c in got if c is not None]
        assert got[4] is None

    def test_next_for_names_the_next_claim_without_taking_it(
        self, store: SqlStore, bench: Workbench, clock: Clock
    ) -> None:
        """next_for gives the item claim_next would, leaves it pending (no lease, no audit event) and skips what
        the reviewer may not take: another's lease, another's assignment, an item the reviewer already judged."""
        normal = _flag(store, clock, 1, Priority.NORMAL)
        high = _flag(store, clock, 2, Priority.HIGH)
        assert high == bench.next_for("alice")
        assert high == bench.next_for("alice")  # asking twice takes nothing
        assert "pending" == bench.item(high)["state"]
        assert [] == [e for e in bench.events(high, ADMIN) if e["action"] == "claim"]  # (claim_next writes one)
        claim = bench.claim_next("bob")
        assert claim is not None
        assert high == claim.item_id
        assert normal == bench.next_for("alice")  # bob's lease
        bench.assign(normal, "root", "carol")
        assert bench.next_for("alice") is None  # carol's item
        assert normal == bench.next_for("carol")
        bench.submit_verdict(high, "bob", PASS)
        bench.requeue(high, "root", reviews_required=2)
        assert high == bench.next_for("alice")
        assert bench.next_for("bob") is None  # bob judged high; normal is carol's

    def test_the_sample_lane_comes_out_in_random_order(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Low-priority items (the random sample's lane) are claimed in the order of their trace ids' last
        8 hex digits, not oldest first: a reviewer who falls behind reviews a random part of the waiting
        sample. Higher lanes still go first, oldest first."""
        rng = random.Random(8)
        ids = [f"{rng.getrandbits(128):032x}" for _ in range(12)]
        for tid in ids:
            store.write([scored_run(tid, reasons=["random_sample"], priority=Priority.LOW)])
            clock.now += 1
        urgent = _flag(store, clock, 99, Priority.HIGH)
        got = [c.trace_id if c else None for c in (bench.claim_next("alice") for _ in range(14))]
        assert _tid(99) == got[0], urgent
        assert sorted(ids, key=lambda t: t[24:]) == got[1:13]
        assert ids != got[1:13]  # not the order they arrived in
        assert got[13] is None

    def test_lease_and_audit(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """A claim takes a lease of lease_s and is recorded in the audit trail."""
        item = _flag(store, clock, 1)
        claim = bench.claim_next("alice")
        assert claim is not None
        assert (item, _tid(1), clock.now + 60.0) == (claim.item_id, claim.trace_id, claim.lease_expires_at)
        state = bench.item(item)
        assert ("claimed", "alice") == (state["state"], state["claimed_by"])
        assert ["claim"] == [e["action"] for e in bench.events(item, ADMIN)]

    def test_lease_expires_back_to_pending(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """After the lease lapses the item is pending again and another reviewer gets it."""
        item = _flag(store, clock, 1)
        assert bench.claim_next("alice") is not None
        clock.now += 59
        assert bench.claim_next("bob") is None
        clock.now += 2
        claim = bench.claim_next("bob")
        assert claim is not None
        assert item == claim.item_id
        assert ["claim", "lease_expired", "claim"] == [e["action"] for e in bench.events(item, ADMIN)]
        with pytest.raises(ConflictError):
            bench.submit_verdict(item, "alice", PASS)

    def test_expire_leases_counts(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """expire_leases returns how many leases lapsed and notifies the observer."""
        seen: list[int] = []

        class Observer:
            def claimed(self) -> None:
                pass

            def leases_expired(self, count: int) -> None:
                seen.append(count)

            def verdict(self, agent: str, verdict: str) -> None:
                pass

        observed = Workbench(store.engine, clock=clock, lease_s=10, observer=Observer())  # type: ignore[arg-type]
        for n in range(3):
            _flag(store, clock, n)
        for _ in range(3):
            observed.claim_next("alice")
        assert 0 == observed.expire_leases()
        clock.now += 11
        assert 3 == observed.expire_leases()
        assert [3] == seen
        assert 3 == len([c for c in (observed.claim_next("bob") for _ in range(4)) if c is not None])

    def test_concurrent_claimers_never_share(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Many threads claiming at once each get distinct items, and every item is handed out once."""
        store.write([scored_run(_tid(n), reasons=["r"]) for n in range(60)])
        results = _claim_all_at_once([bench], 12, limit=5)  # 12 x 5 = 60: every thread must take part
        every = [i for got in results for i in got]
        assert 60 == len(every)
        assert 60 == len(set(every))
        assert [5] * 12 == [len(got) for got in results]

    def test_assignment(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """An item assigned to bob is not offered to alice; bob gets it; unassigning frees it."""
        item = _flag(store, clock, 1, Priority.HIGH)
        bench.assign(item, "admin", "bob")
        assert bench.claim_next("alice") is None
        with pytest.raises(ConflictError):
            bench.claim(item, "alice")
        bench.assign(item, "admin", None)
        claim = bench.claim_next("alice")
        assert claim is not None
        assert item == claim.item_id
        assert ["assign", "assign", "claim"] == [e["action"] for e in bench.events(item, ADMIN)]

    def test_release_and_skip(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Release puts an item back for anyone; skip hides it from the skipper only."""
        item = _flag(store, clock, 1)
        bench.claim_next("alice")
        bench.release(item, "alice")
        claim = bench.claim_next("alice")
        assert claim is not None
        bench.skip(item, "alice")
        assert bench.claim_next("alice") is None
        claim = bench.claim_next("bob")
        assert claim is not None
        assert item == claim.item_id

    def test_release_by_other_is_conflict(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Only the lease holder may release; unknown items are NotFound."""
        item = _flag(store, clock, 1)
        bench.claim_next("alice")
        with pytest.raises(ConflictError):
            bench.release(item, "bob")
        with pytest.raises(NotFoundError):
            bench.release(999_999, "alice")


class TestVerdicts:
    """submit_verdict, reviews_required, blind review, requeue."""

    def test_verdict_completes_item(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """A fail verdict with categories, notes and a corrected answer lands and the item is done."""
        item = _flag(store, clock, 1, agent="support")
        bench.claim_next("alice")
        verdict = VerdictIn(VerdictValue.FAIL, ("wrong_tool", "loop"), "looped on search", "Paris")
        assert "done" == bench.submit_verdict(item, "alice", verdict)
        [stored] = bench.verdicts(item, Principal("carol", Role.VIEWER))
        assert {
            "reviewer": "alice",
            "verdict": "fail",
            "categories": ["wrong_tool", "loop"],
            "notes": "looped on search",
            "corrected_answer": "Paris",
        } == {k: stored[k] for k in ("reviewer", "verdict", "categories", "notes", "corrected_answer")}
        assert ("done", 1) == (bench.item(item)["state"], bench.item(item)["reviews_done"])
        assert bench.claim_next("bob") is None

    def test_verdict_needs_the_lease(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """A verdict on an unclaimed item, or one claimed by someone else, is a conflict."""
        item = _flag(store, clock, 1)
        with pytest.raises(ConflictError):
            bench.submit_verdict(item, "alice", PASS)
        bench.claim_next("bob")
        with pytest.raises(ConflictError):
            bench.submit_verdict(item, "alice", PASS)

    @pytest.mark.parametrize(
        "verdict",
        [
            VerdictIn(VerdictValue.FAIL, ("not_a_category",)),
            VerdictIn(VerdictValue.PASS, ("loop",)),
            VerdictIn(VerdictValue.FAIL, (), "x" * 30_000),
        ],
    )
    def test_invalid_verdicts(self, store: SqlStore, bench: Workbench, clock: Clock, verdict: VerdictIn) -> None:
        """Unknown categories, categories on a pass and oversized notes are refused; nothing lands."""
        item = _flag(store, clock, 1)
        bench.claim_next("alice")
        with pytest.raises(InvalidInputError):
            bench.submit_verdict(item, "alice", verdict)
        assert [] == bench.verdicts(item, Principal("root", Role.ADMIN))
        assert "claimed" == bench.item(item)["state"]

    def test_configurable_taxonomy(self, store: SqlStore, clock: Clock) -> None:
        """A configured taxonomy replaces the default one."""
        custom = Workbench(store.engine, clock=clock, categories=("pii_leak",))
        item = _flag(store, clock, 1)
        custom.claim_next("alice")
        with pytest.raises(InvalidInputError):
            custom.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("loop",)))
        assert "done" == custom.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("pii_leak",)))

    def test_blind_review(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """With two reviews required, nobody but an admin sees the other's verdict until both landed."""
        item = _flag(store, clock, 1)
        bench.set_reviews_required(item, "admin", 2)
        bench.claim_next("alice")
        assert "pending" == bench.submit_verdict(item, "alice", PASS)
        assert bench.claim_next("alice") is None  # one verdict per reviewer
        bob = Principal("bob", Role.REVIEWER)
        assert [] == bench.verdicts(item, bob)
        assert [] == bench.verdicts(item, Principal("viewer", Role.VIEWER))
        assert ["alice"] == [v["reviewer"] for v in bench.verdicts(item, Principal("alice", Role.REVIEWER))]
        assert ["alice"] == [v["reviewer"] for v in bench.verdicts(item, Principal("root", Role.ADMIN))]
        claim = bench.claim_next("bob")
        assert claim is not None
        assert "done" == bench.submit_verdict(item, "bob", VerdictIn(VerdictValue.FAIL, ("hallucination",)))
        assert ["alice", "bob"] == [v["reviewer"] for v in bench.verdicts(item, bob)]

    def test_blind_audit_trail(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Until the item is done, the audit trail hides the other reviewers' verdicts (admins see all)."""
        item = _flag(store, clock, 1)
        bench.set_reviews_required(item, "admin", 2)
        bench.claim(item, "alice")
        bench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("loop",)))
        bob = Principal("bob", Role.REVIEWER)
        [seen] = [e for e in bench.events(item, bob) if e["action"] == "verdict"]
        assert {"state": "pending", "blind": True} == seen["detail"]
        for viewer in (Principal("alice", Role.REVIEWER), ADMIN):
            [own] = [e for e in bench.events(item, viewer) if e["action"] == "verdict"]
            assert "fail" == own["detail"]["verdict"]
        bench.claim(item, "bob")
        bench.submit_verdict(item, "bob", PASS)
        assert ["fail", "pass"] == [e["detail"]["verdict"] for e in bench.events(item, bob) if e["action"] == "verdict"]

    def test_same_reviewer_cannot_review_twice(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Claiming by id an item one already judged is a conflict."""
        item = _flag(store, clock, 1)
        bench.set_reviews_required(item, "admin", 2)
        bench.claim(item, "alice")
        bench.submit_verdict(item, "alice", PASS)
        with pytest.raises(ConflictError):
            bench.claim(item, "alice")

    def test_requeue_done_item(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """Requeueing a done item asks for one more verdict from someone else."""
        item = _flag(store, clock, 1)
        bench.claim_next("alice")
        bench.submit_verdict(item, "alice", PASS)
        bench.requeue(item, "admin")
        assert ("pending", 2) == (bench.item(item)["state"], bench.item(item)["reviews_required"])
        assert bench.claim_next("alice") is None
        bench.claim_next("bob")
        assert "done" == bench.submit_verdict(item, "bob", PASS)
        actions = [(e["actor"], e["action"]) for e in bench.events(item, ADMIN)]
        assert [
            ("alice", "claim"),
            ("alice", "verdict"),
            ("admin", "requeue"),
            ("bob", "claim"),
            ("bob", "verdict"),
        ] == actions

    def test_rescore_keeps_review_state(self, store: SqlStore, bench: Workbench, clock: Clock) -> None:
        """A re-score of a claimed run keeps its lease and claimant."""
        item = _flag(store, clock, 1)
        bench.claim_next("alice")
        store.write([scored_run(_tid(1), reasons=["r", "s"], priority=Priority.HIGH)])
        assert ("claimed", "alice") == (bench.item(item)["state"], bench.item(item)["claimed_by"])


@pytest.mark.integration
class TestPostgresContention:
    """Many claimers in separate connection pools (as separate processes would be) on PostgreSQL."""

    def test_many_pools_never_share(self, tmp_path: Path) -> None:
        """4 workbenches × 8 threads claim 200 items: each item exactly once, and every claimer progresses."""
        reason = postgres_unreachable(POSTGRES_URL)
        if reason is not None:
            pytest.skip(f"!!! PostgreSQL at {POSTGRES_URL} is unreachable ({reason}); PostgreSQL tests SKIPPED")
        with postgres_scratch_url(POSTGRES_URL) as url:
            upgrade_database(url)
            stores = [SqlStore(url) for _ in range(4)]
            stores[0].write([scored_run(_tid(n), reasons=["r"]) for n in range(200)])
            results = _claim_all_at_once([Workbench(s.engine, lease_s=600) for s in stores], 32, limit=7)
            for s in stores:
                s.close()
        every = [i for got in results for i in got]
        assert (200, 200) == (len(every), len(set(every)))
        assert sum(1 for got in results if got) >= 29  # 200 items, at most 7 a thread


class TestCompletionRevocation:
    """A failing verdict revokes a counted task completion once (scorers.slo)."""

    def test_first_fail_on_a_completed_run_revokes_once(self, store: SqlStore, clock: Clock) -> None:
        """Pass: nothing; first fail on a completed run: one revocation; a second fail or an uncompleted run: none."""
        revoked: list[str] = []

        class Observer(ReviewObserver):
            def completion_revoked(self, agent: str) -> None:
                revoked.append(agent)

        bench = Workbench(store.engine, clock=clock, lease_s=60.0, observer=Observer())
        fail = VerdictIn(VerdictValue.FAIL, ("loop",))
        store.write([scored_run(_tid(1), reasons=["r"], agent="support", final_output="ok")])
        store.write([scored_run(_tid(2), reasons=["r"], agent="billing", errored=True, status=RunStatus.ERROR)])
        store.write([scored_run(_tid(3), reasons=["r"], agent="triage", final_output="ok")])
        first, second, third = (int(store.get_run(_tid(n))["review_item"]["id"]) for n in (1, 2, 3))  # type: ignore[index]
        bench.set_reviews_required(first, "admin", 2)
        for reviewer in ("alice", "bob"):
            bench.claim(first, reviewer)
            bench.submit_verdict(first, reviewer, fail)
        bench.claim(second, "alice")
        bench.submit_verdict(second, "alice", fail)
        bench.claim(third, "alice")
        bench.submit_verdict(third, "alice", PASS)
        assert ["support"] == revoked


def _claim_all_at_once(benches: list[Workbench], workers: int, limit: int | None = None) -> list[list[int]]:
    """``workers`` threads (spread over ``benches``) start claiming together and claim until nothing is
    left (or each has ``limit``); the item ids each one got."""
    barrier = threading.Barrier(workers)

    def claimer(worker: int) -> list[int]:
        bench = benches[worker % len(benches)]
        barrier.wait()
        got: list[int] = []
        while (limit is None or len(got) < limit) and (claim := bench.claim_next(f"reviewer{worker}")) is not None:
            got.append(claim.item_id)
        return got

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(claimer, range(workers)))


EXCHANGES = [("Where is order 7?", "It shipped."), ("When does it arrive?", "Thursday."), ("Thanks", "Bye.")]


class TestVerdictTargets:
    """A session item's verdict judges the session or one turn of it; a run item's judges its run."""

    @pytest.fixture
    def revoked(self) -> list[str]:
        """Agents of the completions revoked."""
        return []

    @pytest.fixture
    def vbench(self, store: SqlStore, clock: Clock, revoked: list[str]) -> Workbench:
        """A workbench recording revocations."""

        class Observer(ReviewObserver):
            def completion_revoked(self, agent: str) -> None:
                revoked.append(agent)

        return Workbench(store.engine, clock=clock, lease_s=60.0, observer=Observer())

    def test_session_verdict_by_default_revokes_nothing(
        self, store: SqlStore, vbench: Workbench, revoked: list[str]
    ) -> None:
        """No target on a session item: the session; a failing one revokes no turn and takes no corrected answer."""
        item = flagged_session(store, "conv-s", EXCHANGES)
        vbench.claim(item, "alice")
        with pytest.raises(InvalidInputError, match="corrected answer is one turn's answer"):
            vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("gave_up",), "", "Sorry."))
        with pytest.raises(InvalidInputError, match="a session: a verdict judges the session or one turn"):
            vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, target=VerdictTarget.RUN))
        assert "done" == vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("gave_up",)))
        (verdict,) = vbench.verdicts(item, ADMIN)
        assert ("session", None, "fail") == (verdict["target"], verdict["target_trace_id"], verdict["verdict"])
        assert [] == revoked
        assert {"verdict": "fail", "state": "done", "target": "session"} == vbench.events(item, ADMIN)[-1]["detail"]

    def test_turn_verdict_applies_to_that_turn(self, store: SqlStore, vbench: Workbench, revoked: list[str]) -> None:
        """A failing turn verdict revokes that turn's completion once; a later fail on the same turn does not."""
        item = flagged_session(store, "conv-t", EXCHANGES, first=11)
        turn = _tid(12)
        vbench.set_reviews_required(item, "admin", 2)
        for reviewer in ("alice", "bob"):
            vbench.claim(item, reviewer)
            given = VerdictIn(VerdictValue.FAIL, ("other",), "", "Friday.", VerdictTarget.TURN, turn.upper())
            vbench.submit_verdict(item, reviewer, given)
        assert [("turn", turn), ("turn", turn)] == [
            (v["target"], v["target_trace_id"]) for v in vbench.verdicts(item, ADMIN)
        ]
        assert ["support"] == revoked
        assert "target_trace_id" in vbench.events(item, ADMIN)[-1]["detail"]

    def test_turn_not_in_the_session_refused(self, store: SqlStore, vbench: Workbench, clock: Clock) -> None:
        """A trace of another session, an unknown trace or none at all: one-line 4xx error, the claim kept."""
        item = flagged_session(store, "conv-a", EXCHANGES, first=21)
        flagged_session(store, "conv-b", EXCHANGES, first=31)
        vbench.claim(item, "alice")
        for trace, says in [
            (_tid(31), f"trace '{_tid(31)}' is not a turn of session 'conv-a'"),
            ("f" * 40, "is not a turn of session 'conv-a'"),
            (None, "a turn verdict needs the turn's trace id"),
        ]:
            with pytest.raises(InvalidInputError) as info:
                vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.PASS, target=VerdictTarget.TURN,
                                                               target_trace_id=trace))  # fmt: skip
            assert says in str(info.value)
            assert "\n" not in str(info.value)
        assert ("claimed", []) == (vbench.item(item)["state"], vbench.verdicts(item, ADMIN))

    def test_run_items_unchanged(self, store: SqlStore, vbench: Workbench, clock: Clock, revoked: list[str]) -> None:
        """A run item's verdict is a run verdict; it takes no session or turn target."""
        item = _flag(store, clock, 41)
        vbench.claim(item, "alice")
        for target, trace in [(VerdictTarget.SESSION, None), (VerdictTarget.TURN, _tid(41)), (None, _tid(41))]:
            with pytest.raises(InvalidInputError, match="is one run, not a session"):
                vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, target=target, target_trace_id=trace))
        vbench.submit_verdict(item, "alice", VerdictIn(VerdictValue.FAIL, ("loop",)))
        (verdict,) = vbench.verdicts(item, ADMIN)
        assert ("run", _tid(41)) == (verdict["target"], verdict["target_trace_id"])
        assert {"verdict": "fail", "state": "done"} == vbench.events(item, ADMIN)[-1]["detail"]
