"""What peerbench's AK producer spends per put on its own bookkeeping, with no MRS in it.

Why: peerbench's AK_DQF row (../shared/peerbench/bench_mrs.py, `--put-mode ak`) runs
1,000 lanes, each doing `put` and then waiting for that put's MRS_ACK with
`trio.fail_after(60)` around a `trio.Event` kept in a dict, while 64 tasks `get` the
MRS_ACKs and set those events. Issue 17 asks for AK within 0.8x of WF; on this
machine the AK producer process is the limit (90% CPU, server 46%). This measures
the part of its cost that is the benchmark's own, in the same shape: 1,000 tasks,
each looping [make an Event, store it, wait for it under fail_after(60), pop it],
and 64 tasks that set the events in arrival order, as the MRS_ACK getters do. No
socket, no MRS code: what is left when the client library costs nothing.

    python benchmarks/ak_producer_floor.py --seconds 3

It prints µs of CPU per put and the ceiling that puts on the AK row (1 / that).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque

import trio

LANES = 1000
ACK_GETTERS = 64


async def _measure(seconds: float) -> dict:
    acks: dict[int, list] = {}
    due: deque[int] = deque()
    arrived = trio.Event()
    done = {"puts": 0}
    next_seq = iter(range(1, 1 << 62))

    async def lane(end: float) -> None:
        while time.monotonic() < end:
            seq = next(next_seq)
            slot = acks.setdefault(seq, [trio.Event(), None])
            due.append(seq)
            if not arrived.is_set():
                arrived.set()
            with trio.fail_after(60):
                await slot[0].wait()
            acks.pop(seq)
            done["puts"] += 1
            await trio.lowlevel.checkpoint()  # the put's own await in the real lane

    async def ack_getter(stop: trio.Event) -> None:
        nonlocal arrived
        while not stop.is_set():
            if not due:
                await arrived.wait()
                arrived = trio.Event()
                continue
            seq = due.popleft()
            slot = acks.setdefault(seq, [trio.Event(), None])
            slot[1] = seq
            slot[0].set()
            await trio.lowlevel.checkpoint()  # the get's own await in the real getter

    stop = trio.Event()
    cpu0 = time.process_time()
    end = time.monotonic() + seconds
    async with trio.open_nursery() as outer:
        for _ in range(ACK_GETTERS):
            outer.start_soon(ack_getter, stop)
        async with trio.open_nursery() as lanes:
            for _ in range(LANES):
                lanes.start_soon(lane, end)
        stop.set()
        outer.cancel_scope.cancel()
    cpu_s = time.process_time() - cpu0
    per_put_us = 1e6 * cpu_s / max(1, done["puts"])
    return {
        "puts": done["puts"],
        "cpu_us_per_put": round(per_put_us, 1),
        "ceiling_puts_per_s": round(1e6 / per_put_us),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    print(json.dumps(trio.run(_measure, args.seconds)))


if __name__ == "__main__":
    main()
