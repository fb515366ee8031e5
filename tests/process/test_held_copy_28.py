"""A message a blocking caller never saw, held again for its next get
(`Client.hold_again`, clients.sync `_give_back`), when the connection it came on
dropped and came back before the interrupt was handled: the group delivers it again
marked POSSDUPL on the new connection, so the old copy must not be handed out first.
In process (make_mem_bus): the group restarted between the answer and the hand-back."""

from __future__ import annotations

from clients import DeliveryMode


async def test_a_copy_from_before_a_reconnect_is_not_handed_out_again(make_mem_bus) -> None:
    """Before, the copy was kept whenever the client was connected at the hand-back:
    the next get returned it unmarked before the POSSDUPL redelivery, and its
    confirm failed BADSEQ (the seq was handed out again on the new connection)."""
    bus = await make_mem_bus()
    async with bus.connect(queue="SENDER") as sender:
        await sender.put(b"one", "ORDERS", delivery=DeliveryMode.WF_DQF)
    async with bus.connect(queue="ORDERS") as receiver:
        first = await receiver.get(timeout=5)
        came_on = receiver.reconnects
        assert first.needs_confirm and not first.possible_duplicate
        await bus.restart()
        await receiver.wait_connected()
        assert await receiver.pending(["ORDERS"]) == [1]
        assert receiver.reconnects == came_on + 1
        receiver.hold_again([first], came_on)
        again = await receiver.get(timeout=5)
        assert again.seq == first.seq and again.possible_duplicate
        await again.confirm()
        assert await receiver.pending(["ORDERS"]) == [0]
