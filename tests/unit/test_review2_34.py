"""Review of the thirty-fourth session's commits: what `mrs status` says of an
automatic PCJ archive that went well, and the work a link's flush does to find a
peer's confirm notices when another group's are kept beside them."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from journals import Journal, WriteBatch, group_key
from mrs.group.notices import Notices
from mrs.ops.pcj_retention import _child_run
from mrs.protocol.link_events import ConfNotice, encode_notice
from mrs.tools.status_render import archive_note
from sim.memstore import MemoryJournalStore


async def test_an_automatic_archive_that_moved_records_is_named_automatic_in_status() -> None:
    """A group that is not replicated runs its automatic policy as `mrs pcj archive
    --json` in a child: its summary has no `run`, and the status note read "PCJ
    archive (run): ...", not "(automatic)" as docs/operations.md shows it."""
    summary = {"group": 1, "dir": "/srv/a", "archived": 5000, "files": ["/srv/a/x.parquet"]}
    command = [sys.executable, "-c", f"print({json.dumps(json.dumps(summary))})"]
    ops = SimpleNamespace(server=SimpleNamespace(config=None), last_archive=None)
    await _child_run(ops, command)  # type: ignore[arg-type]
    assert archive_note(ops.last_archive) == (
        "PCJ archive (automatic): 5000 records in 1 files to /srv/a"
    )


class _CountingStore:
    """A store that counts the journal entries handed out to its reader."""

    def __init__(self, store: MemoryJournalStore) -> None:
        self.store = store
        self.read = 0

    def raw_items(self, journal: Journal):
        for item in self.store.raw_items(journal):
            self.read += 1
            yield item

    def items_after(self, *args):
        items = self.store.items_after(*args)
        self.read += len(items)
        return items


def test_a_peers_notices_are_found_without_reading_another_groups() -> None:
    """Confirm notices for a group the config links no more are kept (5b6b39c), as
    many as its messages confirmed here. Each flush of another link that has
    notices to send read every one of them (50 ms per flush for 200,000)."""
    store = MemoryJournalStore()
    batch = WriteBatch.empty()
    for peer, count in ((2, 3), (3, 2000)):
        for n in range(count):
            seq = (peer << 48) + n
            batch.put_raw(Journal.NOTICES, group_key(peer, seq), encode_notice(ConfNotice(seq, 1)))
    store.commit_now(batch)
    counting = _CountingStore(store)
    notices = Notices(SimpleNamespace(store=counting), None, None, None, None)  # type: ignore[arg-type]
    found = notices.pending_notices(2, 512)
    assert [notice.seq for _, notice in found] == [(2 << 48) + n for n in range(3)]
    assert counting.read <= 3, f"{counting.read} notices read to find group 2's 3"
