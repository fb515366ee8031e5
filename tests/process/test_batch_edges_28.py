"""The batch calls at their edges, against the group's own code in process
(make_mem_bus, MockClock): a `put_many` item whose target or response queue is no
queue is refused in its place as `put` refuses it, and a `get_many` with a bad
timeout is refused whether messages are held or not, as `get` refuses it."""

from __future__ import annotations

import pytest

from clients import BadParameter, DeliveryMode, PutItem, Status

NOT_QUEUES = [
    ("target", None),
    ("target", 10),
    ("target", b"1.10"),
    ("resp_q", 10),
    ("resp_q", b"1.10"),
]
"""What a caller may pass where a queue goes; 10 is ORDERS' number, b"1.10" its address."""


@pytest.mark.parametrize(("field", "value"), NOT_QUEUES)
async def test_a_put_many_item_to_something_that_is_no_queue_is_refused_in_its_place(
    make_mem_bus, field: str, value: object
) -> None:
    """`put` refuses a target or resp_q that is no str or Address (BADPARAM), and
    put_many promises, per item, what put alone would have raised. Before, put_many
    sent `str()` of it: None went out as the queue name "None", and 10 or b"1.10"
    was stored on a queue the caller never named, or under a reply queue it never meant."""
    bus = await make_mem_bus()
    async with bus.connect(queue="SENDER") as sender:
        orders = await sender.locate("ORDERS")
        refused, stored, as_address = await sender.put_many(
            [
                PutItem(b"not a queue", **{"target": "ORDERS", field: value}),
                PutItem(b"stored", "ANYORDER"),
                PutItem(b"an Address", **{"target": "ANYORDER", field: orders}),
            ]
        )
        assert isinstance(refused, BadParameter)
        assert "a queue is a str or an Address" in str(refused)
        assert stored.status == as_address.status == Status.SUCCESS
        # the refused item is stored nowhere; the third goes to ORDERS as an Address
        expected = [1, 1] if field == "target" else [0, 2]
        assert await sender.pending(["ORDERS", "ANYORDER"]) == expected


async def test_get_many_refuses_a_bad_timeout_while_messages_are_held(make_mem_bus) -> None:
    """`get` refuses a timeout that is no number of seconds >= 0 at once; `get_many`
    refused it only when nothing was held, and returned the held (read-ahead) messages
    otherwise, so a program with such a timeout ran while memory messages were read
    ahead and failed BADPARAM later. The held messages stay for the next get."""
    bus = await make_mem_bus()
    async with bus.connect(queue="SENDER") as sender:
        for number in range(4):
            await sender.put(b"%d" % number, "ANYORDER", delivery=DeliveryMode.NN_MEM)
    async with bus.connect(queue="ANYORDER") as receiver:
        assert (await receiver.get(timeout=5)).body == b"0"  # the rest read ahead
        assert len(receiver.held) == 3
        for timeout in (-1, "5", float("nan")):
            with pytest.raises(BadParameter, match="get timeout must be"):
                await receiver.get_many(2, timeout=timeout)  # type: ignore[arg-type]
        assert [m.body for m in await receiver.get_many(5, timeout=0)] == [b"1", b"2", b"3"]
