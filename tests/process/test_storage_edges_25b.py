"""The server at the edges of its storage (twenty-fifth session, second round): a real
small disk (tmpfs) filled by another program, real `mrs serve` processes, SIGKILL.

Each test names what a user would have seen before its fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, NoMoreMessages, Status, Uma, connect
from journals import Journal, JournalDeviceError, JournalStore, WriteBatch
from tests.conftest import STANDARD_QUEUES, Bus
from tests.disk_helpers import mounted_tmpfs

BODY_BYTES = 4000
LIMITS = "journal_bytes_max = 67108864\nmessage_bytes_max = 16384"
"""A 64 MiB journal on a 40 MiB disk: the disk, not the map, is what runs out."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 40 MiB filesystem (tmpfs): a full disk is a real ENOSPC."""
    yield from mounted_tmpfs(tmp_path / "small-disk", "40m")


def _bus_on(disk: Path, log_dir: Path, group_extra: str = "") -> Bus:
    """A group whose data_dir is on `disk` and whose log is not."""
    bus = Bus(disk / "bus", limits=LIMITS, queues=STANDARD_QUEUES, group_extra=group_extra)
    bus.process.log_path = log_dir / "group1.log"
    return bus


def _fill(disk: Path) -> Path:
    """Another program's file takes every free block of `disk` (a log gone wild)."""
    filler = disk / "filler"
    stats = os.statvfs(disk)
    # What fit is written (OSError: ENOSPC): the disk is full either way.
    with open(filler, "wb") as file, contextlib.suppress(OSError):
        file.write(bytes(stats.f_bavail * stats.f_frsize))
    assert os.statvfs(disk).f_bavail == 0
    return filler


async def _put(address: str, count: int, prefix: str) -> list[bytes]:
    """`count` WF_DQF puts to ANYORDER, each answered STORED; their bodies."""
    bodies = []
    async with connect(address, "SENDER") as sender:
        for index in range(count):
            body = f"{prefix}{index}:".encode().ljust(BODY_BYTES, b"x")
            psb = await sender.put(
                body, target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC
            )
            assert psb.delivery_status == Status.STORED, psb
            bodies.append(body)
    return bodies


async def _take(address: str, count: int | None) -> list[bytes]:
    """Get and confirm `count` messages of ANYORDER (None: all of them); a get or a
    confirm that fails raises."""
    taken: list[bytes] = []
    async with connect(address, "ANYORDER") as reader:
        while count is None or len(taken) < count:
            try:
                message = await reader.get(timeout=0)
            except NoMoreMessages:
                break
            await reader.confirm(message.seq)
            taken.append(message.body)
    return taken


async def _put_once(address: str, body: bytes) -> int:
    """One WF_DQF put's delivery status."""
    async with connect(address, "SENDER") as sender:
        psb = await sender.put(body, target="ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        return psb.delivery_status


async def _put_until_stored(address: str, body: bytes) -> int:
    """Puts until one is STORED (the reserve measures the disk again every 50 ms):
    the group accepts again by itself once the disk has room."""
    while (status := await _put_once(address, body)) == Status.MRS_RES_EXH:
        await trio.sleep(0.05)
    return status


@pytest.mark.parametrize("group_extra", ["", "pcj_default = true"], ids=["no-pcj", "pcj"])
async def test_a_disk_filled_by_another_program_still_drains(
    tmp_path: Path, small_disk: Path, group_extra: str
) -> None:
    """Before: with the disk filled at once by another program (not by the group's own
    puts, which the reserve stops), every get failed `JOURNAL_FAIL: cannot record
    delivery: journal device failed: mdb_txn_commit: No space left on device`, and so
    did confirms: the pages earlier confirms had freed were kept for the last
    checkpoint, and the server measured the disk only at its next checkpoint, which
    no failing commit ever reached. The queue could not drain, the very thing that
    frees space. Now a commit that finds the disk full checkpoints and tries again;
    new messages are refused meanwhile and accepted again once the disk is freed."""
    bus = _bus_on(small_disk, tmp_path, group_extra)  # with the PCJ, a confirm writes
    address = bus.start()
    with trio.fail_after(120):
        stored = await _put(address, 600, "m")
        taken = await _take(address, 300)  # freed pages, kept for the last checkpoint
        filler = _fill(small_disk)
        assert await _put_once(address, b"on a full disk") == Status.MRS_RES_EXH
        taken += await _take(address, None)
        assert sorted(taken) == sorted(stored)
        filler.unlink()
        assert await _put_until_stored(address, b"after") == Status.STORED
    bus.kill()  # what was confirmed on the full disk stays confirmed
    address = bus.process.start()
    with trio.fail_after(60):
        assert await _take(address, None) == [b"after"]
    assert "Traceback" not in (tmp_path / "group1.log").read_text()
    assert bus.process.terminate() == 0


def test_a_commit_lmdb_finds_the_disk_full_for_names_the_disk(small_disk: Path) -> None:
    """Before: when LMDB itself reported the full disk (py-lmdb's DiskError), the
    answer read `journal device failed: mdb_txn_commit: No space left on device`,
    not the line journals.md promises (`journal device full: no space left on device
    (ENOSPC) for <journals>: N bytes free`), so a get's JOURNAL_FAIL or a put's
    DQF_DEVICE_FAIL named neither the disk nor its room. Real LMDB on a real full
    disk: a store that has never freed a page, so no checkpoint can make room."""
    journals = small_disk / "journals"
    store = JournalStore(journals, map_size_bytes=32 << 20)
    try:
        _fill(small_disk)
        batch = WriteBatch.empty()
        for index in range(200):
            batch = batch.put_raw(Journal.META, b"note%d" % index, bytes(8000))
        with pytest.raises(JournalDeviceError) as refused:
            store.commit_now(batch)
        assert refused.value.errno_value == errno.ENOSPC
        assert str(refused.value) == (
            f"journal device full: no space left on device (ENOSPC) for {journals}: 0 bytes free"
        )
    finally:
        store.close()
