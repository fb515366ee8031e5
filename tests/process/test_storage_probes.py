"""Probes of the journal storage under a real server: a real small disk (tmpfs), real
LMDB files, SIGKILL.

Each test names what a user would have seen before its fix.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, MrsError, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalStore, WriteBatch
from journals.commit_log import CommitLog, LogContents, read_log
from tests.conftest import STANDARD_QUEUES, Bus
from tests.disk_helpers import mounted_tmpfs
from tests.journal_helpers import mrs, record, write_records

BODY_BYTES = 8000
"""Over a page: each message takes whole overflow pages, as real bodies do."""
PRODUCERS = 4
PRODUCER_QUEUES = "".join(
    f'[[group.queue]]\nid = {40 + index}\nname = "P{index}"\n' for index in range(PRODUCERS)
)
SMALL_JOURNAL_LIMITS = "journal_bytes_max = 67108864\nmessage_bytes_max = 16384"
"""A 64 MiB journal on a 20 MiB disk: the disk fills first, and its reserve
(5% of the cap, 3.3 MB) is all that stands between the group and ENOSPC."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 20 MiB filesystem (tmpfs): a full disk is a real ENOSPC."""
    yield from mounted_tmpfs(tmp_path / "small-disk", "20m")


def _bus_on(disk: Path, log_dir: Path) -> Bus:
    """A group whose data_dir is on `disk` and whose log is not (a traceback there
    would take the disk's last bytes and hide what the journals did)."""
    bus = Bus(disk / "bus", limits=SMALL_JOURNAL_LIMITS, queues=STANDARD_QUEUES + PRODUCER_QUEUES)
    bus.process.log_path = log_dir / "group1.log"
    return bus


async def _put_until_refused(address: str, index: int, stored: set[bytes]) -> None:
    """Recoverable puts until the group refuses one; each STORED one is recorded."""
    async with connect(address, f"P{index}") as client:
        for counter in range(10_000):
            body = f"{index}:{counter}:".encode().ljust(BODY_BYTES, b"x")
            psb = await client.put(
                body, target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
            )
            if psb.delivery_status != Status.STORED:
                assert psb.delivery_status == Status.MRS_RES_EXH, psb
                return
            stored.add(body)
    raise AssertionError("never refused: the disk never filled")


async def _drain(address: str) -> tuple[set[bytes], list[str]]:
    """Every message of ANYORDER, each confirmed; the confirms that failed."""
    delivered: set[bytes] = set()
    failures: list[str] = []
    async with connect(address, "ANYORDER") as client:
        while True:
            try:
                message = await client.get(timeout=0)
            except NoMoreMessages:
                return delivered, failures
            delivered.add(message.body)
            try:
                await client.confirm(message.seq)
            except MrsError as error:
                failures.append(str(error))
                return delivered, failures


async def test_a_disk_filled_by_puts_still_drains_after_a_kill(
    tmp_path: Path, small_disk: Path
) -> None:
    """Before: puts filled a nearly full disk past its reserve (the commit log's
    copies and the pages no commit may reuse until the next checkpoint were not
    counted), and after a SIGKILL the drain's gets and confirms failed on ENOSPC:
    the group could not empty its queue until an operator freed space."""
    bus = _bus_on(small_disk, tmp_path)
    address = bus.start()
    stored: set[bytes] = set()
    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            for index in range(PRODUCERS):
                nursery.start_soon(_put_until_refused, address, index, stored)
    assert len(stored) > 500
    bus.kill()
    address = bus.process.start()
    with trio.fail_after(120):
        delivered, failures = await _drain(address)
    assert failures == []
    assert delivered == stored
    assert bus.process.terminate() == 0


def _fill_leaving(disk: Path, free_bytes: int) -> None:
    """Take every block of `disk` but `free_bytes`, as another program's file would."""
    stats = os.statvfs(disk)
    with open(disk / "filler", "wb") as filler:
        filler.write(bytes(stats.f_bavail * stats.f_frsize - free_bytes))


def test_a_log_record_cut_short_by_a_full_disk_is_not_taken_as_flushed(
    small_disk: Path,
) -> None:
    """Before: a full disk wrote what fit of a commit's log record and the append
    returned as if flushed; the commit was answered STORED with a log that could
    not replay it (nor any commit after it until the next checkpoint) after a power
    loss. Now the short write fails the commit, and after the disk frees the same
    commit logs whole."""
    log = CommitLog(small_disk, LogContents(None, []))
    log.write_header(log.begin_checkpoint(0, b""))  # the log starts at commit 0
    payload = b"p" * 50_000
    _fill_leaving(small_disk, 8192)
    with pytest.raises(OSError) as refused:
        log.append(1, payload)
    assert refused.value.errno == errno.ENOSPC
    assert read_log(small_disk).records == []
    (small_disk / "filler").unlink()
    log.append(1, payload)
    log.append(2, b"after")
    assert read_log(small_disk).records == [(1, payload), (2, b"after")]
    log.close()


