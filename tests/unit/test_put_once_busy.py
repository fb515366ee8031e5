"""`put_once` sends a copy refused QUEUE_BUSY again instead of giving up.

Why a user cares: QUEUE_BUSY on a keyed put means an earlier copy with the same key
is still being stored (the group's copies waiting for theirs at DEDUPE_WAITERS_MAX);
the group says "try again later". `put_once` promises a put stored exactly once
however often its answer is lost: it raised the refusal to an application that had
asked it to keep trying, and the application could not tell whether the first copy
had been stored.
"""

from __future__ import annotations

import trio

from clients import put_once
from clients.saf_drain import IDEMPOTENCY_HEADER
from mrs.errors import QueueBusy
from mrs.model import Psb, Status


class BusyThenStored:
    """A client whose group refuses the first copies QUEUE_BUSY, then stores one."""

    def __init__(self, busy_count: int) -> None:
        self.busy_count = busy_count
        self.keys: list[str] = []

    async def put(self, body: bytes, target: str, *, headers: dict, **put: object) -> Psb:
        self.keys.append(headers[IDEMPOTENCY_HEADER])
        if len(self.keys) <= self.busy_count:
            raise QueueBusy(
                Status.QUEUE_BUSY, "an earlier copy with this dedupe key is being stored"
            )
        return Psb(Status.SUCCESS, Status.STORED, 41, Status.NO_UMA)

    async def wait_connected(self) -> None:
        raise AssertionError("QUEUE_BUSY is an answer: the connection is up")


async def test_a_copy_refused_queue_busy_is_sent_again_under_the_same_key() -> None:
    client = BusyThenStored(busy_count=3)
    with trio.fail_after(5):
        psb = await put_once(client, b"order", "1.10", "order-7")  # type: ignore[arg-type]
    assert (psb.delivery_status, psb.seq) == (Status.STORED, 41)
    assert client.keys == ["order-7"] * 4
