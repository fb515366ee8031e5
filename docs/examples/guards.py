"""Two guards at work: a cap on parked gets and a byte quota on a memory queue.

Run against the docs' bus (docs/examples/bus.toml: parked_gets_max = 100,
queue_bytes_max = 4 MiB):

python docs/examples/guards.py 127.0.0.1:7001
"""

import sys

import trio

from clients import DeliveryMode, MrsError, Status, Uma, connect

MIB = 1024 * 1024


async def park_too_many_gets(address: str) -> None:
    """101 get requests waiting at once on one connection: the last is refused, the
    rest wait. (Plain `get()` calls that wait together share one GetBatch request, so
    this takes 101 separate `get_many` requests.)"""
    refused: list[Status] = []

    async with connect(address, queue="BULK") as receiver:

        async def wait_for_one() -> None:
            try:
                await receiver.get_many(1, timeout=30.0)
            except MrsError as error:
                refused.append(error.status)

        async with trio.open_nursery() as nursery:
            for _ in range(101):
                nursery.start_soon(wait_for_one)
            with trio.fail_after(10):
                while not refused:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()  # closing the connection ends the other 100
    print(f"101 parked gets: {len(refused)} refused with {refused[0].name}")


async def fill_a_memory_queue(address: str) -> None:
    """1 MiB memory messages into a queue nobody reads: the fifth passes queue_bytes_max."""
    async with connect(address, queue="SENDER") as sender:
        for number in range(1, 6):
            psb = await sender.put(
                b"x" * MIB, target="BULK", delivery=DeliveryMode.WF_MEM, uma=Uma.DISC
            )
            print(f"put {number} of 1 MiB: {psb.delivery_status.name}, {psb.uma_status.name}")
    async with connect(address, queue="BULK") as receiver:  # leave the queue empty
        for _ in range(4):
            await receiver.get(timeout=5.0)


async def main(address: str) -> None:
    await park_too_many_gets(address)
    await fill_a_memory_queue(address)


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
