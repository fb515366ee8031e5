"""The MessageQ calls as an application makes them, against a real `mrs serve`:
`pams_get_msgw` given the longest timeout a float holds, and `pams_put_msg` /
`pams_get_msg` of a message over 64 MiB to a group whose `message_bytes_max` takes
it. What must hold: a timeout longer than the wire carries is that long
(client-library.md), a message the group takes travels, and the connection and the
other calls on it go on."""

from __future__ import annotations

import sys

import trio

from clients import Status, connect, connect_sync

WAIT_S = 30.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


async def test_a_get_with_the_longest_float_timeout_takes_its_message(bus) -> None:
    """`get(timeout=sys.float_info.max)` (a "wait for ever" some ports write) joins
    the pooled gets. Before, the batch's wait in ms was `(deadline - now) * 1000`,
    infinite, and `math.ceil` raised OverflowError in the connection's send loop: the
    client closed ("client closed", LINK_DOWN) and so did every call on it."""
    longest = sys.float_info.max
    async with connect(bus.address, "SENDER") as sender:
        await sender.put(b"order 1", "ANYORDER")
        await sender.put(b"order 2", "ANYORDER")
    async with connect(bus.address, "ANYORDER") as receiver:
        with trio.fail_after(WAIT_S):
            message = await receiver.get(timeout=longest)
            await message.confirm()
        assert (message.body, message.delivery_status) == (b"order 1", Status.CONFIRMREQ)
        assert receiver.connected

    def blocking_get() -> bytes:
        with connect_sync(bus.address, "ANYORDER") as blocking:
            message = blocking.get(timeout=longest)
            message.confirm(timeout=WAIT_S)
            return message.body

    assert await trio.to_thread.run_sync(blocking_get) == b"order 2"


async def test_a_message_over_64_mib_travels_where_the_group_takes_it(make_bus) -> None:
    """A group may take messages up to 1 GiB (`message_bytes_max`, configuration.md).
    Before, the client bounded every frame at 64 MiB whatever the group said: a put
    of 64 MiB + 1 byte to a group taking 65 MiB was refused by the client with
    PROTOCOL_ERROR ("Put frame ... exceeds frame_bytes_max"), not stored, and a
    delivery of one would have ended the receiver's connection."""
    bus = make_bus(limits=f"message_bytes_max = {65 << 20}")
    body = b"b" * ((64 << 20) + 1)
    async with connect(bus.address, "SENDER") as sender:
        psb = await sender.put(body, "ANYORDER")
        assert psb.delivery_status == Status.STORED
    async with connect(bus.address, "ANYORDER") as receiver:
        with trio.fail_after(WAIT_S):
            message = await receiver.get(timeout=WAIT_S)
            await message.confirm()
        assert (len(message.body), receiver.reconnects) == (len(body), 0)
