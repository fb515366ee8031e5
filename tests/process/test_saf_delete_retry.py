"""A SAF record whose transfer the peer acknowledged but whose delete failed (a disk
error) is sent again and deleted in the end: the link settles and the SAF drains.
Found by the swarm (before the fix the drain never came back to it, the link never
settled, and the record stayed in the SAF until a restart)."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from clients import DeliveryMode, Uma, connect
from journals import Journal, WriteBatch
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore
from sim.swarm import SimGroup, Workload, bus_config

SETTLE_S_MAX = 60.0


class FailFirstSafDelete:
    """A store fault: the first commit that deletes SAF records fails with EIO, and so
    does the writer's retry of that batch alone."""

    def __init__(self) -> None:
        self.failed = 0

    @property
    def done(self) -> bool:
        return self.failed == 2

    def __call__(self, batches: list[WriteBatch]) -> str | None:
        deletes = any(journal is Journal.SAF for batch in batches for journal, _ in batch.deletes)
        if deletes and not self.done:
            self.failed += 1
            return "EIO"
        return None


async def _scenario(
    directory: Path, fault: FailFirstSafDelete
) -> tuple[list[str], int, list[bytes]]:
    network = MemoryNetwork(random.Random(1))
    bus = bus_config(directory, Workload(groups=(1, 2)))
    sender = SimGroup(bus, 1, network, MemoryJournalStore(fault=fault))
    receiver = SimGroup(bus, 2, network, MemoryJournalStore())
    clients = network.node("clients")
    async with trio.open_nursery() as nursery:
        await sender.start(nursery)
        await network.partition("g1", "g2")
        async with connect(
            sender.address, "P0", open_stream=clients.connect, reconnect=None
        ) as client:
            for index in range(3):
                psb = await client.put(
                    f"m{index}".encode(), target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DLJ
                )
                assert psb.delivery_status.name == "STORED"
        await network.heal()
        await receiver.start(nursery)
        backlog = -1
        with trio.move_on_after(SETTLE_S_MAX):
            while backlog != 0:
                await trio.sleep(0.5)
                async with connect(
                    sender.address, None, open_stream=clients.connect, reconnect=None
                ) as client:
                    backlog = (await client.status())["links"]["2"]["saf_backlog"]
        bodies = []
        async with connect(
            receiver.address, "IN", open_stream=clients.connect, reconnect=None
        ) as consumer:
            for _ in range(3):
                message = await consumer.get(timeout=1)
                bodies.append(message.body)
                await consumer.confirm(message.seq)
        left = [record.body.decode() for _, record in sender.store.scan(Journal.SAF)]
        nursery.cancel_scope.cancel()
    return left, backlog, bodies


def test_a_failed_saf_delete_is_retried(tmp_path) -> None:
    fault = FailFirstSafDelete()
    left, backlog, bodies = trio.run(
        _scenario, tmp_path, fault, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert fault.done  # the delete did fail once
    assert bodies == [b"m0", b"m1", b"m2"]
    assert backlog == 0 and left == []
