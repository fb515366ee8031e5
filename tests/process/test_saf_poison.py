"""A SAF record no peer could accept (tampered on disk, checksum valid) is quarantined
to the sending group's DLJ with a reason; the drain goes on in order behind it."""

from __future__ import annotations

import dataclasses

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalStore, WriteBatch
from sim.bus import LinkedBus
from tests.process.test_links import QUEUES, wait_for_link


@pytest.fixture
async def bus(tmp_path, nursery):
    linked = LinkedBus(tmp_path / "bus", queues=QUEUES)
    await linked.start_proxies(nursery)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2, "up")
    yield linked
    linked.stop()


async def test_a_poisoned_saf_record_is_quarantined_and_the_drain_goes_on(bus) -> None:
    bus.proxy(1, 2).cut()
    await wait_for_link(bus, 1, 2, "down")
    async with connect(bus.address(1), "OUT") as sender:
        seqs = []
        for body in (b"first", b"poisoned", b"third"):
            psb = await sender.put(body, target="2.10", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED
            seqs.append(psb.seq)
    bus.processes[1].kill()
    store = JournalStore(bus.data_dir(1) / "journals")
    batch = WriteBatch.empty()
    for key, record in store.scan(Journal.SAF):
        if record.body == b"poisoned":
            batch.put_record(Journal.SAF, key, dataclasses.replace(record, delivery=99))
    store.commit_now(batch)
    store.close()
    bus.proxy(1, 2).heal()
    await trio.to_thread.run_sync(bus.processes[1].start)
    await wait_for_link(bus, 1, 2, "up", backlog=0)
    async with connect(bus.address(2), "IN") as receiver:
        got = []
        for _ in range(2):
            message = await receiver.get(timeout=10)
            got.append(message.body)
            await receiver.confirm(message.seq)
        with pytest.raises(NoMoreMessages):
            await receiver.get(timeout=0)
    assert got == [b"first", b"third"]
    store = JournalStore(bus.data_dir(1) / "journals", readonly=True)
    try:
        dead = {record.seq: record for _, record in store.scan(Journal.DLJ)}
        assert store.count(Journal.SAF) == 0
    finally:
        store.close()
    assert list(dead) == [seqs[1]]
    assert dead[seqs[1]].reason == int(Status.BADPARAM)
    assert "delivery" in dead[seqs[1]].extra["quarantine"]
