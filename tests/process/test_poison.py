"""Poison messages never kill a group: a hostile peer's transfers are checked like a
client's puts, and a tampered journal record (valid checksum) is quarantined to the
DLJ with a reason. Real `mrs serve` processes, real LMDB files, SIGKILL."""

from __future__ import annotations

import dataclasses

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalStore, WriteBatch
from mrs import protocol as wire
from mrs.core.seqspace import GROUP_SHIFT
from sim.bus import LinkedBus

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 13
name = "SENDER"
confirm = "explicit-out-of-order"
"""


def _dlj(data_dir) -> dict:
    store = JournalStore(data_dir / "journals", readonly=True)
    try:
        return {record.seq: record for _, record in store.scan(Journal.DLJ)}
    finally:
        store.close()


async def _drain_bodies(address: str) -> list[bytes]:
    bodies = []
    async with connect(address, queue="IN") as receiver:
        while True:
            try:
                message = await receiver.get(timeout=0)
            except NoMoreMessages:
                return bodies
            bodies.append(message.body)
            await receiver.confirm(message.seq)


async def test_tampered_dqf_records_are_quarantined_and_the_group_keeps_serving(
    make_bus,
) -> None:
    bus = make_bus(queues=QUEUES)
    async with connect(bus.address, queue="SENDER") as sender:
        seqs = []
        for body in (b"priority 200", b"delivery 99", b"good"):
            psb = await sender.put(body, target="IN", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            seqs.append(psb.seq)
    bus.kill()
    # Rewrite two records with out-of-range fields and a valid checksum.
    store = JournalStore(bus.data_dir / "journals")
    batch = WriteBatch.empty()
    for key, record in store.scan(Journal.DQF):
        if record.body == b"priority 200":
            batch.put_record(Journal.DQF, key, dataclasses.replace(record, priority=200))
        elif record.body == b"delivery 99":
            batch.put_record(Journal.DQF, key, dataclasses.replace(record, delivery=99))
    store.commit_now(batch)
    store.close()

    for _ in range(2):  # and again after a restart: nothing poisonous comes back
        address = bus.start()
        assert await _drain_bodies(address) == ([b"good"] if _ == 0 else [])
        async with connect(address, None) as client:
            status = await client.status()
        assert status["dqf_messages"] == 0
        bus.kill()
    dead = _dlj(bus.data_dir)
    assert sorted(dead) == seqs[:2]
    assert {record.reason for record in dead.values()} == {int(Status.BADPARAM)}
    assert "priority" in dead[seqs[0]].extra["quarantine"]
    assert "delivery" in dead[seqs[1]].extra["quarantine"]
    log_text = bus.log_text()
    assert log_text.count("quarantined to the DLJ") == 2
    assert "Traceback" not in log_text


POISON = {
    "priority": 200,
    "delivery": 99,
    "target_queue": 1 << 40,
    "msg_class": 1 << 63,
    "correlation_id": b"x" * 10_000,
    "headers": {"idempotency_key": 7},
}


async def _send_as_group_1(address: str, messages: list[wire.TransferredMessage]) -> list:
    """Dial group 2 as its linked group 1 would and send one LinkTransfer."""
    host, port = address.rsplit(":", 1)
    connection = wire.Connection("client")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        hello = wire.Hello(wire.PROTOCOL_VERSION, "group:1", "link", 1)
        await stream.send_all(connection.send(hello))
        await stream.send_all(connection.send(wire.LinkTransfer(1, messages)))
        with trio.fail_after(20):
            while True:
                data = await stream.receive_some(65536)
                assert data, "group 2 closed the link"
                connection.receive_data(data)
                for event in connection.events():
                    assert not isinstance(event, wire.Fatal), event
                    if isinstance(event, wire.LinkAck) and event.request_id == 1:
                        return event.results


ONE = 1 << GROUP_SHIFT
"""Group 1's seqs carry its id (mrs.core.seqspace): group 2 checks it."""


def _transfer(seq: int, body: bytes, **fields) -> wire.TransferredMessage:
    values = {
        "seq": seq, "target_queue": 10, "source_group": 1, "source_queue": 13, "body": body,
        "msg_class": 0, "msg_type": 0, "priority": 0, "delivery": int(DeliveryMode.WF_DQF),
        "uma": int(Uma.DISC), "correlation_id": b"", "put_time_ns": 1, "headers": None,
        "ordered": False,
    }  # fmt: skip
    values.update(fields)
    return wire.TransferredMessage(**values)


@pytest.mark.parametrize("field", sorted(POISON))
async def test_a_hostile_peer_cannot_poison_the_group(tmp_path, field) -> None:
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES)
    group2 = bus.processes[2]  # group 1 is played by the test
    address = group2.start()
    try:
        results = await _send_as_group_1(
            address,
            [
                _transfer(ONE | 101, b"poison", **{field: POISON[field]}),
                _transfer(ONE | 102, b"good"),
                _transfer(
                    ONE | 103,
                    b"memory poison",
                    delivery=int(DeliveryMode.WF_MEM),
                    **({field: POISON[field]} if field != "delivery" else {"priority": -1}),
                ),
            ],
        )
        assert [[result.seq, result.status] for result in results] == [
            [ONE | 101, Status.BADPARAM],
            [ONE | 102, Status.STORED],
            [ONE | 103, Status.BADPARAM],
        ]
        assert await _drain_bodies(address) == [b"good"]
        log_text = (bus.directory / "group2.log").read_text()
        assert "refused BADPARAM" in log_text and "Traceback" not in log_text
        group2.kill()
        assert await _drain_bodies(group2.start()) == []
    finally:
        group2.kill()
