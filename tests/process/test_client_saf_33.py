"""Probes of the client SAF journal with real processes (thirty-third session): a
drain that re-sends WF_CONF records its group stored already, and a journal one of
whose files cannot be opened.

What must hold: a drain ends once its group holds every record (not when a receiver
confirms them), each message arrives once, and a journal that cannot be opened is
one MrsError line, not a bare OSError.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, JournalFailed, Status, connect
from sim.bus import LinkedBus
from tests.client_helpers import FAST_RECONNECT, FixedPortServer, take_all
from tests.process.test_links import wait_for_link

QUEUES = """
[[group.queue]]
id = 20
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 21
name = "SENDER"
"""
TARGETS = ("1.20", "2.20")
"""A queue of the group the journal drains into, and one of the group linked to it."""


@pytest.fixture
def linked(tmp_path: Path) -> Iterator[LinkedBus]:
    """Groups 1 and 2, linked directly; configured, not started."""
    bus = LinkedBus(tmp_path / "bus", queues=QUEUES, direct=True)
    yield bus
    bus.stop()


async def journal_while_down(address: str, journal: Path, bodies: list[bytes]) -> None:
    async with connect(address, "SENDER", saf_journal=journal, connect_timeout_s=0.3) as client:
        for index, body in enumerate(bodies):
            target = TARGETS[index % len(TARGETS)]
            psb = await client.put(body, target, delivery=DeliveryMode.WF_CONF)
            assert psb.status == Status.JOURNAL_ON, psb


async def test_a_drain_that_resends_stored_wf_conf_records_ends_before_their_confirm(
    linked: LinkedBus, tmp_path: Path
) -> None:
    """WF_CONF records the group stored already (here: by the drain of a copy of the
    journal; after a SIGKILL of the client or the server mid-drain, the same) are
    sent again under their keys. The drain asks to hear when each is stored, and it
    is: it reaches LINK_UP at once. Before, the group held each answer until the
    receiver confirmed the first copy, to a queue of its own or of a linked group:
    the drain stayed JOURNAL_ON (new puts journaled behind it), dropping the
    connection at every reply deadline and sending them all again."""
    original, copy = tmp_path / "original.saf", tmp_path / "copy.saf"
    address = f"127.0.0.1:{linked.ports[1]}"
    bodies = [b"wf_conf %d" % index for index in range(4)]
    await journal_while_down(address, original, bodies)
    shutil.copytree(original, copy)
    await trio.to_thread.run_sync(linked.start)
    await wait_for_link(linked, 1, 2)
    for journal in (original, copy):
        async with connect(
            address, "SENDER", saf_journal=journal, reconnect=FAST_RECONNECT
        ) as client:
            with trio.fail_after(15):  # the drained put's reply deadline is 35 s
                await client.wait_journal_status(Status.LINK_UP)

    received = []
    for group in (1, 2):
        async with linked.connect(group, "IN") as receiver:
            for _ in range(len(bodies) // 2):
                message = await receiver.get(timeout=10)
                await message.confirm()
                received.append(message.body)
            received += [message.body for message in await take_all(receiver)]
    assert sorted(received) == bodies, "a message lost or delivered twice"


def test_a_journal_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    """A journal whose owner's lock file cannot be opened (another user's, a file
    system gone read-only; here a directory in its place) is refused with
    JournalFailed naming the journal, as any other journal file that cannot be
    opened is. Before, connect raised the bare OSError of the commit log's restore."""
    journal = tmp_path / "client.saf"

    async def attach() -> None:
        async with connect("127.0.0.1:1", "SENDER", saf_journal=journal, connect_timeout_s=0.3):
            pass

    trio.run(attach)  # a journal that exists: its commit log is restored at attach
    (journal / "writer.lock").unlink()
    (journal / "writer.lock").mkdir()
    with pytest.raises(JournalFailed) as refused:
        trio.run(attach)
    assert refused.value.status == Status.JOURNAL_FAIL
    assert f"client SAF journal {journal} cannot be opened: Is a directory" in str(refused.value)


async def test_a_client_attached_to_no_queue_leaves_an_earlier_runs_records(
    tmp_path: Path,
) -> None:
    """A program that opened a producer's journal attached to no queue (to look at
    it) sent its backlog: the group refused each put NOTATTACHED, and every record
    was moved aside to the refused ones, to be redriven by hand. The records now stay
    in the journal, and the next client attached to a queue drains them."""
    server = FixedPortServer(tmp_path / "bus")
    journal = tmp_path / "client.saf"
    said = _Said("attached to no queue, so they are not sent")
    logging.getLogger("clients").addHandler(said)
    try:
        async with connect(
            server.address, "SENDER", saf_journal=journal, connect_timeout_s=0.3
        ) as producer:
            for number in range(3):
                psb = await producer.put(b"m%d" % number, "1.10", delivery=DeliveryMode.WF_DQF)
                assert psb.status == Status.JOURNAL_ON, psb
        server.start()
        async with connect(server.address, None, saf_journal=journal) as looker:
            with trio.fail_after(10):
                await said.event.wait()
            await looker.status()  # a round trip behind any put the drain sent
            assert (looker.journal_backlog, looker.refused_records()) == (3, [])
        async with connect(server.address, "SENDER", saf_journal=journal) as sender:
            with trio.fail_after(20):
                await sender.wait_journal_status(Status.LINK_UP)
        async with connect(server.address, "ORDERS") as receiver:
            bodies = [message.body for message in await take_all(receiver)]
        assert bodies == [b"m0", b"m1", b"m2"]
    finally:
        logging.getLogger("clients").removeHandler(said)
        server.stop()


class _Said(logging.Handler):
    """Sets `event` when the client library logs a line holding `words` (in the task
    that logs it: trio's thread)."""

    def __init__(self, words: str) -> None:
        super().__init__(logging.WARNING)
        self.words = words
        self.event = trio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()
