"""`mrs admin purge` and `move` repeat their request (500 messages each) until the
queue is empty, but never chase what a producer puts meanwhile: under one faster than
a request's 500 a round trip, a purge never ended."""

from __future__ import annotations

import trio

from mrs.tools.admin import _repeat


class RefilledQueue:
    """A group whose queue a producer refills faster than each request empties it:
    every purge takes 500 and leaves `left` (what was there, plus what came)."""

    def __init__(self, depth: int, arriving_per_request: int) -> None:
        self.depth = depth
        self.arriving = arriving_per_request
        self.requests = 0

    async def admin(self, action: str, **args: object) -> dict:
        self.requests += 1
        if self.requests > 100:
            raise AssertionError("the purge chased the producer")
        taken = min(500, self.depth)
        self.depth += self.arriving - taken
        return {"queue": "1.10", "dead_lettered": taken, "discarded": 0,
                "memory_discarded": 0, "senders_told": taken, "left": self.depth}  # fmt: skip


async def test_a_purge_under_a_faster_producer_ends_after_what_was_there() -> None:
    queue = RefilledQueue(depth=1_200, arriving_per_request=800)
    with trio.fail_after(5):
        total = await _repeat(queue, "purge", {"queue": "1.10"})
    # held 1,200 at the first answer (500 taken, 1,500 left then: 2,000 asked)
    assert total["dead_lettered"] == 2_000 and queue.requests == 4
    assert total["left"] == queue.depth  # what is there now, not added up


async def test_senders_told_is_not_counted_as_messages_taken() -> None:
    """1,000 held, 500 a request: two requests, although each also told 500 senders."""
    queue = RefilledQueue(depth=1_000, arriving_per_request=0)
    total = await _repeat(queue, "purge", {"queue": "1.10"})
    assert (total["dead_lettered"], total["left"], queue.requests) == (1_000, 0, 2)
