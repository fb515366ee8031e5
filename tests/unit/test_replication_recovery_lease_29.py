"""A new active's lease counted from its win, not from the end of its recovery.

The lease is granted in the campaign; the active recovers its journals (the event loop
held) and only then starts its lease loop. Before: the loop counted its lease from its
own start, so an active whose recovery took most of the TTL, with etcd then out of
reach, went on answering past the lease's expiry (a replica could win the next term
meanwhile, and the answers given on the old term's replicas be lost). Now it counts
from when the grant was sent (`Coordinator.lease_sent_s`).

The recovery is `MockClock.jump`: time passes while no task runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from journals import JournalStore
from mrs.replication.coordinator import MemoryElection
from tests.conftest import run_under_autojump_clock
from tests.unit.test_replication_lease_stall_28 import SlowCoordinator, holder, put
from tests.unit.test_replication_rules import StallingCoordinator

TTL_S = 6.0


@pytest.fixture
def store(tmp_path: Path):
    opened = JournalStore(tmp_path / "journals", 1 << 24)
    yield opened
    opened.close()


def test_answers_stop_half_a_lease_after_the_win_when_etcd_is_out_of_reach(store) -> None:
    """Recovery took 0.4 of the TTL, then etcd stopped answering: answers stop by half
    the TTL after the grant (not half a TTL after the lease loop began, 0.9 of it)."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def scenario() -> None:
        election = MemoryElection()
        coordinator = StallingCoordinator(election, "a")
        await coordinator.campaign()
        won_s = trio.current_time()
        active, answered = holder(store, coordinator)
        clock.jump(0.4 * TTL_S)  # the recovery, the loop held
        coordinator.stalled = True
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._lease_loop, nursery)
            put(active, answered, "recovered")
            assert answered == ["recovered"]
            with trio.fail_after(TTL_S):
                while active.stream.answering:
                    await trio.sleep(0.01)
            stopped_s = trio.current_time() - won_s
            put(active, answered, "late")
            nursery.cancel_scope.cancel()
        assert stopped_s <= 0.5 * TTL_S + 0.05
        assert answered == ["recovered"]

    run_under_autojump_clock(scenario, clock=clock)


def test_a_recovery_past_half_the_lease_asks_etcd_before_answering(store) -> None:
    """Recovery took 0.7 of the TTL, etcd answering slowly: nothing is answered until
    etcd renewed the lease; then answers flow in the same term, nobody stepped down."""
    clock = trio.testing.MockClock(autojump_threshold=0)
    ask_s = 0.5

    async def scenario() -> None:
        election = MemoryElection()
        coordinator = SlowCoordinator(election, "a")
        await coordinator.campaign()
        active, answered = holder(store, coordinator)
        clock.jump(0.7 * TTL_S)
        coordinator.delay_s = ask_s
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._lease_loop, nursery)
            await trio.sleep(ask_s / 5)
            assert not active.stream.answering  # the lease is in doubt
            put(active, answered, "in doubt")
            assert answered == []
            await trio.sleep(ask_s)  # etcd renewed it
            assert active.stream.answering
            coordinator.delay_s = 0.0
            await trio.sleep(2 * TTL_S)
            put(active, answered, "renewed")
            nursery.cancel_scope.cancel()
        assert active.stepped_down is None
        assert answered == ["in doubt", "renewed"]
        assert (election.leader, election.term) == ("a", 1)

    run_under_autojump_clock(scenario, clock=clock)
