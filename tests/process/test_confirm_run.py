"""The confirms of one receive share one write batch (mrs.group.confirm_run), and each
is still checked, answered and, if their commit fails, failed on its own terms.

Against the server's own code in process (make_mem_bus: in-memory journals whose
commits can be made to fail); `Client.confirm_many` sends its Confirms in one write,
so the server takes them in one receive.
"""

from __future__ import annotations

import contextlib

import pytest
import trio
import trio.testing

from clients import DeliveryMode, MrsError, NoMoreMessages, PutItem, Status, Uma
from journals import Journal
from mrs import protocol as wire

COUNT = 30
ANYORDER_QUEUE_ID = 11


async def put_durable(bus, count: int = COUNT) -> None:
    """`count` WF_DQF messages put to ANYORDER, all stored."""
    async with bus.connect(queue="SENDER") as sender:
        items = [
            PutItem(bytes([n]), "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
            for n in range(count)
        ]
        assert all(psb.stored for psb in await sender.put_many(items))


@contextlib.asynccontextmanager
async def delivered(make_mem_bus, count: int = COUNT, group_extra: str = ""):
    """A fresh group holding `count` stored messages on ANYORDER, and a receiver that
    got them all (each now waits for its confirm): (bus, receiver, seqs)."""
    bus = await make_mem_bus(limits="dqf_messages_max = 1000", group_extra=group_extra)
    await put_durable(bus, count)
    async with bus.connect(queue="ANYORDER") as receiver:
        messages = await receiver.get_many(count, timeout=5)
        assert len(messages) == count
        yield bus, receiver, [message.seq for message in messages]


def writer_batches(bus) -> int:
    return bus.server.group.ctx.writer.stats.batches


def unconfirmed(bus) -> list[int]:
    return list(bus.server.group.queues[ANYORDER_QUEUE_ID].unconfirmed)


async def test_the_confirms_of_one_receive_are_written_in_one_batch_and_each_answered(
    make_mem_bus,
) -> None:
    async with delivered(make_mem_bus) as (bus, receiver, seqs):
        before = writer_batches(bus)
        assert await receiver.confirm_many(seqs) == [None] * COUNT
        assert writer_batches(bus) - before == 1
        assert bus.server.group.ctx.counts.dqf == 0
        assert bus.store.count(Journal.DQF) == bus.store.count(Journal.MARKS) == 0
        assert unconfirmed(bus) == []


async def test_a_refused_confirm_in_a_run_is_answered_alone_and_the_others_share_a_batch(
    make_mem_bus,
) -> None:
    async with delivered(make_mem_bus, 3) as (bus, receiver, seqs):
        before = writer_batches(bus)
        results = await receiver.confirm_many([seqs[0], 987_654_321, seqs[1], seqs[2]])
        assert results[0] is None and results[2] is None and results[3] is None
        assert isinstance(results[1], MrsError)
        assert writer_batches(bus) - before == 1
        assert unconfirmed(bus) == []


async def test_when_the_shared_commit_fails_every_confirm_fails_and_can_be_made_again(
    make_mem_bus,
) -> None:
    async with delivered(make_mem_bus) as (bus, receiver, seqs):
        bus.fail_commits("EIO")
        failed = await receiver.confirm_many(seqs)
        assert all(isinstance(result, MrsError) for result in failed)
        assert {result.status for result in failed} == {Status.JOURNAL_FAIL}
        assert unconfirmed(bus) == seqs  # each still waits for its confirm, in seq order
        bus.fail_commits(None)
        assert await receiver.confirm_many(seqs) == [None] * COUNT
        assert bus.server.group.ctx.counts.dqf == 0


async def test_confirms_that_write_a_pcj_record_each_go_alone(make_mem_bus) -> None:
    """With pcj_default every confirm also journals its message to the PCJ: those are
    not deletes only, so each keeps its own batch (and its PCJ record)."""
    async with delivered(make_mem_bus, group_extra="pcj_default = true") as (bus, receiver, seqs):
        before = writer_batches(bus)
        assert await receiver.confirm_many(seqs) == [None] * COUNT
        assert writer_batches(bus) - before == COUNT
        assert bus.server.group.ctx.counts.dqf == 0
        assert bus.store.count(Journal.PCJ) == COUNT
        assert bus.store.count(Journal.DQF) == 0


async def test_confirms_before_a_protocol_error_in_the_same_receive_are_still_written(
    make_mem_bus,
) -> None:
    """A request that breaks the protocol ends the connection and the rest of its
    receive; the confirms taken before it are written all the same (else their
    messages, no longer unconfirmed, would be neither confirmed nor redelivered)."""
    bus = await make_mem_bus(limits="dqf_messages_max = 1000")
    await put_durable(bus, 3)
    host, port = bus.address.rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await bus.open_stream(host, int(port))
    await stream.send_all(
        connection.send(wire.Hello(wire.PROTOCOL_VERSION, "raw"))
        + connection.send(wire.Attach(1, "ANYORDER"))
        + connection.send(wire.GetBatch(2, 3, 5000))
    )
    deliveries = []
    while not deliveries:
        connection.receive_data(await stream.receive_some(65536))
        while (event := connection.next_event()) is not wire.NEED_DATA:
            if isinstance(event, wire.DeliveryBatch):
                deliveries = event.deliveries
    confirms = [wire.Confirm(10 + n, one.seq, 0, 0) for n, one in enumerate(deliveries)]
    link_only = wire.LinkAck(20, [])  # a link's answer on a client's connection
    await stream.send_all(b"".join(connection.send(event) for event in [*confirms, link_only]))
    with trio.fail_after(5):
        while await stream.receive_some(65536):
            pass  # until the server closes the connection
    await stream.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert bus.server.group.ctx.counts.dqf == 0
    async with bus.connect(queue="ANYORDER") as again:  # none of them comes again
        with pytest.raises(NoMoreMessages):
            await again.get(timeout=0)
