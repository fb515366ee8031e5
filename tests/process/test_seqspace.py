"""Sequence numbers: no number of restarts exhausts them, and journals written with
the old `group | epoch | counter` layout migrate with seqs still increasing."""

from __future__ import annotations

import dataclasses

import pytest

from clients import DeliveryMode, Status, Uma, connect
from journals import Journal, JournalStore, WriteBatch, queue_key
from mrs.core.seqspace import (
    COUNTER_MAX,
    FRESH_COUNTERS_PER_S,
    FRESH_EPOCH_S,
    GROUP_SHIFT,
    RESERVE_FIRST,
    SeqAllocator,
    counter_of,
    fresh_start,
    group_of,
)
from sim.memstore import MemoryJournalStore

LEGACY_EPOCH_MAX = (1 << 17) - 1


async def _put(address: str, body: bytes) -> int:
    async with connect(address, queue="SENDER") as sender:
        psb = await sender.put(body, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        return psb.seq


def test_a_crash_loop_costs_at_most_one_small_block_per_start() -> None:
    store = MemoryJournalStore()
    seqs = []
    starts = 20_000
    for _ in range(starts):
        allocator = SeqAllocator(store, group_id=3)
        allocator.start()
        seqs.append(allocator.next())
    assert seqs == sorted(set(seqs)), "seqs must be unique and increasing across restarts"
    assert {group_of(seq) for seq in seqs} == {3}
    per_start = counter_of(seqs[-1]) / starts
    assert per_start <= RESERVE_FIRST
    # At one crash a second, the 2**49 counters last for thousands of years.
    assert COUNTER_MAX / per_start / (365 * 24 * 3600) > 10_000
    assert allocator.boots == starts


def test_a_busy_group_reserves_rarely_and_never_reuses_a_seq_after_a_crash() -> None:
    store = MemoryJournalStore()
    allocator = SeqAllocator(store, group_id=1)
    allocator.start()
    commits_before = store.commits
    issued = [allocator.next() for _ in range(300_000)]
    assert store.commits - commits_before <= 12  # blocks double up to 1M
    crashed = SeqAllocator(store, group_id=1)  # no shutdown: a crash
    crashed.start()
    assert crashed.next() > issued[-1]


@pytest.mark.parametrize("legacy_epoch", [7, LEGACY_EPOCH_MAX])
async def test_old_journals_migrate_and_seqs_keep_increasing(make_bus, legacy_epoch) -> None:
    """The old layout could not start past epoch 131,071; a journal there starts now."""
    bus = make_bus()
    await _put(bus.address, b"old")
    bus.kill()
    # Turn the journal into one the old layout wrote at `legacy_epoch`.
    legacy_seq = (1 << GROUP_SHIFT) | (legacy_epoch << 32) | 5
    store = JournalStore(bus.data_dir / "journals")
    ((key, record),) = list(store.scan(Journal.DQF))
    batch = WriteBatch.empty().delete(Journal.DQF, key)
    batch.put_record(
        Journal.DQF, queue_key(10, legacy_seq), dataclasses.replace(record, seq=legacy_seq)
    )
    batch.delete(Journal.META, b"seq_reserved").delete(Journal.META, b"boots")
    batch.put_raw(Journal.META, b"epoch", legacy_epoch.to_bytes(4, "big"))
    store.commit_now(batch)
    store.close()

    address = bus.start()
    new_seq = await _put(address, b"new")
    assert new_seq > legacy_seq and group_of(new_seq) == 1
    bus.kill()
    address = bus.start()
    newer_seq = await _put(address, b"newer")
    assert newer_seq > new_seq
    async with connect(address, queue="ORDERS") as receiver:
        got = [await receiver.get(timeout=5) for _ in range(3)]
    # FIFO across the upgrade: the old message first.
    assert [(m.body, m.seq) for m in got] == [
        (b"old", legacy_seq),
        (b"new", new_seq),
        (b"newer", newer_seq),
    ]


def test_a_reservation_the_disk_refuses_is_the_puts_journal_fail_not_a_server_error() -> None:
    """A full disk at the reservation commit raised JournalDeviceError out of the put:
    the client got SERVER_ERROR and the log a traceback per put (13,000 in one run).
    It is the put's JOURNAL_FAIL now, and the next put tries again."""
    from journals import JournalDeviceError
    from mrs.errors import Refused

    store = MemoryJournalStore()
    allocator = SeqAllocator(store, group_id=1)
    allocator.start()
    issued = [allocator.next() for _ in range(RESERVE_FIRST)]  # the first block used
    commit_now = store.commit_now

    def disk_full(batch: WriteBatch) -> None:
        raise JournalDeviceError("journal device failed: No space left on device", 28)

    store.commit_now = disk_full  # type: ignore[method-assign]
    with pytest.raises(Refused) as refused:
        allocator.next()
    assert refused.value.status is Status.JOURNAL_FAIL
    assert "cannot reserve sequence numbers: journal device failed" in refused.value.message
    store.commit_now = commit_now  # type: ignore[method-assign]
    assert allocator.next() > issued[-1]


def test_a_fresh_group_counts_from_its_clock_and_a_restart_from_its_reservation() -> None:
    """A rebuilt group (fresh journals, same id) starts above the seqs its old
    incarnation issued at up to FRESH_COUNTERS_PER_S a second; a restart does not
    jump to the clock (no gap in a running group's seqs)."""
    store = MemoryJournalStore()
    built_ns = (FRESH_EPOCH_S + 86_400) * 1_000_000_000
    old = SeqAllocator(store, group_id=1, clock_ns=lambda: built_ns)
    old.start()
    first = old.next()
    assert counter_of(first) == fresh_start(built_ns) == 86_400 * FRESH_COUNTERS_PER_S
    issued = [old.next() for _ in range(5_000)]
    restarted = SeqAllocator(store, group_id=1, clock_ns=lambda: built_ns + 3_600 * 10**9)
    restarted.start()
    skipped = counter_of(restarted.next()) - counter_of(issued[-1])
    assert 0 < skipped < FRESH_COUNTERS_PER_S  # the rest of a block, not an hour of clock
    # Lost with its journals an hour later, after 5,001 seqs: the rebuilt one starts above.
    rebuilt = SeqAllocator(MemoryJournalStore(), 1, clock_ns=lambda: built_ns + 3_600 * 10**9)
    rebuilt.start()
    assert rebuilt.next() > issued[-1]


def test_a_clock_before_the_fresh_epoch_or_far_ahead_still_leaves_room() -> None:
    assert fresh_start(0) == 1  # a simulator's clock
    assert fresh_start((FRESH_EPOCH_S - 1) * 10**9) == 1
    far = fresh_start(2**63)
    assert far == COUNTER_MAX // 2  # half the counters left for the rest of its life
