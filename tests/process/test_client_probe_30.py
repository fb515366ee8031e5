"""Probes of the client library as an application that must not lose a message uses
it, against real `mrs serve` processes: calls given up (a trio cancel scope) while
their answer is on the wire, then the calls after them. What must hold each time:
nothing acknowledged is lost, nothing comes twice unmarked, and every refusal says
in one line what the application can do about it."""

from __future__ import annotations

from clients import BadSequence, Client, DeliveryMode, Uma, connect
from mrs.core.selection import by_correlation_id
from tests.client_helpers import take_all
from tests.process.test_receive_probes_19 import (
    GatedStream,
    gated_opener,
    give_up_a_get_as_its_answer_comes,
)

WAIT_S = 30.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


async def hold_a_crossed_message(stream: GatedStream, sender: Client, receiver: Client) -> None:
    """Leave `receiver` (on ORDERS) holding "crossed": the message came for a get given
    up while its Delivery was on the client's socket, not yet read."""
    await give_up_a_get_as_its_answer_comes(stream, sender, receiver, "ORDERS", uma=Uma.DLJ)
    stream.open()
    await receiver._requests.cancelled_gets_answered(None)  # the given-up get's answer
    assert [message.body for message in receiver.held] == [b"crossed"]


async def test_an_in_order_confirm_behind_a_held_message_says_to_take_it_first(
    make_bus,
) -> None:
    """On an explicit-in-order queue, a selective get that passes over a message the
    client holds (it came for a get given up) returns a message the group will not
    take a confirm of before the held one, which the application never saw. Before,
    its confirm answered only "queue confirms in order: confirm <held seq> before
    <seq>": a seq the application had never been handed, and nothing said where it
    was. Now the refusal names it as held by this client and says to take it with a
    plain get first; once that is done both confirm and nothing is lost."""
    bus = make_bus()
    streams: list[GatedStream] = []
    async with connect(bus.address, "SENDER") as sender:
        async with connect(
            bus.address, "ORDERS", open_stream=gated_opener(streams), heartbeat_s=None
        ) as receiver:
            await hold_a_crossed_message(streams[0], sender, receiver)
            await sender.put(b"wanted", "ORDERS", delivery=DeliveryMode.WF_DQF, correlation_id=b"w")
            wanted = await receiver.get(timeout=WAIT_S, select=by_correlation_id(b"w"))
            assert wanted.body == b"wanted"
            [held] = receiver.held
            try:
                await wanted.confirm()
            except BadSequence as refused:
                text = str(refused)
            else:
                raise AssertionError("an in-order confirm behind a held message was taken")
            assert f"{held.seq}" in text and "take it with a plain get first" in text, text
            crossed = await receiver.get(timeout=WAIT_S)
            assert (crossed.seq, crossed.body) == (held.seq, b"crossed")
            assert await receiver.confirm_many([crossed.seq, wanted.seq]) == [None, None]
        async with connect(bus.address, "ORDERS", reconnect=None) as again:
            assert await take_all(again) == []  # both confirmed: none comes again
