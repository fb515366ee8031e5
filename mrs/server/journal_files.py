"""Opens the server's journals and guards its data directory while it serves.

One server per data directory (a lock), a damaged journal file read in a child
process before this one opens it, headroom for the largest message, and a look at
the directory once a second: a directory removed or replaced stops the server
loudly instead of committing into nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import lmdb
import trio

from journals import JournalError, JournalStore
from mrs.config.bus import BusConfig, GroupConfig
from mrs.limits import DATA_DIR_CHECK_INTERVAL_S
from mrs.server import startup
from mrs.storage.datadir import DataDirError, DataDirGuard
from mrs.storage.fault_file import file_fault_hook
from mrs.storage.journal_check import verify_before_open
from mrs.storage.journal_reserve import ensure_headroom

log = logging.getLogger("mrs.server")


class ServerJournals:
    """The journal and data-directory part of `mrs.server.group_server.GroupServer` (a mixin)."""

    bus: BusConfig
    config: GroupConfig
    open_store: Callable[[], JournalStore]
    fault_file: Path | None
    data_dir_guard: DataDirGuard | None
    data_dir_lost: str | None
    _cancel_scope: trio.CancelScope | None

    def _open_journals(self) -> JournalStore:
        """open_store, with the usual operator mistakes as one line each."""
        if self.open_store == self._open_lmdb:
            startup.check_data_dir(self.bus, self.config)
        try:
            return self.open_store()
        except (lmdb.Error, MemoryError, JournalError) as error:
            raise startup.journal_failure(self.bus, self.config, error) from None

    def _open_lmdb(self) -> JournalStore:
        """Lock the data directory (one server per directory), then open its journals
        with the directory's identity checked before every commit."""
        guard = DataDirGuard.acquire(self.config.data_dir)
        # Read it in a child first: a damaged file must not abort this process.
        if (damage := verify_before_open(self.config.data_dir / "journals")) is not None:
            guard.release()
            raise DataDirError(damage)
        token = trio.lowlevel.current_trio_token()
        try:
            store = JournalStore(
                self.config.data_dir / "journals",
                self.config.ops.journal_bytes_initial or self.config.limits.journal_bytes_max,
                fault_hook=guard.commit_hook(
                    file_fault_hook(self.fault_file) if self.fault_file else None,
                    lambda reason: token.run_sync_soon(self._lose_data_dir, reason),
                ),
            )
        except BaseException:
            guard.release()
            raise
        limits = self.config.limits
        ensure_headroom(store, limits.journal_bytes_max, limits.message_bytes_max)
        guard.watch_journal(self.config.data_dir / "journals" / "data.mdb")
        self.data_dir_guard = guard
        return store

    async def _watch_data_dir(self) -> None:
        """Between commits, look at the data directory once a second."""
        while True:
            await trio.sleep(DATA_DIR_CHECK_INTERVAL_S)
            try:
                self.data_dir_guard.check()
            except DataDirError as error:
                self._lose_data_dir(str(error))
                return

    def _lose_data_dir(self, reason: str) -> None:
        """The data directory is gone or replaced: say so loudly and stop serving."""
        if self.data_dir_lost is not None:
            return
        self.data_dir_lost = reason
        log.critical("%s; stopping the server", reason)
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()
