"""Probes of the client SAF journal as an application developer who "must not lose a
message" relies on it, with real `mrs serve` processes, real credentials files and
real LMDB journals.

A put journaled while the group was down was answered STORED. When its right to put
is taken away before it drains, the group refuses it NOTAUTHORIZED; before, the
client deleted the record (a WARNING and a "rejected" event only): the message was
gone, and when the right came back there was nothing left to send.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, JournalEvent, MrsError, Status, connect
from tests.auth_helpers import SecureBus, creds, mrs
from tests.client_helpers import FAST_RECONNECT as FAST

PRODUCER_GRANTS = ["--attach", "1.13", "--put", "1.10", "--put", "1.11"]
WITHOUT_IN = ["--attach", "1.13", "--put", "1.11"]


@pytest.fixture
def bus(tmp_path):
    """Group 1 with [auth], not started: `producer` may put to 1.10 and 1.11."""
    bus = SecureBus(tmp_path / "bus", group_ids=(1,))
    mrs("creds", "grant", "producer", "--config", str(bus.config_path), *PRODUCER_GRANTS)
    yield bus
    bus.stop()


def _address(bus: SecureBus) -> str:
    return f"127.0.0.1:{bus.ports[1]}"


async def _receive(address: str, who: str, queue: str, count: int) -> list[bytes]:
    """`count` bodies from `queue` as `who`, in order, each confirmed (fewer if none
    comes within 10 s)."""
    bodies: list[bytes] = []
    async with connect(address, queue, credentials=creds(who)) as receiver:
        for _ in range(count):
            try:
                message = await receiver.get(timeout=10)
            except MrsError:
                break
            bodies.append(message.body)
            await message.confirm()
    return bodies


async def _drained(client, events: list[JournalEvent], seqs: set[int]) -> None:
    """Return once the records of `seqs` drained (their "drained" events came)."""
    heard = trio.Event()

    def listen(event: JournalEvent) -> None:
        if seqs <= {e.local_seq for e in events if e.kind == "drained"}:
            heard.set()

    client.add_journal_listener(listen)
    listen(JournalEvent("status", Status.SUCCESS))
    await heard.wait()


def _regrant(bus: SecureBus, grants: list[str]) -> None:
    mrs("creds", "grant", "producer", "--config", str(bus.config_path), *grants)


async def _journal_four(client, events: list[JournalEvent]) -> list[int]:
    """Four journaled puts, alternating 1.10 and 1.11: their client seqs."""
    client.add_journal_listener(events.append)
    seqs = []
    for n, target in enumerate(["1.10", "1.11", "1.10", "1.11"]):
        psb = await client.put(b"m%d" % n, target, delivery=DeliveryMode.WF_DQF)
        assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)
        seqs.append(psb.seq)
    return seqs


async def test_a_drained_put_refused_notauthorized_is_kept_and_redriven(bus, tmp_path) -> None:
    """The put right to 1.10 is taken away while four puts wait in the journal. The
    two to 1.11 drain (a refused record holds up nothing: LINK_UP), the two to 1.10
    are refused NOTAUTHORIZED and kept aside, named by `journal_refused`,
    `refused_records()` and a "rejected" event. The right given back,
    `redrive_refused()` sends them again and the receiver on 1.10 gets both, in order."""
    events: list[JournalEvent] = []
    async with connect(
        _address(bus), "1.13", credentials=creds("producer"), saf_journal=tmp_path / "j",
        reconnect=FAST, connect_timeout_s=2,
    ) as client:  # fmt: skip
        seqs = await _journal_four(client, events)
        _regrant(bus, WITHOUT_IN)
        bus.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
        rejected = [(e.local_seq, e.status) for e in events if e.kind == "rejected"]
        assert rejected == [(seqs[0], Status.NOTAUTHORIZED), (seqs[2], Status.NOTAUTHORIZED)]
        assert (client.journal_backlog, client.journal_refused) == (0, 2)
        refused = client.refused_records()
        assert [(r.local_seq, r.target, r.body, r.status) for r in refused] == [
            (seqs[0], "1.10", b"m0", Status.NOTAUTHORIZED),
            (seqs[2], "1.10", b"m2", Status.NOTAUTHORIZED),
        ]
        assert "not granted" in refused[0].message
        assert await _receive(_address(bus), "thief", "1.11", 2) == [b"m1", b"m3"]
        _regrant(bus, PRODUCER_GRANTS)
        async with connect(_address(bus), None, credentials=creds("ops")):
            pass  # a new connection makes the group read the credentials file now
        moved = await client.redrive_refused()
        assert sorted(moved) == [seqs[0], seqs[2]]
        assert client.journal_refused == 0
        with trio.fail_after(20):
            await _drained(client, events, set(moved.values()))
    assert await _receive(_address(bus), "consumer", "1.10", 2) == [b"m0", b"m2"]


def _dump_refused(journal: Path) -> list[dict]:
    """`mrs dump dlj --client-saf PATH --json`: the records kept aside as refused."""
    done = subprocess.run(
        [sys.executable, "-m", "mrs", "dump", "dlj", "--client-saf", str(journal), "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


async def test_refused_records_outlive_the_client_and_are_dropped_on_purpose_only(
    bus, tmp_path, caplog
) -> None:
    """A refused record stays in the journal file across a restart of the client: the
    next attach says so in the log, `journal_refused` counts it (the blocking client
    too), `mrs dump dlj --client-saf` lists it with its status, and it leaves only when
    the application drops it (`discard_refused`)."""
    journal = tmp_path / "j"
    _regrant(bus, WITHOUT_IN)
    async with connect(
        _address(bus), "1.13", credentials=creds("producer"), saf_journal=journal,
        reconnect=FAST, connect_timeout_s=2,
    ) as client:  # fmt: skip
        refused = await client.put(b"lost?", "1.10", delivery=DeliveryMode.WF_DQF)
        await client.put(b"kept", "1.11", delivery=DeliveryMode.WF_DQF)
        bus.start()
        with trio.fail_after(20):
            await client.wait_journal_status(Status.LINK_UP)
    [record] = _dump_refused(journal)
    assert (record["seq"], record["reason_name"]) == (refused.seq, "NOTAUTHORIZED")
    caplog.clear()

    def reopen() -> tuple[int, int, list[int]]:
        from clients import connect_sync

        with connect_sync(
            _address(bus), "1.13", credentials=creds("producer"), saf_journal=journal
        ) as again:
            count = again.journal_refused
            seqs = [r.local_seq for r in again.refused_records()]
            return count, again.discard_refused(seqs), seqs

    count, dropped, seqs = await trio.to_thread.run_sync(reopen)
    assert (count, dropped, seqs) == (1, 1, [refused.seq])
    assert "holds 1 record(s) the group refused" in caplog.text
    assert "discarded by the application" in caplog.text
    assert _dump_refused(journal) == []


def test_both_journal_readers_keep_their_place_in_one_read_ahead() -> None:
    """The reader of the files and the reader over the wire keep where they are in one
    class (`ReadAhead`, pure logic): a record read and not handed out is handed out
    first, the limit stops the reading, a corrupt record is listed and skipped, and an
    end reached with records is reported once before the reading goes on."""
    from clients.journal_reader import JournalReader, ReadAhead
    from clients.journal_remote import RemoteJournalReader
    from journals import CorruptRecord, Record

    assert {f for f in JournalReader.__dataclass_fields__ if "ahead" in f} == {"_ahead"}
    assert {f for f in RemoteJournalReader.__dataclass_fields__ if "ahead" in f} == {"_ahead"}
    ahead = ReadAhead("pcj", limit=2)
    assert ahead.wants_read() and ahead.room(100) == 2
    assert ahead.add(CorruptRecord("pcj", b"\0" * 8, "checksum mismatch"))
    assert ahead.add(Record(5, 1, 10, 1, 13, b"a")) and ahead.add(Record(6, 1, 10, 1, 13, b"b"))
    assert not ahead.add(Record(7, 1, 10, 1, 13, b"c"))  # over the limit: not kept
    ahead.passed(6)
    ahead.reached_end()
    assert not ahead.wants_read() and ahead.take().body == b"a"
    assert [record.seq for record in ahead.take_all()] == [6]
    assert not ahead.wants_read()  # the limit, not the end: never reads again
    assert len(ahead.corrupt) == 1 and ahead.after_seq == 6
    endless = ReadAhead("dlj")
    endless.add(Record(1, 1, 10, 1, 13, b"x"))
    endless.reached_end()
    endless.take()
    assert [endless.wants_read(), endless.wants_read()] == [False, True]  # end once, then on


async def test_a_groups_journals_are_not_taken_for_a_client_journal(tmp_path) -> None:
    """`saf_journal` pointed at a group's journals directory (its server stopped) is
    refused with one line, and nothing in it changes. Before, the client took it for
    a client journal: it wrote its id into the group's journals and journaled its
    put, answered STORED, into the group's own SAF, where the group found it at its
    next start as a message for group 0, kept and never sent."""
    from clients import JournalFailed
    from tests.client_helpers import FixedPortServer

    server = FixedPortServer(tmp_path / "bus")
    server.start()
    try:
        async with connect(server.address, "SENDER") as sender:
            await sender.put(b"x", "ORDERS", delivery=DeliveryMode.WF_DQF)
        server.stop()
        journals = next((tmp_path / "bus").rglob("data.mdb")).parent
        before = {path.name: path.stat().st_size for path in journals.iterdir()}
        with pytest.raises(JournalFailed, match="holds a group server's journals"):
            async with connect(
                server.address, "SENDER", saf_journal=journals, connect_timeout_s=1
            ):
                pass
        assert {path.name: path.stat().st_size for path in journals.iterdir()} == before
        server.start()
        async with connect(server.address, "ORDERS") as receiver:
            assert (await receiver.get(timeout=10)).body == b"x"
        assert "group 0" not in (tmp_path / "bus" / "group1.log").read_text()
    finally:
        server.stop()
