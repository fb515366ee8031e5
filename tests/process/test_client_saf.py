"""The client-side SAF journal with real server processes: attach while the server is
down (JOURNAL_ON), recoverable puts journaled on the client's disk, FIFO drain before
any new put once the server is up, LINK_UP, limits, one owner per journal."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from clients import (
    ConnectionLost,
    DeliveryMode,
    JournalBusy,
    JournalFull,
    NoMoreMessages,
    NotSupported,
    Status,
    Uma,
    connect,
    connect_sync,
)
from clients.saf_drain import CLIENT_SAF_SEQ_HEADER
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer

MODE = DeliveryMode


@pytest.fixture
def server(tmp_path):
    """Configured, not started: the tests start it when they want it up."""
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


async def receive_all(address: str, queue: str = "ORDERS", wait_s: float = 5.0) -> list:
    """Every message on an explicit in-order queue, confirming each (BADSEQ if a
    message came out of order)."""
    messages = []
    async with connect(address, queue) as receiver:
        while True:
            try:
                message = await receiver.get(timeout=wait_s if not messages else 1.0)
            except (NoMoreMessages, Exception) as error:  # noqa: BLE001 - TIMEOUT ends it
                if getattr(error, "status", None) in (Status.TIMEOUT, Status.NOMOREMSG):
                    return messages
                raise
            messages.append(message)
            await message.confirm()


async def test_attach_while_down_journals_then_drains_in_fifo(server, tmp_path) -> None:
    journal = tmp_path / "client.saf"
    events = []
    async with connect(
        server.address, "SENDER", saf_journal=journal, reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(events.append)
        assert client.attach_status == Status.JOURNAL_ON
        assert client.journal_status == Status.JOURNAL_ON
        psbs = [await client.put(b"m%d" % i, target="1.10", delivery=MODE.WF_DQF) for i in range(5)]
        assert {(psb.status, psb.delivery_status) for psb in psbs} == {
            (Status.JOURNAL_ON, Status.STORED)
        }
        assert [psb.seq for psb in psbs] == sorted(psb.seq for psb in psbs)
        assert client.journal_backlog == 5
        with pytest.raises(ConnectionLost) as refused:
            await client.put(b"memory", target="1.10", delivery=MODE.WF_MEM)
        assert refused.value.status == Status.LINK_DOWN
        with pytest.raises(ConnectionLost) as refused:
            await client.get(timeout=0)
        assert refused.value.status == Status.NOTACTIVE

        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
        assert client.journal_backlog == 0
        after = await client.put(b"after", target="1.10", delivery=MODE.WF_DQF)
        assert (after.status, after.delivery_status) == (Status.SUCCESS, Status.STORED)

    drained = [event for event in events if event.kind == "drained"]
    assert [event.local_seq for event in drained] == [psb.seq for psb in psbs]
    assert [event.kind for event in events if event.kind == "status"] == ["status"]
    assert events[-1].status == Status.LINK_UP
    messages = await receive_all(server.address)
    assert [m.body for m in messages] == [b"m0", b"m1", b"m2", b"m3", b"m4", b"after"]
    assert [m.headers[CLIENT_SAF_SEQ_HEADER] for m in messages[:5]] == [p.seq for p in psbs]
    assert [m.seq for m in messages[:5]] == [e.psb.seq for e in drained]


async def test_a_put_the_server_would_refuse_is_refused_not_journaled(server, tmp_path) -> None:
    """A journaled put's PSB says STORED; the server refusing it at drain time would
    lose it. So the client refuses what the server would, at once, journal or not."""
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        assert client.journal_status == Status.JOURNAL_ON
        with pytest.raises(NotSupported) as saf_with_saf:
            await client.put(b"a", target="1.10", delivery=MODE.WF_SAF, uma=Uma.SAF)
        assert saf_with_saf.value.status == Status.NOTSUPPORTED
        assert "UMA SAF is not supported with WF_SAF" in str(saf_with_saf.value)
        with pytest.raises(NotSupported) as no_uma:
            await client.put(b"b", target="1.10", delivery=MODE.WF_DQF, uma=0)
        assert no_uma.value.status == Status.BADUMA
        with pytest.raises(NotSupported):  # not journaled, and named before the link is
            await client.put(b"c", target="1.10", delivery=MODE.WF_MEM, uma=Uma.DLJ)
        assert client.journal_backlog == 0
        kept = await client.put(b"kept", target="1.10", delivery=MODE.WF_DQF, uma=Uma.DLJ)
        assert kept.status == Status.JOURNAL_ON
        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    assert [m.body for m in await receive_all(server.address)] == [b"kept"]


async def test_puts_during_the_drain_queue_behind_the_backlog(server, tmp_path) -> None:
    journal = tmp_path / "client.saf"
    async with connect(server.address, "SENDER", saf_journal=journal, reconnect=FAST) as client:
        for i in range(300):
            await client.put(b"old%d" % i, target="1.10", delivery=MODE.NN_DQF)
        server.start()
        with trio.fail_after(20):
            await client.wait_connected()
        new = [await client.put(b"new%d" % i, target="1.10") for i in range(20)]
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    assert new[0].status == Status.JOURNAL_ON  # the backlog was still draining
    bodies = [m.body for m in await receive_all(server.address)]
    assert bodies == [b"old%d" % i for i in range(300)] + [b"new%d" % i for i in range(20)]


async def test_ak_mode_still_acknowledges_after_the_drain(server, tmp_path) -> None:
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        psb = await client.put(b"ak", target="1.11", delivery=MODE.AK_DQF)
        assert psb.status == Status.JOURNAL_ON
        server.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
        ack = await client.get(timeout=10)
    assert ack.is_mrs_ack and ack.ack_psb().delivery_status == Status.STORED


async def test_connection_drop_turns_journaling_on(server, tmp_path) -> None:
    server.start()
    async with connect(server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST) as q:
        assert (q.attach_status, q.journal_status) == (Status.SUCCESS, Status.LINK_UP)
        await q.put(b"direct", target="1.10")
        server.kill()
        with trio.fail_after(10):
            await q.wait_journal_status(Status.JOURNAL_ON)
        psb = await q.put(b"journaled", target="1.10")
        assert psb.status == Status.JOURNAL_ON
        server.start()
        with trio.fail_after(20):
            await q.wait_journal_status(Status.LINK_UP)
    assert [m.body for m in await receive_all(server.address)] == [b"direct", b"journaled"]


async def test_one_process_owns_a_journal(server, tmp_path) -> None:
    journal = tmp_path / "j"
    async with connect(server.address, "SENDER", saf_journal=journal, connect_timeout_s=1):
        with pytest.raises(JournalBusy) as busy:
            async with connect(server.address, "SENDER2", saf_journal=journal):
                pass
    assert busy.value.status == Status.JOURNAL_FAIL
    assert "in use by another process" in str(busy.value)


async def test_a_full_journal_applies_the_uma(server, tmp_path) -> None:
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", saf_messages_max=2
    ) as client:
        for i in range(2):
            await client.put(b"%d" % i, target="1.10")
        with pytest.raises(JournalFull) as full:
            await client.put(b"dlj", target="1.10", uma=Uma.DLJ)
        assert full.value.status == Status.JOURNAL_FULL
        psb = await client.put(b"disc", target="1.10", uma=Uma.DISC)
        assert (psb.delivery_status, psb.uma_status) == (Status.JOURNAL_FULL, Status.DISC_SUCCESS)


def test_sync_client_journals_too(server, tmp_path) -> None:
    with connect_sync(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=1
    ) as client:
        assert client.attach_status == Status.JOURNAL_ON
        psb = client.put(b"sync", target="1.10")
        assert psb.status == Status.JOURNAL_ON
        server.start()
        client.wait_journal_status(Status.LINK_UP, timeout=20)
        assert client.journal_backlog == 0
    assert [m.body for m in trio.run(receive_all, server.address)] == [b"sync"]


async def test_status_shows_a_draining_client(server, tmp_path) -> None:
    some_drained = trio.Event()

    def progress(event) -> None:
        if event.kind == "drained":
            some_drained.set()

    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, connect_timeout_s=2
    ) as client:
        client.add_journal_listener(progress)
        async with trio.open_nursery() as nursery:
            for i in range(1000):
                nursery.start_soon(partial(client.put, b"%d" % i, "1.11", delivery=MODE.NN_DQF))
        server.start()
        with trio.fail_after(20):
            await some_drained.wait()
        async with connect(server.address, None) as observer:
            status = await observer.status()
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)
    [draining] = status["clients_draining"]
    assert draining["queue"] == "1.13" and draining["sent"] >= 1
    assert 0 < draining["backlog"] <= 1000


def test_mrs_dump_reads_a_client_journal(server, tmp_path) -> None:
    journal = tmp_path / "j"
    with connect_sync(server.address, "SENDER", saf_journal=journal, connect_timeout_s=1) as c:
        for i in range(3):
            c.put(b"body %d" % i, target="1.10", msg_class=7, delivery=MODE.WF_DQF)
    result = subprocess.run(
        [sys.executable, "-m", "mrs", "dump", "--client-saf", str(journal), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["seq"], r["class"], r["delivery"]) for r in records] == [
        (1, 7, "WF_DQF"),
        (2, 7, "WF_DQF"),
        (3, 7, "WF_DQF"),
    ]
    assert "3 records" in result.stderr


def test_mrs_dump_shows_the_name_a_client_journal_record_was_put_to(server, tmp_path) -> None:
    journal = tmp_path / "j"
    with connect_sync(server.address, "SENDER", saf_journal=journal, connect_timeout_s=1) as c:
        c.put(b"by name", target="ORDERS", delivery=MODE.WF_DQF)
        c.put(b"by number", target="1.10", delivery=MODE.WF_DQF)
    dump = [sys.executable, "-m", "mrs", "dump", "--client-saf", str(journal)]
    as_json = subprocess.run([*dump, "--json"], capture_output=True, text=True, timeout=60)
    assert as_json.returncode == 0, as_json.stderr
    targets = [json.loads(line)["target"] for line in as_json.stdout.splitlines()]
    assert targets == ["ORDERS", "1.10"]
    table = subprocess.run(dump, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines() if " WF_DQF" in line]
    assert [row[3] for row in rows] == ["ORDERS", "1.10"], table.stdout


def test_docs_example_drains_after_the_server_starts(server, tmp_path) -> None:
    example = Path(__file__).resolve().parents[2] / "docs" / "examples" / "client_saf.py"
    child = subprocess.Popen(
        [sys.executable, str(example), server.address, str(tmp_path / "client.saf")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        for line in child.stdout:
            lines.append(line.strip())
            if line.startswith("waiting for the server"):
                break
        server.start()
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    lines += out.splitlines()
    assert child.returncode == 0, err
    assert lines[0] == "attach status: JOURNAL_ON"
    assert "put -> JOURNAL_ON, STORED, client seq 1" in lines
    assert "journal status: LINK_UP" in lines
    assert [line for line in lines if line.startswith("got ")] == [
        f"got order {i}" for i in range(6)
    ]


async def journal_while_down(address: str, journal: Path, bodies: list[bytes]) -> None:
    """Attach with `journal` while the server is down and journal `bodies` to ORDERS."""
    async with connect(
        address, "SENDER", saf_journal=journal, reconnect=None, connect_timeout_s=1
    ) as client:
        for body in bodies:
            psb = await client.put(body, target="1.10", delivery=MODE.WF_DQF)
            assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)


async def test_a_copied_journal_loses_nothing(server, tmp_path) -> None:
    """A second process started on a copy of a journal counts the same local seqs as
    the original. Each copy's own messages are delivered (none refused KEY_REUSED
    under the other's key), and what was in the file when it was copied arrives once."""
    original, copy = tmp_path / "original.saf", tmp_path / "copy.saf"
    before = [b"before %d" % i for i in range(5)]
    mine, theirs = [b"original %d" % i for i in range(5)], [b"copy %d" % i for i in range(5)]
    await journal_while_down(server.address, original, before)
    shutil.copytree(original, copy)
    await journal_while_down(server.address, original, mine)
    await journal_while_down(server.address, copy, theirs)
    server.start()
    events = []
    for journal in (original, copy):
        async with connect(
            server.address, "SENDER", saf_journal=journal, reconnect=FAST, connect_timeout_s=2
        ) as client:
            client.add_journal_listener(events.append)
            with trio.fail_after(20):
                await client.wait_journal_status(Status.LINK_UP)
    assert [(e.local_seq, e.message) for e in events if e.kind == "rejected"] == []
    assert [m.body for m in await receive_all(server.address)] == before + mine + theirs


async def test_a_silent_server_counts_as_lost(server, tmp_path) -> None:
    """SIGSTOP: the server's socket stays open but nothing answers. The client's
    heartbeat notices, journals, and drains once the server runs again."""
    server.start()
    async with connect(
        server.address, "SENDER", saf_journal=tmp_path / "j", reconnect=FAST, heartbeat_s=0.2
    ) as client:
        assert client.journal_status == Status.LINK_UP
        server.process.process.send_signal(signal.SIGSTOP)
        try:
            with trio.fail_after(10):
                await client.wait_journal_status(Status.JOURNAL_ON)
            psb = await client.put(b"while stopped", target="1.10")
            assert psb.status == Status.JOURNAL_ON
        finally:
            server.process.process.send_signal(signal.SIGCONT)
        with trio.fail_after(30):
            await client.wait_journal_status(Status.LINK_UP)
    assert [m.body for m in await receive_all(server.address)] == [b"while stopped"]
