"""Review of the copy-of-journals seq check (mrs.core.seqspace `_above_the_original`):
a backup restored over the journal file in place is noticed (the data directory's
reservation mark, mrs.storage.reservation_mark), and the same file read once with a
birth time and once without is not taken for a copy."""

from __future__ import annotations

import shutil
import struct

from mrs.core.seqspace import FRESH_EPOCH_S, RESERVE_FIRST, SeqAllocator, counter_of
from sim.memstore import MemoryJournalStore
from tests.process.test_seqspace_copy_27 import _put


async def test_a_backup_copied_over_the_journal_file_counts_above_the_originals_seqs(
    make_bus, tmp_path
) -> None:
    bus = make_bus()
    await _put(bus.address, b"before the backup")
    assert bus.process.terminate() == 0
    backup = tmp_path / "backup"
    shutil.copytree(bus.data_dir / "journals", backup)  # the operator's copy of the journals

    address = bus.start()  # the original runs on after the backup
    issued_after_backup = [await _put(address, b"after the backup %d" % n) for n in range(3)]
    bus.kill()
    # `cp -a backup/. g1/journals/`: each file written over in place, so data.mdb keeps
    # the original's inode and birth time (its lineage)
    journals = bus.data_dir / "journals"
    inode = (journals / "data.mdb").stat().st_ino
    for each in backup.iterdir():
        shutil.copyfile(each, journals / each.name)
    assert (journals / "data.mdb").stat().st_ino == inode

    address = bus.start()
    on_the_copy = await _put(address, b"on the restored copy")
    assert on_the_copy > max(issued_after_backup)
    assert "runs on a copy of its journals" in bus.log_text()
    # The next start is a plain restart: it counts from its own reservation.
    address = bus.restart(graceful=True)
    assert counter_of(await _put(address, b"restarted")) - counter_of(on_the_copy) <= RESERVE_FIRST


def test_the_same_journal_file_read_without_its_birth_time_is_not_a_copy() -> None:
    """A start where statx is refused (a container's seccomp) reads the inode alone;
    the start before read the inode and birth time of the same file."""
    inode = struct.pack("=Q", 4242)
    birth = struct.pack("=qI", 1_767_225_600, 5)
    clock_ns = [(FRESH_EPOCH_S + 86_400) * 10**9]
    store = MemoryJournalStore()
    store.lineage = inode + birth
    first = SeqAllocator(store, group_id=1, clock_ns=lambda: clock_ns[0])
    first.start()
    issued = first.next()

    clock_ns[0] += 3_600 * 10**9  # an hour later: a jump to the clock would show
    for lineage in (inode, inode + birth):  # without the birth time, then with it again
        store.lineage = lineage
        restarted = SeqAllocator(store, group_id=1, clock_ns=lambda: clock_ns[0])
        restarted.start()
        assert restarted.copied_from == 0
        assert 0 < counter_of(restarted.next()) - counter_of(issued) <= 4 * RESERVE_FIRST
        issued = restarted.next()

    # Another inode is another file, birth time or not: a copy, counted from the clock.
    store.lineage = struct.pack("=Q", 4243)
    copy = SeqAllocator(store, group_id=1, clock_ns=lambda: clock_ns[0])
    copy.start()
    assert copy.copied_from != 0 and copy.next() > issued
