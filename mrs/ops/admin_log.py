"""The admin journal: who did what to a running group, one JSON object per action.

Kept twice, for two readers. The file `admin-journal.jsonl` in the data directory
(appended and synced per action) is for the machine's log shipping and `tail -f`. The
same lines are committed to the group's journals (META, `KEY_PREFIX` + time + a
count), and `mrs admin journal` reads them from there. Why: a replicated group's
journals are on every instance and its data directory's file is not, so after a
failover `mrs admin journal` on the new active showed nothing of what operators did
before it (an auditor asking who purged a queue found no one); a group's own
journals follow it through a failover, a full copy and a restore from a copy.
At most `ADMIN_LOG_RECORDS_MAX` are kept in the journals (the oldest go with each new
one past it); the file keeps everything.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from journals import Journal, JournalError, WriteBatch
from mrs.limits import ADMIN_LOG_RECORDS_MAX

log = logging.getLogger("mrs.admin")

KEY_PREFIX = b"adminlog:"
_KEY = struct.Struct(">QI")
_SCAN_BYTES = 1 << 20


class AdminLog:
    """The admin journal of one group: `store_of` gives the group's journal store and
    writer while it runs (None while it starts: the file alone then)."""

    def __init__(self, path: Path, store_of: Callable[[], tuple[Any, Any] | None]) -> None:
        self.path = path
        self.store_of = store_of
        self._keys: list[bytes] | None = None
        """The journals' admin-log keys, oldest first (read at the first write)."""
        self._count = itertools.count()

    def write(self, line: dict, then: Callable[[JournalError | None], None] | None = None) -> None:
        """Append `line` to the file and commit it to the journals; `then` is told
        once the commit is as durable as an answer (on a majority of a replicated
        group's instances), with its error if it failed. Why: the line's commit
        follows every commit the action made, so an action whose own writes were not
        made through the writer (mrs.group.incarnation's reset) answers when it is
        durable by waiting for its line."""
        text = json.dumps(line, sort_keys=True)
        try:
            with open(self.path, "ab+") as file:
                # A line cut short (a full disk, a crash in the middle of a write) is
                # ended first: appended to it, this action's line was lost with it.
                file.write((b"\n" if _ends_torn(file) else b"") + text.encode() + b"\n")
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:
            log.error("admin journal %s not written: %s", self.path, error)
        found = self.store_of()
        if found is not None:
            self._commit(*found, text, then)
        elif then is not None:
            then(None)  # the group is starting: nothing of it to wait for

    def read(self, limit: int) -> list[dict]:
        """The last `limit` actions, oldest first: from the group's journals, or from
        the file for a data directory whose journals hold none (written before)."""
        found = self.store_of()
        if found is not None and (keys := self._known_keys(found[0])):
            values = found[0].get_raw_many(Journal.META, keys[-limit:])  # one read
            return [json.loads(value) for value in values if value is not None]
        return read_file(self.path, limit)[0]

    def _commit(
        self,
        store: Any,
        writer: Any,
        text: str,
        then: Callable[[JournalError | None], None] | None,
    ) -> None:
        keys = self._known_keys(store)
        key = KEY_PREFIX + _KEY.pack(time.time_ns(), next(self._count) & 0xFFFFFFFF)
        batch = WriteBatch.empty().put_raw(Journal.META, key, text.encode())
        keys.append(key)
        while len(keys) > ADMIN_LOG_RECORDS_MAX:
            batch.delete(Journal.META, keys.pop(0))

        def committed(error: JournalError | None) -> None:
            if error is not None:
                log.error("admin journal line not committed to the journals: %s", error)
            if then is not None:
                then(error)

        writer.submit(batch, committed)

    def _known_keys(self, store: Any) -> list[bytes]:
        if self._keys is None:
            keys: list[bytes] = []
            after: bytes | None = None
            while pairs := store.items_after(
                Journal.META, KEY_PREFIX, after, ADMIN_LOG_RECORDS_MAX, _SCAN_BYTES
            ):
                keys.extend(key for key, _ in pairs)
                after = pairs[-1][0]
            self._keys = keys
        return self._keys


def _ends_torn(file: Any) -> bool:
    """Whether the file (opened to append and read) ends in a line without its end."""
    if file.seek(0, os.SEEK_END) == 0:
        return False
    file.seek(-1, os.SEEK_END)
    return bool(file.read(1) != b"\n")


def read_file(path: Path, limit: int) -> tuple[list[dict], int]:
    """The last `limit` lines of an admin journal file that read as JSON objects, oldest
    first, and how many of those last lines did not (a line cut short by a crash or a
    full disk): skipped and counted, so the lines around it are still read. Why:
    `mrs admin journal --offline` after a crash stopped at such a line with "unexpected
    error: JSONDecodeError" and showed nothing."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return [], 0
    records: list[dict] = []
    unreadable = 0
    for line in [line for line in lines if line.strip()][-limit:]:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            unreadable += 1
    return records, unreadable
