"""The replicated group's rules, without processes: who may be promoted, what a
replica refuses (an older term, a gap), and when the active may answer.

The coordinator is the in-memory one (`MemoryCoordinator`, etcd's compare rules); the
replica writes a real LMDB store."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import msgpack
import pytest
import trio

from journals import JournalStore, WriteBatch
from journals.batch import encode_batches
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.replication.active import Active
from mrs.replication.coordinator import (
    CoHolders,
    GroupState,
    MemoryCoordinator,
    MemoryElection,
    may_campaign,
    must_post_position,
    same_position_replicas,
)
from mrs.replication.replica import Replica, read_position
from mrs.replication.stream import CommitStream, RecordingStore
from tests.conftest import run_under_autojump_clock


def commit(term: int, number: int, key: bytes) -> dict:
    batch = WriteBatch.empty().put_raw(Journal.DQF, key, b"body")
    return {"t": "commit", "term": term, "n": number, "batches": encode_batches([batch])}


def copy_at(term: int, number: int) -> dict:
    """An empty full copy: how a replica of another term starts in this one."""
    return {"t": "copy", "term": term, "n": number, "items": [], "last": True}


# ----------------------------------------------------------------- promotion


def test_only_an_in_sync_instance_may_campaign() -> None:
    fresh = GroupState(leader=None, term=0, in_sync=None)
    assert may_campaign(fresh, "c")  # a new group: anyone
    after = GroupState(leader=None, term=3, in_sync=("a", "b"))  # an older build's record
    assert may_campaign(after, "b")
    assert not may_campaign(after, "c")  # not in sync: it may lack answered commits
    held = GroupState(leader="a", term=3, in_sync=("a", "b"))
    assert not may_campaign(held, "b")  # someone holds the lease


def test_under_a_quorum_record_only_the_most_advanced_of_enough_replicas_may_campaign() -> None:
    """Each answer waited for one of b and c: either may lack one the other has, so a
    replica campaigns only once both posted their positions, and only the one ahead."""
    record = GroupState(
        leader=None, term=3, in_sync=("a", "b", "c"), sync_leader="a", acks_needed=1
    )
    assert may_campaign(record, "a")  # the active that wrote it made every answer durable
    assert not may_campaign(record, "b") and not may_campaign(record, "c")
    assert must_post_position(record, "b") and not must_post_position(record, "a")
    one = replace(record, positions={"b": (3, 10)})
    assert not may_campaign(one, "b")  # c may hold an answer b lacks
    assert not must_post_position(one, "b") and must_post_position(one, "c")
    both = replace(record, positions={"b": (3, 10), "c": (3, 12)})
    assert may_campaign(both, "c") and not may_campaign(both, "b")
    assert not may_campaign(both, "c", holds_journals=False)
    tied = replace(record, positions={"b": (3, 12), "c": (3, 12)})
    assert may_campaign(tied, "b") and may_campaign(tied, "c")  # etcd lets one win
    dropped = GroupState(None, 3, ("a", "b"), sync_leader="a", acks_needed=1)
    assert may_campaign(replace(dropped, positions={"b": (3, 5)}), "b")  # c was dropped: b alone
    handed = GroupState(None, 3, ("b", "c"), sync_leader="a", acks_needed=2)
    assert not may_campaign(handed, "a")  # a handed over: not listed
    assert may_campaign(replace(handed, positions={"c": (3, 9)}), "c")  # each has every record
    assert not must_post_position(replace(record, leader="a"), "b")  # a leader: no election


def test_an_instance_whose_disk_was_lost_is_no_candidate(tmp_path: Path) -> None:
    """Its name is still in the in-sync record (it was the active, killed and wiped,
    back before its lease ran out), but its journals are empty: promoted, it would
    have started empty and handed that to the others as a full copy (the replicated
    nemesis lost 8,709 answered messages that way before this rule)."""
    after = GroupState(leader=None, term=3, in_sync=("a", "b", "c"))
    assert not may_campaign(after, "a", holds_journals=False)
    assert may_campaign(after, "b", holds_journals=True)
    fresh = GroupState(leader=None, term=0, in_sync=None)
    assert may_campaign(fresh, "a", holds_journals=False)  # a new group starts empty
    empty = JournalStore(tmp_path / "empty", 1 << 24)
    try:
        replica = Replica(1, "a", empty)
        assert not replica.holds_journals
        replica.check_hello({"t": "hello", "group": 1, "term": 4, "from": "b"})
        assert not replica.holds_journals  # a term seen, but the copy has not come
        replica.receive(copy_at(4, 0))
        assert replica.holds_journals
    finally:
        empty.close()
    served = JournalStore(tmp_path / "served", 1 << 24)
    try:
        served.commit_now(WriteBatch.empty().put_raw(Journal.META, b"boots", b"\0" * 8))
        assert Replica(1, "a", served).holds_journals  # it was the active: its own journals
    finally:
        served.close()


async def test_memory_coordinator_terms_and_in_sync_record() -> None:
    election = MemoryElection()
    a, b, c = (MemoryCoordinator(election, name) for name in "abc")
    assert await a.campaign() == 1
    assert await b.campaign() is None  # a holds it
    assert await a.set_in_sync(1, ("a", "b"), 1)
    assert (await c.read()).in_sync == ("a", "b")
    election.expire("a")  # a's lease ran out
    assert not await a.renew()
    state = await c.read()
    assert not may_campaign(state, "c") and not may_campaign(state, "b")  # b has not posted
    await b.post_position(1, (1, 4))
    state = await c.read()
    assert state.positions == {"b": (1, 4)}
    assert not may_campaign(state, "c") and may_campaign(state, "b")
    assert await b.campaign() == 2
    assert not await a.set_in_sync(1, ("a",), 1)  # an old term writes nothing
    state = await c.read()
    assert state.in_sync == ("b",) and state.sync_leader == "b"  # the new active's record
    election.expire("b")
    assert (await c.read()).positions == {}  # b's position closed term 1, not term 2


async def test_a_winner_lost_before_a_replica_joins_leaves_a_candidate(store) -> None:
    """b wins term 4 at the position c posted too: the win's record names c in sync,
    each answer on every listed replica (b answers nothing before a replica joins).
    b is lost before c joins: c, not a group waiting for b, takes term 5. A replica
    behind the winner is not named: it may lack an answer the winner holds."""
    election = MemoryElection(
        term=3, in_sync=("a", "b", "c"), sync_leader="a", acks_needed=1, leader=None
    )
    a, b, c = (MemoryCoordinator(election, name) for name in "abc")
    await b.post_position(3, (3, 10))
    await c.post_position(3, (3, 10))
    state = await b.read()
    assert may_campaign(state, "b") and may_campaign(state, "c")  # tied: etcd lets one win
    assert same_position_replicas(state, "b", (3, 10)) == {"c"}
    assert same_position_replicas(replace(state, positions={"c": (3, 9)}), "b", (3, 10)) == set()
    assert same_position_replicas(state, "b", (0, 0)) == set()  # b's journals not whole
    # a campaign judged on a state whose term has moved since is refused: the next
    # look judges the new state (an active may have led and answered in between)
    assert await b.campaign(co_holders=CoHolders(2, frozenset({"c"}))) is None
    assert election.leader is None and election.term == 3
    assert CoHolders(3, frozenset({"c"})).members("b") == (("b", "c"), 1)
    assert await b.campaign(co_holders=CoHolders(3, frozenset({"c"}))) == 4
    # named by the win itself: lost the instant after it, b still leaves a candidate
    assert (election.in_sync, election.sync_leader, election.acks_needed) == (("b", "c"), "b", 1)
    election.expire("b")  # lost before c joined
    state = await c.read()
    assert must_post_position(state, "c") and not may_campaign(state, "a")
    await c.post_position(4, (3, 10))  # c closed term 4 having taken none of it
    state = await c.read()
    assert may_campaign(state, "c")
    assert await c.campaign() == 5


def test_a_position_in_a_term_the_instance_led_is_compared_with_no_other(store) -> None:
    """An instance that led term 3 holds (3, 0) while its own commits of term 3 follow:
    a replica that posted (3, 0) took none of them, so it holds less."""
    replica = Replica(1, "a", store)
    assert replica.comparable_position == (0, 0)  # nothing held
    replica.receive(copy_at(2, 0))
    replica.receive(commit(2, 1, b"k1"))
    assert replica.comparable_position == (2, 1)
    replica.record_term(3)
    assert replica.position == (3, 0) and replica.comparable_position == (0, 0)


# ------------------------------------------------------------------- fencing


@pytest.fixture
def store(tmp_path: Path):
    opened = JournalStore(tmp_path / "journals", 1 << 24)
    yield opened
    opened.close()


def test_replica_refuses_an_older_term(store: JournalStore) -> None:
    replica = Replica(1, "b", store)
    assert replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "a"}) is None
    assert replica.receive(copy_at(2, 0)) == {"t": "ack", "n": 0}
    refusal = replica.check_hello({"t": "hello", "group": 1, "term": 1, "from": "c"})
    assert refusal is not None and "older term 1" in refusal
    assert replica.receive(commit(2, 1, b"k1")) == {"t": "ack", "n": 1}
    answer = replica.receive(commit(1, 2, b"old"))
    assert answer is not None and answer["t"] == "refuse" and "older term" in answer["why"]
    assert store.get_raw(Journal.DQF, b"old") is None  # nothing of the old term stored
    assert store.get_raw(Journal.DQF, b"k1") == b"body"


def test_an_instance_that_won_a_term_says_so_in_its_journals(store: JournalStore) -> None:
    """A wiped instance holds position (0, 0) and must not campaign (mrs.server.instance);
    one that won a term and stepped down holds (term, 0) and may."""
    replica = Replica(1, "a", store)
    assert read_position(store) == ((0, 0), 0)
    replica.record_term(3)
    assert read_position(store) == ((3, 0), 3)
    assert Replica(1, "a", store).position == (3, 0)
    refusal = Replica(1, "a", store).check_hello({"t": "hello", "group": 1, "term": 2})
    assert refusal is not None and "older term 2" in refusal


def test_replica_refuses_another_group(store: JournalStore) -> None:
    replica = Replica(1, "b", store)
    assert "group 1" in (replica.check_hello({"t": "hello", "group": 2, "term": 5}) or "")


def test_replica_refuses_a_gap_and_keeps_its_position(store: JournalStore) -> None:
    replica = Replica(1, "b", store)
    replica.check_hello({"t": "hello", "group": 1, "term": 4, "from": "a"})
    assert replica.receive(commit(4, 1, b"k1"))["t"] == "refuse"  # not from (4, 0)
    replica.receive(copy_at(4, 0))
    assert replica.receive(commit(4, 1, b"k1")) == {"t": "ack", "n": 1}
    answer = replica.receive(commit(4, 3, b"k3"))
    assert answer is not None and answer["t"] == "refuse" and "gap" in answer["why"]
    assert replica.receive(commit(4, 2, b"k2")) == {"t": "ack", "n": 2}
    assert read_position(store) == ((4, 2), 4)  # durable with the records


def test_a_burst_of_commits_is_applied_together_and_acknowledged_once(store) -> None:
    replica = Replica(1, "b", store)
    replica.check_hello({"t": "hello", "group": 1, "term": 4, "from": "a"})
    replica.receive(copy_at(4, 0))
    burst = [commit(4, n, f"k{n}".encode()) for n in (1, 2, 3)]
    assert replica.receive_commits(burst) == [{"t": "ack", "n": 3}]
    assert read_position(store) == ((4, 3), 4)
    answers = replica.receive_commits([commit(4, 4, b"k4"), commit(4, 6, b"k6")])
    assert answers[0] == {"t": "ack", "n": 4}  # what follows is kept, then the gap refused
    assert answers[1] is not None and "gap" in answers[1]["why"]
    assert (
        store.get_raw(Journal.DQF, b"k4") == b"body" and store.get_raw(Journal.DQF, b"k6") is None
    )
    assert read_position(store) == ((4, 4), 4)


def test_a_replica_that_closed_a_term_takes_none_of_its_records(store) -> None:
    """Its posted position must be its last in that term: a record applied after it
    could carry an answer the candidates comparing positions did not see."""
    replica = Replica(1, "b", store)
    replica.check_hello({"t": "hello", "group": 1, "term": 4, "from": "a"})
    replica.receive(copy_at(4, 0))
    assert replica.receive(commit(4, 1, b"k1")) == {"t": "ack", "n": 1}
    replica.close_term(4)
    answer = replica.receive(commit(4, 2, b"late"))
    assert answer is not None and "older term 4" in answer["why"]
    assert store.get_raw(Journal.DQF, b"late") is None
    assert replica.candidate_position == (4, 1)
    assert Replica(1, "b", store).check_hello({"t": "hello", "group": 1, "term": 4}) is not None
    assert replica.check_hello({"t": "hello", "group": 1, "term": 5, "from": "c"}) is None


def test_a_promoted_replica_bridges_another_of_its_term_instead_of_a_full_copy(tmp_path) -> None:
    """b and c both followed the active of term 4; c fell behind at 2, b reached 5 and
    was promoted to term 5: c gets records 3..5 and a rebase, not the journals."""
    stores = [JournalStore(tmp_path / name, 1 << 24) for name in "bc"]
    try:
        b, c = (Replica(1, name, store) for name, store in zip("bc", stores, strict=True))
        for replica in (b, c):
            replica.check_hello({"t": "hello", "group": 1, "term": 4, "from": "a"})
            replica.receive(copy_at(4, 0))
        records = [commit(4, n, f"k{n}".encode()) for n in range(1, 6)]
        b.receive_commits(records)
        c.receive_commits(records[:2])
        bridge = b.bridge()
        assert bridge.base == (4, 5) and [n for n, _ in bridge.records] == [1, 2, 3, 4, 5]
        b.record_term(5)
        stream = CommitStream(5, ("a", "c"), lambda dones: None, lambda: 0.0, bridge=bridge)
        stream.seal([WriteBatch.empty().put_raw(Journal.DQF, b"new", b"v")])
        assert stream.frames_for((4, 2), led=0, whole=False) is None  # a copy not replayed
        assert stream.frames_for((4, 2), led=4, whole=True) is None  # it led term 4
        assert stream.frames_for((3, 9), led=0, whole=True) is None  # another term
        frames = stream.frames_for((4, 2), led=0, whole=True)
        assert frames is not None and len(frames) == 3 + 1 + 1  # 3..5, rebase, new term's 1
        c.check_hello({"t": "hello", "group": 1, "term": 5, "from": "b"})
        answers = [c.receive(unframe(body)) for body in frames]
        assert answers[:3] == [None, None, None]
        assert answers[3:] == [{"t": "ack", "n": 0}, {"t": "ack", "n": 1}]
        assert read_position(stores[1]) == ((5, 1), 5)
        for n in range(1, 6):
            assert stores[1].get_raw(Journal.DQF, f"k{n}".encode()) == b"body"
        assert stores[1].get_raw(Journal.DQF, b"new") == b"v"
        assert b.bridge().base == (0, 0)  # b led term 5: its position says nothing more
    finally:
        for store in stores:
            store.close()


def unframe(body: bytes) -> dict:
    return msgpack.unpackb(body[4:], raw=False)


def test_full_copy_replaces_everything(store: JournalStore) -> None:
    replica = Replica(1, "b", store)
    replica.check_hello({"t": "hello", "group": 1, "term": 1, "from": "a"})
    replica.receive(copy_at(1, 0))
    assert replica.receive(commit(1, 1, b"diverged")) == {"t": "ack", "n": 1}
    replica.check_hello({"t": "hello", "group": 1, "term": 2, "from": "c"})
    items = [["dqf", b"kept", b"v"]]
    assert replica.receive({"t": "copy", "term": 2, "n": 7, "items": items, "last": False}) is None
    answer = replica.receive({"t": "copy", "term": 2, "n": 7, "items": [], "last": True})
    assert answer == {"t": "ack", "n": 7}
    assert store.get_raw(Journal.DQF, b"diverged") is None
    assert store.get_raw(Journal.DQF, b"kept") == b"v"
    assert read_position(store) == ((2, 7), 2)


# ------------------------------------------------------------ answers held


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def stream_of(answered: list[str], clock: Clock) -> CommitStream:
    return CommitStream(
        term=1, replicas=("b", "c"), deliver=lambda dones: [d(None) for d in dones], clock_s=clock
    )


def one_put(name: str, answered: list[str]):
    return lambda error: answered.append(name)


async def test_an_answer_waits_for_a_majority() -> None:
    answered: list[str] = []
    clock = Clock()
    stream = stream_of(answered, clock)
    batch = WriteBatch.empty().put_raw(Journal.DQF, b"k", b"v")
    stream.seal([batch])
    stream.hold([one_put("p1", answered)])
    assert answered == []  # nobody in sync: durable here only is not enough
    assert stream.ack("b", 1)  # caught up: may join
    stream.in_sync.add("b")
    stream.release()
    assert answered == ["p1"]
    stream.in_sync.add("c")
    stream.seal([batch])
    stream.hold([one_put("p2", answered)])
    stream.ack("c", 2)
    assert answered == ["p1", "p2"]  # c and the active: two of three, b not waited for
    five = CommitStream(1, ("b", "c", "d", "e"), lambda dones: [d(None) for d in dones])
    five.acks_needed = 2
    five.in_sync.update({"b", "c", "d", "e"})
    five.seal([batch])
    five.hold([one_put("q", answered)])
    five.ack("d", 1)
    assert answered == ["p1", "p2"]  # two of five
    five.ack("b", 1)
    assert answered == ["p1", "p2", "q"]  # three of five


async def test_a_lagging_replica_is_dropped_only_while_the_others_hold_every_answer() -> None:
    answered: list[str] = []
    clock = Clock()
    stream = stream_of(answered, clock)
    stream.in_sync.update({"b", "c"})
    batch = WriteBatch.empty().put_raw(Journal.DQF, b"k", b"v")
    stream.seal([batch])
    stream.hold([one_put("p1", answered)])
    stream.ack("b", 1)
    assert answered == ["p1"]
    stream.seal([batch])
    stream.hold([one_put("p2", answered)])
    stream.seal([batch])
    assert stream.laggards() == []  # not late yet
    clock.now_s = 5.0
    # both are late; only b holds p1: dropping b would leave a listed set without it
    assert stream.laggards() == ["c"]
    stream.in_sync.discard("c")  # (its acknowledgements stop counting, then etcd)
    clock.now_s = 50.0
    assert stream.laggards() == []  # b is the last in sync: waited for, not dropped
    assert answered == ["p1"]
    stream.ack("b", 3)
    assert answered == ["p1", "p2"]


async def test_a_stepped_down_active_answers_nothing() -> None:
    answered: list[str] = []
    stream = stream_of(answered, Clock())
    stream.in_sync.add("b")
    stream.answering = False
    stream.seal([WriteBatch.empty().put_raw(Journal.DQF, b"k", b"v")])
    stream.hold([one_put("p", answered)])
    stream.ack("b", 1)
    assert answered == []


def test_records_after_says_when_a_full_copy_is_needed() -> None:
    stream = CommitStream(term=1, replicas=("b",), deliver=lambda dones: None, clock_s=lambda: 0.0)
    batch = WriteBatch.empty().put_raw(Journal.DQF, b"k", b"v")
    for _ in range(3):
        stream.seal([batch])
    assert len(stream.records_after(1) or []) == 2
    assert stream.records_after(3) == []
    stream.ack("b", 2)
    stream.seal([batch])  # trims what b has
    assert stream.records_after(0) is None  # no longer kept: a full copy


async def test_a_replica_joining_releases_what_it_already_acknowledged(store) -> None:
    """After a failover the first commit is held with nobody in sync; the replica that
    acknowledges it and then joins the set releases it at once (not at the next commit,
    which a lone sequential client would never send)."""
    election = MemoryElection()
    coordinator = MemoryCoordinator(election, "a")
    term = await coordinator.campaign()
    assert term is not None
    answered: list[str] = []
    stream = CommitStream(term, ("b", "c"), lambda dones: [d(None) for d in dones])
    me, b, c = (
        InstanceConfig(name, "127.0.0.1", 1, "127.0.0.1", 2, Path("/nowhere")) for name in "abc"
    )
    active = Active(
        group_id=1,
        me=me,
        replicas=(b, c),
        coordinator=coordinator,
        term=term,
        lease_ttl_s=5,
        store=RecordingStore(store, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )
    stream.seal([WriteBatch.empty().put_raw(Journal.DQF, b"k", b"v")])
    stream.hold([one_put("p", answered)])
    assert stream.ack("b", 1)  # caught up: may join
    assert answered == []
    election.reachable = {"b", "c"}  # etcd cannot be written: b's acknowledgement must not count
    await active._join("b")
    assert answered == [] and "b" not in stream.in_sync
    election.reachable = set()
    await active._join("b")
    assert answered == ["p"]
    assert election.in_sync == ("a", "b") and election.acks_needed == 1


# ------------------------------------------------------------------ the lease


class StallingCoordinator(MemoryCoordinator):
    """etcd stops answering: a renewal never returns (a partition, not a refusal)."""

    stalled = False

    async def renew(self) -> bool:
        if self.stalled:
            await trio.sleep_forever()
        return await super().renew()


def lease_holder(store: JournalStore, coordinator: MemoryCoordinator, ttl_s: float) -> Active:
    """The Active of `coordinator`'s instance, one of a, b and c."""
    me, *replicas = (
        InstanceConfig(name, "127.0.0.1", 1, "127.0.0.1", 2, Path("/nowhere"))
        for name in sorted("abc", key=lambda name: name != coordinator.name)
    )
    stream = CommitStream(coordinator.term, tuple(r.name for r in replicas), lambda dones: None)
    return Active(
        group_id=1,
        me=me,
        replicas=tuple(replicas),
        coordinator=coordinator,
        term=coordinator.term,
        lease_ttl_s=ttl_s,
        store=RecordingStore(store, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )


@pytest.mark.parametrize("fault", ["unreachable", "stalled"])
def test_an_active_that_cannot_renew_stops_answering_before_the_lease_expires(
    store: JournalStore, fault: str
) -> None:
    ttl_s = 6.0

    async def scenario() -> None:
        election = MemoryElection()
        coordinator = StallingCoordinator(election, "a")
        await coordinator.campaign()
        active = lease_holder(store, coordinator, ttl_s)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._lease_loop, nursery)
            await trio.sleep(3 * ttl_s)  # renewals go through
            assert active.stepped_down is None
            cut_s = trio.current_time()
            if fault == "unreachable":
                election.reachable = {"b", "c"}
            else:
                coordinator.stalled = True
            with trio.fail_after(ttl_s):
                while active.stream.answering:
                    await trio.sleep(0.01)
                stopped_s = trio.current_time() - cut_s
                while active.stepped_down is None:
                    assert not active.stream.answering
                    await trio.sleep(0.01)
            stepped_down_s = trio.current_time() - cut_s
            nursery.cancel_scope.cancel()
        assert not active.stream.answering
        # the last renewal was at most ttl/4 before the cut; answers stop at half the
        # TTL after it: always before the lease can expire in etcd. It steps down once
        # etcd was asked once more (a renewal missed by a stalled process, `_renew_late`)
        assert stopped_s <= ttl_s * 0.5 + 0.1
        assert stopped_s < ttl_s - ttl_s / 4
        assert stepped_down_s <= ttl_s * 0.5 + ttl_s / 4 + 0.1

    run_under_autojump_clock(scenario)


