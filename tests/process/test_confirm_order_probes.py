"""Probes of confirmation order, POSSDUPL and the recovery of handed-out messages,
against a real `mrs serve` process: each case is one a receiver met as a message
stranded, lost or delivered twice without the mark."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from clients import Psb, PutItem, Status, connect
from journals import Journal, queue_key
from mrs import protocol as wire
from mrs.core.selection import by_class_type
from tests.client_helpers import take_all
from tests.conftest import Bus
from tests.journal_helpers import journal_seqs, record, write_raw

WAIT_S = 15.0
"""Generous: the machine is shared; an answer that never comes fails the test."""


async def put_all(address: str, target: str, count: int) -> list[int]:
    """Put `count` recoverable messages to `target`; their seqs in put order."""
    async with connect(address, queue="SENDER") as sender:
        return [(await sender.put(f"m{index}".encode(), target)).seq for index in range(count)]


class RawClient:
    """A client speaking frames itself: it can send requests and close its side in
    one go, which the client library never does (it waits for its answers)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.connection = wire.Connection("client")

    @classmethod
    async def attached(cls, address: str, queue: str) -> RawClient:
        host, port = address.rsplit(":", 1)
        client = cls(await trio.open_tcp_stream(host, int(port)))
        await client.send(wire.Hello(wire.PROTOCOL_VERSION, "probe"), wire.Attach(1, queue))
        welcome, attached = await client.events(2)
        assert isinstance(welcome, wire.Welcome) and isinstance(attached, wire.Attached)
        return client

    async def send(self, *events: object) -> None:
        await self.stream.send_all(b"".join(self.connection.send(event) for event in events))

    async def events(self, count: int) -> list[object]:
        """The next `count` events the server sends (heartbeat Pings aside)."""
        found: list[object] = []
        with trio.fail_after(WAIT_S):
            while True:
                found += [e for e in self.connection.events() if not isinstance(e, wire.Ping)]
                if len(found) >= count:
                    return found
                data = await self.stream.receive_some(65536)
                assert data, f"connection closed after {found}"
                self.connection.receive_data(data)


async def take_in_order(address: str, queue: str) -> list[tuple[int, Status]]:
    """Every message waiting on `queue` (each confirmed, `take_all`): (seq, status)."""
    async with connect(address, queue=queue, reconnect=None) as receiver:
        return [(message.seq, message.delivery_status) for message in await take_all(receiver)]


def faulty_bus(make_bus, tmp_path: Path) -> tuple[Bus, Path]:
    """A group whose journal faults a test switches by writing its fault file
    (mrs.storage.fault_file: "" none, "EIO" every commit fails)."""
    fault = tmp_path / "fault"
    fault.write_text("")
    return make_bus(env={"MRS_FAULT_FILE": str(fault)}), fault


async def test_a_confirm_that_fails_after_its_receiver_left_comes_again_possdupl(
    make_bus, tmp_path: Path
) -> None:
    """The receiver confirms and closes at once; the confirm's commit fails after the
    server saw the close. The message was not confirmed: it must come to the next
    receiver (POSSDUPL), not sit among the unconfirmed of a session that is gone,
    where it was never delivered again and an in-order queue answered every confirm
    of the next receiver BADSEQ ("confirm <that message> before ...")."""
    bus, fault = faulty_bus(make_bus, tmp_path)
    seqs = await put_all(bus.address, "ORDERS", 2)
    receiver = await RawClient.attached(bus.address, "ORDERS")
    async with receiver.stream:
        await receiver.send(wire.Get(2, 1000), wire.Get(3, 1000))
        assert [event.seq for event in await receiver.events(2)] == seqs  # type: ignore[attr-defined]
        fault.write_text("EIO")
        # a parked get: the confirm's commit may wait a moment, long enough to see the close
        await receiver.send(wire.Get(4, -1), wire.Confirm(5, seqs[0], 0, 0))
        await receiver.stream.send_eof()
        with trio.fail_after(WAIT_S):
            while await receiver.stream.receive_some(65536):
                pass  # the server closes its side once it has detached the session
    async with connect(bus.address, queue="SENDER") as sender:  # committed after the confirm
        late = await sender.put(b"late", "ORDERS")
    assert late.delivery_status == Status.DQF_DEVICE_FAIL  # so the confirm's commit failed
    fault.write_text("")
    assert await take_in_order(bus.address, "ORDERS") == [
        (seqs[0], Status.POSSDUPL),
        (seqs[1], Status.POSSDUPL),
    ]


