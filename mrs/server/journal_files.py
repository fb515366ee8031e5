"""Opens the server's journals and guards its data directory while it serves.

One server per data directory (a lock), a damaged journal file read in a child
process before this one opens it, headroom for the largest message, and a look at
the directory once a second: a directory removed or replaced stops the server
loudly instead of committing into nothing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import lmdb
import trio

from journals import JournalError, JournalStore
from journals.store import restore_after_restart
from mrs.config.bus import BusConfig, GroupConfig
from mrs.limits import DATA_DIR_CHECK_INTERVAL_S
from mrs.server import startup
from mrs.storage import file_identity
from mrs.storage.data_dir_owner import check_journals_group
from mrs.storage.datadir import DataDirError, DataDirGuard
from mrs.storage.fault_file import file_fault_hook
from mrs.storage.journal_check import verify_before_open
from mrs.storage.journal_reserve import ensure_headroom
from mrs.storage.reservation_mark import ReservationMark

log = logging.getLogger("mrs.server")


class JournalFiles:
    """A server's journals and the data directory that holds them: opened once, then
    watched until the server stops. `lost` says why the directory was lost, if it was;
    `on_lost` stops the server that owns them."""

    def __init__(
        self,
        bus: BusConfig,
        config: GroupConfig,
        on_lost: Callable[[], None],
        *,
        open_store: Callable[[], JournalStore] | None = None,
        fault_file: Path | None = None,
    ) -> None:
        self.bus = bus
        self.config = config
        self.on_lost = on_lost
        self.open_store = open_store
        """Another store to open instead of the LMDB files (the simulator's); None: LMDB."""
        self.fault_file = fault_file
        """Journal fault injection for the harness (mrs.storage.fault_file); None in production."""
        self.guard: DataDirGuard | None = None
        self.lost: str | None = None

    def open(self) -> JournalStore:
        """The store, with the usual operator mistakes as one line each."""
        if self.open_store is None:
            startup.check_data_dir(self.bus, self.config)
        try:
            return self.open_store() if self.open_store is not None else self._open_lmdb()
        except (lmdb.Error, MemoryError, JournalError) as error:
            raise startup.journal_failure(self.bus, self.config, error) from None

    def release(self) -> None:
        """Unlock the data directory (the server stopped or failed to start)."""
        if self.guard is not None:
            self.guard.release()

    def _open_lmdb(self) -> JournalStore:
        """Lock the data directory (one server per directory), then open its journals
        with the directory's identity checked before every commit."""
        guard = DataDirGuard.acquire(self.config.data_dir)
        journals = self.config.data_dir / "journals"
        # The meta pages put back from the log's checkpoint first (after a power loss,
        # or one damaged): the file as LMDB left it may name pages the disk never got,
        # and the check below refused a start the log recovers.
        restore_after_restart(journals)
        # Read it in a child first: a damaged file must not abort this process.
        if (damage := verify_before_open(journals)) is not None:
            guard.release()
            raise DataDirError(damage)
        token = trio.lowlevel.current_trio_token()
        try:
            store = JournalStore(
                self.config.data_dir / "journals",
                self.config.ops.journal_bytes_initial or self.config.limits.journal_bytes_max,
                fault_hook=guard.commit_hook(
                    file_fault_hook(self.fault_file) if self.fault_file else None,
                    lambda reason: token.run_sync_soon(self.lose, reason),
                ),
            )
        except BaseException:
            guard.release()
            raise
        try:
            check_journals_group(store, journals, self.config.id, f"group {self.config.id}")
        except BaseException:
            store.close()
            guard.release()
            raise
        limits = self.config.limits
        ensure_headroom(store, limits.journal_bytes_max, limits.message_bytes_max)
        journal_file = self.config.data_dir / "journals" / "data.mdb"
        guard.watch_journal(journal_file)
        with contextlib.suppress(OSError):  # unreadable: no copy noticed (and none made)
            store.lineage = file_identity.lineage_of(str(journal_file))
        store.reservation_mark = ReservationMark(self.config.data_dir)
        self.guard = guard
        return store

    async def watch(self, guard: DataDirGuard) -> None:
        """Between commits, look at the data directory once a second."""
        while True:
            await trio.sleep(DATA_DIR_CHECK_INTERVAL_S)
            try:
                guard.check()
            except DataDirError as error:
                self.lose(str(error))
                return

    def lose(self, reason: str) -> None:
        """The data directory is gone or replaced: say so loudly and stop serving."""
        if self.lost is not None:
            return
        self.lost = reason
        log.critical("%s; stopping the server", reason)
        self.on_lost()
