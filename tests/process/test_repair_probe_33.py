"""Journals damaged on disk, met by the operator's path: a commit log damaged before
a restart of the machine, a `group.json` edited by hand, a dry run of `mrs jplay`
over a corrupt record. Real files, real `mrs` processes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from journals import Journal, JournalError, JournalStore, WriteBatch, commit_log, seq_key
from journals.commit_log import LOG_NAMES, RECORDS_OFFSET, read_log
from tests.journal_helpers import mrs, record, stopped_bus, write_raw, write_records

MAP_BYTES = 64 << 20


def _put(store: JournalStore, index: int) -> None:
    store.commit_now(
        WriteBatch.empty().put_raw(Journal.DQF, index.to_bytes(12, "big"), b"m%06d" % index * 50)
    )


def _killed_after_commits(journals: Path) -> dict[bytes, bytes]:
    """Ten commits, a checkpoint, ten more, then the process is gone (nothing flushed
    at close): the DQF it left, every commit in it."""
    store = JournalStore(journals, MAP_BYTES)
    try:
        for index in range(10):
            _put(store, index)
        store.checkpoint()
        for index in range(10, 20):
            _put(store, index)
        if store._checkpoint is not None and store._checkpoint.thread is not None:
            store._checkpoint.thread.join()
        expected = dict(store.raw_items(Journal.DQF))
    finally:
        for pinned in (store._pinned, store._checkpoint and store._checkpoint.pinned):
            if pinned is not None:
                pinned.abort()
        store.commit_log.close()
        store.env.close()
        os.close(store._writer_fd)  # the kernel lets go of a killed process's lock
    return expected


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_log_damaged_before_a_restart_of_the_machine_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a reboot the journals are put back at the log's checkpoint and its records
    applied. A changed byte in the first record after it dropped every later commit
    without a word (acknowledged puts gone, confirmed messages back unmarked). Now the
    open is refused naming the damage and the
    way out, and nothing is written; the way out opens every commit."""
    journals = tmp_path / "journals"
    expected = _killed_after_commits(journals)
    newest = LOG_NAMES[read_log(journals).newest_file]
    _flip(journals / newest, RECORDS_OFFSET + 30)
    data_before = (journals / "data.mdb").read_bytes()
    rebooted = tmp_path / "boot_id"
    rebooted.write_text("00000000-0000-4000-8000-000000000001\n")
    monkeypatch.setattr(commit_log, "BOOT_ID_PATH", rebooted)
    monkeypatch.setattr(commit_log, "_boot_ids", {})

    with pytest.raises(JournalError) as refused:
        JournalStore(journals, MAP_BYTES)
    words = str(refused.value)
    assert f"{newest} is damaged" in words
    assert "move commit.0.log and commit.1.log aside" in words
    assert (journals / "data.mdb").read_bytes() == data_before

    aside = tmp_path / "aside"  # the way out, as the refusal says
    aside.mkdir()
    for name in LOG_NAMES:
        shutil.move(journals / name, aside / name)
    store = JournalStore(journals, MAP_BYTES)
    try:
        assert dict(store.raw_items(Journal.DQF)) == expected
    finally:
        store.close()


@pytest.mark.parametrize(
    "content", [b'{"group_id": "1", "group": "NYC", "coordinator": "/mrs/1"}\n', b"\xff\xfe{}"]
)
def test_a_group_json_edited_by_hand_is_named_as_such(tmp_path: Path, content: bytes) -> None:
    """A group id typed in quotes was refused as "belongs to group 1 ..., not to group
    1", and bytes that are not UTF-8 as "unexpected error: UnicodeDecodeError"."""
    bus = stopped_bus(tmp_path / "bus")
    (bus.data_dir / "group.json").write_bytes(content)
    served = mrs("serve", "--config", str(bus.config_path), "--group", "1")
    assert served.returncode == 1
    assert served.stderr.strip().splitlines() == [
        f"mrs: {bus.data_dir / 'group.json'}: not the JSON object mrs writes (a group_id "
        "number, its group name and coordinator key); restore it, or remove it if this "
        "directory is this group's (the next start records it again)"
    ]


def test_a_dry_run_that_meets_a_corrupt_record_says_so_in_its_status(tmp_path: Path) -> None:
    """The real run exits 1 on a corrupt record; its dry run said 0, so a script's
    `mrs jplay --dry-run && ...` went on as if the journal were whole."""
    bus = stopped_bus(tmp_path / "bus")
    journals = bus.data_dir / "journals"
    write_records(journals, Journal.DLJ, [record(0), record(1)])
    write_raw(journals, Journal.DLJ, seq_key(record(2).seq), b"\x4d\x01junk")
    planned = mrs(
        "jplay", "--config", str(bus.config_path), "--group", "1", "dlj", "--dry-run", "--json"
    )
    assert planned.returncode == 1, planned.stderr
    assert json.loads(planned.stdout)["corrupt"] == 1
    assert "corrupt record in dlj" in planned.stderr
