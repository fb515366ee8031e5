"""A reader in another process left holding an old snapshot of a group's journal (a
`mrs dump` piped to a pager that waits): a full map names it, with how old its
snapshot is, since LMDB reuses no page freed after it. Before, the full map was
blamed on the queues or on short runs of free pages. A real LMDB file, a real
second process."""

from __future__ import annotations

import subprocess
import sys

from journals import Journal, JournalFullError, JournalStore, WriteBatch
from journals.store import OLD_SNAPSHOT_COMMITS

HOLDER = """
import sys, lmdb
env = lmdb.open(sys.argv[1], readonly=True, max_dbs=32)
with env.begin():
    print("holding", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""
CAP_BYTES = 1 << 20


def test_a_full_map_names_the_process_that_holds_an_old_snapshot(tmp_path) -> None:
    store = JournalStore(tmp_path / "j", CAP_BYTES)
    store.commit_now(WriteBatch.empty().put_raw(Journal.PCJ, b"first", b"x"))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store.path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        refused = None
        commits = 0
        while refused is None and commits < 10_000:  # each replaces the last: freed pages
            batch = WriteBatch.empty().put_raw(Journal.PCJ, b"churn", b"y" * 20_000)
            try:
                store.commit_now(batch)
                commits += 1
            except JournalFullError as error:
                refused = error
        assert refused is not None and commits > OLD_SNAPSHOT_COMMITS
        assert f"pid {holder.pid} reads it from a snapshot" in str(refused), refused
        assert "cannot be reused until it ends" in str(refused)
    finally:
        holder.communicate("")
        store.close()
