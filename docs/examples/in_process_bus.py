"""A rule test without a process: group 1 in this trio run, under MockClock.

Run it: python docs/examples/in_process_bus.py
The bus config is written to a temporary directory; the group is the real server code
(`GroupServer`) on the in-memory network and journals of sim/. A WF_CONF put waits for
the receiver's confirm; the receiver takes 20 s, which under MockClock costs nothing.
"""

import tempfile
import time
from pathlib import Path

import trio
import trio.testing

from clients import DeliveryMode, Status
from sim.membus import memory_bus
from sim.processes import write_single_group_config

QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 13
name = "SENDER"
"""


async def main(directory: Path) -> None:
    config = write_single_group_config(directory, queues=QUEUES)
    async with memory_bus(config) as bus:
        async with (
            bus.connect(1, "SENDER") as sender,
            bus.connect(1, "ORDERS") as receiver,
            trio.open_nursery() as nursery,
        ):
            answers = []

            async def put() -> None:
                answers.append(await sender.put(b"pay 10", target="ORDERS",
                                                delivery=DeliveryMode.WF_CONF, timeout=60))

            nursery.start_soon(put)
            message = await receiver.get(timeout=5)
            await trio.sleep(20)  # the receiver takes its time: MockClock skips it
            await receiver.confirm(message.seq)
        print(f"put answered {Status(answers[0].delivery_status).name} "
              f"after {trio.current_time():.0f} s of bus time")


started = time.monotonic()
with tempfile.TemporaryDirectory() as scratch:
    trio.run(main, Path(scratch), clock=trio.testing.MockClock(autojump_threshold=0))
print(f"wall time under 5 s: {time.monotonic() - started < 5}")
