"""The group's delivery state: what a server keeps for messages a reader holds, and
what a dead letter becomes when an operator moves it off a memory-only DLQ.

Probed on real `mrs serve` processes (the server's RSS from /proc, a SIGKILL and a
restart) and, where the queue's own entries are counted, in process."""

from __future__ import annotations

import shutil

from clients import DeliveryMode, ForceJrn, Status, Uma, connect
from journals import Journal, seq_key
from tests.conftest import STANDARD_QUEUES
from tests.process.test_flood_limits import _peak_rss_mib, _rss_mib

HELD = 1500
"""Journaled 1 MB messages a reader gets one by one and holds: 1.5 GB, 1,000 waiting
in the queue's window (64 MiB of their bodies in memory) and the rest on disk only."""
BODY = b"H" * 1_000_000
HOLDING_QUEUE = (
    STANDARD_QUEUES
    + f"""
[[group.queue]]
id = 20
name = "BIG"
confirm = "explicit-out-of-order"
unconfirmed_max = {HELD}
"""
)


async def _held(bus, count: int) -> None:
    """`count` WF_DQF 1 MB messages put to BIG of `bus` (a process's or in process)."""
    async with bus.connect("SENDER") as sender:
        for _ in range(count):
            psb = await sender.put(BODY, target="BIG", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED


async def test_bodies_a_reader_holds_unconfirmed_leave_the_servers_memory(make_bus) -> None:
    """A reader gets 1,500 journaled 1 MB messages one get at a time and confirms
    none. Every body it was handed stayed in the server's memory until its confirm
    (RSS +1.9 GB for 2,000 held); and each refill of the queue's window read ~500
    records from disk in one pass, bodies and all, to keep 64 MiB of them (peak RSS
    +1.4 GB with the held bodies gone). Now a body goes back to disk once its Delivery
    is sent, and a refill reads 64 records at a time, dropping what it does not keep
    as it goes: RSS +0.1 GB (LMDB's pages), peak +0.3 GB. The reader that comes after
    the first one left gets them POSSDUPL, intact."""
    bus = make_bus(queues=HOLDING_QUEUE, limits="journal_bytes_max = 4294967296")
    pid = bus.process.process.pid
    await _held(bus, HELD)
    before_mib, peak_before_mib = _rss_mib(pid), _peak_rss_mib(pid)
    async with bus.connect("BIG") as reader:
        for _ in range(HELD):
            message = await reader.get(timeout=5)
            assert message.body == BODY and message.delivery_status == Status.CONFIRMREQ
        grown_mib = _rss_mib(pid) - before_mib
        peak_grown_mib = _peak_rss_mib(pid) - peak_before_mib
    assert grown_mib < 300, f"the server grew {grown_mib:.0f} MiB for {HELD} MB held"
    assert peak_grown_mib < 800, f"the server's peak grew {peak_grown_mib:.0f} MiB"
    async with bus.connect("BIG") as next_reader:
        for _ in range(3):
            message = await next_reader.get(timeout=5)
            assert message.body == BODY and message.delivery_status == Status.POSSDUPL
            await next_reader.confirm(message.seq)
    assert bus.process.terminate() == 0
    shutil.rmtree(bus.data_dir)  # 1.5 GB of journal, not left to pytest's kept tmp dirs


async def test_a_held_message_is_journaled_whole_at_its_confirm(make_mem_bus) -> None:
    """The bodies held by a reader are on disk only (the queue's entries counted, in
    process: an RSS cannot tell a kept body from memory its allocator kept), and
    each confirm that journals to the PCJ writes the message's body read back, the
    audit trail `mrs jplay pcj` resends from."""
    bus = await make_mem_bus(queues=HOLDING_QUEUE, limits="journal_bytes_max = 1073741824")
    await _held(bus, 5)
    async with bus.connect("BIG") as reader:
        got = [await reader.get(timeout=5) for _ in range(5)]
        group = bus.memory.groups[1].server.group
        assert group is not None
        (queue,) = [q for q in group.queues.values() if q.address.queue == 20]
        kept = [entry.seq for entry in queue.unconfirmed.values() if entry.body is not None]
        assert kept == [], f"{len(kept)} bodies of held messages kept in memory"
        for message in got:
            await reader.confirm(message.seq, force_j=ForceJrn.FORCE_JRN)
    for message in got:
        record = bus.store.get(Journal.PCJ, seq_key(message.seq))
        assert record is not None and record.body == BODY


DLQ_QUEUES = (
    STANDARD_QUEUES
    + """
[[group.queue]]
id = 21
name = "NODQF"
recoverable = false
"""
)


async def test_a_dead_letter_moved_to_a_recoverable_queue_is_stored_there(make_bus) -> None:
    """A WF_DQF put to a queue without a DQF, UMA DLQ, waits on the memory-only DLQ
    (forced status SUCCESS, no confirm: on the DLQ itself a get is a lease). An
    operator moves it to ANYORDER, a recoverable queue. It kept that status and its
    memory: delivered SUCCESS, gone once handed out, and at a restart. Now the move
    stores it in ANYORDER's DQF: CONFIRMREQ, kept across a SIGKILL after its reader
    got it (then POSSDUPL) with its dead-letter header, gone once confirmed."""
    bus = make_bus(queues=DLQ_QUEUES)
    async with bus.connect("SENDER") as sender:
        psb = await sender.put(
            b"letter", target="NODQF", delivery=DeliveryMode.WF_DQF, uma=Uma.DLQ
        )
        assert psb.uma_status == Status.DLQ_SUCCESS
        moved = await sender.admin("move", queue="DLQ", to="ANYORDER")
        assert moved["moved"] == 1, moved
    async with bus.connect("ANYORDER") as reader:
        message = await reader.get(timeout=5)
        assert message.delivery_status == Status.CONFIRMREQ
    bus.restart()  # SIGKILL
    async with connect(bus.address, "ANYORDER") as reader:
        message = await reader.get(timeout=5)
        assert message.body == b"letter" and message.delivery_status == Status.POSSDUPL
        assert message.dead_letter_header is not None
        assert message.dead_letter_header["mrs_status"] == int(Status.NO_DQF)
        await reader.confirm(message.seq)
    bus.restart()
    async with connect(bus.address, None) as client:
        assert await client.pending(["ANYORDER"]) == [0]
