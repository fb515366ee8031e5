"""The admin journal kept in the group's journals (mrs.ops.admin_log): read back from
there, oldest first, bounded; the file keeps every line."""

from __future__ import annotations

import json
from pathlib import Path

from journals import Journal, JournalError, WriteBatch
from mrs.ops import admin_log
from mrs.ops.admin_log import KEY_PREFIX, AdminLog
from sim.memstore import MemoryJournalStore


class CommitNow:
    """A writer that commits each batch at once (the group's writer, without a loop)."""

    def __init__(self, store: MemoryJournalStore) -> None:
        self.store = store

    def submit(self, batch: WriteBatch, done) -> None:
        error: JournalError | None = None
        try:
            self.store.apply([batch])
        except JournalError as failure:
            error = failure
        done(error)


def test_lines_are_read_from_the_journals_bounded_and_the_file_keeps_all(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(admin_log, "ADMIN_LOG_RECORDS_MAX", 3)
    store = MemoryJournalStore()
    path = tmp_path / "admin-journal.jsonl"
    writing = AdminLog(path, lambda: (store, CommitNow(store)))
    for index in range(5):
        writing.write({"action": f"a{index}"})
    kept = [key for key, _ in store.raw_items(Journal.META) if key.startswith(KEY_PREFIX)]
    assert len(kept) == 3
    path.unlink()  # another instance's data directory: no file, the same journals
    reading = AdminLog(path, lambda: (store, CommitNow(store)))
    assert [line["action"] for line in reading.read(10)] == ["a2", "a3", "a4"]
    assert [line["action"] for line in reading.read(2)] == ["a3", "a4"]


def test_a_group_starting_or_journals_without_lines_read_the_file(tmp_path: Path) -> None:
    path = tmp_path / "admin-journal.jsonl"
    AdminLog(path, lambda: None).write({"action": "before"})  # the group not up yet
    assert [json.loads(line)["action"] for line in path.read_text().splitlines()] == ["before"]
    store = MemoryJournalStore()
    assert [line["action"] for line in AdminLog(path, lambda: (store, None)).read(5)] == ["before"]


class CommitLater:
    """A writer whose commits wait for the loop's next turn (`run`), as the group's do."""

    def __init__(self, store: MemoryJournalStore) -> None:
        self.store = store
        self.waiting: list = []

    def submit(self, batch: WriteBatch, done) -> None:
        self.waiting.append((batch, done))

    def run(self) -> None:
        for batch, done in self.waiting:
            self.store.apply([batch])
            done(None)
        self.waiting.clear()


def test_a_line_not_yet_committed_is_read_back(tmp_path: Path) -> None:
    """A refused action is answered at once and its line committed at the next turn: a
    `mrs admin journal` asked in between missed it (the web page's refused browse,
    test_admin_rules_24b, failed so under load). The line is read back before its
    commit, once, and after it from the journals."""
    store = MemoryJournalStore()
    writer = CommitLater(store)
    journal = AdminLog(tmp_path / "admin-journal.jsonl", lambda: (store, writer))
    journal.write({"action": "purge"})
    writer.run()
    journal.write({"action": "browse"})
    assert [line["action"] for line in journal.read(10)] == ["purge", "browse"]
    writer.run()
    assert [line["action"] for line in journal.read(10)] == ["purge", "browse"]
