"""The receiver learns where to reply: a put's `resp_q` comes with the message as
`Message.resp_q` (MessageQ's response queue), on this group's queues, across a link,
and after a SIGKILL of the group that journaled it; a put that names none is answered
on its source, and an application's own `reply_q` header is left as it said. Before,
`resp_q` only steered MRS_ACKs and returned messages: a worker answering a requester
that asked for replies on a shared reply queue sent them to the requester's own."""

from __future__ import annotations

import trio

from clients import Address, DeliveryMode
from mrs.model import REPLY_QUEUE_HEADER
from tests.process.test_conformance import start_mem_bus

MODE = DeliveryMode


async def test_a_worker_replies_on_the_queue_the_requester_named(mem_bus) -> None:
    async with (
        mem_bus.connect("SENDER") as requester,
        mem_bus.connect("ANYORDER") as worker,
        mem_bus.connect("IMPLICIT") as replies,
    ):
        await requester.put(b"ask", target="ANYORDER", delivery=MODE.WF_MEM, resp_q="IMPLICIT")
        await requester.put(b"plain", target="ANYORDER", delivery=MODE.WF_MEM)
        asked = await worker.get(timeout=5)
        plain = await worker.get(timeout=5)
        assert asked.source == Address(1, 13)  # the sending queue, as before
        assert asked.resp_q == Address(1, 12)
        await worker.put(b"answer", target=asked.resp_q, delivery=MODE.WF_MEM)
        assert (await replies.get(timeout=5)).body == b"answer"
        assert plain.resp_q == plain.source == Address(1, 13)
        assert plain.headers is None  # nothing added to a put that named no resp_q


async def test_an_applications_own_reply_q_header_is_kept(mem_bus) -> None:
    async with mem_bus.connect("SENDER") as requester, mem_bus.connect("ANYORDER") as worker:
        await requester.put(
            b"ask",
            target="ANYORDER",
            delivery=MODE.WF_MEM,
            resp_q="IMPLICIT",
            headers={REPLY_QUEUE_HEADER: "ORDERS"},
        )
        assert (await worker.get(timeout=5)).resp_q == "ORDERS"


async def test_resp_q_crosses_a_link_with_a_recoverable_message(make_mem_linked) -> None:
    bus = await start_mem_bus(make_mem_linked)
    try:
        async with bus.connect(1, "OUT") as sender, bus.connect(2, "IN") as receiver:
            await sender.put(b"ask", target="2.10", delivery=MODE.WF_DQF, resp_q="1.12")
            message = await receiver.get(timeout=30)
            assert (message.source, message.resp_q) == (Address(1, 11), Address(1, 12))
            await message.confirm()
    finally:
        bus.stop()


async def test_resp_q_survives_a_sigkill_of_the_group_that_journaled_it(bus) -> None:
    async with bus.connect("SENDER") as requester:
        await requester.put(b"ask", target="ANYORDER", delivery=MODE.WF_DQF, resp_q="IMPLICIT")
    await trio.to_thread.run_sync(bus.restart)
    async with bus.connect("ANYORDER") as worker:
        message = await worker.get(timeout=10)
        assert (message.body, message.resp_q) == (b"ask", Address(1, 12))
