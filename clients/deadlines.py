"""Reply deadlines of the client's requests in flight, expired by one sweeper task.

Why not `trio.fail_after` around each wait: a cancel scope per request (enter, register
its deadline, exit, unregister) was about a quarter of the client's CPU per put in a
profile (benchmarks/README.md), for deadlines that almost never fire. Here a request costs one
append of (deadline, request id, waiter); one task sleeps until the earliest deadline
and wakes the waiters whose time is up (`_Pending.expire`), which then raise
ReplyTimeout exactly as a fail_after's TooSlowError did.

Entries are kept in a few FIFO lanes, each in deadline order, and a heap for the rest.
Requests with the same wait (every put of a producer, every get of a consumer) reach
their deadlines in the order they were made, so each lands at the end of a lane: a
deque append where a heap push compared its way down the heap (0.13 against 0.68 µs
per request, benchmarks/README.md). A request whose deadline sorts before every lane's last one
opens a new lane, up to LANES_MAX; after that it goes into the heap, so any mix of
waits still expires in deadline order.

Entries of requests answered or cancelled stay until they reach the front of their
lane (or the heap's top) or the entries are compacted; compaction runs when they are
more than twice the waiters held after the last one (and at least
COMPACT_ENTRIES_MIN), so they stay within a small multiple of the requests in flight,
which CLIENT_REQUESTS_IN_FLIGHT_MAX bounds.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Final

import trio

if TYPE_CHECKING:
    from clients.waiting import Pending as _Pending

COMPACT_ENTRIES_MIN = 1024
"""Below this many entries they are never compacted (stale entries are cheap)."""
LANES_MAX = 4
"""FIFO lanes at most: one per distinct wait in use, in practice one or two."""

_Entry = tuple[float, int, "_Pending"]
_PERF_COUNTER: Final = time.perf_counter


def system_clock_offset_s(clock: Any) -> float | None:
    """The offset of trio's own clock (SystemClock: `offset + perf_counter()`), or None
    for any other clock (a test's MockClock), which is then always asked."""
    kind = type(clock)
    if kind.__name__ != "SystemClock" or not kind.__module__.startswith("trio."):
        return None
    offset = getattr(clock, "offset", None)
    if type(offset) is not float:
        return None
    # the clock must read as its documented formula says, else ask it every time
    if abs(clock.current_time() - (offset + _PERF_COUNTER())) > 0.001:
        return None
    return offset


class ReplyDeadlines:
    """The deadlines of the waiting requests; `run` is the task that expires them."""

    def __init__(self) -> None:
        self._lanes: list[deque[_Entry]] = []
        """Each in deadline order (appended only at or after its last deadline)."""
        self._heap: list[_Entry] = []
        """The entries no lane could take in order."""
        self._wake_s = math.inf
        """The trio time the sweeper sleeps until (inf: no deadline, or not running)."""
        self._scope: trio.CancelScope | None = None
        self._compact_at = COMPACT_ENTRIES_MIN
        self._entries = 0
        """Entries held in lanes and heap, stale ones included."""
        self._clock_offset_s: float | None = None
        """While `run` runs under trio's SystemClock, its offset: `now_s` then reads
        `perf_counter()` itself. trio.current_time() goes through three Python calls,
        2.7% of a producer's CPU when each put asked it (benchmarks/README.md)."""

    def __len__(self) -> int:
        """Entries held, stale ones included (what compaction bounds)."""
        return self._entries

    def now_s(self) -> float:
        """trio.current_time(), cheaper while the sweeper runs under trio's own clock."""
        offset = self._clock_offset_s
        if offset is None:
            return trio.current_time()
        return _PERF_COUNTER() + offset

    def add_after(self, wait_s: float, request_id: int, pending: _Pending) -> None:
        """Expire `pending` `wait_s` seconds from now unless it is answered before."""
        self.add(self.now_s() + wait_s, request_id, pending)

    def add(self, deadline_s: float, request_id: int, pending: _Pending) -> None:
        """Expire `pending` at trio time `deadline_s` unless it is answered before.

        An entry whose request is done (answered, expired, its caller cancelled) is
        stale: dropped when it reaches its lane's front (here or in the sweeper) or at
        the next compaction. Answers come back about in the order of the requests, so
        dropping stale fronts here keeps a lane near the number of requests waiting."""
        entry = (deadline_s, request_id, pending)
        for lane in self._lanes:
            if not lane or lane[-1][0] <= deadline_s:  # emptied lanes take any deadline
                lane.append(entry)
                while lane and lane[0][2].done:
                    lane.popleft()
                    self._entries -= 1
                break
        else:
            self._add_elsewhere(entry)
        self._entries += 1
        if self._entries > self._compact_at:
            self._compact()
        if deadline_s < self._wake_s:
            self._wake_s = deadline_s
            if self._scope is not None:
                # Not scope.cancel(): that formats the calling task's repr every time.
                self._scope.deadline = deadline_s

    def _add_elsewhere(self, entry: _Entry) -> None:
        """A new lane for a deadline before every lane's last one, or the heap."""
        if len(self._lanes) < LANES_MAX:
            self._lanes.append(deque((entry,)))
            return
        heap = self._heap
        heapq.heappush(heap, entry)
        while heap and heap[0][2].done:
            heapq.heappop(heap)
            self._entries -= 1

    def clear(self) -> None:
        """Forget every entry (the connection is lost: every request was answered)."""
        self._lanes.clear()
        self._heap.clear()
        self._entries = 0
        self._compact_at = COMPACT_ENTRIES_MIN

    async def run(self) -> None:
        """Expire due requests, sleep until the next deadline or a wake; until cancelled."""
        self._clock_offset_s = system_clock_offset_s(trio.lowlevel.current_clock())
        try:
            while True:
                self._sweep(trio.current_time())
                with trio.CancelScope(deadline=self._wake_s) as scope:
                    self._scope = scope
                    await trio.sleep_forever()
        finally:
            self._scope = None
            self._wake_s = math.inf
            self._clock_offset_s = None

    def _sweep(self, now_s: float) -> None:
        wake_s = math.inf
        for lane in self._lanes:
            while lane and (lane[0][0] <= now_s or lane[0][2].done):
                lane.popleft()[2].expire()
                self._entries -= 1
            if lane:
                wake_s = min(wake_s, lane[0][0])
        heap = self._heap
        while heap and (heap[0][0] <= now_s or heap[0][2].done):
            heapq.heappop(heap)[2].expire()
            self._entries -= 1
        self._wake_s = min(wake_s, heap[0][0]) if heap else wake_s

    def _compact(self) -> None:
        """Drop every stale entry: what is left is only requests still waiting."""
        for lane in self._lanes:
            live = [entry for entry in lane if not entry[2].done]
            lane.clear()
            lane.extend(live)
        heap = self._heap
        heap[:] = [entry for entry in heap if not entry[2].done]
        heapq.heapify(heap)
        self._entries = len(heap) + sum(len(lane) for lane in self._lanes)
        self._compact_at = max(COMPACT_ENTRIES_MIN, 2 * self._entries)
