"""WF put timeouts swept in buckets: a few timers per tick, not a timer per put.

Why: every WF put needs a deadline, and a timer with two closures per put (one to
fire, one to cancel) cost about 2.5% of a put's server CPU. Here puts with the same
timeout that arrive within one tick share a bucket: the first put of a bucket sets
two timers (close the bucket for new puts after one tick; time out what is left in
it after timeout + tick), every other put is one dict insert, and a put answered in
time removes itself with one dict pop, so a bucket holds only puts still waiting
(memory stays flat at any rate). A put times out no earlier than its timeout and at
most one tick later.

Only `Timers.call_later` is used, so the simulator's and the tests' timers serve.
"""

from __future__ import annotations

from typing import Protocol

from mrs.group.context import Timers

TICK_S_MAX = 0.05
"""Widest bucket: how late (at most) a put with a long timeout is timed out."""
TICK_FRACTION = 0.05
"""A short timeout gets a tick of this fraction of it, so 100 ms is at most 5 ms late."""


class Expiring(Protocol):
    def time_out(self, timeout_s: float) -> None: ...


Bucket = dict[Expiring, None]
"""Puts waiting in one bucket, in arrival order (a dict: O(1) removal when answered)."""


class PutDeadlines:
    """The open bucket per timeout value; the timers close and expire buckets."""

    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._open: dict[float, Bucket] = {}
        self.waiting = 0
        """Buckets not yet expired (status and tests: it stays bounded by timeout/tick)."""

    def add(self, timeout_s: float, reply: Expiring) -> Bucket:
        """Time `reply` out after `timeout_s` unless it is removed from the returned
        bucket first (`bucket.pop(reply, None)` when it is answered)."""
        bucket = self._open.get(timeout_s)
        if bucket is None:
            bucket = self._open[timeout_s] = {}
            tick_s = min(TICK_S_MAX, timeout_s * TICK_FRACTION)
            self.waiting += 1
            self._timers.call_later(tick_s, _Close(self._open, timeout_s, bucket))
            self._timers.call_later(timeout_s + tick_s, _Expire(self, timeout_s, bucket))
        bucket[reply] = None
        return bucket

    def _expire(self, timeout_s: float, bucket: Bucket) -> None:
        self.waiting -= 1
        if self._open.get(timeout_s) is bucket:  # a timer that never closed it
            del self._open[timeout_s]
        replies = list(bucket)  # arrival order
        bucket.clear()
        for reply in replies:
            reply.time_out(timeout_s)


class _Close:
    """Timer: the bucket takes no more puts (later ones open a new bucket)."""

    __slots__ = ("open", "timeout_s", "bucket")

    def __init__(self, open_buckets: dict[float, Bucket], timeout_s: float, bucket: Bucket):
        self.open, self.timeout_s, self.bucket = open_buckets, timeout_s, bucket

    def __call__(self) -> None:
        if self.open.get(self.timeout_s) is self.bucket:
            del self.open[self.timeout_s]


class _Expire:
    __slots__ = ("deadlines", "timeout_s", "bucket")

    def __init__(self, deadlines: PutDeadlines, timeout_s: float, bucket: Bucket):
        self.deadlines, self.timeout_s, self.bucket = deadlines, timeout_s, bucket

    def __call__(self) -> None:
        self.deadlines._expire(self.timeout_s, self.bucket)
