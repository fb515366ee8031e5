"""WF put and parked get timeouts swept in buckets: a few timers per tick, not a
timer per request (the hand-over room's `GetExpiry` uses the same buckets).

Why: every WF put needs a deadline, and a timer with two closures per put (one to
fire, one to cancel) cost about 2.5% of a put's server CPU. Here puts with the same
timeout that arrive within one tick share a bucket: the first put of a bucket sets
two timers (close the bucket for new puts after one tick; time out what is left in
it after timeout + tick), every other put is one dict insert, and a put answered in
time leaves with one dict pop, so a bucket holds only puts still waiting. A bucket
closed and empty cancels its expiry timer, so puts with many different timeouts
(a client passing what is left of its own deadline) leave no timer behind once
answered: the timers stay bounded by the puts waiting. A put times out no earlier
than its timeout and at most one tick later.

Only `Timers.call_later` is used, so the simulator's and the tests' timers serve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mrs.group.context import Timers

TICK_S_MAX = 0.05
"""Widest bucket: how late (at most) a put with a long timeout is timed out."""
TICK_FRACTION = 0.05
"""A short timeout gets a tick of this fraction of it, so 100 ms is at most 5 ms late."""


class Expiring(Protocol):
    def time_out(self, timeout_s: float) -> None: ...


class Bucket:
    """Puts waiting with one timeout, arrived within one tick, in arrival order (a
    dict: O(1) removal when answered)."""

    def __init__(self) -> None:
        self.replies: dict[Expiring, None] = {}
        self.closed = False
        self.cancel_expiry: Callable[[], None] | None = None

    def leave(self, reply: Expiring) -> None:
        """`reply` was answered: it no longer times out."""
        replies = self.replies
        replies.pop(reply, None)
        if not replies and self.closed:
            self.drop_expiry()

    def drop_expiry(self) -> None:
        if self.cancel_expiry is not None:
            self.cancel_expiry()
            self.cancel_expiry = None


class PutDeadlines:
    """The open bucket per timeout value; the timers close and expire buckets."""

    def __init__(self, timers: Timers) -> None:
        self._timers = timers
        self._open: dict[float, Bucket] = {}

    @property
    def waiting(self) -> int:
        """Buckets open for new puts (status and tests: bounded by puts per tick)."""
        return len(self._open)

    def add(self, timeout_s: float, reply: Expiring) -> Bucket:
        """Time `reply` out after `timeout_s` unless it leaves the returned bucket
        first (`bucket.leave(reply)` when it is answered)."""
        bucket = self._open.get(timeout_s)
        if bucket is None:
            bucket = self._open[timeout_s] = Bucket()
            tick_s = min(TICK_S_MAX, timeout_s * TICK_FRACTION)
            self._timers.call_later(tick_s, BucketTimer(self._open, timeout_s, bucket, False))
            bucket.cancel_expiry = self._timers.call_later(
                timeout_s + tick_s, BucketTimer(self._open, timeout_s, bucket, True)
            )
        bucket.replies[reply] = None
        return bucket


class BucketTimer:
    """Timer of one bucket. Closing (`expires` False): the bucket takes no more puts
    (later ones open a new bucket). Expiring: every put still in it is answered
    TIMEOUT. One class with one `__call__`, not a subclass per kind: the module is
    compiled (mrs.native.loader), and a compiled subclass's `__call__` run as a timer
    crashed the interpreter."""

    def __init__(
        self, open_buckets: dict[float, Bucket], timeout_s: float, bucket: Bucket, expires: bool
    ) -> None:
        self.open = open_buckets
        self.timeout_s = timeout_s
        self.bucket = bucket
        self.expires = expires

    def __call__(self) -> None:
        bucket = self.bucket
        if self.open.get(self.timeout_s) is bucket:
            del self.open[self.timeout_s]
        bucket.closed = True  # the expiry closes it too, should the close timer not run
        if not self.expires:
            if not bucket.replies:
                bucket.drop_expiry()
            return
        bucket.cancel_expiry = None
        replies = list(bucket.replies)  # arrival order
        bucket.replies.clear()
        for reply in replies:
            reply.time_out(self.timeout_s)
