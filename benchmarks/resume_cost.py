"""What parking and waking a trio task costs: with trio's default `outcome.Value` per
wake-up, and with the client's one shared resume object (`clients.pending.RESUMED`).

Why: every request of the client parks its caller's task and the receive loop wakes
it with the answer, once per put and twice per get + confirm. `reschedule(task)`
builds an `outcome.Value(None)` for each wake-up (an attrs class, 6.8% of the e2e
consumer's samples in py-spy); the client resumes with one shared object instead.

    .venv/bin/python benchmarks/resume_cost.py

100 tasks park in `wait_task_rescheduled` and one loop wakes them, 100,000 wake-ups
per way, both ways twice; it prints the CPU µs per park + wake.
"""

from __future__ import annotations

import time

import trio

from clients.pending import RESUMED

TASKS = 100
WAKEUPS = 100_000


def _abort(_raise_cancel: object) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.SUCCEEDED


async def _round(shared: bool) -> float:
    """CPU µs per park + wake, resuming with RESUMED if `shared` else trio's default."""
    parked: list[trio.lowlevel.Task] = []

    async def sleeper() -> None:
        for _ in range(WAKEUPS // TASKS):
            parked.append(trio.lowlevel.current_task())
            await trio.lowlevel.wait_task_rescheduled(_abort)

    started = time.process_time()
    async with trio.open_nursery() as nursery:
        for _ in range(TASKS):
            nursery.start_soon(sleeper)
        woken = 0
        while woken < WAKEUPS:
            await trio.lowlevel.checkpoint()
            while parked:
                task = parked.pop()
                if shared:
                    trio.lowlevel.reschedule(task, RESUMED)
                else:
                    trio.lowlevel.reschedule(task)
                woken += 1
    return 1e6 * (time.process_time() - started) / WAKEUPS


async def _main() -> None:
    for _ in range(2):
        for label, shared in (("outcome.Value per wake-up", False), ("shared RESUMED", True)):
            print(f"{label}: {await _round(shared):.2f} µs CPU per park + wake")


if __name__ == "__main__":
    trio.run(_main)
