"""One LMDB environment per group holding its SAF, DQF, DLJ and PCJ, plus metadata.

Why this shape:
- Every journal of a group lives in one environment so that a move between them
  (confirm = delete from DQF + append to PCJ) is one atomic transaction.
- Writes go through `GroupCommitWriter`: one long-lived thread that takes every
  pending batch, applies them all in one write transaction, makes it durable with
  one flush of the commit log (journals.commit_log) and commits it to LMDB, and only
  then reports each batch durable. Many puts cost one flush.
- Reads (startup recovery, dump, selection scans) use read-only snapshots and may run
  while the writer works, from this process or another one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import msgpack

from journals import dqf_index, freelist, lock_file, residency
from journals.batch import (
    JournalDeviceError,
    JournalError,
    JournalFullError,
    WriteBatch,
    decode_batches,
    encode_batches,
)
from journals.commit_log import (
    CHECKPOINT_GROWTH_SHARE,
    CHECKPOINT_LOG_BYTES,
    CHECKPOINT_WASTE_BYTES,
    LOG_NAMES,
    LOG_RECORD_BYTES_MAX,
    NEAR_FULL_SHARE,
    CheckpointStart,
    CommitLog,
    LogContents,
    boot_id,
    read_log,
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


_LOG_DB = b"commit_log"
"""The database holding the number of the last commit applied (`_LOG_NUMBER_KEY`): a
database of its own, outside `Journal`, so no scan or full copy of the journals
carries one store's number into another."""
_LOG_NUMBER_KEY = b"number"
_U64 = struct.Struct(">Q")


class _CheckpointJob:
    """A checkpoint begun: the snapshot it pins, and its flush and header, run on a
    thread of their own beside the commits."""

    def __init__(self, start: CheckpointStart, pinned: Any) -> None:
        self.start = start
        self.pinned = pinned
        self.thread: threading.Thread | None = None
        self.error: OSError | None = None

    def failed(self) -> OSError | None:
        """Its flush's error, read through a call: after `job.error = None` and a
        flush that set it again, a read of `job.error` itself is narrowed to None by
        the type checker, and the compiled module then raised TypeError
        ("None object expected; got OSError") instead of the journal error."""
        return self.error


