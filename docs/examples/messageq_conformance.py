"""MessageQ behaviours MRS keeps: a put timeout of 0 means the default (30 s), and a
message returned to its sender (UMA RTS) says where it was going and why.

    python docs/examples/messageq_conformance.py 127.0.0.1:7001

Its gets select its own messages by correlation id, so messages the other pages'
examples left on ORDERS or SENDER are neither taken nor in its way.
"""

import sys

import trio

from clients import DeliveryMode, Status, Uma, connect
from mrs.core.selection import by_correlation_id


async def main(address: str) -> None:
    async with (
        connect(address, queue="SENDER") as sender,
        connect(address, queue="ORDERS") as receiver,
        trio.open_nursery() as nursery,
    ):

        async def put_and_wait() -> None:
            # timeout=0: "the default", not "1 ms" -- the receiver takes 0.5 s here
            psb = await sender.put(
                b"order 19",
                target="ORDERS",
                delivery=DeliveryMode.WF_CONF,
                timeout=0,
                correlation_id=b"order-19",
            )
            print(f"WF_CONF with timeout=0: {psb.delivery_status.name} seq {psb.seq}")

        nursery.start_soon(put_and_wait)
        message = await receiver.get(timeout=5.0, select=by_correlation_id(b"order-19"))
        await trio.sleep(0.5)
        await receiver.confirm(message.seq)

    async with connect(address, queue="SENDER") as sender:
        # DISPATCH is not permanent and nobody is attached: a memory put cannot
        # reach it (NOTACTIVE), and UMA RTS returns it to the sender's queue.
        psb = await sender.put(
            b"truck 7",
            target="DISPATCH",
            delivery=DeliveryMode.WF_MEM,
            uma=Uma.RTS,
            correlation_id=b"truck-7",
        )
        print(f"put to DISPATCH: {psb.delivery_status.name}, {psb.uma_status.name}")
        returned = await sender.get(timeout=5.0, select=by_correlation_id(b"truck-7"))
        assert returned.delivery_status == Status.MSGUNDEL
        print(
            f"returned: original_target={returned.original_target} "
            f"reason={returned.return_reason.name}"
        )


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
