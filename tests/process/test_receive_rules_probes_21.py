"""Probes of the receive side's rules against a real `mrs serve`: a consumer whose get
is given up while its message is on the wire must find that message in its next
get_many or poll, as docs/client-library.md promises ("a batch that was already on
its way is kept and handed to the next get/get_many"), not an empty answer, an
EXCMAXUNCONF, or a wait for its whole timeout with the message in hand."""

from __future__ import annotations

import trio
import trio.testing

from clients import DeliveryMode, MrsError, Uma, connect
from tests.process.test_receive_probes_19 import GatedStream, gated_opener


async def give_up_a_pooled_get_as_its_answer_comes(
    stream: GatedStream, sender, receiver, queue: str
) -> None:
    """A pooled `get` of the gated client is given up while the Delivery of the
    recoverable message "crossed" sits on its socket, unread; `stream` stays shut."""
    receiver_get = trio.CancelScope()
    stream.shut()
    async with trio.open_nursery() as nursery:

        async def get_given_up() -> None:
            with receiver_get:
                await receiver.get(timeout=30)

        nursery.start_soon(get_given_up)
        await trio.testing.wait_all_tasks_blocked()
        await sender.put(b"crossed", queue, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        await stream.arrived.wait()
        receiver_get.cancel()


async def next_call_after_the_crossing(bus, queue: str, call) -> object:
    """What `call(receiver)` returns (or raises) when made while the crossed message
    is still on the wire; the gate opens once its request went out."""
    streams: list[GatedStream] = []
    async with (
        connect(bus.address, "SENDER") as sender,
        connect(
            bus.address, queue, open_stream=gated_opener(streams), heartbeat_s=None
        ) as receiver,
    ):
        [stream] = streams
        for early in (b"early0", b"early1"):  # two unconfirmed in the application's hands
            await sender.put(early, queue, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
            assert (await receiver.get(timeout=10)).body == early
        await give_up_a_pooled_get_as_its_answer_comes(stream, sender, receiver, queue)
        outcome: list[object] = []
        async with trio.open_nursery() as nursery:

            async def the_next_call() -> None:
                try:
                    outcome.append(await call(receiver))
                except MrsError as error:
                    outcome.append(error)

            nursery.start_soon(the_next_call)
            await trio.testing.wait_all_tasks_blocked()
            stream.open()
        return outcome[0]


async def test_a_get_many_after_a_given_up_get_returns_the_crossed_message(bus) -> None:
    """Before: the get_many sent its GetBatch at once; the server had handed "crossed"
    to the given-up get, so the get_many waited its whole timeout (for ever with none)
    and raised TIMEOUT while "crossed" sat held in the client."""

    async def get_many(receiver) -> list[bytes]:
        return [message.body for message in await receiver.get_many(3, timeout=2)]

    assert await next_call_after_the_crossing(bus, "ANYORDER", get_many) == [b"crossed"]


async def test_a_poll_at_the_cap_after_a_given_up_get_returns_the_crossed_message(
    make_bus,
) -> None:
    """unconfirmed_max = 3, two messages in hand and "crossed" on the wire: before, a
    poll was refused EXCMAXUNCONF ("3 messages unconfirmed") and "crossed" was held
    behind the refusal; now the poll waits for the given-up get's answer and returns it."""
    bus = make_bus(
        queues="""
        [[group.queue]]
        id = 13
        name = "SENDER"
        [[group.queue]]
        id = 20
        name = "CAPPED"
        confirm = "explicit-in-order"
        unconfirmed_max = 3
        """
    )

    async def poll(receiver) -> bytes:
        return (await receiver.get(timeout=0)).body

    assert await next_call_after_the_crossing(bus, "CAPPED", poll) == b"crossed"