async def test_an_active_whose_lease_expired_steps_down_at_once(store: JournalStore) -> None:
    election = MemoryElection()
    coordinator = MemoryCoordinator(election, "a")
    await coordinator.campaign()
    active = lease_holder(store, coordinator, 6.0)
    election.expire("a")
    await MemoryCoordinator(election, "b").campaign()  # b took over
    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            await active._lease_loop(nursery)
    assert active.stepped_down is not None and "lost" in active.stepped_down


def test_a_term_is_raised_only_by_the_leader_the_coordinator_names(store: JournalStore) -> None:
    """A hello that raises the replica's term must come from the instance the
    coordinator names the leader of that term: a stranger who reaches the replication
    port (no TLS) cannot fence the active off with one hello of a higher term. A term
    already seen is not asked about, and a coordinator that cannot be asked refuses the
    new term until it can."""
    election = MemoryElection()
    replica = Replica(1, "b", store, coordinator_state=MemoryCoordinator(election, "b").read)

    async def scenario() -> None:
        assert await MemoryCoordinator(election, "a").campaign() == 1
        stranger = {"t": "hello", "group": 1, "term": 10**6, "from": "stranger"}
        refusal = await replica.unconfirmed_term(stranger)
        assert refusal is not None and "names 'a' the leader of term 1" in refusal
        impostor = {"t": "hello", "group": 1, "term": 1, "from": "c"}
        assert "names 'a'" in (await replica.unconfirmed_term(impostor) or "")
        hello = {"t": "hello", "group": 1, "term": 1, "from": "a"}
        assert await replica.unconfirmed_term(hello) is None
        assert replica.check_hello(hello) is None and replica.term_seen == 1
        election.reachable = {"a"}  # b cut off from the coordinator
        assert await replica.unconfirmed_term(hello) is None  # term 1 is seen: not asked
        later = {"t": "hello", "group": 1, "term": 2, "from": "a"}
        assert "cannot confirm term 2" in (await replica.unconfirmed_term(later) or "")
        assert replica.term_seen == 1

    trio.run(scenario)
