"""A journal cap sized for another machine: `journal_bytes_max` whose reserve (5% of
it) is more than a real small disk (tmpfs) has free. The group starts, and says at
once, in the words its refused puts carry, what will be refused and what helps."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from clients import DeliveryMode, Status, Uma, connect
from tests.conftest import STANDARD_QUEUES, Bus
from tests.disk_helpers import mounted_tmpfs

CAP_BYTES = 1 << 30
"""1 GiB: its reserve (51 MiB) is more than the 24 MiB disk holds."""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small-disk", "24m")


async def test_a_cap_whose_reserve_the_disk_cannot_hold_is_said_at_start(
    tmp_path: Path, small_disk: Path
) -> None:
    """Before: the group started without a word, and its first recoverable put was
    the first sign (MRS_RES_EXH, "... under the journal reserve ... (ENOSPC ahead)"),
    nothing naming the cap that sized the reserve; and its log said the journal
    would accept again "until it drains", which a journal whose file never shrinks
    cannot do for a disk."""
    bus = Bus(small_disk / "bus", limits=f"journal_bytes_max = {CAP_BYTES}",
              queues=STANDARD_QUEUES)  # fmt: skip
    address = bus.start()
    started = bus.log_text()
    assert "free space on that disk, or lower journal_bytes_max" in started, started
    assert "refused (MRS_RES_EXH) until the disk has room" in started
    async with connect(address, "SENDER") as client:
        psb = await client.put(b"order", "ANYORDER", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)
        assert psb.delivery_status == Status.MRS_RES_EXH
        assert await client.pending(["ANYORDER"]) == [0]  # nothing stored, still serving
    assert bus.log_text().count("journal reserve of") == 1  # said once, not per put
    assert bus.process.terminate() == 0
