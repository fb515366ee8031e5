"""Reply deadlines of the client's requests in flight, expired by one sweeper task.

Why not `trio.fail_after` around each wait: a cancel scope per request (enter, register
its deadline, exit, unregister) was about a quarter of the client's CPU per put in a
profile (issue 17), for deadlines that almost never fire. Here a request costs one
`heappush` of (deadline, request id, waiter); one task sleeps until the earliest
deadline and wakes the waiters whose time is up (`_Pending.expire`), which then raise
ReplyTimeout exactly as a fail_after's TooSlowError did.

Entries of requests answered or cancelled stay in the heap until they reach its top or
the heap is compacted; compaction runs when the heap holds more than twice the waiters
it held after the last one (and at least COMPACT_ENTRIES_MIN), so it stays within a
small multiple of the requests in flight, which CLIENT_REQUESTS_IN_FLIGHT_MAX bounds.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from clients.pending import _Pending

COMPACT_ENTRIES_MIN = 1024
"""Below this many entries the heap is never compacted (stale entries are cheap)."""


class ReplyDeadlines:
    """The deadlines of the waiting requests; `run` is the task that expires them."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _Pending]] = []
        self._wake_s = math.inf
        """The trio time the sweeper sleeps until (inf: no deadline, or not running)."""
        self._scope: trio.CancelScope | None = None
        self._compact_at = COMPACT_ENTRIES_MIN

    def __len__(self) -> int:
        """Entries held, stale ones included (what compaction bounds)."""
        return len(self._heap)

    def add(self, deadline_s: float, request_id: int, pending: _Pending) -> None:
        """Expire `pending` at trio time `deadline_s` unless it is answered before.

        An entry whose request is done (answered, expired, its caller cancelled) is
        stale: dropped when it reaches the top (here or in the sweeper) or at the next
        compaction. Answers come back about in the order of the requests, so popping
        stale tops here keeps the heap near the number of requests waiting."""
        heap = self._heap
        heapq.heappush(heap, (deadline_s, request_id, pending))
        while heap[0][2].done:
            heapq.heappop(heap)
        if len(heap) > self._compact_at:
            self._compact()
        if deadline_s < self._wake_s:
            self._wake_s = deadline_s
            if self._scope is not None:
                # Not scope.cancel(): that formats the calling task's repr every time.
                self._scope.deadline = deadline_s

    def clear(self) -> None:
        """Forget every entry (the connection is lost: every request was answered)."""
        self._heap.clear()
        self._compact_at = COMPACT_ENTRIES_MIN

    async def run(self) -> None:
        """Expire due requests, sleep until the next deadline or a wake; until cancelled."""
        try:
            while True:
                self._sweep(trio.current_time())
                with trio.CancelScope(deadline=self._wake_s) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
        finally:
            self._scope = None
            self._wake_s = math.inf

    def _sweep(self, now_s: float) -> None:
        heap = self._heap
        while heap and (heap[0][0] <= now_s or heap[0][2].done):
            heapq.heappop(heap)[2].expire()
        self._wake_s = heap[0][0] if heap else math.inf

    def _compact(self) -> None:
        """Drop every stale entry: the heap then holds only requests still waiting."""
        heap = self._heap
        heap[:] = [entry for entry in heap if not entry[2].done]
        heapq.heapify(heap)
        self._compact_at = max(COMPACT_ENTRIES_MIN, 2 * len(heap))
