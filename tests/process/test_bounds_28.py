"""Bounds against peers that ask and never read, probed on real `mrs serve` processes
(real TCP, real LMDB files, the server's RSS from /proc): what a server holds for a
client or a peer group that stops reading stays near a bound in bytes, whatever its
requests (or the puts for it) would bring, and the clients that read are served as
usual beside it."""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import trio

from clients import DeliveryMode, PutItem, Status, Uma, connect
from mrs import protocol as wire
from mrs.limits import JOURNALED_BODIES_BYTES_MAX, LINK_DIRECT_BYTES_MAX, OUTBOX_BYTES_HIGH
from sim.bus import LinkedBus
from tests.conftest import STANDARD_QUEUES
from tests.process.test_flood_limits import _address, _peak_rss_mib, _requests, _rss_mib
from tests.process.test_links import link_state, wait_for_link

MIB = 1024 * 1024
BIG_QUEUE = (
    STANDARD_QUEUES
    + """
[[group.queue]]
id = 20
name = "BIG"
confirm = "explicit-out-of-order"
"""
)
"""A queue with the default unconfirmed_max (1,000): a reader may hold 1,000 messages."""
BODY = b"B" * 1_000_000
BACKLOG = 200
"""Journaled 1 MB messages waiting: 200 MB on disk, at most 64 MiB of them in memory."""