async def test_a_selective_get_parked_behind_a_deep_queue_gets_the_whole_message(
    make_bus,
) -> None:
    """With a thousand messages waiting, an arrival's body stays on disk (the queue
    keeps that many in memory); a parked selective get that it matches took it at
    once, body and all missing: the Delivery carried no body and the receiver's
    connection broke on it."""
    bus = make_bus(limits="dqf_messages_max = 5000")
    async with connect(bus.address, queue="SENDER") as sender:
        stored = await sender.put_many([PutItem(b"waiting", "ANYORDER") for _ in range(1000)])
        assert all(isinstance(psb, Psb) for psb in stored)
        receiver = await RawClient.attached(bus.address, "ANYORDER")
        async with receiver.stream:
            select = by_class_type(5).to_wire()
            await receiver.send(wire.Get(2, 10_000, select), wire.Ping(3))
            assert await receiver.events(1) == [wire.Pong(3)]  # the get is parked
            psb = await sender.put(b"class five", "ANYORDER", msg_class=5)
            (delivery,) = await receiver.events(1)
    assert isinstance(delivery, wire.Delivery)
    assert (delivery.seq, delivery.body) == (psb.seq, b"class five")
    assert delivery.delivery_status == Status.CONFIRMREQ


@pytest.mark.parametrize("mark", [b"\x01\x02", b"\xff\xff\xff\xff"], ids=["short", "huge"])
async def test_an_unreadable_delivery_mark_marks_its_message_and_loses_no_other(
    make_bus, mark: bytes
) -> None:
    """A damaged delivery mark (marks carry no checksum): one of the wrong length failed
    the get with SERVER_ERROR and took every message read back with it out of the queue
    until the next restart; a count near 2**32 failed every delivery of its message.
    The mark still says its message was handed out: that one comes POSSDUPL, the
    others as they were, and the damage is reported."""
    bus = make_bus()
    seqs = await put_all(bus.address, "ORDERS", 3)
    assert bus.process.terminate() == 0
    damaged = queue_key(10, seqs[1])  # ORDERS is queue 10
    write_raw(bus.data_dir / "journals", Journal.MARKS, damaged, mark)
    bus.start()
    assert await take_in_order(bus.address, "ORDERS") == [
        (seqs[0], Status.CONFIRMREQ),
        (seqs[1], Status.POSSDUPL),
        (seqs[2], Status.CONFIRMREQ),
    ]
    assert f"delivery mark {mark.hex()} of DQF message {seqs[1]} of queue 10" in bus.log_text()


@pytest.mark.parametrize(
    "extra",
    [{"resp_q": "ab"}, {"resp_q": [1]}, {"headers": [1, 2]}],
    ids=["resp_q-text", "resp_q-short", "headers-list"],
)
async def test_a_record_whose_extra_fields_cannot_be_an_entry_is_quarantined_alone(
    replay_bus, extra: dict
) -> None:
    """A DQF record (checksum sound) whose response queue or headers have the wrong
    shape: read back, it failed the get with SERVER_ERROR and dropped the messages read
    with it from the queue, or, a response queue of text, stopped the server once its
    MRS_ACK was sent at the confirm. It goes to the DLJ; the others are delivered."""
    records = [record(index, target_queue=11, priority=0) for index in range(3)]
    records[1].extra = extra
    bus = replay_bus({Journal.DQF: records})
    taken = await take_in_order(bus.address, "ANYORDER")
    assert taken == [(records[0].seq, Status.CONFIRMREQ), (records[2].seq, Status.CONFIRMREQ)]
    assert bus.process.terminate() == 0  # still serving, stopped cleanly
    assert journal_seqs(bus.data_dir / "journals", Journal.DLJ) == [records[1].seq]


async def test_a_get_pipelined_behind_a_failed_one_does_not_confirm_its_message(
    make_bus, tmp_path: Path
) -> None:
    """On a queue that confirms implicitly, two gets sent together: the first is handed
    the first message, and the second confirmed it before the first's delivery mark
    was committed. That commit failed (the first get answered JOURNAL_FAIL), so the
    message was never received, yet the confirm stood and the next get deleted it:
    lost. It must be what the next get receives, as a first delivery."""
    bus, fault = faulty_bus(make_bus, tmp_path)
    seqs = await put_all(bus.address, "IMPLICIT", 3)
    receiver = await RawClient.attached(bus.address, "IMPLICIT")
    async with receiver.stream:
        fault.write_text("EIO")
        await receiver.send(wire.Get(2, 1000), wire.Get(3, 1000))
        failed = await receiver.events(2)
        assert [event.status for event in failed] == [Status.JOURNAL_FAIL] * 2  # type: ignore[attr-defined]
        fault.write_text("")
        await receiver.send(wire.Get(4, 1000))
        (delivery,) = await receiver.events(1)
        assert isinstance(delivery, wire.Delivery)
        assert (delivery.seq, delivery.delivery_status) == (seqs[0], Status.CONFIRMREQ)
    assert await take_in_order(bus.address, "IMPLICIT") == [
        (seqs[0], Status.POSSDUPL),
        (seqs[1], Status.CONFIRMREQ),
        (seqs[2], Status.CONFIRMREQ),
    ]
