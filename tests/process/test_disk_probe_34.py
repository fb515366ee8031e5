"""Full disks at moments earlier sessions had not tried (thirty-fourth session): a
new journal environment made (a group's, jplay's ledger, a client SAF journal) and a
first link recorded, on a real small disk (tmpfs) with a page or two free or none,
real `mrs` processes.

Each test names what a user saw before its fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from clients import DeliveryMode, Status, Uma, connect
from sim.bus import LinkedBus
from sim.processes import ServerStartError
from tests.cli_helpers import one_line, run_mrs
from tests.client_helpers import take_all
from tests.conftest import STANDARD_QUEUES, Bus
from tests.disk_helpers import mounted_tmpfs
from tests.process.test_auth_lifecycle import wait_for_log
from tests.process.test_links import wait_for_link

QUEUES = STANDARD_QUEUES + '[[group.queue]]\nid = 99\nname = "REPLAY"\n'
LIMITS = "journal_bytes_max = 16777216"
"""A 16 MiB map on a 24 MiB disk: the disk runs out, not the map."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small-disk", "24m")


def _leave_free(disk: Path, free_bytes: int) -> None:
    """Another program's file takes all of `disk` but `free_bytes`."""
    stats = os.statvfs(disk)
    with open(disk / "filler", "ab", buffering=0) as filler:
        filler.write(bytes(stats.f_bavail * stats.f_frsize - free_bytes))
    assert os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize == free_bytes


async def _confirmed(address: str, count: int) -> None:
    """`count` PCJ records: puts to ANYORDER, each got and confirmed."""
    async with connect(address, "SENDER") as sender:
        for index in range(count):
            await sender.put(b"order %d" % index, "ANYORDER", delivery=DeliveryMode.WF_DQF)
    async with connect(address, "ANYORDER") as reader:
        for _ in range(count):
            await reader.confirm((await reader.get(timeout=5)).seq)


async def _drained(address: str, queue: str) -> list[tuple[bytes, bool]]:
    """Every message of `queue`, confirmed (`take_all`): (body, marked POSSDUPL)."""
    async with connect(address, queue) as reader:
        return [(message.body, message.possible_duplicate) for message in await take_all(reader)]


async def test_the_first_jplay_on_a_full_disk_says_so_and_the_next_replays_each_once(
    tmp_path: Path, small_disk: Path
) -> None:
    """Before: the first `mrs jplay` of a group whose disk had filled died of SIGBUS
    (the shell's "Bus error", exit -7, no line): LMDB made the new replay ledger's
    lock.mdb as a file of holes and wrote into it through a map. Now it exits 1 with
    one line naming the file and the full disk; once space is freed the next run
    replays every record once."""
    bus = Bus(small_disk / "bus", limits=LIMITS, queues=QUEUES, group_extra="pcj_default = true")
    bus.process.log_path = tmp_path / "group1.log"
    address = bus.start()
    with trio.fail_after(60):
        await _confirmed(address, 20)
    _leave_free(small_disk, 0)
    replay = ("jplay", "--config", str(bus.config_path), "--group", "1", "--address", address,
              "pcj", "--to", "ORDERS")  # fmt: skip
    refused = one_line(run_mrs(*replay), 1, "replay-ledger", "No space left on device")
    assert "Bus error" not in refused
    (small_disk / "filler").unlink()
    assert run_mrs(*replay).returncode == 0
    with trio.fail_after(60):
        replayed = await _drained(address, "ORDERS")
    assert sorted(replayed) == sorted((b"order %d" % n, False) for n in range(20))
    assert bus.process.terminate() == 0


@pytest.mark.parametrize(
    ("free_bytes", "named"),
    [(4096, "cannot write mrs.lock: No space left on device"),
     (8192, "journals/lock.mdb: No space left on device")],
    ids=["data-dir-lock", "journals"],
)  # fmt: skip
def test_a_new_group_on_a_disk_with_a_page_or_two_free_says_why_it_did_not_start(
    tmp_path: Path, small_disk: Path, free_bytes: int, named: str
) -> None:
    """Before: a new group on a disk with two pages free died of SIGBUS making its
    journals' lock.mdb, its log ending without a word of why; with one page free it
    said "mrs: No space left on device", naming no file (its data directory's lock,
    the page group.json left). Now each stops in one line naming the file."""
    bus = Bus(small_disk / "bus", limits=LIMITS, queues=QUEUES)
    bus.process.log_path = tmp_path / "group1.log"
    _leave_free(small_disk, free_bytes)  # group.json takes the first page
    with pytest.raises(ServerStartError) as refused:
        bus.start()
    said = refused.value.last_words()
    assert named in said and "unexpected" not in said, said


