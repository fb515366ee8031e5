"""`mrs jplay --data-dir` on a backup mounted read-only says what to do in one line:
it stopped with `mrs: .../replay-ledger: Read-only file system`, naming no way on (a
replay keeps its ledger in the data directory; a copy on a writable disk replays)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from journals import Journal
from tests.disk_helpers import mounted_tmpfs
from tests.journal_helpers import record, stopped_bus, write_records


@pytest.fixture
def read_only_backup(tmp_path):
    bus = stopped_bus(tmp_path / "bus")
    write_records(bus.data_dir / "journals", Journal.PCJ, [record(i) for i in range(3)])
    for backup in mounted_tmpfs(tmp_path / "backup", "16m"):
        shutil.copytree(bus.data_dir, backup / "g1")
        subprocess.run(["mount", "-o", "remount,ro", str(backup)], check=True)
        yield backup / "g1"


def test_a_replay_from_a_read_only_backup_says_to_copy_it(read_only_backup) -> None:
    argv = ["jplay", "pcj", "--data-dir", str(read_only_backup), "--group", "1"]
    argv += ["--address", "127.0.0.1:9", "--as", "1.20"]
    result = subprocess.run(
        [sys.executable, "-m", "mrs", *argv, "--to", "1.10"], capture_output=True, text=True
    )
    assert result.returncode == 1, result
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "read-only file system" in result.stderr and "copy the data directory" in result.stderr
    dry = subprocess.run(
        [sys.executable, "-m", "mrs", *argv, "--to", "1.10", "--dry-run"],
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr  # a dry run reads the backup as it is
