"""One LMDB environment per group holding its SAF, DQF, DLJ and PCJ, plus metadata.

Why this shape:
- Every journal of a group lives in one environment so that a move between them
  (confirm = delete from DQF + append to PCJ) is one atomic transaction.
- Writes go through `GroupCommitWriter`: one long-lived thread that takes every
  pending batch, applies them all in one write transaction, commits it with fsync,
  and only then reports each batch durable. Many puts cost one fsync.
- Reads (startup recovery, dump, selection scans) use read-only snapshots and may run
  while the writer works, from this process or another one.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb

from journals import dqf_index, residency
from journals.batch import (
    JournalDeviceError,
    JournalError,
    JournalFullError,
    WriteBatch,
)
from journals.keys import (
    PREFIX,
    RECORD_JOURNALS,
    Journal,
    group_key,
    queue_key,
    seq_key,
    split_key,
)
from journals.record import CorruptRecord, Record, decode_record

__all__ = [
    "RECORD_JOURNALS",
    "FaultHook",
    "Journal",
    "JournalDeviceError",
    "JournalError",
    "JournalFullError",
    "JournalStore",
    "Selection",
    "WriteBatch",
    "apply_batches",
    "decode_selected",
    "group_key",
    "queue_key",
    "seq_key",
    "split_key",
]


FaultHook = Callable[[str], None]
"""Called by the writer at each commit with the phase name, "commit" before the
transaction's writes and "flush" after them (after `before_commit`), before the
commit; may raise OSError (or lmdb.MapFullError). Only the fault-injection harness
installs one (mrs.storage.fault_file)."""


@dataclass(frozen=True, slots=True)
class Selection:
    """Which records a scan yields. None means 'any'. Times are ns since the epoch."""

    seq_min: int | None = None
    seq_max: int | None = None
    time_min_ns: int | None = None
    time_max_ns: int | None = None
    prefix: int | None = None
    """Target queue (DQF) or target group (SAF): scanned as a key range."""
    msg_class: int | None = None
    msg_type: int | None = None

    def matches(self, record: Record) -> bool:
        if self.seq_min is not None and record.seq < self.seq_min:
            return False
        if self.seq_max is not None and record.seq > self.seq_max:
            return False
        time_ns = record.confirm_time_ns or record.written_time_ns
        if self.time_min_ns is not None and time_ns < self.time_min_ns:
            return False
        if self.time_max_ns is not None and time_ns > self.time_max_ns:
            return False
        if self.msg_class is not None and record.msg_class != self.msg_class:
            return False
        return self.msg_type is None or record.msg_type == self.msg_type


class JournalStore:
    """The LMDB environment of one group. Open it once per process."""

    def __init__(
        self,
        path: Path,
        map_size_bytes: int = 1 << 30,
        *,
        readonly: bool = False,
        fault_hook: FaultHook | None = None,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.fault_hook = fault_hook
        self._page_dropper = residency.PageDropper(self.path / "data.mdb")
        self.grow_map: Callable[[], bool] | None = None
        """Set by the server (mrs.storage.journal_usage): grow the map; True if it grew."""
        if not readonly:
            _owner_only(self.path)
        self.env = lmdb.open(
            str(self.path),
            mode=FILE_MODE,
            map_size=map_size_bytes,
            max_dbs=len(Journal) + 2,
            sync=True,
            metasync=True,
            readonly=readonly,
            lock=True,
            max_readers=256,
        )
        self._dbs: dict[Journal, Any] = (  # an lmdb database; None: absent (read-only)
            {
                journal: self.env.open_db(journal.value.encode(), create=not readonly)
                for journal in Journal
            }
            if not readonly
            else self._open_readonly_dbs()
        )
        self._counted = [self._dbs[journal] for journal in Journal] if not readonly else []
        """The handles whose entry counts every commit stamps (journals.dqf_index)."""
        self.dqf_index = dqf_index.open_index(
            self.env, self._dbs[Journal.DQF], readonly=readonly, counted=self._counted
        )
        """The DQF's keys alone (journals.dqf_index); None: read the DQF's own keys."""

    def _open_readonly_dbs(self) -> dict[Journal, Any]:
        dbs: dict[Journal, Any] = {}
        for journal in Journal:
            try:
                dbs[journal] = self.env.open_db(journal.value.encode(), create=False)
            except lmdb.NotFoundError:
                dbs[journal] = None
        return dbs

    def db(self, journal: Journal) -> Any:
        return self._dbs[journal]

    def close(self) -> None:
        self.env.close()

    # ----- synchronous writes (startup, tools); the server's hot path uses the writer
    def commit_now(self, batch: WriteBatch) -> None:
        """Apply one batch in its own synced transaction, on the calling thread."""
        self.apply([batch])

    def apply(
        self, batches: list[WriteBatch], before_commit: Callable[[], None] | None = None
    ) -> None:
        """Apply batches in one synced transaction (what the writers call). A full map
        that `grow_map` can still grow (towards its cap) is grown and tried once more,
        unless `before_commit` already ran.

        `before_commit` runs once every write is in the transaction, before its commit
        (the flush): a replicated active sends the commit to its replicas there, so
        their flushes overlap its own (mrs.replication.stream `RecordingStore`). A
        full map is found while writing, before it; what fails after it is the flush
        itself (a device error, or rarely a map filled by the commit's own pages), and
        is not tried again: the commit went out once already."""
        ran: list[bool] = []

        def hook() -> None:
            ran.append(True)
            if before_commit is not None:
                before_commit()

        told = None if before_commit is None else hook
        try:
            apply_batches(self, batches, told)
        except JournalFullError:
            if ran or self.grow_map is None or not self.grow_map():
                raise
            apply_batches(self, batches, told)

    def items_after(
        self,
        journal: Journal,
        prefix: bytes,
        after_key: bytes | None,
        count_max: int,
        bytes_max: int,
    ) -> list[tuple[bytes, bytes]]:
        """Raw (key, value) pairs whose key starts with `prefix` and sorts after
        `after_key`, in key order, at most count_max and about bytes_max (always one)."""
        db = self._dbs[journal]
        items: list[tuple[bytes, bytes]] = []
        if db is None:
            return items
        with self.env.begin(db=db) as txn:
            cursor = txn.cursor(db)
            if not cursor.set_range(after_key + b"\x00" if after_key else prefix):
                return items
            size = 0
            for key, value in cursor:
                if not key.startswith(prefix) or len(items) >= count_max:
                    break
                if items and size + len(value) > bytes_max:
                    break
                size += len(value)
                items.append((key, value))
        return items

    # ----- reads
    def count(self, journal: Journal) -> int:
        db = self._dbs[journal]
        if db is None:
            return 0
        with self.env.begin(db=db) as txn:
            return txn.stat(db)["entries"]

    def get(self, journal: Journal, key: bytes) -> Record | None:
        """One record by key (None if absent); raises CorruptRecord if it is corrupt."""
        db = self._dbs[journal]
        if db is None:
            return None
        with self.env.begin(db=db) as txn:
            value = txn.get(key)
        return None if value is None else decode_record(value, journal.value, key)

    def get_raw(self, journal: Journal, key: bytes) -> bytes | None:
        db = self._dbs[journal]
        if db is None:
            return None
        with self.env.begin(db=db) as txn:
            return txn.get(key)

    def get_raw_many(self, journal: Journal, keys: list[bytes]) -> list[bytes | None]:
        """The values at `keys` (None where absent) from one read transaction: a
        queue's cold backlog is read back hundreds at a time (mrs.group.recovery)."""
        db = self._dbs[journal]
        if db is None:
            return [None] * len(keys)
        with self.env.begin(db=db) as txn:
            get = txn.get
            return [get(key) for key in keys]

    def meta_get(self, name: str) -> bytes | None:
        db = self._dbs[Journal.META]
        if db is None:
            return None
        with self.env.begin(db=db) as txn:
            return txn.get(name.encode())

    def scan(
        self, journal: Journal, selection: Selection | None = None
    ) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
        """Yield (key, record) in key order from one consistent snapshot.

        A corrupt record is yielded as a CorruptRecord, so callers can report it and
        go on; nothing corrupt is ever returned as a Record.
        """
        selection = selection or Selection()
        db = self._dbs[journal]
        if db is None:
            return
        with self.env.begin(db=db, buffers=False) as txn:
            cursor = txn.cursor(db)
            start = PREFIX.pack(selection.prefix) if selection.prefix is not None else b""
            if not (cursor.set_range(start) if start else cursor.first()):
                return
            yield from decode_selected(journal, cursor.iternext(), selection, start)

    def raw_items(self, journal: Journal) -> Iterator[tuple[bytes, bytes]]:
        db = self._dbs[journal]
        if db is None:
            return
        with self.env.begin(db=db) as txn:
            yield from txn.cursor(db).iternext(keys=True, values=True)

    def keys(self, journal: Journal) -> Iterator[bytes]:
        """Every key in key order, no value read: the DQF's from its index."""
        if journal is Journal.DQF and self.dqf_index is not None:
            yield from dqf_index.keys(self.env, self.dqf_index, dqf_index.FIRST_KEY)
        elif (db := self._dbs[journal]) is not None:
            yield from dqf_index.keys(self.env, db)

    def release_pages(self) -> int:
        """Drop the data file's pages from this process's map (journals.residency)."""
        return self._page_dropper.release()


def decode_selected(
    journal: Journal,
    items: Iterator[tuple[bytes, bytes]],
    selection: Selection,
    prefix: bytes = b"",
) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
    """(key, record) for the items that match, in order, stopping at the first key
    outside `prefix`; a corrupt value comes out as a CorruptRecord, never a Record."""
    for key, value in items:
        if prefix and not key.startswith(prefix):
            break
        try:
            record = decode_record(value, journal.value, key)
        except CorruptRecord as corrupt:
            yield key, corrupt
        else:
            if selection.matches(record):
                yield key, record


def apply_batches(
    store: JournalStore, batches: list[WriteBatch], before_commit: Callable[[], None] | None = None
) -> None:
    """Apply batches in one write transaction and commit it (fsync), calling
    `before_commit` between the two. Raises JournalError."""
    try:
        if store.fault_hook is not None:
            store.fault_hook("commit")
        index = store.dqf_index
        indexed: list[tuple[bytes, bytes]] = []  # DQF keys put, for the index in one call
        dbs = store._dbs
        dqf = Journal.DQF
        dqf_db = dbs[dqf]
        with store.env.begin(write=True) as txn:
            put = txn.put
            # One cursor per database deletes everything of this commit: confirms
            # delete neighbouring keys, and a cursor already on the right leaf page
            # finds the next one there instead of searching from the root.
            deleters: dict[Journal, Any] = {}
            index_deleter: Any = None
            for batch in batches:
                for journal, key in batch.deletes:
                    deleter = deleters.get(journal)
                    if deleter is None:
                        deleter = deleters[journal] = txn.cursor(db=dbs[journal])
                    if deleter.set_key(key):
                        deleter.delete()
                    if journal is dqf and index is not None:
                        dqf_index.put_keys(txn, index, indexed)  # in order: puts first
                        if index_deleter is None:
                            index_deleter = txn.cursor(db=index)
                        if index_deleter.set_key(key):
                            index_deleter.delete()
                for journal, key, value in batch.puts:
                    if journal is dqf:
                        # A queue's seqs only grow: appended, its pages are filled
                        # instead of split in half (a refused append is put as usual)
                        if not put(key, value, db=dqf_db, append=True):
                            put(key, value, db=dqf_db)
                        indexed.append((key, b""))
                    else:
                        put(key, value, db=dbs[journal])
            if index is not None:
                dqf_index.put_keys(txn, index, indexed)
                dqf_index.stamp(txn, index, store._counted)
            if before_commit is not None:
                before_commit()
            if store.fault_hook is not None:
                store.fault_hook("flush")  # where a device error comes in LMDB: the commit
    except lmdb.MapFullError as error:
        raise JournalFullError(f"journal map full: {error}") from None
    except lmdb.DiskError as error:  # py-lmdb's class for ENOSPC (no space left)
        raise JournalDeviceError(f"journal device failed: {error}", errno.ENOSPC) from None
    except OSError as error:
        raise JournalDeviceError(
            f"journal device failed: {os.strerror(error.errno or errno.EIO)}", error.errno
        ) from None
    except lmdb.Error as error:
        if (full := _disk_full(store.path, batches)) is not None:
            raise JournalDeviceError(full, errno.ENOSPC) from None
        raise JournalDeviceError(f"journal write failed: {error}") from None


DISK_SLACK_BYTES = 1 << 20


def _disk_full(path: Path, batches: list[WriteBatch]) -> str | None:
    """LMDB reports a write that hit a full disk as EIO (a short write): tell the
    operator what it really is when the disk has no room for the batch."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return None
    free_bytes = stats.f_bavail * stats.f_frsize
    needed = DISK_SLACK_BYTES + sum(len(value) for b in batches for _, _, value in b.puts)
    if free_bytes >= needed:
        return None
    return (
        f"journal device full: no space left on device (ENOSPC) for {path}: {free_bytes} bytes free"
    )


FILE_MODE = 0o600
DIR_MODE = 0o700
"""Journals hold message bodies: owner-only whatever the umask (a umask only removes
bits), and files left wider by an older version are narrowed when opened for writing."""


def _owner_only(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path / name, FILE_MODE)