class JournalStore:
    """The LMDB environment of one group. Open it once per process."""

    def __init__(
        self,
        path: Path,
        map_size_bytes: int = 1 << 30,
        *,
        readonly: bool = False,
        fault_hook: FaultHook | None = None,
        beside_owner: bool = False,
    ) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.fault_hook = fault_hook
        self._page_dropper = residency.PageDropper(self.path / "data.mdb")
        self.grow_map: Callable[[], bool] | None = None
        """Set by the server (mrs.storage.journal_usage): grow the map; True if it grew."""
        self.lineage: bytes | None = None
        """Set by the server (mrs.server.journal_files): data.mdb's inode and birth time
        (mrs.storage.file_identity `lineage_of`), kept in the journal by the seq
        allocator so that a copy of it (a backup restored) counts seqs from its clock."""
        self.reservation_mark: Any = None
        """Set by the server (mrs.server.journal_files): the file beside the journals that
        the seq allocator writes each reservation to, read at start for a copy restored
        over the journal file (mrs.storage.reservation_mark)."""
        self.guest = False
        """Writing beside the process that owns the journals (its server): each commit
        synced by LMDB itself, never through the owner's commit log (`_writer_lock`)."""
        self._writer_fd = -1
        if not readonly:
            _owner_only(self.path)
            self._writer_fd = _writer_lock(self.path, beside_owner)
            self.guest = self._writer_fd < 0
        try:
            self._open_beside_owner(map_size_bytes, readonly)
        except BaseException:
            if hasattr(self, "env"):
                self.env.close()
            if self._writer_fd >= 0:  # a store that did not open owns nothing
                os.close(self._writer_fd)
            raise

    def _open_beside_owner(self, map_size_bytes: int, readonly: bool) -> None:
        """Open, sharing LMDB's lock.mdb with the journals' owner if another process
        owns them (journals.lock_file), or as the owner recording the one it opened."""
        owner_alive = True if self.guest else None
        if self._writer_fd < 0:  # a guest or a reader: never beside another lock.mdb
            lock_file.check_beside_owner(self.path, owner_alive)
        self._open(map_size_bytes, readonly)
        if self._writer_fd >= 0:
            lock_file.record_owner(self._writer_fd, self.path)
        else:  # a lock.mdb deleted meanwhile was made again by this open: let it go
            lock_file.check_beside_owner(self.path, owner_alive)

    def _open(self, map_size_bytes: int, readonly: bool) -> None:
        """The environment and its state; for the owner, after the log's replay."""
        log_contents = LogContents(None, [])
        if not readonly and not self.guest:
            log_contents = _restore_meta_pages(self.path)
            lock_file.allocate_new(self.path, _MAX_READERS)  # no SIGBUS on a full disk
        # Unflushed: each commit is made durable by the commit log's one flush
        # (journals.commit_log); a checkpoint flushes LMDB. A guest's are synced.
        self.env = lmdb.open(
            str(self.path),
            mode=FILE_MODE,
            map_size=map_size_bytes,
            max_dbs=len(Journal) + 3,
            sync=self.guest,
            metasync=self.guest,
            readonly=readonly,
            lock=True,
            max_readers=_MAX_READERS,
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
        self.commit_log: CommitLog | None = None
        """None for a read-only store: it never writes."""
        self.log_number = 0
        """The number of the last commit applied (in the log and in LMDB)."""
        self._pinned: Any = None
        """A read transaction on the last checkpoint's snapshot: LMDB reuses none of
        its pages while it is open, so they are whole on disk whatever a power loss
        keeps of the writes since (journals.commit_log)."""
        self._page_bytes = int(self.env.stat()["psize"])
        self._checkpoint_last_page = 0
        self._checkpoint: _CheckpointJob | None = None
        """The checkpoint under way (its flush on a thread), if any."""
        self._data_fd = -1
        self._disk_tight = False
        """The disk had too little free at the last checkpoint for the log's way
        (`near_full`); measured again at each checkpoint."""
        self.failed: JournalDeviceError | None = None
        """Set once a flush failed after LMDB took its commit (`_flush_direct`)."""
        self.writeback_due = False
        """A logged commit left LMDB's pages dirty and nobody has started writing them
        yet (`start_writeback`)."""
        if not readonly:
            self._log_db: Any = self.env.open_db(_LOG_DB, create=True)
            if not self.guest:
                self._recover(log_contents)

    def _recover(self, contents: LogContents) -> None:
        """Apply the log's records LMDB does not have, then checkpoint: the store
        opens at the last commit the log made durable."""
        with self.env.begin() as txn:
            raw = txn.get(_LOG_NUMBER_KEY, db=self._log_db)
        applied = _U64.unpack(raw)[0] if raw else 0
        since = contents.checkpoint.number if contents.checkpoint is not None else 0
        if applied < since:
            raise JournalError(
                f"the journals in {self.path} end at commit {applied}, before their log's "
                f"checkpoint at {since}: they are an older copy; move the commit.*.log "
                "files aside to open the journals as they are"
            )
        if contents.damaged_beyond > max(applied, contents.last_number):
            assert contents.damage is not None
            raise _damaged_log(self.path, contents.damage)
        for number, payload in contents.records:
            if number > applied:
                apply_batches(self, decode_batches(msgpack.unpackb(payload)), replayed=number)
        self.log_number = max(applied, contents.last_number)
        self.commit_log = CommitLog(self.path, contents)
        self._data_fd = os.open(self.path / "data.mdb", os.O_RDONLY)
        self.checkpoint()

    def checkpoint(self) -> None:
        """Flush LMDB now and let the log start from here (at open and close, and for
        room in a full map); one under way is waited for first. JournalDeviceError if
        the flush fails."""
        try:
            self._end_checkpoint(wait=True)
            job = self._begin_checkpoint()
            _flush_and_mark(self, job)
            self._end_checkpoint(wait=True)
        except OSError as error:
            raise JournalDeviceError(
                f"journal device failed: {os.strerror(error.errno or errno.EIO)}", error.errno
            ) from None

    def _begin_checkpoint(self) -> _CheckpointJob:
        """On the writer, between commits: pin this snapshot and send the later
        records to the log's other file (journals.commit_log)."""
        assert self.commit_log is not None
        self._disk_tight = _disk_tight(self.path, int(self.env.info()["map_size"]))
        meta_pages = os.pread(self._data_fd, 2 * self._page_bytes, 0)
        pinned = self.env.begin()
        self._checkpoint_last_page = int(self.env.info()["last_pgno"])
        job = _CheckpointJob(self.commit_log.begin_checkpoint(self.log_number, meta_pages), pinned)
        self._checkpoint = job
        return job

    def _end_checkpoint(self, wait: bool) -> None:
        """A checkpoint whose header is written ends: the snapshot before it is no
        longer kept. One whose flush failed is tried again (raising when `wait`);
        the records since are in the log either way."""
        job = self._checkpoint
        if job is None:
            return
        if job.thread is not None:
            if job.thread.is_alive() and not wait:
                return
            job.thread.join()
            job.thread = None
        if job.error is not None:
            job.error = None
            if not wait:
                _start_flush(self, job)
                return
            _flush_and_mark(self, job)
            if (error := job.failed()) is not None:
                raise error
        self._checkpoint = None
        if self._pinned is not None:
            self._pinned.abort()
        self._pinned = job.pinned

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
        if self.commit_log is not None:
            with contextlib.suppress(lmdb.Error, JournalError):
                self.checkpoint()  # the next open replays nothing
            pins = [self._pinned]
            if self._checkpoint is not None:  # its flush failed: given up at close
                if self._checkpoint.thread is not None:
                    self._checkpoint.thread.join()
                pins.append(self._checkpoint.pinned)
            for pinned in pins:
                if pinned is not None:
                    pinned.abort()
            self.commit_log.close()
            self.commit_log = None
            os.close(self._data_fd)
        self.env.close()
        if self._writer_fd >= 0:
            os.close(self._writer_fd)  # releases the writer lock
            self._writer_fd = -1

    def let_go_in_forked_child(self) -> None:
        """In a child forked while this store was open: close the child's copy of the
        writer lock, and nothing else (the environment, its snapshot and its log stay
        the parent's; the child must not write, checkpoint or close them).

        Why: an flock belongs to the open file, which fork shares, so a child that
        outlived its SIGKILLed parent kept the journals locked for a process that no
        longer existed, and the parent's successor was refused them."""
        if self._writer_fd >= 0:
            os.close(self._writer_fd)
            self._writer_fd = -1

    # ----- synchronous writes (startup, tools); the server's hot path uses the writer
    def commit_now(self, batch: WriteBatch) -> None:
        """Apply one batch in its own synced transaction, on the calling thread."""
        self.apply([batch])

    def apply(
        self, batches: list[WriteBatch], before_commit: Callable[[], None] | None = None
    ) -> None:
        """Apply batches in one synced transaction (what the writers call). A full map
        is tried again after each remedy that made room: a checkpoint that frees the
        pages the last one pinned, then `grow_map` (towards the cap, then once by the
        journal reserve: mrs.storage.journal_usage); not once `before_commit` ran.

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
        # Each remedy once, in turn; one that found nothing to do passes to the next.
        remedies = iter((self._free_pinned_pages, self._grow_map))
        disk_remedy = True
        while True:
            try:
                apply_batches(self, batches, told)
                break
            except JournalFullError:
                if ran or not any(made_room() for made_room in remedies):
                    raise
            except JournalDeviceError as error:
                if ran or not disk_remedy or not self._room_on_full_disk(error):
                    raise
                disk_remedy = False
        if self.commit_log is not None:
            self._end_checkpoint(wait=False)
            if self._checkpoint is None and self._checkpoint_due():
                _start_flush(self, self._begin_checkpoint())

    def _checkpoint_due(self) -> bool:
        """Once the log holds CHECKPOINT_LOG_BYTES (the replay after a crash), or the
        file grew by CHECKPOINT_WASTE_BYTES more than the log did since the last
        checkpoint began, or by 1/CHECKPOINT_GROWTH_SHARE of the map: LMDB reuses no
        page freed while the checkpoint's snapshot is pinned, so until the next one a
        commit's copied tree path takes new pages at the file's end (and in a small
        map, what confirms delete stays unused)."""
        assert self.commit_log is not None
        logged_bytes = self.commit_log.bytes_since_checkpoint
        if logged_bytes >= CHECKPOINT_LOG_BYTES:
            return True
        info = self.env.info()
        grown_bytes = (info["last_pgno"] - self._checkpoint_last_page) * self._page_bytes
        share_bytes = info["map_size"] // CHECKPOINT_GROWTH_SHARE
        return grown_bytes > share_bytes or grown_bytes - logged_bytes > CHECKPOINT_WASTE_BYTES

    def near_full(self) -> bool:
        """Whether LMDB's file reaches into the last 1/NEAR_FULL_SHARE of its map:
        then each commit is flushed and checkpointed on its own (`_flush_direct`), so
        pages freed by deletes are reused at once, as before the log, and the journal
        reserve's room (measured in pages in use) is there for the confirms that
        drain a full journal. So too while the disk has less free than a checkpoint
        cycle may take (`_disk_tight`): logged, the log's copies and the pages no
        commit may reuse until the next checkpoint filled a nearly full disk by
        themselves, and the confirms that would drain it then failed on ENOSPC."""
        if self._disk_tight:
            return True
        info = self.env.info()
        used_bytes = (info["last_pgno"] + 1) * self._page_bytes
        return used_bytes * NEAR_FULL_SHARE > info["map_size"] * (NEAR_FULL_SHARE - 1)

    def _free_pinned_pages(self) -> bool:
        """After a full map: a checkpoint lets LMDB reuse the pages freed since the
        last one; True if there were commits since (room may have come)."""
        if self.commit_log is None:
            return False
        if not self.commit_log.bytes_since_checkpoint and self._checkpoint is None:
            return False
        self.checkpoint()
        return True

    def _grow_map(self) -> bool:
        return self.grow_map is not None and self.grow_map()

    def _room_on_full_disk(self, error: JournalDeviceError) -> bool:
        """After a commit the full disk refused (ENOSPC; nothing of it was kept): a
        checkpoint lets LMDB reuse the pages freed since the last one, inside its
        file, and measures the disk again, so the commits after it are flushed on
        their own (`near_full`) and reuse what each frees. Without it a disk filled
        at once by another program refused every get and confirm, the very commits
        that free space, until the next checkpoint, which no failing commit reached.
        True if the commit may be tried again."""
        if error.errno_value != errno.ENOSPC or self.commit_log is None or self.failed:
            return False
        try:
            self.checkpoint()
        except JournalError:
            return False
        return True

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

    def start_writeback(self) -> None:
        """Start writing the pages the logged commits since the last call left dirty in
        LMDB's file, without waiting for them (journals.residency), as a synced
        commit wrote them with every commit: the checkpoint's flush then finds little
        left. Why not inside the commit: the commit's answers need only the log's
        flush, and this syscall would stand before every one of them (its cost:
        benchmarks/README.md, "What a paced put costs"); the server calls this once
        they are on their sockets, a replica once its acknowledgement is. A commit
        that finds it still due (nobody called) starts it itself first."""
        if self.writeback_due:
            self.writeback_due = False
            residency.start_writeback(self._data_fd)


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
    store: JournalStore,
    batches: list[WriteBatch],
    before_commit: Callable[[], None] | None = None,
    replayed: int = 0,
) -> None:
    """Apply batches in one write transaction and make it durable (the commit log's
    flush, then LMDB's commit), calling `before_commit` once every write is in.
    `replayed`: the number of a log record being applied again at open (not logged
    again, no fault hook). Raises JournalError."""
    try:
        _commit(store, batches, before_commit, replayed)
    except lmdb.MapFullError:
        raise JournalFullError(_map_full_words(store)) from None
    except lmdb.DiskError:  # py-lmdb's class for ENOSPC (no space left)
        raise JournalDeviceError(_disk_full_words(store.path), errno.ENOSPC) from None
    except OSError as error:
        raise JournalDeviceError(
            f"journal device failed: {os.strerror(error.errno or errno.EIO)}", error.errno
        ) from None
    except lmdb.Error as error:
        if (full := _disk_full(store.path, batches)) is not None:
            raise JournalDeviceError(full, errno.ENOSPC) from None
        raise JournalDeviceError(f"journal write failed: {error}") from None


def _map_full_words(store: JournalStore) -> str:
    """What a commit the full map refused says (the MRS_RES_EXH of a put or a confirm,
    an admin action's failure): the map, its size and what an operator can do.
    Why: it said py-lmdb's words, "mdb_put: MDB_MAP_FULL: Environment mapsize limit
    reached (Please use a larger Environment(map_size=) parameter)", an option no
    operator has; a group's map is sized by its journal_bytes_max."""
    try:
        size = f"its map of {int(store.env.info()['map_size'])} bytes"
    except lmdb.Error:
        size = "its map"
    return (
        f"journal map full: the journal in {store.path} has no room left in {size} for "
        "this commit; drain its queues, archive its PCJ (`mrs pcj archive`) or raise "
        f'journal_bytes_max (docs/journals.md, "A full journal"){snapshot_holders(store)}'
    )


OLD_SNAPSHOT_COMMITS = 10
"""A reader whose snapshot is this many commits behind is named (`snapshot_holders`)."""


def snapshot_holders(store: JournalStore) -> str:
    """The other processes whose read transaction pins the journal's freed pages ("; pid
    N reads it from a snapshot K commits old, ..."), or "" if none does.

    Why: LMDB reuses no page freed after the oldest open snapshot, so a reader left
    waiting (a `mrs dump` piped to a pager, another program's read transaction) fills
    the map however much the queues drain; the full map was blamed on the queues or
    on short runs of free pages, and `mrs status` showed the journal nearly empty."""
    try:
        last_txnid = int(store.env.info()["last_txnid"])
        table = store.env.readers()
    except lmdb.Error:
        return ""
    held = []
    for line in table.splitlines()[1:]:
        words = line.split()
        if len(words) != 3 or not (words[0].isdigit() and words[2].isdigit()):
            continue  # a free slot ("-") or a line of another shape
        pid, behind = int(words[0]), last_txnid - int(words[2])
        if pid != os.getpid() and behind >= OLD_SNAPSHOT_COMMITS:
            held.append(f"pid {pid} reads it from a snapshot {behind} commits old")
    if not held:
        return ""
    return (
        f"; {', '.join(held)}: the pages freed since cannot be reused until it ends "
        "(a `mrs dump` or another reader left waiting?)"
    )


def _commit(
    store: JournalStore,
    batches: list[WriteBatch],
    before_commit: Callable[[], None] | None,
    replayed: int,
) -> None:
    """The transaction of `apply_batches`: written, logged (flushed), committed; or,
    for a commit of more than LOG_RECORD_BYTES_MAX, committed and then flushed by a
    checkpoint on the spot (`_flush_direct`)."""
    if store.failed is not None:
        raise store.failed
    if store.writeback_due:  # no caller started the last commit's pages
        store.start_writeback()
    log = store.commit_log if not replayed else None
    number = replayed or store.log_number + 1
    hook = store.fault_hook if not replayed else None
    if hook is not None:
        hook("commit")
    logged = direct = False
    try:
        with store.env.begin(write=True) as txn:
            value_bytes = _write_batches(store, txn, batches)
            if not store.guest:  # the owner's numbering: a guest's commit is not in its log
                txn.put(_LOG_NUMBER_KEY, _U64.pack(number), db=store._log_db)
            if before_commit is not None:
                before_commit()
            if hook is not None:
                hook("flush")  # where a device error comes: the commit's flush
            if log is not None and (value_bytes > LOG_RECORD_BYTES_MAX or store.near_full()):
                direct = True
            elif log is not None:
                log.append(number, msgpack.packb(encode_batches(batches), use_bin_type=True))
                logged = True
    except BaseException:
        if logged and log is not None:
            log.void_last()  # LMDB's commit failed: a replay must not apply it
        raise
    store.log_number = number
    if direct:
        _flush_direct(store)
    elif log is not None:  # LMDB's pages go once the answers are out
        store.writeback_due = True


def _flush_direct(store: JournalStore) -> None:
    """A commit too large for the log (its bytes written twice would slow a busy
    disk) is made durable as LMDB's synced commit was, with two flushes: a
    checkpoint at it (LMDB's file, then the log header that names it). LMDB holds
    the commit already, so a failed flush cannot take it back: the store fails every
    later commit (`failed`) until it is opened again, as a database must once a
    flush failed (the kernel may have dropped the pages it could not write)."""
    try:
        store.checkpoint()
    except JournalDeviceError as error:
        store.failed = JournalDeviceError(
            f"{error}: a flush failed after the commit; restart the group", error.errno_value
        )
        raise store.failed from None


def _write_batches(store: JournalStore, txn: Any, batches: list[WriteBatch]) -> int:
    """Every write of `batches` into `txn`, the DQF's key index and its counts; the
    bytes of the values put."""
    value_bytes = 0
    index = store.dqf_index
    indexed: list[tuple[bytes, bytes]] = []  # DQF keys put, for the index in one call
    dbs = store._dbs
    dqf = Journal.DQF
    dqf_db = dbs[dqf]
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
            value_bytes += len(value)
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
    return value_bytes


def _flush_and_mark(store: JournalStore, job: _CheckpointJob) -> None:
    """A checkpoint's slow half (any thread): flush LMDB's file, then write the log
    header that starts the log at the checkpoint's commit. A failure is kept in
    `job.error` for the writer."""
    assert store.commit_log is not None
    try:
        os.fdatasync(store._data_fd)
        store.commit_log.write_header(job.start)
    except OSError as error:
        job.error = error


def _start_flush(store: JournalStore, job: _CheckpointJob) -> None:
    """Run the checkpoint's flush on a thread: the commits go on meanwhile (the
    flush waits for the disk, not for the interpreter)."""
    job.thread = threading.Thread(
        target=_flush_and_mark, args=(store, job), name="mrs-checkpoint", daemon=True
    )
    job.thread.start()


def restore_after_restart(path: Path) -> None:
    """Before a check of the journals at `path` and their opening by their owner:
    LMDB's meta pages put back as the last checkpoint wrote them after a restart of
    the machine or when one is damaged (`_restore_meta_pages`). Nothing is done while
    another process owns them (`_writer_lock`): it restored them when it opened, and
    its own commits write those pages now."""
    if not (path / "data.mdb").exists():
        _restore_meta_pages(path)  # no data file, no owner: a stale log is removed
        return
    fd = _writer_lock(path, beside_owner=True)
    if fd < 0:
        return
    try:
        _restore_meta_pages(path)
    finally:
        os.close(fd)


def _restore_meta_pages(path: Path) -> LogContents:
    """The log of the journals at `path`. After a restart of the machine, LMDB's meta
    pages are first put back as the last checkpoint wrote them (the pages since may
    be lost: journals.commit_log), and so are they when one of them is damaged
    (LMDB then refuses the whole file, and the tools copied nothing out of it);
    journals without a data file have no use for a log, which is removed. The
    caller owns the journals (`_writer_lock`)."""
    data_path = path / "data.mdb"
    if not data_path.exists():
        for name in LOG_NAMES:
            with contextlib.suppress(FileNotFoundError):
                (path / name).unlink()
        return LogContents(None, [])
    contents = read_log(path)
    checkpoint = contents.checkpoint
    if checkpoint is not None and (
        checkpoint.boot != boot_id() or _meta_damaged(data_path, checkpoint.meta_pages)
    ):
        if contents.damage is not None:
            raise _damaged_log(path, contents.damage)
        fd = os.open(data_path, os.O_WRONLY)
        try:
            os.pwrite(fd, checkpoint.meta_pages, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
    return contents


def _damaged_log(path: Path, damage: str) -> JournalError:
    """The refusal of journals whose log cannot put them back at its checkpoint.

    Why refuse: put back from it, the journals lost every commit after the damage
    without a word (acknowledged messages gone, confirmed ones delivered again
    unmarked), or, from an older header than the damaged one, took meta pages naming
    pages since reused, and no tool could read the file any more. Nothing is written:
    after a restart that lost no power, LMDB's file as it stands is whole."""
    return JournalError(
        f"the commit log of the journals in {path} is damaged ({damage}): opened "
        "from it, they would lose commits it made durable; nothing was changed. "
        "If the machine did not lose power, move commit.0.log and "
        "commit.1.log aside and start again (the journals open as LMDB last wrote "
        "them); then run `mrs journal verify` on them, and `mrs journal salvage` if "
        "it finds damage (docs/journal-repair.md)"
    )


def _meta_damaged(data_path: Path, saved_meta_pages: bytes) -> bool:
    """Whether a meta page of the data file fails LMDB's check at open. The
    checkpoint's copies (`saved_meta_pages`, both pages) give the page size; its
    pinned snapshot keeps every page they name whole, as after a power loss."""
    page_bytes = len(saved_meta_pages) // 2
    with open(data_path, "rb") as data:
        pages = data.read(2 * page_bytes)
    if len(pages) < 2 * page_bytes:  # not the file the checkpoint was of: LMDB says what
        return False
    return not all(
        freelist.meta_page_whole(pages[start : start + page_bytes]) for start in (0, page_bytes)
    )


DISK_SLACK_BYTES = 1 << 20


def _disk_tight(path: Path, map_bytes: int) -> bool:
    """Whether the disk holding the journals has less free than one checkpoint cycle
    of logged commits may take: the log's growth (up to CHECKPOINT_LOG_BYTES) and the
    file's (up to the last 1/NEAR_FULL_SHARE of its map). A disk that cannot be
    measured counts as roomy: the commits report a full one as they always did."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False
    free_bytes = stats.f_bavail * stats.f_frsize
    return free_bytes < CHECKPOINT_LOG_BYTES + map_bytes // NEAR_FULL_SHARE


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
    return _disk_full_words(path, free_bytes)


def _disk_full_words(path: Path, free_bytes: int | None = None) -> str:
    """What a commit the full disk refused says (journals.md): the disk, its free bytes
    (None: measured here)."""
    if free_bytes is None:
        try:
            stats = os.statvfs(path)
            free_bytes = stats.f_bavail * stats.f_frsize
        except OSError:
            return f"journal device full: no space left on device (ENOSPC) for {path}"
    return (
        f"journal device full: no space left on device (ENOSPC) for {path}: {free_bytes} bytes free"
    )


FILE_MODE = 0o600
_MAX_READERS = 256
"""LMDB's reader slots in lock.mdb (`lock_file.allocate_new` gives them their blocks)."""
DIR_MODE = 0o700
"""Journals hold message bodies: owner-only whatever the umask (a umask only removes
bits), and files left wider by an older version are narrowed when opened for writing."""


WRITER_LOCK_NAME = lock_file.WRITER_LOCK_NAME


def _writer_lock(path: Path, beside_owner: bool) -> int:
    """The lock of the journals' owner (an exclusive flock held while the store is
    open; the kernel drops it with the process): its fd, or -1 when another process
    owns them and `beside_owner` lets this one write as a guest.

    Why: the owner makes each commit durable through its commit log, numbered in
    LMDB (journals.commit_log). A second writer (`mrs pcj archive`, `mrs jplay
    --remove`, the DLQ handler's journal source, beside a running server) that also
    replayed, numbered and checkpointed the same log files left the server unable to
    start after its next crash ("the journals end at commit 124, before their log's
    checkpoint at 201"). A guest touches neither the log nor its numbering: LMDB
    syncs its commits as it did before the log."""
    fd = os.open(path / WRITER_LOCK_NAME, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if beside_owner:
            return -1
        raise JournalError(
            f"the journals in {path} are open for writing in another process (their "
            "group's server, or a journal tool such as mrs pcj archive or mrs jplay "
            "--remove while the server is stopped): one owner at a time; start this "
            "once it ends"
        ) from None
    return fd


def _owner_only(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    for name in ("data.mdb", "lock.mdb"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(path / name, FILE_MODE)
