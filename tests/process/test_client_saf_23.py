"""Probes of the client SAF journal as an application developer relies on it while its
group is down, with a real `mrs serve` and real LMDB files: a journaled put is
answered STORED, so a drained put that the group answers without keeping the message
anywhere (its DQF full or missing, and its UMA failed too) must not leave the journal
as "drained" in silence."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from clients import (
    ConnectionLost,
    DeliveryMode,
    JournalEvent,
    MrsError,
    PutOutcomeUnknown,
    Status,
    Uma,
    connect,
    saf_drain,
)
from sim.ports import free_port
from sim.processes import GroupProcess, write_single_group_config
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer
from tests.conftest import STANDARD_QUEUES

NO_DQF_QUEUE = """
[[group.queue]]
id = 20
name = "NODQF"
recoverable = false
"""


class SmallDqfServer:
    """Group 1 on a fixed port (the standard queues and NODQF, a queue with no DQF),
    whose DQF holds at most two messages; not started."""

    def __init__(self, directory: Path) -> None:
        port = free_port()
        path = write_single_group_config(
            directory, queues=STANDARD_QUEUES + NO_DQF_QUEUE, limits="dqf_messages_max = 2"
        )
        path.write_text(path.read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}"))
        self.process = GroupProcess(path, 1)
        self.address = f"127.0.0.1:{port}"

    def start(self) -> None:
        assert self.process.start() == self.address

    def stop(self) -> None:
        if self.process.running:
            self.process.terminate()


@pytest.fixture
def server(tmp_path):
    server = SmallDqfServer(tmp_path / "bus")
    yield server
    server.stop()


class _Heard(logging.Handler):
    """Sets `event` when the client logs a line holding `words` (on trio's thread: the
    drain logs from its own callbacks)."""

    def __init__(self, words: str, event: trio.Event) -> None:
        super().__init__(logging.WARNING)
        self.words = words
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.event.set()


async def _receive(address: str, count: int) -> list[bytes]:
    """`count` bodies from ORDERS, in order, each confirmed (or fewer: the first
    waited for 10 s, each next one for 2 s)."""
    bodies: list[bytes] = []
    async with connect(address, "ORDERS") as receiver:
        for _ in range(count):
            try:
                message = await receiver.get(timeout=2 if bodies else 10)
            except MrsError:
                break
            bodies.append(message.body)
            await message.confirm()
    return bodies


async def test_a_drained_put_the_full_dqf_refused_is_kept_not_lost(server, tmp_path) -> None:
    """ORDERS's DQF is full when two journaled WF_DQF puts (UMA SAF) drain: the group
    answers each DQF_FULL / SAF_FAILED, so it holds them nowhere. Before, the client
    took that answer for "stored", deleted both records (a "drained" event, no log
    line) and they were lost, though each put had been answered STORED. Now they stay
    in the journal (JOURNAL_ON, a WARNING) and are sent again until the DQF has room:
    the receiver gets all four, in order, and the journal then reaches LINK_UP."""
    server.start()
    async with connect(server.address, "SENDER") as filler:
        for body in (b"f0", b"f1"):
            await filler.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
    server.stop()
    answered = trio.Event()
    handler = _Heard("not kept", answered)
    logging.getLogger("clients").addHandler(handler)
    try:
        async with connect(
            server.address,
            "SENDER",
            saf_journal=tmp_path / "j",
            reconnect=FAST,
            connect_timeout_s=2,
        ) as client:
            client.add_journal_listener(lambda event: answered.set())  # drained (before)
            for body in (b"m0", b"m1"):
                psb = await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
                assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
            server.start()
            with trio.fail_after(20):
                await answered.wait()
            assert client.journal_status == Status.JOURNAL_ON
            assert client.journal_backlog == 2
            assert await _receive(server.address, 4) == [b"f0", b"f1", b"m0", b"m1"]
            with trio.fail_after(20):
                await client.wait_journal_status(Status.LINK_UP)
            assert client.journal_backlog == 0
    finally:
        logging.getLogger("clients").removeHandler(handler)


async def test_a_drained_put_to_a_queue_with_no_dqf_is_a_rejection(server, tmp_path) -> None:
    """A journaled put to a queue with no DQF (`recoverable = false`), UMA SAF: the
    group answers NO_DQF / SAF_FAILED and keeps it nowhere, and waiting cannot heal
    that. Before, it was a "drained" event and no log line; now it is refused for
    good as the group's other refusals are (a WARNING and a "rejected" event with
    NO_DQF), and the journal goes on to LINK_UP."""
    events: list[JournalEvent] = []
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(events.append)
        lost = await client.put(b"x", "NODQF", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
        kept = await client.put(b"m0", "ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    outcome = {event.local_seq: event for event in events if event.kind != "status"}
    assert outcome[lost.seq].kind == "rejected"
    assert outcome[lost.seq].status == Status.NO_DQF
    assert "SAF_FAILED" in outcome[lost.seq].message
    assert outcome[kept.seq].kind == "drained"
    assert await _receive(server.address, 1) == [b"m0"]


async def test_puts_during_a_full_dqf_do_not_resend_the_backlog(
    server, tmp_path, monkeypatch
) -> None:
    """While ORDERS's DQF is full, records the group did not keep wait for their
    pause (1 s) before they are sent again, and nothing newer is sent meanwhile: a
    producer that goes on putting (each put journaled, each waking the drain) does
    not make the client send its whole backlog again for every put, which would be
    the backlog's size in refused puts per put. The group counts the drained puts it
    received (`clients_draining`, `mrs status`); the pause is made a minute long here,
    so that every put falls inside it."""
    monkeypatch.setattr(saf_drain, "CLIENT_SAF_DELETE_RETRY_S", 60.0)
    server.start()
    async with connect(server.address, "SENDER") as filler:
        for body in (b"f0", b"f1"):
            await filler.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
    server.stop()
    answered = trio.Event()
    handler = _Heard("not kept", answered)
    logging.getLogger("clients").addHandler(handler)
    try:
        async with connect(
            server.address,
            "SENDER",
            saf_journal=tmp_path / "j",
            reconnect=FAST,
            connect_timeout_s=2,
        ) as client:
            for n in range(20):
                await client.put(b"m%d" % n, "ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF)
            server.start()
            with trio.fail_after(20):
                await answered.wait()
            for n in range(20, 50):
                psb = await client.put(
                    b"m%d" % n, "ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.SAF
                )
                assert psb.status == Status.JOURNAL_ON
            async with connect(server.address, None) as observer:
                [draining] = (await observer.status())["clients_draining"]
            assert draining["sent"] == 20  # each once; before, 41 to 67 here
            assert client.journal_backlog == 50
    finally:
        logging.getLogger("clients").removeHandler(handler)


async def test_a_put_the_drop_left_unsent_is_journaled(tmp_path) -> None:
    """A journaling client whose server dies while many recoverable puts wait in its
    outbox (more than OUTBOX_BYTES_HIGH): those were never sent, so the library can
    journal them as it journals a put made a moment later. Before, each raised
    ConnectionLost "the request was not sent" (270 of 400 here), though the docs
    promise that a client with a SAF journal journals its recoverable puts while
    the server is down; only a put sent and not answered may raise
    (PutOutcomeUnknown). Every put answered is then delivered."""
    server = FixedPortServer(tmp_path / "bus")
    server.start()
    answered: dict[int, str] = {}
    first = trio.Event()
    try:
        async with connect(
            server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST
        ) as client:

            async def put(n: int) -> None:
                try:
                    psb = await client.put(
                        b"%06d" % n + bytes(65536), "ORDERS", delivery=DeliveryMode.WF_DQF
                    )
                    answered[n] = psb.status.name
                except PutOutcomeUnknown:
                    answered[n] = "unknown"
                except ConnectionLost as lost:
                    answered[n] = f"raised {lost.message}"
                first.set()

            async with trio.open_nursery() as nursery:
                for n in range(400):
                    nursery.start_soon(put, n)
                await first.wait()
                server.kill()
            raised = {n: how for n, how in answered.items() if how.startswith("raised")}
            assert raised == {}
            assert "JOURNAL_ON" in answered.values()  # some did wait in the outbox
            server.start()
            with trio.fail_after(30):
                await client.wait_journal_status(Status.LINK_UP)
        stored = {n for n, how in answered.items() if how in ("SUCCESS", "JOURNAL_ON")}
        got = {int(body[:6]) for body in await _receive(server.address, 400)}
        assert stored <= got
    finally:
        server.stop()
