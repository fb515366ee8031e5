"""AK mode: put returns at once, the MRS_ACK arrives later on the sender's queue.
And the TIMEOUT case: resend with the same correlation id so duplicates are visible.

    python docs/examples/ak_and_timeouts.py 127.0.0.1:7001

Its gets select what it put (its MRS_ACK, its correlation ids), so messages the
other pages' examples left on SENDER or ORDERS are neither taken nor in its way.
"""

import sys

import trio

from clients import DeliveryMode, MrsTimeout, Uma, connect
from mrs.core.selection import by_class_type, by_correlation_id
from mrs.model import MRS_ACK_TYPE, MRS_CLASS


async def main(address: str) -> None:
    async with connect(address, queue="SENDER") as sender:
        psb = await sender.put(
            b"order 17",
            target="ORDERS",
            delivery=DeliveryMode.AK_DQF,
            uma=Uma.DLJ,
            correlation_id=b"order-17",
        )
        ack = await sender.get(timeout=5.0, select=by_class_type(MRS_CLASS, MRS_ACK_TYPE))
        assert ack.is_mrs_ack and ack.ack_psb().seq == psb.seq
        print(f"MRS_ACK for seq {psb.seq}: {ack.ack_psb().delivery_status.name}")

        try:
            # WF_DEQ waits until a receiver gets the message; nobody does here.
            await sender.put(
                b"order 18",
                target="ORDERS",
                delivery=DeliveryMode.WF_DEQ,
                correlation_id=b"order-18",
                timeout=0.5,
            )
        except MrsTimeout as timeout:
            # The message may or may not be queued: a resend can make two copies, which
            # the receiver tells apart by correlation id.
            print(f"timed out ({timeout.status.name}); resending order-18")
            await sender.put(
                b"order 18",
                target="ORDERS",
                delivery=DeliveryMode.WF_MEM,
                correlation_id=b"order-18",
            )

    async with connect(address, queue="ORDERS") as receiver:
        seen = set()
        for correlation_id in (b"order-17", b"order-18", b"order-18"):
            message = await receiver.get(timeout=5.0, select=by_correlation_id(correlation_id))
            duplicate = message.correlation_id in seen
            seen.add(message.correlation_id)
            print(f"{message.correlation_id.decode()}: duplicate={duplicate}")
            if message.needs_confirm:
                await receiver.confirm(message.seq)


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