CLIENT = """
import sys
from clients import DeliveryMode, MrsError, connect_sync
try:
    with connect_sync(sys.argv[1], "SENDER", saf_journal=sys.argv[2], connect_timeout_s=5) as c:
        c.put(b"order", target="ANYORDER", delivery=DeliveryMode.WF_DQF)
except MrsError as error:
    print(error)
"""


def test_an_application_opening_a_new_client_saf_journal_on_a_full_disk_is_told(
    tmp_path: Path, small_disk: Path
) -> None:
    """Before: an application whose new client SAF journal was on a disk with one
    page free was killed by SIGBUS in `connect` (exit -7, nothing said; its puts
    never made). Now `connect` raises JOURNAL_FAIL naming the journal and the full
    disk, and the application goes on (here: prints it and exits 0)."""
    bus = Bus(tmp_path / "bus", queues=QUEUES)
    address = bus.start()
    _leave_free(small_disk, 4096)
    journal = small_disk / "app-saf"
    ran = subprocess.run([sys.executable, "-c", CLIENT, address, str(journal)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert ran.returncode == 0, (ran.returncode, ran.stderr)
    assert "JOURNAL_FAIL" in ran.stdout and str(journal) in ran.stdout, ran.stdout
    assert "No space left on device" in ran.stdout, ran.stdout
    assert bus.process.terminate() == 0


LINKED_QUEUES = """
[[group.queue]]
id = 20
name = "IN"
[[group.queue]]
id = 21
name = "SENDER"
"""


@pytest.fixture
def linked_on_small_disk(tmp_path: Path) -> Iterator[LinkedBus]:
    """Groups 1 and 2, linked directly, group 2's data directory a 24 MiB tmpfs."""
    bus = LinkedBus(tmp_path / "bus", queues=LINKED_QUEUES, limits=LIMITS, direct=True)
    mounts = mounted_tmpfs(bus.data_dir(2), "24m")
    next(mounts)
    try:
        yield bus
    finally:
        bus.stop()
        next(mounts, None)


async def test_a_first_link_to_a_group_whose_disk_is_full_is_one_line_and_comes_up_once_freed(
    linked_on_small_disk: LinkedBus,
) -> None:
    """Before: group 2, its disk full, could not record group 1's incarnation at their
    first link: each Hello (every 2 s) logged a traceback in group 2's log and was
    answered with no request id, so group 1 said "peer refused the link:
    Failure.request_id must be 1..2**63-1, got 0" and group 2 "protocol error". Now
    each side says the journal is full, and once freed the link comes up by itself
    and drains group 1's SAF, each message once."""
    bus = linked_on_small_disk
    bus.processes[2].start()
    disk = bus.data_dir(2)
    _leave_free(disk, 0)
    bus.processes[1].start()
    full = "cannot record group 1's journals here: journal device full"
    async with bus.connect(1, "SENDER") as sender:
        for index in range(5):
            body = b"saf %d" % index
            psb = await sender.put(body, "2.20", delivery=DeliveryMode.WF_SAF, uma=Uma.DISC)
            assert psb.delivery_status == Status.STORED, psb
    await wait_for_log(bus.directory / "group1.log", f"peer refused the link: {full}")
    await wait_for_log(bus.directory / "group2.log", f"refused link: {full}")
    (disk / "filler").unlink()
    await wait_for_link(bus, 1, 2, backlog=0)
    with trio.fail_after(30):
        drained = await _drained(bus.address(2), "IN")
    assert sorted(drained) == [(b"saf %d" % n, False) for n in range(5)]
    for group in (1, 2):
        log = (bus.directory / f"group{group}.log").read_text()
        assert "Traceback" not in log and "request_id" not in log, log
