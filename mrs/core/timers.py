"""Timers for put and get timeouts: one heap and one trio task, not a task per request.

Thousands of parked gets and WF puts each need a deadline; a task or cancel scope
each would put an await on the per-message path. Instead callbacks sit in a heap
and one task sleeps until the earliest deadline. It follows trio's clock, so a
MockClock drives it in the simulator.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

import trio


class TrioTimers:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, list]] = []
        self._counter = itertools.count()
        self._wakeup = trio.Event()
        self._cancelled = 0

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        deadline = trio.current_time() + max(0.0, delay_s)
        slot = [callback]
        heapq.heappush(self._heap, (deadline, next(self._counter), slot))
        if self._heap[0][2] is slot:
            self._wakeup.set()

        def cancel() -> None:
            if slot[0] is not None:
                slot[0] = None
                self._note_cancelled()

        return cancel

    def _note_cancelled(self) -> None:
        """Drop cancelled entries once they are most of the heap, so memory stays flat
        when most WF puts complete long before their timeout."""
        self._cancelled += 1
        if self._cancelled > 1024 and self._cancelled * 2 > len(self._heap):
            self._heap = [item for item in self._heap if item[2][0] is not None]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def __len__(self) -> int:
        return len(self._heap) - self._cancelled

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            now = trio.current_time()
            while self._heap and self._heap[0][0] <= now:
                _, _, slot = heapq.heappop(self._heap)
                if slot[0] is None:
                    self._cancelled -= 1
                else:
                    callback, slot[0] = slot[0], None
                    callback()
            deadline = self._heap[0][0] if self._heap else float("inf")
            self._wakeup = trio.Event()
            with trio.move_on_at(deadline):
                await self._wakeup.wait()
