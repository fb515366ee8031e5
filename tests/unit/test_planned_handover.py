"""A planned switch-over (`mrs failover`) in process: the active hands over only to a
replica that acknowledges a record made for the hand-over, keeps its lease while it
waits, answers nothing while etcd is told, and a request it refuses or its command
withdrew is never carried out later.

The coordinator is the in-memory one (etcd's compare rules); the journals are a real
LMDB store; the replicas' acknowledgements are given by hand (`CommitStream.ack`)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
import trio

from journals import JournalStore, WriteBatch
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.limits import REPLICATION_HANDOVER_WAIT_S, REPLICATION_LAG_S_MAX
from mrs.replication.active import HANDOVER_KEY, Active
from mrs.replication.coordinator import FailoverRequest, MemoryCoordinator, MemoryElection
from mrs.replication.stream import CommitStream, RecordingStore
from tests.conftest import run_under_autojump_clock


@pytest.fixture
def store(tmp_path: Path):
    opened = JournalStore(tmp_path / "journals", 1 << 24)
    yield opened
    opened.close()


async def active_a_with_b_and_c_in_sync(
    store: JournalStore, election: MemoryElection, answered: list[str], ttl_s: float = 6.0
) -> Active:
    coordinator = MemoryCoordinator(election, "a")
    term = await coordinator.campaign()
    assert term is not None
    stream = CommitStream(term, ("b", "c"), lambda dones: [done(None) for done in dones])
    me, b, c = (
        InstanceConfig(name, "127.0.0.1", 1, "127.0.0.1", 2, Path("/nowhere")) for name in "abc"
    )
    active = Active(
        group_id=1,
        me=me,
        replicas=(b, c),
        coordinator=coordinator,
        term=term,
        lease_ttl_s=ttl_s,
        store=RecordingStore(store, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )
    for name in ("b", "c"):
        await active._join(name)
    assert election.in_sync == ("a", "b", "c")
    return active


def put_answered(active: Active, name: str, answered: list[str]) -> None:
    """One put committed and held for the majority, as the writer does."""
    active.store.commit_now(WriteBatch.empty().put_raw(Journal.DQF, name.encode(), b"v"))
    active.stream.hold([lambda error: answered.append(name)])


async def acknowledge_as_sealed(active: Active, name: str) -> None:
    """`name` acknowledges every record as soon as it is sealed (a replica at work)."""
    while True:
        if active.stream.acked.get(name, 0) < active.stream.number:
            active.stream.ack(name, active.stream.number)
        await trio.sleep(0.001)


def test_a_replica_that_does_not_acknowledge_the_hand_over_record_is_not_handed_to(
    store: JournalStore,
) -> None:
    """b has every record (nothing was written since), but is paused: before, the active
    named b alone in sync and stopped, and the group had no active until b came back."""

    async def scenario() -> None:
        election = MemoryElection()
        answered: list[str] = []
        active = await active_a_with_b_and_c_in_sync(store, election, answered)
        request = FailoverRequest("b", "r1")
        await active.coordinator.request_failover(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acknowledge_as_sealed, active, "c")  # b stays silent
            started_s = trio.current_time()
            assert not await active.hand_over(request)
            assert trio.current_time() - started_s <= REPLICATION_HANDOVER_WAIT_S + 0.01
            put_answered(active, "after", answered)
            with trio.fail_after(1):
                while answered != ["after"]:
                    await trio.sleep(0.001)  # still answering, with c
            nursery.cancel_scope.cancel()
        assert active.stepped_down is None and active.stream.answering
        assert (election.leader, election.failover) == ("a", None)  # not tried again
        refusal = await active.coordinator.failover_refusal(request)
        assert refusal is not None and "b did not acknowledge" in refusal
        assert store.meta_get(HANDOVER_KEY) is not None  # the record b was asked for

    run_under_autojump_clock(scenario)


def test_the_lease_is_renewed_while_a_hand_over_waits(store: JournalStore) -> None:
    """The wait for the chosen replica (5 s) is longer than a short lease (3 s): the
    renewals go on beside it (before, the lease loop waited in the hand-over, etcd's
    TTL ran out under an active that still answered, and c took over)."""

    class RenewalsSeen(MemoryCoordinator):
        renewed_s: list[float] = []

        async def renew(self) -> bool:
            self.renewed_s.append(trio.current_time())
            return await super().renew()

    async def scenario() -> None:
        election = MemoryElection()
        ttl_s = 3.0
        active = await active_a_with_b_and_c_in_sync(store, election, [], ttl_s=ttl_s)
        watched = RenewalsSeen(election, "a")
        watched.term = active.coordinator.term
        active.coordinator = watched
        request = FailoverRequest("b", "r2")
        await watched.request_failover(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._lease_loop, nursery)
            await trio.sleep(REPLICATION_HANDOVER_WAIT_S + ttl_s)
            nursery.cancel_scope.cancel()
        assert await watched.failover_refusal(request) is not None  # it did wait, for b
        gaps_s = [later - earlier for earlier, later in pairwise(watched.renewed_s)]
        assert max(gaps_s) <= ttl_s / 4 + 0.01
        assert active.stepped_down is None and election.leader == "a"
        assert election.failover is None  # refused once, not retried at every renewal

    run_under_autojump_clock(scenario)


def test_a_hand_over_to_a_replica_that_acknowledges_steps_down_with_every_answer_on_it(
    store: JournalStore,
) -> None:
    """c acknowledges the hand-over record: only c is named in sync and the active
    steps down. An answer held while etcd is written is not given, even once b (not
    chosen) has its record: c might lack it and win the next term without it."""

    class SlowElection(MemoryCoordinator):
        """etcd takes its time to write the in-sync record of the hand-over."""

        writing = trio.Event()
        go_on = trio.Event()

        async def set_in_sync(self, term, members, acks_needed, request=None) -> bool:
            if request is not None:
                self.writing.set()
                await self.go_on.wait()
            return await super().set_in_sync(term, members, acks_needed, request)

    async def scenario() -> None:
        election = MemoryElection()
        answered: list[str] = []
        active = await active_a_with_b_and_c_in_sync(store, election, answered)
        slow = SlowElection(election, "a")
        slow.term = active.coordinator.term
        active.coordinator = slow
        request = FailoverRequest("c", "r3")
        await slow.request_failover(request)
        handed: list[bool] = []

        async def hand_over() -> None:
            handed.append(await active.hand_over(request))

        async with trio.open_nursery() as nursery:
            acknowledging = trio.CancelScope()

            async def c_acknowledges() -> None:
                with acknowledging:
                    await acknowledge_as_sealed(active, "c")

            nursery.start_soon(c_acknowledges)
            nursery.start_soon(hand_over)
            await slow.writing.wait()
            acknowledging.cancel()  # c takes no more records from here
            put_answered(active, "late", answered)
            active.stream.ack("b", active.stream.number)  # a majority without c
            assert answered == []
            slow.go_on.set()
        assert handed == [True]
        assert answered == []
        assert active.stepped_down is not None and "planned" in active.stepped_down
        assert election.in_sync == ("c",) and election.failover is None

    run_under_autojump_clock(scenario)


async def test_a_withdrawn_request_is_not_carried_out(store: JournalStore) -> None:
    """`mrs failover` gave up waiting and withdrew its request: the active, taking it
    up after, hands over nothing."""
    election = MemoryElection()
    active = await active_a_with_b_and_c_in_sync(store, election, [])
    request = FailoverRequest("c", "r4")
    await active.coordinator.request_failover(request)
    assert await active.coordinator.withdraw_failover(request)
    assert not await active.coordinator.withdraw_failover(request)  # once
    async with trio.open_nursery() as nursery:
        nursery.start_soon(acknowledge_as_sealed, active, "c")
        assert not await active.hand_over(request)
        nursery.cancel_scope.cancel()
    assert active.stepped_down is None and active.stream.answering
    assert election.in_sync == ("a", "b", "c") and election.leader == "a"
    assert await active.coordinator.failover_refusal(request) is None  # nobody asks


def test_without_a_name_the_hand_over_goes_to_the_replicas_that_acknowledge(
    store: JournalStore,
) -> None:
    """`mrs failover` without `--to`, b paused: c alone acknowledges the hand-over
    record; once b is dropped for lagging (the lag bound, not the whole wait), the
    active hands over to c."""

    async def scenario() -> None:
        election = MemoryElection()
        active = await active_a_with_b_and_c_in_sync(store, election, [])
        request = FailoverRequest("", "r5")
        await active.coordinator.request_failover(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acknowledge_as_sealed, active, "c")
            nursery.start_soon(active._lag_loop)
            started_s = trio.current_time()
            assert await active.hand_over(request)
            took_s = trio.current_time() - started_s
            nursery.cancel_scope.cancel()
        assert took_s <= REPLICATION_LAG_S_MAX + 0.5 < REPLICATION_HANDOVER_WAIT_S
        assert election.in_sync == ("c",) and active.stepped_down is not None

    run_under_autojump_clock(scenario)


def test_an_active_that_lost_its_lease_during_the_hand_over_answers_nothing_after_it(
    store: JournalStore,
) -> None:
    """The lease is lost while the hand-over's in-sync record is written (which then
    fails): the refused hand-over must not turn answering back on for a stepped-down
    active, whose term another instance may hold by now."""

    class LostMeanwhile(MemoryCoordinator):
        active: Active

        async def set_in_sync(self, term, members, acks_needed, request=None) -> bool:
            if request is None:
                return await super().set_in_sync(term, members, acks_needed)
            self.active.step_down("the lease is lost (another instance may be active)")
            return False

    async def scenario() -> None:
        election = MemoryElection()
        answered: list[str] = []
        active = await active_a_with_b_and_c_in_sync(store, election, answered)
        losing = LostMeanwhile(election, "a")
        losing.term, losing.active = active.coordinator.term, active
        active.coordinator = losing
        request = FailoverRequest("c", "r6")
        await losing.request_failover(request)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(acknowledge_as_sealed, active, "c")
            assert not await active.hand_over(request)
            put_answered(active, "after", answered)
            active.stream.ack("b", active.stream.number)
            nursery.cancel_scope.cancel()
        assert not active.stream.answering and answered == []
        assert not active.resigned and active.stepped_down is not None

    run_under_autojump_clock(scenario)