@pytest.mark.parametrize("meta_page", [0, 1])
def test_a_damaged_meta_page_is_put_back_from_the_log(tmp_path: Path, meta_page: int) -> None:
    """Before: one damaged meta page (of LMDB's two) made LMDB refuse the whole file
    (MDB_INVALID), and `mrs journal salvage` copied nothing out of it, though the
    commit log's checkpoint holds both pages whole. Now the store puts them back at
    open, as after a power loss, and every record is there."""
    journals = tmp_path / "journals"
    store = JournalStore(journals)
    puts = WriteBatch.empty()
    for index in range(100):
        puts = puts.put_raw(Journal.META, f"note{index}".encode(), bytes(3000))
    store.commit_now(puts)
    page_bytes = int(store.env.stat()["psize"])
    store.close()
    with open(journals / "data.mdb", "r+b") as data:
        data.seek(meta_page * page_bytes)
        data.write(bytes(page_bytes))
    store = JournalStore(journals)
    assert [store.meta_get(f"note{index}") for index in range(100)] == [bytes(3000)] * 100
    store.close()


def test_verify_reads_a_journal_of_more_than_100_mib(tmp_path: Path) -> None:
    """Before: `mrs journal verify` (and salvage) of a journal holding more than
    100 MiB of records stopped with `mrs: unexpected error: BufferFull` (msgpack's
    default buffer), so an operator could check no real-sized journal."""
    journals = tmp_path / "g1" / "journals"
    body = bytes(1 << 20)
    write_records(journals, Journal.DQF, (record(index, body=body) for index in range(110)))
    result = mrs("journal", "verify", "--data-dir", str(tmp_path / "g1"))
    assert result.returncode == 0, result.stderr
    assert "dqf            110 readable" in result.stdout
    assert result.stdout.strip().endswith("intact")


async def _traffic(address: str, stop: trio.Event) -> None:
    """Puts (some over a commit log record: flushed on their own) and their confirms,
    until `stop`: a busy group's journal changing under a reader."""
    async with connect(address, "P0") as producer, connect(address, "ANYORDER") as consumer:
        counter = 0
        while not stop.is_set():
            counter += 1
            body = bytes(90_000 if counter % 3 == 0 else 2000)
            await producer.put(body, target="ANYORDER", delivery=DeliveryMode.WF_DQF)
            if counter % 2 == 0:
                message = await consumer.get()
                await consumer.confirm(message.seq)


async def test_verify_beside_a_busy_group_finds_it_intact(tmp_path: Path) -> None:
    """Before: `mrs journal verify` beside a running group under load (which the docs
    promise works) reported the journal DAMAGED: entry counts walked in one snapshot
    per database held against the stamp of a later commit, and MDB_MAP_RESIZED when
    the group grew its map meanwhile."""
    bus = Bus(tmp_path / "bus", queues=STANDARD_QUEUES + PRODUCER_QUEUES)
    bus.start()
    stop = trio.Event()
    verdicts: list[tuple[int, str]] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_traffic, bus.address, stop)
        for _ in range(4):
            result = await trio.to_thread.run_sync(
                lambda: mrs("journal", "verify", "--config", str(bus.config_path), "--group", "1")
            )
            verdicts.append((result.returncode, result.stdout[-300:] + result.stderr))
        stop.set()
    assert bus.process.terminate() == 0
    assert [code for code, _ in verdicts] == [0] * 4, verdicts


def test_a_group_whose_meta_page_is_damaged_starts_from_its_checkpoint(make_bus) -> None:
    """The store puts a damaged meta page back from the commit log's checkpoint, but
    `mrs serve` checked the file before the store could, and refused to start: so did
    it after a power loss whose meta page names pages the disk never got. The pages
    are put back first now; the group starts and serves what it stored."""
    bus = make_bus()

    async def put() -> None:
        async with bus.connect("SENDER") as sender:
            psb = await sender.put(b"kept", "ORDERS", delivery=DeliveryMode.WF_DQF)
            assert psb.delivery_status == Status.STORED

    trio.run(put)
    assert bus.process.terminate() == 0  # closed: a checkpoint holds both meta pages
    data = bus.data_dir / "journals" / "data.mdb"
    with open(data, "r+b") as file:
        file.write(b"\0" * os.sysconf("SC_PAGE_SIZE"))  # meta page 0: LMDB refuses the file
    bus.start()

    async def get() -> bytes:
        async with bus.connect("ORDERS") as reader:
            message = await reader.get(timeout=5)
            await reader.confirm(message.seq)
            return message.body

    assert trio.run(get) == b"kept"
