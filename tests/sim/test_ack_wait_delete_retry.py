"""An AK_CONF put whose SAF UMA ran (its link was down) gets one MRS_ACK, also when the
sender's disk failed the delete of its owed-ack record: the receiver's confirm notice,
which comes once the SAF copy is delivered and confirmed, must not find that record
and send a second MRS_ACK; the record is deleted with the next one. Found by the
replicated swarm (seed 1795: two MRS_ACKs for one put after a disk fault on the
sender's group)."""

from __future__ import annotations

import random
from pathlib import Path

import trio
import trio.testing

from clients import DeliveryMode, NoMoreMessages, Uma, connect
from journals import Journal, WriteBatch
from mrs.group.acks import KEY_PREFIX
from mrs.model import Status
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore
from sim.swarm import SimGroup, Workload, bus_config

SETTLE_S_MAX = 60.0


class FailAckWaitDeletes:
    """A store fault: the first commits that delete an owed-ack record fail with EIO
    (the writer's retry of that batch alone included)."""

    def __init__(self, failures: int) -> None:
        self.failures_left = failures

    def __call__(self, batches: list[WriteBatch]) -> str | None:
        deletes = any(
            journal is Journal.META and key.startswith(KEY_PREFIX)
            for batch in batches
            for journal, key in batch.deletes
        )
        if deletes and self.failures_left:
            self.failures_left -= 1
            return "EIO"
        return None


async def _link_settled(group: SimGroup, peer: int, clients) -> None:
    """Until the link to `peer` is up with nothing in its SAF and no notice pending
    (MockClock time between looks)."""
    with trio.fail_after(SETTLE_S_MAX):
        while True:
            async with connect(
                group.address, None, open_stream=clients.connect, reconnect=None
            ) as client:
                link = (await client.status())["links"][str(peer)]
            if link["state"] == "up" and link["saf_backlog"] == 0 and not link["notices_pending"]:
                return
            await trio.sleep(0.5)


async def _scenario(directory: Path, fault: FailAckWaitDeletes) -> tuple[list, list[bytes]]:
    network = MemoryNetwork(random.Random(1))
    bus = bus_config(directory, Workload(groups=(1, 2)))
    sender = SimGroup(bus, 1, network, MemoryJournalStore(fault=fault))
    receiver = SimGroup(bus, 2, network, MemoryJournalStore())
    clients = network.node("clients")
    acks = []
    async with trio.open_nursery() as nursery:
        await sender.start(nursery)
        await network.partition("g1", "g2")
        async with connect(
            sender.address, "P0", open_stream=clients.connect, reconnect=None
        ) as producer:
            psb = await producer.put(
                b"order", target="2.10", delivery=DeliveryMode.AK_CONF, uma=Uma.SAF
            )
            acks.append(await producer.get(timeout=10))  # the SAF UMA's MRS_ACK
            await network.heal()
            await receiver.start(nursery)
            await _link_settled(sender, 2, clients)
            async with connect(
                receiver.address, "IN", open_stream=clients.connect, reconnect=None
            ) as consumer:
                message = await consumer.get(timeout=10)
                assert message.body == b"order"
                await consumer.confirm(message.seq)
            await _link_settled(receiver, 1, clients)  # the confirm notice was answered
            try:
                while True:
                    acks.append(await producer.get(timeout=0))
            except NoMoreMessages:
                pass
            await _confirmed_ak_put(producer, receiver, clients)  # its delete retries ours
        left = [
            key for key, _ in sender.store.raw_items(Journal.META) if key.startswith(KEY_PREFIX)
        ]
        nursery.cancel_scope.cancel()
    return [(psb.seq, ack.is_mrs_ack, ack.ack_psb()) for ack in acks], left


async def _confirmed_ak_put(producer, receiver: SimGroup, clients) -> None:
    """One more AK_CONF put, confirmed, and its MRS_ACK taken."""
    psb = await producer.put(b"next", target="2.10", delivery=DeliveryMode.AK_CONF, uma=Uma.SAF)
    async with connect(
        receiver.address, "IN", open_stream=clients.connect, reconnect=None
    ) as consumer:
        message = await consumer.get(timeout=10)
        await consumer.confirm(message.seq)
    ack = await producer.get(timeout=10)
    assert ack.ack_psb().seq == psb.seq and ack.ack_psb().delivery_status == Status.SUCCESS


def test_an_ack_wait_whose_delete_failed_is_not_acknowledged_twice(tmp_path) -> None:
    fault = FailAckWaitDeletes(failures=2)
    acks, left = trio.run(
        _scenario, tmp_path, fault, clock=trio.testing.MockClock(autojump_threshold=0)
    )
    assert fault.failures_left == 0  # the delete did fail
    [(seq, is_ack, psb)] = acks
    assert is_ack
    assert (psb.seq, psb.delivery_status, psb.uma_status) == (
        seq,
        Status.LINK_DOWN,
        Status.SAF_SUCCESS,
    )
    assert left == []  # the record whose delete failed went with the next one's
