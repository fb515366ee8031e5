"""Read-ahead: the gets of a client's pool take, beyond the messages their callers wait
for, messages the server may lend (in memory only, no confirm, nobody waiting on their
dequeue: MRS_ACKs, plain NN messages), held for the next gets; a client that closes
gives back the ones no get took (GiveBack), so a clean close loses none of them.

The rules run against the server's own code in process (make_mem_bus, MockClock); the
AK round trip that read-ahead exists for runs against a real `mrs serve` process.
"""

from __future__ import annotations

import msgpack
import trio
import trio.testing

import clients
from clients import DeliveryMode, PutItem, Status, Uma, connect
from mrs import protocol as wire
from mrs.config.bus import QueueConfig
from mrs.group.queues import TargetQueue
from mrs.group.shapes import Entry
from mrs.limits import LENT_BYTES_MAX, LENT_REMEMBERED_MAX, READ_AHEAD_MAX
from mrs.model import MRS_ACK_TYPE, MRS_CLASS, Address, Psb

SENDER_QUEUE_ID = 13
ANYORDER_QUEUE_ID = 11


async def put_memory_messages(bus, target: str, count: int, first: int = 0) -> None:
    async with bus.connect(queue="SENDER2") as sender:
        for number in range(first, first + count):
            await sender.put(number.to_bytes(4, "big"), target, delivery=DeliveryMode.NN_MEM)


async def take(receiver, count: int) -> list[int]:
    """`count` gets, one after the other: the numbers their bodies carry."""
    return [int.from_bytes((await receiver.get(timeout=5)).body, "big") for _ in range(count)]


def queue_of(bus, queue_id: int) -> TargetQueue:
    return bus.server.group.queues[queue_id]


async def test_memory_messages_are_read_ahead_and_each_got_once_in_order(make_mem_bus) -> None:
    bus = await make_mem_bus()
    await put_memory_messages(bus, "ANYORDER", 300)
    async with bus.connect(queue="ANYORDER") as receiver:
        first = await take(receiver, 1)
        queue = queue_of(bus, ANYORDER_QUEUE_ID)
        # one GetBatch asked for 1 and took up to READ_AHEAD_MAX more, all lent to us
        # (the one asked for too: held if its get was given up, it is given back)
        read_ahead = min(299, READ_AHEAD_MAX)
        assert len(queue.lent) == 1 + read_ahead
        assert queue.waiting == 299 - read_ahead
        rest = await take(receiver, 299)
    assert first + rest == list(range(300))


async def test_pending_of_its_own_queue_counts_what_the_client_read_ahead(make_mem_bus) -> None:
    """putil_show_pending after one get of ten: nine wait for this application's gets
    (read ahead into the client), not none; by the queue's name or its G.Q alike."""
    bus = await make_mem_bus()
    await put_memory_messages(bus, "ANYORDER", 10)
    async with bus.connect(queue="ANYORDER") as receiver:
        await take(receiver, 1)
        assert len(receiver.held) == 9
        own = f"{receiver.queue.group}.{receiver.queue.queue}"
        assert await receiver.pending(["ANYORDER", own, "SENDER2"]) == [9, 9, 0]
        await take(receiver, 4)
        assert await receiver.pending([receiver.queue]) == [5]


async def test_a_clean_close_gives_back_what_no_get_took(make_mem_bus) -> None:
    bus = await make_mem_bus()
    await put_memory_messages(bus, "ANYORDER", 200)
    async with bus.connect(queue="ANYORDER") as receiver:
        taken = await take(receiver, 10)
        assert len(queue_of(bus, ANYORDER_QUEUE_ID).lent) == 200  # 10 of them got since
    await trio.testing.wait_all_tasks_blocked()  # the server has seen the close
    queue = queue_of(bus, ANYORDER_QUEUE_ID)
    assert not queue.lent and queue.waiting == 190 and queue.memory_count == 190
    async with bus.connect(queue="ANYORDER") as again:
        rest = await take(again, 190)
    assert taken + rest == list(range(200))  # nothing lost, nothing twice, same order


async def test_recoverable_messages_are_never_read_ahead(make_mem_bus) -> None:
    """A journaled message is delivered only to a get that asked for it, so one the
    application never saw is not marked POSSDUPL when it comes again."""
    bus = await make_mem_bus()
    async with bus.connect(queue="SENDER2") as sender:
        for number in range(20):
            await sender.put(
                number.to_bytes(4, "big"), "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
            )
    async with bus.connect(queue="ANYORDER") as receiver:
        message = await receiver.get(timeout=5)
        queue = queue_of(bus, ANYORDER_QUEUE_ID)
        assert list(queue.unconfirmed) == [message.seq] and not queue.lent
    async with bus.connect(queue="ANYORDER") as again:
        statuses = [(await again.get(timeout=5)).delivery_status for _ in range(20)]
    assert statuses == [Status.POSSDUPL] + [Status.CONFIRMREQ] * 19


