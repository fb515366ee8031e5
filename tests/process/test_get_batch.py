"""The batch get (GetBatch -> DeliveryBatch) and `Client.get_many`: a prefetch of up
to N messages in one request, each delivered exactly as a get delivers it.

Protocol round trips are pure; the rest runs against a real `mrs serve` process.
"""

from __future__ import annotations

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from clients import (
    BadParameter,
    DeliveryMode,
    NoMoreMessages,
    Status,
    TooManyUnconfirmed,
    connect,
)
from mrs import protocol as wire
from mrs.limits import GET_BATCH_ITEMS_MAX


def open_pair() -> tuple[wire.Connection, wire.Connection]:
    client, server = wire.Connection("client"), wire.Connection("server")
    server.receive_data(client.send(wire.Hello(wire.PROTOCOL_VERSION, "test")))
    server.next_event()
    client.receive_data(server.send(wire.Welcome(wire.PROTOCOL_VERSION, 1, "G1")))
    client.next_event()
    return client, server


def delivery(request_id: int, seq: int, body: bytes) -> wire.Delivery:
    return wire.Delivery(request_id, seq, body, "1.13", "1.11", 0, 0, 0, 26, -1, b"", 1, None)


@settings(max_examples=50, deadline=None)
@given(
    st.integers(1, GET_BATCH_ITEMS_MAX),
    st.lists(st.binary(max_size=200), min_size=1, max_size=30),
)
def test_a_batch_get_and_its_answer_round_trip(count_max: int, bodies: list[bytes]) -> None:
    client, server = open_pair()
    ask = wire.GetBatch(7, count_max, -1)
    server.receive_data(client.send(ask))
    assert server.next_event() == ask and server.their_requests_in_flight == 1
    answer = wire.DeliveryBatch(7, [delivery(7, seq, body) for seq, body in enumerate(bodies)])
    client.receive_data(server.send(answer))
    assert client.next_event() == answer
    assert client.our_requests_in_flight == server.their_requests_in_flight == 0


@pytest.mark.parametrize("count_max", [0, GET_BATCH_ITEMS_MAX + 1])
def test_a_batch_get_beyond_its_bound_is_refused_naming_the_field(count_max: int) -> None:
    with pytest.raises(wire.LocalProtocolError, match=r"GetBatch.count_max must be 1..1000"):
        wire.GetBatch(1, count_max, 0)


async def put_all(bus, target: str, count: int, **options) -> list[int]:
    async with connect(bus.address, queue="SENDER") as sender:
        return [
            (await sender.put(f"m{index}".encode(), target, **options)).seq
            for index in range(count)
        ]


async def test_get_many_delivers_what_is_ready_in_order_then_says_no_more(make_bus) -> None:
    bus = make_bus()
    seqs = await put_all(bus, "ANYORDER", 12)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        first = await receiver.get_many(8)
        assert [m.seq for m in first] == seqs[:8]
        assert {m.delivery_status for m in first} == {Status.CONFIRMREQ}
        for message in first:
            await receiver.confirm(message.seq)
        rest = await receiver.get_many(8, timeout=0)  # only 4 left: no wait for more
        assert [m.body for m in rest] == [f"m{index}".encode() for index in range(8, 12)]
        for message in rest:
            await receiver.confirm(message.seq)
        with pytest.raises(NoMoreMessages):
            await receiver.get_many(8, timeout=0)


async def test_a_parked_batch_get_is_answered_by_the_first_arrival(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        got: list = []
        async with trio.open_nursery() as nursery:

            async def take() -> None:
                got.extend(await receiver.get_many(5, timeout=30))

            nursery.start_soon(take)
            await trio.sleep(0.2)  # parked (the put below may come first: same answer)
            await put_all(bus, "ANYORDER", 1)
    assert [m.body for m in got] == [b"m0"]


async def test_the_unconfirmed_cap_bounds_a_batch(make_bus) -> None:
    bus = make_bus()
    await put_all(bus, "SMALL", 2)  # SMALL: unconfirmed_max = 2
    async with connect(bus.address, queue="SMALL") as receiver:
        assert len(await receiver.get_many(10, timeout=0)) == 2
        with pytest.raises(TooManyUnconfirmed):
            await receiver.get_many(10, timeout=0)


async def test_unconfirmed_messages_of_a_batch_come_again_marked_possdupl(make_bus) -> None:
    bus = make_bus()
    seqs = await put_all(bus, "ANYORDER", 4)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        first = await receiver.get_many(4)
        await receiver.confirm(first[0].seq)
    async with connect(bus.address, queue="ANYORDER") as receiver:
        again = await receiver.get_many(4, timeout=10)
    assert [m.seq for m in again] == seqs[1:]
    assert {m.delivery_status for m in again} == {Status.POSSDUPL}


async def test_a_batch_get_mixes_memory_and_journaled_messages_in_order(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="SENDER") as sender:
        await sender.put(b"kept", "ANYORDER")
        await sender.put(b"memory", "ANYORDER", delivery=DeliveryMode.WF_MEM)
        await sender.put(b"kept too", "ANYORDER")
    async with connect(bus.address, queue="ANYORDER") as receiver:
        messages = await receiver.get_many(10, timeout=5)
    assert [m.body for m in messages] == [b"kept", b"memory", b"kept too"]


async def test_a_queue_that_confirms_implicitly_refuses_a_batch_get(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="IMPLICIT") as receiver:
        with pytest.raises(BadParameter, match="one get at a time"):
            await receiver.get_many(3, timeout=0)


async def test_a_batch_delivered_before_a_crash_comes_again_marked_possdupl(make_bus) -> None:
    bus = make_bus()
    seqs = await put_all(bus, "ANYORDER", 3)
    async with connect(bus.address, queue="ANYORDER", reconnect=None) as receiver:
        delivered = await receiver.get_many(3)
    assert {m.delivery_status for m in delivered} == {Status.CONFIRMREQ}
    bus.restart()  # SIGKILL: the delivery marks must already be on disk
    async with connect(bus.address, queue="ANYORDER") as receiver:
        again = await receiver.get_many(3, timeout=10)
    assert [m.seq for m in again] == seqs
    assert {m.delivery_status for m in again} == {Status.POSSDUPL}


async def test_a_batch_stops_near_its_byte_bound_and_the_rest_waits(make_bus) -> None:
    bus = make_bus()
    body = b"b" * (600 * 1024)
    async with connect(bus.address, queue="SENDER") as sender:
        for _ in range(3):
            await sender.put(body, "ANYORDER")
    async with connect(bus.address, queue="ANYORDER") as receiver:
        sizes = [len(await receiver.get_many(10, timeout=5)) for _ in range(3)]
    assert sizes == [1, 1, 1]  # two 600 KiB bodies would pass DELIVERY_BATCH_BYTES_MAX


async def test_a_cancelled_batch_get_loses_nothing(make_bus) -> None:
    bus = make_bus()
    async with connect(bus.address, queue="ANYORDER") as receiver:
        with trio.move_on_after(0.3):
            await receiver.get_many(5)  # parked, then withdrawn (CancelGet)
        await put_all(bus, "ANYORDER", 2)
        got = await receiver.get_many(5, timeout=10)
        while len(got) < 2:
            got += await receiver.get_many(5, timeout=10)
    assert [m.body for m in got] == [b"m0", b"m1"]