def _lazy_reader(address: str, requests: list) -> socket.socket:
    """A connection with a tiny receive buffer that sends `requests` after its Hello
    and never reads a byte."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(_address(address))
    sock.sendall(_requests(*requests))
    return sock


async def test_gets_of_journaled_messages_never_read_are_bounded(make_bus) -> None:
    """A client attaches to a queue of 200 journaled 1 MB messages, sends 3,000 batch
    gets in one write and reads nothing. The server stopped reading a connection once
    its unsent answers passed OUTBOX_BYTES_HIGH, but a journaled message's delivery
    joins the outbox only after its mark's commit: in one pass the server read every
    message back from disk and encoded it (VmHWM +1 GB for 600 messages, another
    client's answer 0.56 s late). Deliveries waiting for their mark now count as
    unsent: the server hands the lazy client about 8 MiB, the rest stays on disk."""
    bus = make_bus(queues=BIG_QUEUE, limits="journal_bytes_max = 1073741824")
    pid = bus.process.process.pid
    async with connect(bus.address, "SENDER") as sender:
        for _ in range(BACKLOG):
            await sender.put(BODY, target="BIG", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
    before_mib = _peak_rss_mib(pid)
    gets = [wire.GetBatch(request_id, 1000, 0) for request_id in range(2, 3002)]
    with _lazy_reader(bus.address, [wire.Attach(1, "BIG"), *gets]):
        async with connect(bus.address, "ANYORDER") as honest:
            slowest_s = 0.0
            for round_ in range(100):  # answered after the lazy client's pass, if not within
                started_s = trio.current_time()
                psb = await honest.put(
                    b"%d" % round_, target="ANYORDER", delivery=DeliveryMode.WF_MEM
                )
                message = await honest.get(timeout=5)
                assert message.seq == psb.seq
                slowest_s = max(slowest_s, trio.current_time() - started_s)
            grown_mib = _peak_rss_mib(pid) - before_mib
            pending = (await honest.pending(["BIG"]))[0]
    assert grown_mib < 64, (
        f"server peak RSS grew {grown_mib:.0f} MiB for a client that reads nothing"
    )
    assert slowest_s < 2.0, slowest_s
    handed = BACKLOG - pending  # unconfirmed ones are not pending
    assert handed <= 2 * OUTBOX_BYTES_HIGH // len(BODY), (
        f"{handed} handed to a client that reads nothing"
    )
    assert bus.process.running


LINK_QUEUES = """
[[group.queue]]
id = 10
name = "IN"
messages_max = 100000
[[group.queue]]
id = 11
name = "OUT"
"""
LINK_BODY = b"L" * 100_000
LINK_PUTS = 2000
"""200 MB for a peer group that reads nothing: three times LINK_DIRECT_BYTES_MAX."""


async def _arrived(linked: LinkedBus, group_id: int, queue: str, count: int) -> None:
    """Return once `count` messages wait on `queue` of the group (another process:
    no event to await, so its count is polled)."""
    async with linked.connect(group_id, None) as client:
        with trio.fail_after(60):
            while (await client.pending([queue]))[0] < count:
                await trio.sleep(0.1)


async def test_a_stopped_peer_group_holds_a_bounded_share_of_the_senders_memory(
    tmp_path: Path,
) -> None:
    """Group 2 is stopped (SIGSTOP: its link stays up until its heartbeats are missed)
    while group 1's clients put 2,000 recoverable 100 KB messages for it. Messages
    waiting for the link's window were bounded by count only (10,000): all 2,000
    waited in group 1's memory, +200 MiB (10 GB at 1 MiB each). Now they stop at
    LINK_DIRECT_BYTES_MAX and the rest go to the SAF on disk; once group 2 runs again
    every message reaches it."""
    linked = LinkedBus(
        tmp_path / "bus", queues=LINK_QUEUES, direct=True, limits="journal_bytes_max = 1073741824"
    )
    try:
        await trio.to_thread.run_sync(linked.start)
        await wait_for_link(linked, 1, 2)
        sender_pid = linked.processes[1].process.pid
        before_mib = _rss_mib(sender_pid)
        os.kill(linked.processes[2].process.pid, signal.SIGSTOP)
        items = [
            PutItem(LINK_BODY, "2.10", delivery=DeliveryMode.AK_DQF, uma=Uma.SAF)
            for _ in range(LINK_PUTS)
        ]
        async with linked.connect(1, "OUT") as sender:
            for start in range(0, LINK_PUTS, 100):
                results = await sender.put_many(items[start : start + 100])
                assert all(hasattr(result, "seq") for result in results), results[:3]
        link = await link_state(linked, 1, 2)
        grown_mib = _rss_mib(sender_pid) - before_mib
        os.kill(linked.processes[2].process.pid, signal.SIGCONT)
        await _arrived(linked, 2, "2.10", LINK_PUTS)
    finally:
        linked.stop()
    assert link["state"] == "up", link  # not yet lost: the bound is what held
    assert link["queued"] <= LINK_DIRECT_BYTES_MAX // len(LINK_BODY) + 1, link
    assert link["saf_backlog"] > 0, link
    assert grown_mib < 140, f"group 1 grew {grown_mib:.0f} MiB for a peer that reads nothing"


async def test_messages_a_reader_left_unconfirmed_go_back_to_disk(make_mem_bus) -> None:
    """A reader gets 200 journaled 1 MB messages and leaves without confirming them:
    they wait again for the next reader (POSSDUPL). They came back with the bodies
    read for it, past JOURNALED_BODIES_BYTES_MAX, and the queue kept them all in
    memory until got again (200 MB; 1 GB for the default unconfirmed_max of 1,000
    messages of message_bytes_max). Now the bodies beyond it go back to disk. In
    process (the queue's own entries counted): the server's RSS keeps memory its
    allocator was given back, so it cannot tell a kept body from a freed one."""
    bus = await make_mem_bus(queues=BIG_QUEUE, limits="journal_bytes_max = 1073741824")
    async with bus.connect("SENDER") as sender:
        for _ in range(BACKLOG):
            await sender.put(BODY, target="BIG", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
    async with bus.connect("BIG") as reader:
        got = 0
        while got < BACKLOG:
            got += len(await reader.get_many(1000, timeout=5))
    async with bus.connect(None) as client:
        while (await client.pending(["BIG"]))[0] < BACKLOG:  # the reader's leave seen
            await trio.sleep(0.05)
    group = bus.memory.groups[1].server.group
    assert group is not None
    (queue,) = [q for q in group.queues.values() if q.address.queue == 20]
    kept_bytes = sum(len(entry.body) for entry in queue.pending if entry.body is not None)
    assert kept_bytes <= JOURNALED_BODIES_BYTES_MAX, f"{kept_bytes / MIB:.0f} MiB kept"
    assert queue.journaled_body_bytes == kept_bytes
    async with bus.connect("BIG") as next_reader:  # read back from disk, intact
        message = await next_reader.get(timeout=5)
        assert message.body == BODY and message.delivery_status == Status.POSSDUPL