async def test_read_ahead_stops_at_a_message_that_needs_its_own_get(make_mem_bus) -> None:
    bus = await make_mem_bus()
    await put_memory_messages(bus, "ANYORDER", 5)
    async with bus.connect(queue="SENDER2") as sender:
        await sender.put((5).to_bytes(4, "big"), "ANYORDER", delivery=DeliveryMode.WF_DQF)
    await put_memory_messages(bus, "ANYORDER", 5, first=6)
    async with bus.connect(queue="ANYORDER") as receiver:
        assert await take(receiver, 1) == [0]
        assert len(queue_of(bus, ANYORDER_QUEUE_ID).lent) == 5  # 0..4, not the journaled 5
        numbers = await take(receiver, 10)
    assert numbers == list(range(1, 11))


async def test_a_seq_not_lent_cannot_be_given_back(make_mem_bus) -> None:
    """A client that lies (gives back what it was not lent, or one seq twice) adds
    nothing to the queue: each lent message comes back at most once. (A message
    needing no confirm handed to a get is lent as well: a client that gives back one
    its application took delivers it again, as it could have put it again.)"""
    bus = await make_mem_bus()
    await put_memory_messages(bus, "ANYORDER", 3)
    async with bus.connect(queue="ANYORDER") as receiver:
        message = await receiver.get(timeout=5)  # asked for: lent too (held if given up)
        lent = list(queue_of(bus, ANYORDER_QUEUE_ID).lent)
        assert message.seq in lent and len(lent) == 3
        ahead = sorted(seq for seq in lent if seq != message.seq)  # read ahead: held
        receiver._requests.send_frame(
            receiver._requests.link, wire.GiveBack([ahead[0], ahead[0], 999])
        )
        await receiver._requests.link.flushed()
        rest = await take(receiver, 2)  # the held ones: the client does not know
    queue = queue_of(bus, ANYORDER_QUEUE_ID)
    assert rest == [1, 2] and queue.waiting == 1  # ahead[0] came back once, not twice
    async with bus.connect(queue="ANYORDER") as again:
        assert await take(again, 1) == [1]
        try:
            await again.get(timeout=0)
            raise AssertionError("a message came back that was never lent")
        except clients.NoMoreMessages:
            pass


async def test_a_thousand_lanes_are_never_refused_for_read_ahead(make_mem_bus) -> None:
    """Read-ahead takes no room from the gets (HELD_MESSAGES_MAX): a consumer with
    1,000 lanes looping get -> confirm, as peerbench's, is never refused EXCEEDQUOTA,
    even when its first 100 lanes asked (with a read-ahead) before the other 900
    came, on recoverable messages (never lent) and memory ones (lent) alike."""
    bus = await make_mem_bus(limits="dqf_messages_max = 10000")
    count = 3000
    got: list[int] = []
    async with bus.connect(queue="ANYORDER") as receiver:

        async def lane(done: trio.CancelScope) -> None:
            while True:
                message = await receiver.get(timeout=60)
                got.append(int.from_bytes(message.body, "big"))
                if message.needs_confirm:
                    await receiver.confirm(message.seq)
                if len(got) == count:
                    done.cancel()

        async with trio.open_nursery() as nursery:
            for lanes in (100, 900):  # the first 100 wait on the server, then the rest
                for _ in range(lanes):
                    nursery.start_soon(lane, nursery.cancel_scope)
                await trio.testing.wait_all_tasks_blocked()
            async with bus.connect(queue="SENDER2") as sender:
                items = [
                    PutItem(number.to_bytes(4, "big"), "ANYORDER", delivery=mode, uma=Uma.DISC)
                    for number in range(count)
                    for mode in [DeliveryMode.WF_DQF if number % 2 else DeliveryMode.NN_MEM]
                ]
                results = await sender.put_many(items)
                assert all(isinstance(result, Psb) for result in results)
    assert sorted(got) == list(range(count))


