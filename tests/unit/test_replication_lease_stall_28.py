"""An active whose own process stalls (a loaded host, SIGSTOP, a long pause) past half
its lease TTL, without the memory coordinator.

Before: woken past its step-down point, it stepped down without asking etcd, though
etcd still held its lease; the group failed over for nothing (clients reconnect, what
was handed out comes back POSSDUPL) and it won the next term itself (the clean-clone
CI run's web view showed term 2 where term 1 was read a moment before). Now it stops
answering, asks etcd once more, and answers again when etcd renews the lease; a lease
etcd no longer holds still makes it step down, answering nothing.

The stall is `MockClock.jump`: time passes while no task runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from journals import JournalStore, WriteBatch
from journals.keys import Journal
from mrs.replication.active import Active
from mrs.replication.coordinator import MemoryCoordinator, MemoryElection
from tests.conftest import run_under_autojump_clock
from tests.unit.test_replication_rules import lease_holder, one_put

TTL_S = 6.0
ASK_S = 0.5
"""How long etcd takes to answer the renewal asked after the stall."""


class SlowCoordinator(MemoryCoordinator):
    """A renewal answered `delay_s` late (etcd answering the stalled process)."""

    delay_s = 0.0

    async def renew(self) -> bool:
        await trio.sleep(self.delay_s)
        return await super().renew()


@pytest.fixture
def store(tmp_path: Path):
    opened = JournalStore(tmp_path / "journals", 1 << 24)
    yield opened
    opened.close()


def holder(store: JournalStore, coordinator: MemoryCoordinator) -> tuple[Active, list[str]]:
    """The active of `coordinator` (term won), b in sync, and the answers it gives."""
    answered: list[str] = []
    active = lease_holder(store, coordinator, TTL_S)
    active.stream.deliver = lambda dones: [done(None) for done in dones]
    active.stream.in_sync.add("b")
    return active, answered


def put(active: Active, answered: list[str], name: str) -> None:
    """One put's record, its answer held, and b's acknowledgement of it."""
    active.stream.seal([WriteBatch.empty().put_raw(Journal.DQF, name.encode(), b"v")])
    active.stream.hold([one_put(name, answered)])
    active.stream.ack("b", active.stream.number)


def test_a_stall_past_half_the_lease_keeps_the_term_and_answers_again(store) -> None:
    """Stalled past half the TTL, etcd still holding the lease: answers stop while it
    asks, then resume in the same term; stalled past the lease (b won): it steps down."""
    clock = trio.testing.MockClock(autojump_threshold=0)

    async def scenario() -> None:
        election = MemoryElection()
        coordinator = SlowCoordinator(election, "a")
        await coordinator.campaign()
        active, answered = holder(store, coordinator)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(active._lease_loop, nursery)
            await trio.sleep(3 * TTL_S)  # renewals go through
            put(active, answered, "before")
            assert answered == ["before"]
            coordinator.delay_s = ASK_S
            clock.jump(0.6 * TTL_S)  # the process stalls: past half the TTL, not past it
            await trio.sleep(ASK_S / 5)  # the lease loop woke late and asks etcd
            assert not active.stream.answering  # no answer while the lease is in doubt
            put(active, answered, "asking")
            assert answered == ["before"]
            await trio.sleep(ASK_S)  # etcd renewed the lease: answers resume
            assert active.stepped_down is None and active.stream.answering
            assert answered == ["before", "asking"]
            coordinator.delay_s = 0.0
            await trio.sleep(3 * TTL_S)  # and the renewals go on
            put(active, answered, "after")
            assert active.stepped_down is None and answered == ["before", "asking", "after"]
            assert (election.leader, election.term) == ("a", 1)
            clock.jump(1.5 * TTL_S)  # stalled past the lease: etcd let it go, b won
            election.expire("a")
            assert await MemoryCoordinator(election, "b").campaign() == 2
            with trio.fail_after(TTL_S):
                while active.stepped_down is None:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert not active.stream.answering and "renewed" in active.stepped_down

    run_under_autojump_clock(scenario, clock=clock)

