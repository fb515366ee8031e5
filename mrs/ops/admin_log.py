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
one past it); the file keeps everything. Refusals are journaled one by one up to
ADMIN_REFUSAL_LINES_MAX per principal per ADMIN_REFUSAL_INTERVAL_S, the rest as one
count line (`RefusalLines`), so nobody can push the others' lines out by asking.
One AdminLog per file (`AdminLog.of`): the group's requests and its web page's
actions write the same lines, and two logs each trimmed and listed only their own.

An action that changes the journals commits its line with its own change (`stage`,
`StagedLine.put_in`), and its outcome overwrites that line once known (`settle`).
Why: the line was committed after the action's commit, so a SIGKILL between the two
left a purge or a move done and nobody on record for it. One commit, not the line
first: the line's commit would cost the action a second synced write before it
starts, and a line alone (the action's commit then failed, or never came) would
name a change that was not made. The file's copy is appended at `settle`: a file
cannot join the journals' commit, and an intent line there would be a second line per
action for log shipping to pair with its outcome; `mrs admin journal` reads the
journals, which hold the line whenever they hold the change.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import struct
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from journals import Journal, JournalError, WriteBatch
from mrs.core.refusals import flush_also
from mrs.limits import (
    ADMIN_LOG_RECORDS_MAX,
    ADMIN_REFUSAL_ACTIONS_MAX,
    ADMIN_REFUSAL_INTERVAL_S,
    ADMIN_REFUSAL_LINES_MAX,
    REFUSAL_KEYS_MAX,
)

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
        self._pending: dict[bytes, str] = {}
        """Lines submitted to the journals and not committed yet, by key: `read` shows
        them. Why: a refused action answered at once and its line committed after, so
        a `mrs admin journal` asked right after the answer missed it."""
        self.refusals = RefusalLines(self.write)

    @classmethod
    def of(cls, path: Path, store_of: Callable[[], tuple[Any, Any] | None]) -> AdminLog:
        """The AdminLog of the file at `path`, made at the first ask (the module
        docstring says why one)."""
        key = str(path.resolve())
        found = _LOGS.get(key)
        if found is None:
            found = _LOGS[key] = cls(path, store_of)
        return found

    def stage(self, line: dict) -> StagedLine | None:
        """`line` under a key of its own, for the action's commits to carry
        (`StagedLine.put_in`) and `settle` to finish; None while the group starts (no
        journals: `settle` then writes the line as `write` does). Read back (`read`)
        from now on, as a line whose commit is on its way."""
        found = self.store_of()
        if found is None:
            return None
        key = self._new_key(found[0])
        staged = StagedLine(key, line, json.dumps(line, sort_keys=True).encode())
        self._pending[key] = staged.text.decode()
        return staged

    def settle(
        self, staged: StagedLine | None, then: Callable[[JournalError | None], None] | None = None
    ) -> None:
        """The staged line as it ends (its `line` updated by the caller: the action's
        outcome): appended to the file, and committed over the staged one under the
        same key, so the action has one line whether or not a crash came between.
        `then` as for `write`. The oldest lines past ADMIN_LOG_RECORDS_MAX go here, not
        in the action's commit: that one may fail, and the lines it deleted would stay
        on disk, forgotten."""
        if staged is None:
            return
        text = json.dumps(staged.line, sort_keys=True)
        self._append(text)
        found = self.store_of()
        if found is not None:
            self._commit(*found, text, then, staged.key)
        elif then is not None:
            then(None)

    def write(self, line: dict, then: Callable[[JournalError | None], None] | None = None) -> None:
        """Append `line` to the file and commit it to the journals; `then` is told
        once the commit is as durable as an answer (on a majority of a replicated
        group's instances), with its error if it failed. Why: the line's commit
        follows every commit the action made, so an action whose own writes were not
        made through the writer (mrs.group.incarnation's reset) answers when it is
        durable by waiting for its line."""
        text = json.dumps(line, sort_keys=True)
        self._append(text)
        found = self.store_of()
        if found is not None:
            self._commit(*found, text, then)
        elif then is not None:
            then(None)  # the group is starting: nothing of it to wait for

    def _append(self, text: str) -> None:
        """One line appended to the file and synced (an error is logged: the journals'
        copy is the one `mrs admin journal` reads)."""
        try:
            with open(self.path, "ab+") as file:
                # A line cut short (a full disk, a crash in the middle of a write) is
                # ended first: appended to it, this action's line was lost with it.
                file.write((b"\n" if _ends_torn(file) else b"") + text.encode() + b"\n")
                file.flush()
                os.fsync(file.fileno())
        except OSError as error:
            log.error("admin journal %s not written: %s", self.path, error)

    def read(self, limit: int) -> list[dict]:
        """The last `limit` actions, oldest first: from the group's journals, or from
        the file for a data directory whose journals hold none (written before)."""
        found = self.store_of()
        if found is not None and (keys := self._known_keys(found[0])):
            wanted = keys[-limit:]
            values = found[0].get_raw_many(Journal.META, wanted)  # one read
            pending = self._pending
            texts = [
                value if value is not None else pending.get(key)
                for key, value in zip(wanted, values, strict=True)
            ]
            return [json.loads(text) for text in texts if text is not None]
        return read_file(self.path, limit)[0]

    def _commit(
        self,
        store: Any,
        writer: Any,
        text: str,
        then: Callable[[JournalError | None], None] | None,
        key: bytes | None = None,
    ) -> None:
        """Commit `text` under `key` (a staged line's) or a new key, trimming."""
        keys = self._known_keys(store)
        line_key = key if key is not None else self._new_key(store)
        batch = WriteBatch.empty().put_raw(Journal.META, line_key, text.encode())
        self._pending[line_key] = text
        while len(keys) > ADMIN_LOG_RECORDS_MAX and keys[0] != line_key:
            batch.delete(Journal.META, keys.pop(0))

        def committed(error: JournalError | None) -> None:
            self._pending.pop(line_key, None)
            if error is not None:
                log.error("admin journal line not committed to the journals: %s", error)
            if then is not None:
                then(error)

        writer.submit(batch, committed)

    def _new_key(self, store: Any) -> bytes:
        """A new line's key (time, then a count), listed as the newest."""
        key = KEY_PREFIX + _KEY.pack(time.time_ns(), next(self._count) & 0xFFFFFFFF)
        self._known_keys(store).append(key)
        return key

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


@dataclass(slots=True)
class StagedLine:
    """A line staged for an action's own commits (`AdminLog.stage`): its key, the line
    (its `result` set at `AdminLog.settle`) and its text as staged."""

    key: bytes
    line: dict
    text: bytes

    def put_in(self, batch: WriteBatch) -> WriteBatch:
        """Put the line, as staged, into one of the action's commits: each commit that
        changes the group carries who asked for it (the same key: put again, not twice)."""
        return batch.put_raw(Journal.META, self.key, self.text)


_LOGS: weakref.WeakValueDictionary[str, AdminLog] = weakref.WeakValueDictionary()
"""The AdminLog of each admin journal file in use in this process."""


@dataclass
class _Window:
    """One principal's refusals in the interval that started at `started_s`."""

    started_s: float
    journaled: int = 0
    counted: int = 0
    first_ns: int = 0
    last_ns: int = 0
    actions: dict[str, int] = field(default_factory=dict)


class RefusalLines:
    """Which refusals are journaled one by one: per principal, the first
    ADMIN_REFUSAL_LINES_MAX of each ADMIN_REFUSAL_INTERVAL_S; the others are counted
    and journaled as one line (`action` "refusals") once the interval is over, at the
    principal's next refusal or at the server's next `flush_all`. Why: each
    refusal was a synced line, so a principal with no right asking in a loop cost
    an fsync per request and pushed every other line out of the last
    ADMIN_LOG_RECORDS_MAX; the count line still tells an auditor it happened."""

    def __init__(
        self, write: Callable[[dict], None], clock_s: Callable[[], float] = time.monotonic
    ) -> None:
        self.write = write
        self.clock_s = clock_s
        self._windows: dict[str | None, _Window] = {}
        flush_also(self)

    def admit(self, principal: str | None, action: str) -> bool:
        """Whether this refusal of `principal` is journaled as its own line (else it
        is counted for the interval's count line)."""
        now_s = self.clock_s()
        window = self._windows.get(principal)
        if window is None or now_s - window.started_s >= ADMIN_REFUSAL_INTERVAL_S:
            if window is not None:
                self._counted_line(principal, window)
            elif len(self._windows) >= REFUSAL_KEYS_MAX:
                self.flush(every=True)
            window = self._windows[principal] = _Window(now_s)
        if window.journaled < ADMIN_REFUSAL_LINES_MAX:
            window.journaled += 1
            return True
        window.counted += 1
        window.last_ns = time.time_ns()
        window.first_ns = window.first_ns or window.last_ns
        named = action if action in window.actions else "(others)"
        if len(window.actions) < ADMIN_REFUSAL_ACTIONS_MAX:
            named = action
        window.actions[named] = window.actions.get(named, 0) + 1
        return False

    def flush(self, every: bool = False) -> None:
        """Journal the count line of each interval that is over (`every`: of all)."""
        now_s = self.clock_s()
        for principal, window in list(self._windows.items()):
            if every or now_s - window.started_s >= ADMIN_REFUSAL_INTERVAL_S:
                del self._windows[principal]
                self._counted_line(principal, window)

    def _counted_line(self, principal: str | None, window: _Window) -> None:
        if not window.counted:
            return
        self.write(
            {
                "time_ns": time.time_ns(),
                "principal": principal,
                "peer": None,
                "action": "refusals",
                "args": {"first_ns": window.first_ns, "last_ns": window.last_ns},
                "result": {
                    "refused": f"{window.counted} more refusals not journaled one by one "
                    f"(at most {ADMIN_REFUSAL_LINES_MAX} per {ADMIN_REFUSAL_INTERVAL_S:g} s)",
                    "count": window.counted,
                    "actions": window.actions,
                },
            }
        )
        log.warning(
            "admin: %s: %d more refusals not journaled one by one: %s",
            principal or "(no auth)",
            window.counted,
            window.actions,
        )


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
