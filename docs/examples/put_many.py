"""Put many messages in few frames with `put_many` (every put keeps its own answer),
take many in one request with `get_many`, and confirm them with one wait with
`confirm_many`.

python docs/examples/put_many.py 127.0.0.1:7001
"""

import sys
import uuid

import trio

from clients import Client, ForceJrn, KeyReused, MrsError, NoMoreMessages, PutItem, Status, connect


async def main(address: str) -> None:
    async with (
        connect(address, queue="SENDER") as sender,
        connect(address, queue="RESTORE") as receiver,
    ):
        items = [PutItem(f"line {n}".encode(), "RESTORE") for n in range(1, 2501)]
        # The same idempotency key with another body: that put alone is refused. (A key
        # of this run: the group keeps a key for days, and a second run's "first" would
        # be answered with the first run's seq.)
        key = {"idempotency_key": f"order-7-{uuid.uuid4().hex}"}
        items.append(PutItem(b"first", "RESTORE", headers=key))
        items.append(PutItem(b"second", "RESTORE", headers=key))
        items.append(PutItem(b"nowhere", "NO_SUCH_QUEUE"))
        results = await sender.put_many(items)  # 3 frames: at most 1000 puts in each

        stored = [r for r in results if not isinstance(r, MrsError) and r.stored]
        print(
            f"{len(stored)} of {len(items)} stored, seqs in order: "
            f"{[p.seq for p in stored] == sorted(p.seq for p in stored)}"
        )
        for item, result in zip(items, results, strict=True):
            if isinstance(result, MrsError):  # returned in its place, not raised
                print(f"{item.body!r} -> {type(result).__name__}: {Status(result.status).name}")
        assert isinstance(results[-2], KeyReused)

        # get_many: up to 100 of them in one request (a prefetch), oldest first,
        # each delivered as a get delivers it; confirm_many confirms them all with
        # one wait (one result per seq: None, or the error confirm would raise).
        batch = await receiver.get_many(100, timeout=10)
        print(f"get_many: {len(batch)} messages, {batch[0].body!r} .. {batch[-1].body!r}")
        results = await receiver.confirm_many([message.seq for message in batch])
        following = await receiver.get(timeout=10)
        print(f"confirmed {results.count(None)}; next: {following.body!r}")
        await following.confirm()
        print(f"took the other {await take_the_rest(receiver)}: RESTORE is empty again")


async def take_the_rest(receiver: Client) -> int:
    """Gets and confirms what waits on the queue, without PCJ records (`NO_JRN`), so a
    second run (and the journal tools' examples, which replay to RESTORE) find the
    queue and the PCJ as the first run did."""
    taken = 0
    while True:
        try:
            batch = await receiver.get_many(1000, timeout=0)
        except NoMoreMessages:
            return taken
        await receiver.confirm_many([m.seq for m in batch], ForceJrn.NO_JRN)
        taken += len(batch)


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:7001")
