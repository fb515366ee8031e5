"""A parked get's timeout, kept in the hand-over room's shared deadline buckets
(mrs.group.put_deadlines) instead of a timer and closures per get."""

from __future__ import annotations

import functools

from mrs import protocol as wire
from mrs.core.delivery import EMPTY_GET_TEXT
from mrs.group.context import Session
from mrs.group.put_deadlines import Bucket
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.model import Status


class GetExpiry:
    """A parked get's timeout: called, it is cancelled (the get was answered); timed
    out, the get is answered TIMEOUT, or, if a commit under way reserved it, marked to
    be answered so should that message not be delivered after all."""

    def __init__(
        self, session: Session, queue: TargetQueue, waiter: GetWaiter, bucket: Bucket | None = None
    ) -> None:
        self.session = session
        self.queue = queue
        self.waiter = waiter
        self.bucket = bucket

    def __call__(self) -> None:
        if self.bucket is not None:
            self.bucket.leave(self)
            self.bucket = None

    def time_out(self, timeout_s: float) -> None:
        self.bucket = None
        if self.queue.unpark(self.waiter):
            self._answer_timeout(timeout_s)
        elif self.waiter.reserved:  # answered by its message's commit, unless that fails
            self.waiter.timed_out = functools.partial(self._answer_timeout, timeout_s)

    def _answer_timeout(self, timeout_s: float) -> None:
        self.session.send(
            wire.Failure(
                self.waiter.request_id,
                Status.TIMEOUT,
                f"{EMPTY_GET_TEXT} {self.queue.address} in {timeout_s:g} s",
            )
        )
