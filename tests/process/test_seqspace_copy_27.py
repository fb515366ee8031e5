"""A group started on a copy of its journals (a backup restored) never issues a seq the
original issued after the copy was made; a plain restart keeps counting from its
reservation (mrs.core.seqspace, `LINEAGE_KEY`)."""

from __future__ import annotations

import shutil

from clients import DeliveryMode, Status, Uma, connect
from mrs.core.seqspace import RESERVE_FIRST, counter_of


async def _put(address: str, body: bytes) -> int:
    async with connect(address, queue="SENDER") as sender:
        psb = await sender.put(body, target="ORDERS", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.STORED
        return psb.seq


async def test_a_backup_restored_counts_above_every_seq_the_original_issued_since(
    make_bus, tmp_path
) -> None:
    bus = make_bus()
    await _put(bus.address, b"before the backup")
    assert bus.process.terminate() == 0
    backup = tmp_path / "backup"
    shutil.copytree(bus.data_dir, backup)  # the operator's nightly copy

    address = bus.start()  # the original runs on after the backup
    issued_after_backup = [await _put(address, b"after the backup %d" % n) for n in range(3)]
    bus.kill()  # its disk is lost; the backup comes back in its place
    shutil.rmtree(bus.data_dir)
    shutil.copytree(backup, bus.data_dir)

    address = bus.start()
    on_the_copy = await _put(address, b"on the restored copy")
    assert on_the_copy > max(issued_after_backup)
    assert "runs on a copy of its journals" in bus.log_text()
    # The copy's next start is a plain restart: it counts from its own reservation.
    address = bus.restart(graceful=True)
    assert counter_of(await _put(address, b"restarted")) - counter_of(on_the_copy) <= RESERVE_FIRST


async def test_a_restart_on_the_same_journals_adds_no_gap_from_the_clock(make_bus) -> None:
    bus = make_bus()
    first = await _put(bus.address, b"first")
    address = bus.restart()  # SIGKILL, then the same data directory
    second = await _put(address, b"second")
    assert 0 < counter_of(second) - counter_of(first) <= RESERVE_FIRST
    assert "runs on a copy of its journals" not in bus.log_text()
