"""Put a recoverable message, get it, confirm it. Run against a group server:

python docs/examples/quickstart.py 127.0.0.1:7001
"""

import sys

import trio

from clients import DeliveryMode, ForceJrn, Status, Uma, connect


async def main(address: str) -> None:
    async with (
        connect(address, queue="SENDER") as sender,
        connect(address, queue="ORDERS") as receiver,
    ):
        psb = await sender.put(
            b"shift totals",
            target="ORDERS",
            delivery=DeliveryMode.WF_DQF,
            uma=Uma.DLJ,
            timeout=30.0,
        )
        # Function status SUCCESS: read the delivery status to learn what happened.
        assert psb.delivery_status == Status.STORED, psb
        print(f"stored as seq {psb.seq}")

        message = await receiver.get(timeout=5.0)
        assert message.delivery_status in (Status.CONFIRMREQ, Status.POSSDUPL)
        print(f"got {message.body!r} from {message.source}, {message.delivery_status.name}")
        await receiver.confirm(message.seq, confirm_value=1, force_j=ForceJrn.FORCE_JRN)
        print("confirmed and journaled to the PCJ")


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
