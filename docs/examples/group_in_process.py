"""One group's rooms driven in process: real LMDB journals, the production InlineWriter,
no sockets (docs/architecture.md).

Shows the first and third hot paths as the code runs them: a put is answered only
after the commit that makes it durable; a get is handed over only after its delivery
mark is durable; a confirm deletes the DQF record and writes the PCJ. Then 2,500
messages wait, and the queue keeps 1,000 in memory and the rest as seqs. After a
restart all 2,500 are seqs read from the DQF's key index (docs/journals.md), and
the first get reads a window of records back.

    .venv/bin/python docs/examples/group_in_process.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from journals import InlineWriter, Journal, JournalStore
from mrs import protocol as wire
from mrs.config.bus import parse_config
from mrs.group import Group
from mrs.model import DeliveryMode, Status, Uma

BUS = """
[[group]]
id = 1
name = "DEMO"
listen = "127.0.0.1:0"
data_dir = "g1"
pcj_default = true
[[group.queue]]
id = 10
name = "ORDERS"
[[group.queue]]
id = 11
name = "SHOP"
"""


class Session:
    """What a group needs of a client connection: an id, its queue, a way to answer."""

    def __init__(self, session_id: int) -> None:
        self.id = session_id
        self.attached = None
        self.events: list = []

    def send(self, event: object) -> None:
        self.events.append(event)

    def answer(self, event: object) -> None:
        """A PutDone or Confirmed; a server session may frame several in one AnswerBatch."""
        self.events.append(event)


class NoTimers:
    def call_later(self, delay_s, callback):
        return lambda: None


def put(request_id: int, body: bytes) -> wire.Put:
    return wire.Put(
        request_id=request_id,
        target="ORDERS",
        body=body,
        delivery=int(DeliveryMode.WF_DQF),
        uma=int(Uma.DISC),
        msg_class=0,
        msg_type=0,
        priority=0,
        timeout_ms=0,
        correlation_id=b"",
        resp_q="",
    )


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        bus = parse_config(BUS, Path(scratch) / "bus.toml")
        config = bus.group(1)
        config.data_dir.mkdir()
        store = JournalStore(config.data_dir / "journals", 256 << 20)
        writer = InlineWriter(store, lambda: None)  # the server commits between rounds
        group = Group(bus, config, store, writer, NoTimers())
        group.recover()
        shop, orders = Session(1), Session(2)
        group.attach(shop, wire.Attach(request_id=1, queue="SHOP"))
        group.attach(orders, wire.Attach(request_id=1, queue="ORDERS"))

        group.put(shop, put(2, b"order 17"))
        print(
            f"before the commit: {len(shop.events) - 1} answers, {store.count(Journal.DQF)} in DQF"
        )
        writer.commit_pending()
        done = shop.events[-1]
        print(f"after the commit: {Status(done.delivery_status).name} as seq {done.seq}")

        group.get(orders, wire.Get(request_id=2, timeout_ms=0))
        writer.commit_pending()  # the delivery mark
        delivery = orders.events[-1]
        status = Status(delivery.delivery_status).name
        print(f"ORDERS got {delivery.body!r} ({status})")
        group.confirm(
            orders, wire.Confirm(request_id=3, seq=delivery.seq, confirm_value=0, force_j=0)
        )
        writer.commit_pending()
        print(f"confirmed: DQF {store.count(Journal.DQF)}, PCJ {store.count(Journal.PCJ)}")

        for request_id in range(10, 2510):
            group.put(shop, put(request_id, b"x" * 100))
        writer.commit_pending()
        queue = group.queues[10]
        print(
            f"{queue.waiting} waiting: {len(queue.pending)} in memory, "
            f"{queue.pending.cold_count} as seqs on disk"
        )
        store.close()
        restart(bus, config)


def restart(bus, config) -> None:
    """The same journals opened again: start-up reads keys, a get reads records."""
    store = JournalStore(config.data_dir / "journals", 256 << 20)
    writer = InlineWriter(store, lambda: None)
    group = Group(bus, config, store, writer, NoTimers())
    group.recover()
    queue = group.queues[10]
    print(
        f"after a restart: {queue.waiting} waiting: {len(queue.pending)} in memory, "
        f"{queue.pending.cold_count} as seqs on disk"
    )
    orders = Session(1)
    group.attach(orders, wire.Attach(request_id=1, queue="ORDERS"))
    group.get(orders, wire.Get(request_id=2, timeout_ms=0))
    writer.commit_pending()
    print(
        f"one get later: {len(queue.pending)} in memory, {queue.pending.cold_count} as seqs, "
        f"got {orders.events[-1].body[:5]!r}"
    )
    store.close()


if __name__ == "__main__":
    main()
