"""The client-side SAF journal: put while the server is down, watch the drain.

Start this while the group server is NOT running, then start the server:

    python docs/examples/client_saf.py 127.0.0.1:7001 /tmp/client.saf
    mrs serve --config docs/examples/bus.toml --group 1      # in another shell

The client attaches with JOURNAL_ON, journals five recoverable puts on its own disk,
and when the server comes up it drains them in FIFO order (LINK_UP), then puts one
more message directly and reads all six back from ORDERS.
"""

import sys

import trio

from clients import DeliveryMode, JournalEvent, Status, connect


def show(event: JournalEvent) -> None:
    if event.kind == "status":
        print(f"journal status: {event.status.name}", flush=True)
    elif event.kind == "drained":
        print(f"drained client seq {event.local_seq} -> server seq {event.psb.seq}", flush=True)


async def main(address: str, journal: str) -> None:
    async with connect(address, "SENDER", saf_journal=journal) as sender:
        sender.add_journal_listener(show)
        print(f"attach status: {sender.attach_status.name}", flush=True)
        for number in range(5):
            psb = await sender.put(
                b"order %d" % number, target="ORDERS", delivery=DeliveryMode.WF_DQF
            )
            # Put returned JOURNAL_ON: the message is on the client's disk (fsync).
            print(f"put -> {psb.status.name}, {psb.delivery_status.name}, client seq {psb.seq}")
        if sender.journal_status == Status.JOURNAL_ON:
            print("waiting for the server (start it now) ...", flush=True)
        await sender.wait_journal_status(Status.LINK_UP)
        psb = await sender.put(b"order 5", target="ORDERS", delivery=DeliveryMode.WF_DQF)
        print(f"new put -> {psb.status.name}, {psb.delivery_status.name}, seq {psb.seq}")

    async with connect(address, "ORDERS") as receiver:
        for _ in range(6):
            message = await receiver.get(timeout=10)
            print(f"got {message.body.decode()}", flush=True)
            await message.confirm()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
