"""A confirm that holds no consumer up waits up to COMMIT_COMPANY_WAIT_S for a batch
that cannot wait, and shares its commit (mrs.server.group_server's commit loop, issue 17); one that
may hold a consumer up is committed at once. On the in-process bus, under MockClock:
a wait shows as virtual time passing."""

from __future__ import annotations

import functools

import trio

from clients import DeliveryMode, Uma
from journals import InlineWriter, WriteBatch
from mrs.limits import COMMIT_COMPANY_WAIT_S

WF = DeliveryMode.WF_DQF
ANYORDER_ID = 11


def test_the_writer_wakes_its_committer_again_when_the_first_urgent_batch_joins() -> None:
    wakes: list[bool] = []
    writer = InlineWriter(store=None, wake=lambda: wakes.append(writer.urgent))  # type: ignore[arg-type]
    writer.submit(WriteBatch.empty(), lambda error: None, can_wait=True)
    writer.submit(WriteBatch.empty(), lambda error: None, can_wait=True)
    assert (wakes, writer.urgent) == ([False], False)  # one wake; the commit may wait
    writer.submit(WriteBatch.empty(), lambda error: None)
    writer.submit(WriteBatch.empty(), lambda error: None)
    assert (wakes, writer.urgent) == ([False, True], True)  # woken once more, no longer


def test_the_writer_wakes_its_committer_when_the_pending_batches_reach_the_mark() -> None:
    wakes: list[int] = []
    writer = InlineWriter(store=None, wake=lambda: wakes.append(writer.pending_batches))  # type: ignore[arg-type]
    writer.submit(WriteBatch.empty(), lambda error: None)
    writer.wake_at_batches = 3
    for _ in range(4):
        writer.submit(WriteBatch.empty(), lambda error: None)
    assert wakes == [0, 3]  # the first batch's wake, then once at the mark


def commits(mem_bus) -> int:
    return mem_bus.server.group.writer.stats.commits


async def park_next_get(mem_bus, consumer, nursery) -> list[bytes]:
    """Start a get for the next message; return once the server has parked it. The
    list it returns receives that message's body."""
    got: list[bytes] = []

    async def get_next() -> None:
        got.append((await consumer.get(timeout=60)).body)

    nursery.start_soon(get_next)
    queue = mem_bus.server.group.queues[ANYORDER_ID]
    while not queue.waiters:  # no time passes: this task never blocks meanwhile
        await trio.lowlevel.checkpoint()
    return got


async def arrived(got: list[bytes]) -> list[bytes]:
    while not got:
        await trio.lowlevel.checkpoint()
    return got


async def test_a_consumer_with_no_get_parked_has_its_confirm_committed_at_once(
    mem_bus,
) -> None:
    async with mem_bus.connect("ANYORDER") as consumer, mem_bus.connect("SENDER") as sender:
        await sender.put(b"one", "ANYORDER", delivery=WF, uma=Uma.DLJ)
        await sender.put(b"two", "ANYORDER", delivery=WF, uma=Uma.DLJ)
        message = await consumer.get(timeout=1)
        started_s = trio.current_time()
        await message.confirm()  # a message still waits: a consumer may wait too
        assert trio.current_time() - started_s < COMMIT_COMPANY_WAIT_S
        message = await consumer.get(timeout=1)
        started_s = trio.current_time()
        await message.confirm()  # drained, but no get parked: it may be this one's
        assert trio.current_time() - started_s < COMMIT_COMPANY_WAIT_S


async def test_a_confirm_of_a_drained_queue_waits_for_company_at_most_the_limit(
    mem_bus, nursery
) -> None:
    async with mem_bus.connect("ANYORDER") as consumer, mem_bus.connect("SENDER") as sender:
        await sender.put(b"one", "ANYORDER", delivery=WF, uma=Uma.DLJ)
        message = await consumer.get(timeout=1)
        got = await park_next_get(mem_bus, consumer, nursery)
        started_s = trio.current_time()
        await message.confirm()  # nobody comes: it goes alone after the limit
        waited_s = trio.current_time() - started_s
        assert COMMIT_COMPANY_WAIT_S <= waited_s < 2 * COMMIT_COMPANY_WAIT_S
        await sender.put(b"two", "ANYORDER", delivery=WF, uma=Uma.DLJ)
        assert await arrived(got) == [b"two"]


async def test_a_confirm_waiting_for_company_goes_with_the_next_put(mem_bus, nursery) -> None:
    async with mem_bus.connect("ANYORDER") as consumer, mem_bus.connect("SENDER") as sender:
        await sender.put(b"one", "ANYORDER", delivery=WF, uma=Uma.DLJ)
        message = await consumer.get(timeout=1)
        got = await park_next_get(mem_bus, consumer, nursery)
        writer = mem_bus.server.group.writer
        before = commits(mem_bus)
        started_s = trio.current_time()
        async with trio.open_nursery() as both:
            both.start_soon(message.confirm)
            while not writer.pending:  # the confirm waits in the writer (no time passes:
                await trio.lowlevel.checkpoint()  # this task never blocks meanwhile)
            assert not writer.urgent
            both.start_soon(
                functools.partial(sender.put, b"two", "ANYORDER", delivery=WF, uma=Uma.DLJ)
            )
        assert trio.current_time() - started_s < COMMIT_COMPANY_WAIT_S
        assert commits(mem_bus) == before + 1  # the confirm, the put and its delivery mark
        assert await arrived(got) == [b"two"]
