"""Queue order and parked gets at the unconfirmed cap and when a delivery mark fails,
against the real server code in process (tests/conftest.py `make_mem_bus`)."""

from __future__ import annotations

import trio
import trio.testing

from clients import DeliveryMode, MrsError, Status, Uma

ONE_AT_A_TIME = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
unconfirmed_max = 1
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
"""


async def _put(sender, body: bytes) -> int:
    psb = await sender.put(body, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
    assert psb.delivery_status == Status.STORED
    return psb.seq


async def _parked_gets(receiver, count: int, results: trio.MemorySendChannel, nursery) -> None:
    """Start `count` gets on one connection and return once the server has parked them
    (a status request behind them on the same connection is answered after them)."""

    async def one_get() -> None:
        try:
            await results.send(await receiver.get(timeout=30))
        except MrsError as error:
            await results.send(error)

    for _ in range(count):
        nursery.start_soon(one_get)
    await trio.testing.wait_all_tasks_blocked()
    await receiver.status()


async def test_in_order_queue_at_its_cap_keeps_order_and_serves_parked_gets(make_mem_bus) -> None:
    bus = await make_mem_bus(queues=ONE_AT_A_TIME)
    async with (
        bus.connect(queue="SENDER") as sender,
        bus.connect(queue="ORDERS") as receiver,
    ):
        send, results = trio.open_memory_channel(10)
        got = []
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                await _parked_gets(receiver, 3, send, nursery)
                for body in (b"A", b"B", b"C", b"D"):
                    await _put(sender, body)
                # Each confirm lets exactly one more parked get through, in order.
                for _ in range(3):
                    message = await results.receive()
                    assert not isinstance(message, MrsError), message
                    got.append(message)
                    await receiver.confirm(message.seq)
            got.append(await receiver.get(timeout=5))
        assert [message.body for message in got] == [b"A", b"B", b"C", b"D"]
        assert {message.delivery_status for message in got} == {Status.CONFIRMREQ}


async def test_a_failed_delivery_mark_keeps_order_and_first_delivery_status(
    make_mem_bus,
) -> None:
    bus = await make_mem_bus(
        queues=ONE_AT_A_TIME.replace("unconfirmed_max = 1", "unconfirmed_max = 5"),
    )
    async with (
        bus.connect(queue="SENDER") as sender,
        bus.connect(queue="ORDERS") as receiver,
    ):
        await _put(sender, b"A")
        bus.fail_commits("EIO")
        send, results = trio.open_memory_channel(10)
        with trio.fail_after(15):  # a get left parked would wait its whole 30 s
            async with trio.open_nursery() as nursery:
                await _parked_gets(receiver, 2, send, nursery)
                answers = [await results.receive() for _ in range(2)]
        assert [getattr(answer, "status", None) for answer in answers] == [
            Status.JOURNAL_FAIL,
            Status.JOURNAL_FAIL,
        ]
        bus.fail_commits(None)
        await _put(sender, b"B")
        await _put(sender, b"C")
        bus.fail_commits("EIO")
        # Two deliveries whose marks fail together go back in their order.
        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                await _parked_gets(receiver, 2, send, nursery)
                answers = [await results.receive() for _ in range(2)]
        assert all(isinstance(answer, MrsError) for answer in answers)
        bus.fail_commits(None)
        got = [await receiver.get(timeout=5) for _ in range(3)]
        # Never handed out, so still a first delivery (CONFIRMREQ, not POSSDUPL).
        assert [(m.body, m.delivery_status) for m in got] == [
            (b"A", Status.CONFIRMREQ),
            (b"B", Status.CONFIRMREQ),
            (b"C", Status.CONFIRMREQ),
        ]
