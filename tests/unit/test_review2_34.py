"""Review of the thirty-fourth session's commits: what `mrs status` says of an
automatic PCJ archive that went well, and the work a link's flush does to find a
peer's confirm notices when another group's are kept beside them."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

from journals import Journal, WriteBatch, group_key
from mrs.ops.pcj_retention import _child_run
from mrs.protocol.link_events import ConfNotice, encode_notice
from mrs.tools.status_render import archive_note


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


async def test_a_peers_notices_are_found_without_reading_another_groups(mem_bus) -> None:
    """Confirm notices for a group the config links no more are kept (5b6b39c), as
    many as its messages confirmed here. Each flush of another link that has
    notices to send read every one of them (50 ms per flush for 200,000). The real
    group's Notices on the in-process bus (a compiled build checks its parts' types),
    its journal's reads counted."""
    store = mem_bus.store
    batch = WriteBatch.empty()
    for peer, count in ((2, 3), (3, 2000)):
        for n in range(count):
            seq = (peer << 48) + n
            batch.put_raw(Journal.NOTICES, group_key(peer, seq), encode_notice(ConfNotice(seq, 1)))
    store.commit_now(batch)
    read = 0
    whole_journal, some_items = store.raw_items, store.items_after

    def raw_items(journal: Journal):
        nonlocal read
        for item in whole_journal(journal):
            read += 1
            yield item

    def items_after(*args):
        nonlocal read
        items = some_items(*args)
        read += len(items)
        return items

    store.raw_items, store.items_after = raw_items, items_after
    group = mem_bus.server.group
    assert group is not None
    found = group.notices.pending_notices(2, 512)
    assert [notice.seq for _, notice in found] == [(2 << 48) + n for n in range(3)]
    assert read <= 3, f"{read} notices read to find group 2's 3"
