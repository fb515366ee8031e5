"""A damaged client SAF journal, with real server and client processes: attach refuses
it with one line (JournalFailed) and leaves the file as it was, whatever the damage
(a record changed; the data file emptied, deleted, cut short or another journal's;
the meta pages or a page of the record tree zeroed). A record found damaged while
the client runs is reported, never skipped in silence, and the journal does not say
LINK_UP over it."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
import trio

from clients import DeliveryMode, JournalFailed, Status, connect
from clients.saf_journal import ClientJournal
from tests.client_helpers import FAST_RECONNECT as FAST
from tests.client_helpers import FixedPortServer

CHILD = Path(__file__).resolve().parents[1] / "saf_attach_process.py"
RECORDS = 20
WAIT_S = 20.0
"""What the child waits for the drain at most: a bound for the code before the fix,
whose journal with a hidden page neither drained nor failed."""


@pytest.fixture
def server(tmp_path):
    server = FixedPortServer(tmp_path / "bus")
    yield server
    server.stop()


def body(index: int) -> bytes:
    return b"order %02d " % index + b"x" * 200


async def journal_records(address: str, journal: Path) -> None:
    """RECORDS acknowledged messages in the journal (the server is down)."""
    async with connect(
        address, "SENDER", saf_journal=journal, reconnect=None, connect_timeout_s=1
    ) as client:
        for index in range(RECORDS):
            psb = await client.put(body(index), target="1.10", delivery=DeliveryMode.WF_DQF)
            assert (psb.status, psb.delivery_status) == (Status.JOURNAL_ON, Status.STORED)


def change_a_body(data: Path) -> None:
    """Change one byte of record 8's body, in place (in every copy of it in the file:
    pages an earlier transaction wrote may still hold one)."""
    content = data.read_bytes()
    at = content.find(body(7))
    assert at >= 0
    with open(data, "r+b") as file:
        while at >= 0:
            file.seek(at + len(b"order 0"))
            file.write(b"9")
            at = content.find(body(7), at + 1)


def zero_meta_pages(data: Path) -> None:
    with open(data, "r+b") as file:
        file.write(bytes(2 * 4096))


def zero_record_tree_root(data: Path) -> None:
    """Zero the root page of the journal's record database (its MDB_db record, as the
    main database holds it, ends with md_root)."""
    env = lmdb.open(str(data.parent), readonly=True, max_dbs=16)
    with env.begin() as txn:
        (root,) = struct.unpack_from("<Q", txn.get(b"saf"), 40)
    env.close()
    with open(data, "r+b") as file:
        file.seek(root * 4096)
        file.write(bytes(4096))


def another_journals_file(data: Path) -> None:
    """Put the data file of another (empty) journal in its place."""
    other = data.parent.parent / "other.saf"
    ClientJournal(other).close()
    shutil.copyfile(other / "data.mdb", data)


DAMAGES: dict[str, Callable[[Path], None]] = {
    "a record changed": change_a_body,
    "data file emptied": lambda data: os.truncate(data, 0),
    "data file deleted": lambda data: data.unlink(),
    "data file cut to half": lambda data: os.truncate(data, data.stat().st_size // 2),
    "meta pages zeroed": zero_meta_pages,
    "record tree page zeroed": zero_record_tree_root,
    "another journal's data file": another_journals_file,
}


async def test_meta_pages_the_commit_log_holds_are_put_back_and_every_record_drains(
    server, tmp_path
) -> None:
    """Both meta pages zeroed (a power loss's torn writes, a bad sector): the journal's
    commit log holds them as its last checkpoint wrote them, as the server's does. The
    client refused the journal as damaged, its 20 acknowledged puts stranded; it puts
    them back first now, and every record drains."""
    journal = tmp_path / "client.saf"
    await journal_records(server.address, journal)
    zero_meta_pages(journal / "data.mdb")
    server.start()
    async with connect(
        server.address, "SENDER", saf_journal=journal, reconnect=FAST, connect_timeout_s=1
    ) as client:
        with trio.fail_after(WAIT_S):
            await client.wait_journal_status(Status.LINK_UP)
    async with connect(server.address, "ORDERS") as receiver:
        bodies = [(await receiver.get(timeout=5)).body for _ in range(RECORDS)]
    assert bodies == [body(index) for index in range(RECORDS)]


@pytest.mark.parametrize("damage", [name for name in DAMAGES if name != "meta pages zeroed"])
async def test_attach_refuses_a_damaged_journal(server, tmp_path, damage) -> None:
    journal = tmp_path / "client.saf"
    await journal_records(server.address, journal)
    data = journal / "data.mdb"
    DAMAGES[damage](data)
    damaged = data.read_bytes() if data.exists() else None
    server.start()
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, str(CHILD), server.address, str(journal), str(WAIT_S)],
            capture_output=True,
            text=True,
            timeout=WAIT_S + 60,
        )
    )
    assert (done.returncode, done.stdout.splitlines()[:1]) == (3, done.stdout.splitlines()), (
        done.returncode,
        done.stdout,
        done.stderr[-2000:],
    )
    assert done.stdout.startswith(f"refused mrs: JOURNAL_FAIL: client SAF journal {journal}")
    assert "is damaged" in done.stdout and "Traceback" not in done.stderr
    # Nothing the damage left is lost to the refusal: the file is as it was.
    assert (data.read_bytes() if data.exists() else None) == damaged


async def test_a_record_damaged_while_running_is_reported(server, tmp_path) -> None:
    """The drain meets a record whose bytes changed after attach: the client logs it
    and tells its listeners (kind "corrupt"), sends every other record, keeps the
    damaged one in the journal and says JOURNAL_FAIL, not LINK_UP."""
    journal = tmp_path / "client.saf"
    events = []
    async with connect(
        server.address, "SENDER", saf_journal=journal, reconnect=FAST, connect_timeout_s=1
    ) as client:
        client.add_journal_listener(events.append)
        for index in range(RECORDS):
            await client.put(body(index), target="1.10", delivery=DeliveryMode.WF_DQF)
        change_a_body(journal / "data.mdb")
        server.start()
        with trio.fail_after(WAIT_S), pytest.raises(JournalFailed, match="cannot be read"):
            await client.wait_journal_status(Status.LINK_UP)
        assert client.journal_status == Status.JOURNAL_FAIL
        assert client.journal_backlog == 1
    corrupt = [event for event in events if event.kind == "corrupt"]
    assert [(event.local_seq, event.status) for event in corrupt] == [(8, Status.JOURNAL_FAIL)]
    drained = [event.local_seq for event in events if event.kind == "drained"]
    assert sorted(drained) == [seq for seq in range(1, RECORDS + 1) if seq != 8]
    assert Status.LINK_UP not in [event.status for event in events if event.kind == "status"]


@pytest.mark.parametrize("damage", ["data file cut to half", "meta pages zeroed"])
async def test_mrs_dump_refuses_a_damaged_client_journal_in_one_line(
    server, tmp_path, damage
) -> None:
    """`mrs dump --client-saf` checks the journal as its client does: one line and
    exit status 1, not a SIGBUS or a raw LMDB error."""
    journal = tmp_path / "client.saf"
    await journal_records(server.address, journal)
    DAMAGES[damage](journal / "data.mdb")
    done = await trio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "mrs", "dump", "--client-saf", str(journal)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    )
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"mrs: client SAF journal {journal} is damaged: ")
