"""Probes of the journal tools as an operator runs them at 3 a.m.: a PCJ archive whose
write fails, paths given with `~` the shell left alone, journals of another group named
with the wrong `--group`, and a replay scope damaged by hand. Each test says what was
wrong before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from journals import Journal, JournalStore, WriteBatch
from mrs.core.seqspace import GROUP_KEY
from mrs.tools.journal.pcj_archive import INTENT_KEY
from tests.cli_helpers import run_mrs
from tests.disk_helpers import mounted_tmpfs
from tests.journal_helpers import journal_seqs, record, write_records
from tests.process.test_jplay import jplay

ARCHIVE = ("pcj", "archive", "--group", "1", "--until", "now")
BODY_BYTES = 64 * 1024
"""Random bodies (zstd cannot shrink them): 20 records fill 1.25 MiB of Parquet."""


def _archived_seqs(directory: Path) -> list[int]:
    return [
        seq
        for path in sorted(directory.rglob("*.parquet"))
        for seq in pq.read_table(path, columns=["seq"]).column("seq").to_pylist()
    ]


def _intent(journals: Path) -> bytes | None:
    store = JournalStore(journals, readonly=True)
    try:
        value = store.meta_get(INTENT_KEY)
        return None if value is None else bytes(value)
    finally:
        store.close()


# ---------------------------------------------------------------------- a failed write
def test_an_archive_that_cannot_write_says_why_and_leaves_no_intent(tmp_path: Path) -> None:
    """`--dir` naming a file: the run ended with the OSError and left its chunk's
    intent, and the next run warned that it "finished an interrupted PCJ archive ... 0
    archived records removed", as if something had been cut off. Now the run says in
    one line why and that the records stay in the PCJ, exit 1, and clears its intent:
    the next run archives them with no warning."""
    data_dir = tmp_path / "g"
    items = [record(i) for i in range(4)]
    write_records(data_dir / "journals", Journal.PCJ, items)
    not_a_directory = tmp_path / "archive"
    not_a_directory.write_text("a file, not a directory\n")
    failed = run_mrs(*ARCHIVE, "--data-dir", str(data_dir), "--dir", str(not_a_directory))
    assert failed.returncode == 1, failed.stderr
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert "Not a directory" in failed.stderr and "stay in the PCJ" in failed.stderr
    assert _intent(data_dir / "journals") is None
    assert journal_seqs(data_dir / "journals", Journal.PCJ) == [item.seq for item in items]
    again = run_mrs(*ARCHIVE, "--data-dir", str(data_dir), "--dir", str(tmp_path / "out"))
    assert again.returncode == 0 and "interrupted" not in again.stderr, again.stderr
    assert sorted(_archived_seqs(tmp_path / "out")) == [item.seq for item in items]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    yield from mounted_tmpfs(tmp_path / "small-disk", "2m")


def test_an_archive_stopped_by_a_full_disk_removes_its_partial_files(
    tmp_path: Path, small_disk: Path
) -> None:
    """The disk filled during a chunk's write: its half-written temporary file stayed
    on the full disk and its intent in the journal. Now what the chunk wrote is
    removed, its records stay in the PCJ, the chunks before it stay archived, and
    every record is in exactly one place."""
    data_dir = tmp_path / "g"
    items = [record(i, body=os.urandom(BODY_BYTES)) for i in range(40)]
    write_records(data_dir / "journals", Journal.PCJ, items)
    archive = small_disk / "archive"
    failed = run_mrs(*ARCHIVE, "--data-dir", str(data_dir), "--dir", str(archive), "--chunk", "20")
    assert failed.returncode == 1, failed.stderr
    assert "No space left on device" in failed.stderr, failed.stderr
    assert "20 records archived before it" in failed.stderr, failed.stderr
    assert _intent(data_dir / "journals") is None
    assert [path.name for path in archive.rglob(".*")] == []  # no temporary file
    archived = _archived_seqs(archive)
    left = journal_seqs(data_dir / "journals", Journal.PCJ)
    assert len(archived) == 20 and sorted(archived + left) == [item.seq for item in items]


# ---------------------------------------------------------------------- `~` in a path
SALVAGE_TO_HOME = ["journal", "salvage", "--data-dir", "~/g", "--to", "~/copy"]
JPLAY_FROM_HOME = ["jplay", "--data-dir=~/g", "--group", "1", "pcj", "--dry-run", "--to", "1.20"]
TILDE_COMMANDS = {
    "dump --data-dir=~": (["dump", "--data-dir=~/g", "--group", "1", "pcj"], None),
    "journal verify --data-dir ~": (["journal", "verify", "--data-dir", "~/g"], None),
    "journal salvage --to ~": (SALVAGE_TO_HOME, "copy/journals/data.mdb"),
    "pcj archive --dir=~": ([*ARCHIVE, "--data-dir", "~/g", "--dir=~/archive"], "archive"),
    "jplay --data-dir=~": ([*JPLAY_FROM_HOME, "--as", "1.99"], None),
    "audit --data-dir ~": (["audit", "--data-dir", "~/g", "--trail", "corr-1", "--json"], None),
}


@pytest.mark.parametrize("name", list(TILDE_COMMANDS))
def test_a_path_option_with_a_tilde_the_shell_left_is_the_home_directory(
    tmp_path: Path, name: str
) -> None:
    """A `~` the shell leaves alone (quoted, or after `--opt=`) was taken literally:
    `--dir=~/archive` wrote to `./~/archive` and `--data-dir '~/g'` found no journals,
    while the config's `pcj_archive_dir = "~/archive"` meant the home directory. Now
    every path option of the journal tools expands it as the config does."""
    home, work = tmp_path / "home", tmp_path / "work"
    write_records(home / "g" / "journals", Journal.PCJ, [record(i) for i in range(3)])
    work.mkdir()
    args, written = TILDE_COMMANDS[name]
    done = subprocess.run(
        [sys.executable, "-m", "mrs", *args], cwd=work, capture_output=True, text=True,
        env={**os.environ, "HOME": str(home)}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == []  # nothing under ./~
    if written is not None:
        assert (home / written).exists(), done.stderr


def test_a_home_directory_that_cannot_be_expanded_is_bad_usage(tmp_path: Path) -> None:
    result = run_mrs("dump", "--data-dir", "~no-such-user-24b/g", "pcj")
    assert result.returncode == 2
    assert "cannot expand the home directory in '~no-such-user-24b/g'" in result.stderr


# ---------------------------------------------------------------------- another group's
def _journals_of_group(journals: Path, group_id: int) -> None:
    """Stamp the journals as `mrs serve` of that group does (META journals_group)."""
    store = JournalStore(journals)
    try:
        stamp = str(group_id).encode()
        store.commit_now(WriteBatch.empty().put_raw(Journal.META, GROUP_KEY, stamp))
    finally:
        store.close()


@pytest.mark.parametrize("tool", ["pcj archive", "dump", "jplay"])
def test_journals_of_another_group_are_refused_not_filed_under_the_wrong_one(
    tmp_path: Path, tool: str
) -> None:
    """`--data-dir /backup/g1 --group 2`: group 1's journals were read as group 2's;
    `mrs pcj archive` wrote group 1's records under `group=2` in Parquet (the audit
    then counted them for group 2). Now each tool refuses in one line naming the
    group the journals belong to, exit 2, and nothing moves."""
    data_dir = tmp_path / "g1"
    items = [record(i) for i in range(3)]
    write_records(data_dir / "journals", Journal.PCJ, items)
    _journals_of_group(data_dir / "journals", 1)
    where = ["--data-dir", str(data_dir), "--group", "2"]
    args = {
        "pcj archive": ["pcj", "archive", *where, "--until", "now", "--dir", str(tmp_path / "a")],
        "dump": ["dump", *where, "pcj"],
        "jplay": ["jplay", *where, "pcj", "--dry-run", "--to", "2.20", "--as", "2.99"],
    }[tool]
    result = run_mrs(*args)
    assert result.returncode == 2, result.stderr
    assert "holds the journals of group 1, not of group 2: give --group 1" in result.stderr
    assert not (tmp_path / "a").exists()
    assert journal_seqs(data_dir / "journals", Journal.PCJ) == [item.seq for item in items]
    right = run_mrs("dump", "--data-dir", str(data_dir), "--group", "1", "pcj", "--json")
    assert right.returncode == 0 and len(right.stdout.splitlines()) == len(items)


# ---------------------------------------------------------------------- the ledger's scope
async def test_a_scope_damaged_by_hand_is_refused_in_one_line(replay_bus) -> None:
    """scope.json with an `again_since_ns` that is not a number (edited by hand): an
    `--again` run stopped half-way through planning on "unexpected error: TypeError".
    Now it is refused in one line naming scope.json and the way out, exit 1."""
    bus = replay_bus({Journal.PCJ: [record(i) for i in range(3)]})
    code, _, stderr = await jplay(bus, "pcj", "--to", "RESTORE")
    assert code == 0, stderr
    scope_path = bus.data_dir / "replay-ledger" / "scope.json"
    scope = json.loads(scope_path.read_text())
    scope_path.write_text(json.dumps({**scope, "again_since_ns": "yesterday"}))
    for dry_run in ([], ["--dry-run"]):
        code, _, stderr = await jplay(bus, "pcj", "--to", "RESTORE", "--again", *dry_run)
        assert code == 1, stderr
        assert f"{scope_path} is damaged: not a replay scope; move it aside" in stderr, stderr
        assert "unexpected" not in stderr
