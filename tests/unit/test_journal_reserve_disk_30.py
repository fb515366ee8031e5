"""The journal reserve where the disk holds less than journal_bytes_max, in process
(the journal's and the disk's measures stood in for, as test_journal_reserve_rule.py
does). Before, the disk's test kept 5% of the cap free: with journal_bytes_max =
16 TiB on a disk with 59 GB free that was 880 GB, and the group started and refused
every recoverable put MRS_RES_EXH."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from mrs.limits import RESERVE_MEASURE_INTERVAL_S
from mrs.storage import journal_measure, journal_reserve
from mrs.storage.journal_reserve import JournalReserve, ensure_headroom

CAP_BYTES = 1 << 44  # 16 TiB, the highest the config allows
MESSAGE_BYTES_MAX = 1 << 20
GB = 10**9


@dataclass
class _Disk:
    used_bytes: int = 1 << 20
    free_bytes: int = 59 * GB
    now_s: float = 100.0


class _Store:
    path = "/nonexistent"


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> _Disk:
    state = _Disk()
    monkeypatch.setattr(journal_measure, "pages_in_use_bytes", lambda store: state.used_bytes)
    monkeypatch.setattr(journal_measure, "disk_free_bytes", lambda path: state.free_bytes)
    monkeypatch.setattr(journal_reserve, "monotonic", lambda: state.now_s)
    return state


def _reserve() -> JournalReserve:
    reserve = JournalReserve.for_store(_Store(), CAP_BYTES, MESSAGE_BYTES_MAX)
    assert reserve is None  # no LMDB map: the simulator's store
    return JournalReserve(
        _Store(),
        CAP_BYTES,
        journal_reserve.reserve_bytes(CAP_BYTES, MESSAGE_BYTES_MAX),
        MESSAGE_BYTES_MAX,
    )


def test_a_cap_beyond_the_disk_takes_puts_until_the_disk_nears_full(disk: _Disk) -> None:
    reserve = _reserve()
    assert reserve.accepts(1024) is None  # 59 GB free: a put is taken
    holds = disk.used_bytes + disk.free_bytes
    assert reserve.disk_reserve == holds // 20  # 5% of what the disk can give it
    disk.free_bytes = reserve.disk_reserve + (1 << 20)
    disk.used_bytes = holds - disk.free_bytes
    disk.now_s += 2 * RESERVE_MEASURE_INTERVAL_S  # the next put measures again
    problem = reserve.accepts(2 << 20)
    assert problem is not None and "bytes free, under the journal reserve" in problem


def test_a_cap_the_disk_holds_keeps_five_percent_of_the_cap(disk: _Disk) -> None:
    disk.free_bytes = CAP_BYTES  # a disk larger than the cap: the cap's rule
    reserve = _reserve()
    assert reserve.accepts(1024) is None
    assert reserve.disk_reserve == reserve.reserve == CAP_BYTES // 20


def test_the_start_says_the_disk_bounds_the_journal(
    disk: _Disk, caplog: pytest.LogCaptureFixture
) -> None:
    class _Mapped(_Store):
        class env:  # noqa: N801 - stands in for lmdb.Environment
            @staticmethod
            def info() -> dict:
                return {"map_size": CAP_BYTES}

    with caplog.at_level(logging.INFO, logger="mrs.journal"):
        ensure_headroom(_Mapped(), CAP_BYTES, MESSAGE_BYTES_MAX)
    [line] = [r.getMessage() for r in caplog.records]
    assert f"journal_bytes_max {CAP_BYTES} is more than the disk" in line
    assert "MRS_RES_EXH" in line