async def test_the_mrs_acks_of_one_commit_reach_a_waiting_sender_in_one_batch(
    make_mem_bus,
) -> None:
    """A commit's MRS_ACKs are offered together when its report ends (held_offers):
    the sender's parked GetBatch takes the first and lends the rest in the same
    answer, instead of the first alone and the rest a round trip later. In order."""
    bus = await make_mem_bus(limits="dqf_messages_max = 1000")
    puts_count = 50
    async with bus.connect(queue="SENDER") as producer:
        firsts: list[clients.Message] = []

        async def first_get() -> None:
            firsts.append(await producer.get(timeout=5))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(first_get)
            await trio.testing.wait_all_tasks_blocked()  # its GetBatch waits on the server
            items = [
                PutItem(bytes([number]), "ANYORDER", delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ)
                for number in range(puts_count)
            ]
            psbs = await producer.put_many(items)  # one frame: one commit
        queue = bus.server.group.queues[SENDER_QUEUE_ID]
        assert len(queue.lent) == puts_count and queue.waiting == 0
        acks = firsts + [await producer.get(timeout=0) for _ in range(puts_count - 1)]
    assert [ack.ack_psb().seq for ack in acks] == [psb.seq for psb in psbs]
    assert all(ack.ack_psb().delivery_status == Status.STORED for ack in acks)


def test_a_queue_remembers_a_bounded_number_of_lent_messages() -> None:
    queue = TargetQueue(QueueConfig(id=11, name="Q"), Address(1, 11))
    for seq in range(LENT_REMEMBERED_MAX + 10):
        entry = Entry(seq, b"x", Address(1, 13), Address(1, 11), DeliveryMode.NN_MEM)
        entry.times_delivered = 1
        queue.lend(entry)
    assert len(queue.lent) == LENT_REMEMBERED_MAX
    assert next(iter(queue.lent)) == 10  # the oldest were forgotten first
    assert queue.give_back([0, 10, 11]) == 2
    assert [entry.seq for entry in queue.pending] == [10, 11]
    assert queue.memory_count == 2 and queue.memory_bytes == 2
    assert queue.lent_bytes == LENT_REMEMBERED_MAX - 2


def test_a_queue_remembers_lent_bodies_up_to_a_bound_in_bytes() -> None:
    queue = TargetQueue(QueueConfig(id=11, name="Q"), Address(1, 11))
    body = b"x" * (1 << 20)
    for seq in range(10):
        queue.lend(Entry(seq, body, Address(1, 13), Address(1, 11), DeliveryMode.NN_MEM))
    assert queue.lent_bytes <= LENT_BYTES_MAX and list(queue.lent) == [6, 7, 8, 9]


async def test_mrs_acks_read_ahead_reach_their_sender_once_across_a_close(make_bus) -> None:
    """The AK round trip against a real server: a producer's MRS_ACKs are got by four
    tasks (read-ahead brings the rest of each batch); it closes with acks held, and
    the next program attached to its queue gets exactly the acks not yet got."""
    bus = make_bus()
    puts_count = 400
    got: list[int] = []
    async with connect(bus.address, queue="SENDER") as producer:
        seqs = []
        for number in range(puts_count):
            psb = await producer.put(
                number.to_bytes(4, "big"), "ANYORDER", delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ
            )
            assert psb.status == Status.SUCCESS
            seqs.append(psb.seq)

        async def ack_getter() -> None:
            while len(got) < 50:
                message = await producer.get(timeout=10)
                assert (message.msg_class, message.msg_type) == (MRS_CLASS, MRS_ACK_TYPE)
                psb = Psb.from_wire(msgpack.unpackb(message.body))
                assert (psb.status, psb.delivery_status) == (Status.SUCCESS, Status.STORED)
                got.append(psb.seq)

        async with trio.open_nursery() as nursery:
            for _ in range(4):
                nursery.start_soon(ack_getter)
        assert len(producer._requests.held) > 0  # closing with read-ahead acks held
    async with connect(bus.address, queue="SENDER") as again:  # free at once: the close waited
        while len(got) < puts_count:
            message = await again.get(timeout=10)
            got.append(Psb.from_wire(msgpack.unpackb(message.body)).seq)
        try:
            await again.get(timeout=0)
            raise AssertionError("an MRS_ACK came twice")
        except clients.NoMoreMessages:
            pass
    assert sorted(got) == sorted(seqs)


def test_the_blocking_client_gives_back_at_close_too(make_bus) -> None:
    """`connect_sync`'s close runs the same give-back: what one blocking reader read
    ahead and never took, the next one gets, in order."""
    bus = make_bus()
    with clients.connect_sync(bus.address, "SENDER") as sender:
        for number in range(100):
            sender.put(number.to_bytes(4, "big"), "ANYORDER", delivery=DeliveryMode.NN_MEM)
    with clients.connect_sync(bus.address, "ANYORDER") as reader:
        first = int.from_bytes(reader.get(timeout=5).body, "big")
    with clients.connect_sync(bus.address, "ANYORDER") as again:
        rest = [int.from_bytes(again.get(timeout=5).body, "big") for _ in range(99)]
        try:
            again.get(timeout=0)
            raise AssertionError("a message came back twice")
        except clients.NoMoreMessages:
            pass
    assert [first, *rest] == list(range(100))
