"""Read-ahead: memory-only messages come to the client before its gets ask for them,
and a clean close gives back the ones no get took.

    python docs/examples/read_ahead.py 127.0.0.1:7001
"""

import sys

import trio

from clients import DeliveryMode, NoMoreMessages, connect


async def main(address: str) -> None:
    async with connect(address, queue="SENDER") as sender:
        for number in range(300):  # nonrecoverable: only memory holds them
            await sender.put(b"%d" % number, "BULK", delivery=DeliveryMode.NN_MEM)

    async with connect(address, queue="BULK") as reader:
        first = [int((await reader.get(timeout=5)).body) for _ in range(10)]
        # The first get's one GetBatch brought the other 290 too (read ahead, held in
        # this client): these 9 gets took theirs without a round trip.
    print(f"got {first[0]}..{first[-1]}; closing gave the other 290 back to BULK")

    async with connect(address, queue="BULK") as next_reader:
        rest = []
        while True:
            try:
                rest.append(int((await next_reader.get(timeout=0)).body))
            except NoMoreMessages:
                break
    print(f"the next reader got {len(rest)} more, in order: {rest == list(range(10, 300))}")


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
