"""MRS_ACKs made while one commit's answers are reported, offered to their queues
together once the report ends.

Why: one commit reports hundreds of AK puts at once. Offered one by one, the first
MRS_ACK wakes the sender's parked GetBatch and leaves alone in its frame, and the
rest wait for the client's next GetBatch: a round trip more per commit for every AK
producer (issue 17). Held until the report ends, the parked GetBatch takes them all
(with read-ahead, up to READ_AHEAD_MAX) in one frame. The order does not change:
they join the queue in the order they were made, and parked gets are served oldest
first, as `TargetQueue.offer` would have.

Only the inline writer's commits are held (`mrs.server` wraps `commit_pending`):
an AK_DQF put's MRS_ACK and an AK_CONF put's (made when the confirm's commit is
reported) wait for the report's end; one made outside a commit's report (an AK_DEQ
message taken by a get) or in the thread writer's reports is offered at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mrs.queues import Entry, TargetQueue


class HeldOffers:
    """Offers to queues, held while `holding()` is open."""

    def __init__(self) -> None:
        self._holding = False
        self._queues: dict[int, TargetQueue] = {}
        """The queues offered to while holding, by id, in first-offer order."""

    def offer(self, queue: TargetQueue, entry: Entry) -> None:
        if not self._holding:
            queue.offer(entry)
            return
        queue.put_back(entry, False)  # by position: a compiled method (front=False)
        self._queues[id(queue)] = queue

    @contextmanager
    def holding(self, serve_waiting_gets: Callable[[TargetQueue], None]) -> Iterator[None]:
        """Hold offers until the block ends, then let every parked get take its share
        (`serve_waiting_gets`: the hand-over's)."""
        self._holding = True
        try:
            yield
        finally:
            self._holding = False
            queues, self._queues = self._queues, {}
            for queue in queues.values():
                serve_waiting_gets(queue)
