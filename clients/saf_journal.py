"""The client-side SAF journal: recoverable puts kept on the client's disk while its
server is unreachable, drained in FIFO order when it is back.

One LMDB environment per journal path (the `journals` library: checksummed records,
fsync, group commit), owned by one process at a time through an exclusive `flock`
on `owner.lock`, so a second process gets a clear error instead of two writers
interleaving. Records are keyed by a local sequence number (8 bytes, big-endian):
key order is FIFO order. The next local seq is committed with every append, so a
seq is never reused, even after the journal has drained empty.

A record's idempotency key is `csaf:<key id>:<local seq>`, where the key id is made
afresh each time a journal is opened and stored in every record appended then. Why:
a copy of the journal file (a second process started on a copy) counts the same
seqs as its original; with one id per journal both would send different messages
under one key and the group would refuse the later ones (KEY_REUSED). A record keeps
its key for every re-send, and records already in the file when it was copied keep
theirs in both copies, so the group stores each of those once.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import uuid
from collections.abc import Callable
from pathlib import Path

import lmdb
import trio

from clients import saf_check
from clients.errors import BadParameter, JournalBusy, JournalFailed, JournalFull
from journals import (
    CorruptRecord,
    InlineWriter,
    Journal,
    JournalError,
    JournalFullError,
    JournalStore,
    Record,
    WriteBatch,
    decode_record,
    seq_key,
)
from journals.store import restore_after_restart
from mrs.limits import (
    CLIENT_SAF_BYTES_MAX_DEFAULT,
    CLIENT_SAF_MESSAGES_MAX_DEFAULT,
    CONFIG_COUNT_MAX,
    CONFIG_JOURNAL_BYTES_MAX,
    CONFIG_JOURNAL_BYTES_MIN,
)
from mrs.model import Status

log = logging.getLogger("clients")

LOCK_FILE = "owner.lock"
_META_ID = "client_journal_id"
_META_NEXT_SEQ = "next_seq"
KEY_ID_FIELD = "key_id"
"""The record field (`Record.extra`) holding the key id it was appended under."""
_U64 = struct.Struct(">Q")


def idempotency_key_for(journal_id: str, local_seq: int) -> str:
    """The key a drained record carries: the same for every re-send of one record, so
    the server stores it once however often a crash makes the client re-send it."""
    return f"csaf:{journal_id}:{local_seq}"


class ClientJournal:
    """One process's client SAF journal at `path`."""

    def __init__(
        self,
        path: str | Path,
        *,
        messages_max: int = CLIENT_SAF_MESSAGES_MAX_DEFAULT,
        bytes_max: int = CLIENT_SAF_BYTES_MAX_DEFAULT,
    ) -> None:
        self.path = _checked_path(path)
        _check_cap("saf_messages_max", messages_max, 1, CONFIG_COUNT_MAX)
        _check_cap("saf_bytes_max", bytes_max, CONFIG_JOURNAL_BYTES_MIN, CONFIG_JOURNAL_BYTES_MAX)
        self.messages_max = messages_max
        self.bytes_max = bytes_max
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_file = _take_ownership(self.path)
        except OSError as error:
            raise _unusable(self.path, error) from None
        try:
            self.store = self._open_checked(bytes_max)
        except BaseException:
            self._lock_file.close()
            raise
        try:
            self.journal_id = self._identity()
            """Made with the journal: the key id of records appended before key ids were kept."""
        except BaseException as error:  # e.g. no room for a new journal's id: nothing held
            self.store.close()
            self._lock_file.close()
            if isinstance(error, JournalError | OSError):
                raise _unusable(self.path, error) from None
            raise
        self._commit_wanted = trio.Event()
        self.writer = InlineWriter(self.store, self._wake_writer)
        self.on_change: Callable[[], None] = lambda: None
        """Called whenever a record was added or removed (the drain waits on it)."""
        self.key_id = uuid.uuid4().hex
        """This opening's key id, stored in every record it appends (module docstring)."""
        self._next_seq = self._stored_next_seq()
        self.count = self.store.count(Journal.SAF)
        self.corrupt: dict[bytes, str] = {}
        """Records found unreadable while running (key -> why): kept, never sent."""
        self.on_corrupt: Callable[[int, str], None] = lambda local_seq, problem: None
        """Called once for each record found unreadable (the drain reports it)."""
        self.failure: str | None = None
        """Why the journal could not be read while running (None: it could)."""
        self.crashed = False
        self.closed = False
        """Closed with its client: an append now would wait for ever for a commit."""
        self._deletes_failing = False
        """A delete failed and none has worked since (its WARNING was logged)."""
        self.appending = 0
        """Appends submitted and not yet committed: records the drain cannot read yet."""

    def _open_checked(self, bytes_max: int) -> JournalStore:
        """The journal's store, once saf_check found it whole (JournalFailed if not).
        The meta pages are put back from the commit log's checkpoint first, as the
        server does (after a power loss, or one damaged): the file as LMDB left it may
        name pages the disk never got, and the check refused a journal the log
        recovers, its acknowledged puts stranded."""
        restore_after_restart(self.path)
        saf_check.check_before_open(self.path)
        try:
            store = JournalStore(self.path, bytes_max)
        except JournalError as error:  # e.g. a data file older than its commit log
            raise saf_check.refused(self.path, str(error)) from None
        except (OSError, lmdb.Error) as error:  # no room or no right to create its files
            raise _unusable(self.path, error) from None
        try:
            raw_id = store.meta_get(_META_ID)
            raw_next = store.meta_get(_META_NEXT_SEQ)
            next_seq = _U64.unpack(raw_next)[0] if raw_next else 1
            saf_check.check_records(self.path, store, raw_id.decode() if raw_id else None, next_seq)
        except BaseException:
            store.close()
            raise
        return store

    def _stored_next_seq(self) -> int:
        raw = self.store.meta_get(_META_NEXT_SEQ)
        return _U64.unpack(raw)[0] if raw else 1

    def _identity(self) -> str:
        """The journal's id, made and committed with a new journal; written beside
        the data file too (saf_check), so a lost data file is not taken for a new one."""
        raw = self.store.meta_get(_META_ID)
        if raw:
            journal_id = raw.decode()
        else:
            journal_id = uuid.uuid4().hex
            self.store.commit_now(
                WriteBatch.empty().put_raw(Journal.META, _META_ID.encode(), journal_id.encode())
            )
        if saf_check.read_identity(self.path) is None:
            saf_check.write_identity(self.path, journal_id)
        return journal_id

    # ----------------------------------------------------------------- writer
    def _wake_writer(self) -> None:
        self._commit_wanted.set()

    async def run_writer(self) -> None:
        """Group commit on the client's event loop: everything submitted while the
        loop ran its other ready tasks goes into one synced transaction."""
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted = trio.Event()
            await trio.lowlevel.checkpoint()
            self.writer.commit_pending()

    def _changed(self) -> None:
        self.on_change()

    @property
    def idle(self) -> bool:
        """No append or delete is waiting for its commit."""
        return not self.writer.pending

    # ----------------------------------------------------------------- records
    async def append(self, record: Record) -> int:
        """Journal one record durably (fsync, group commit); returns its local seq.
        Raises JournalFull at the cap, MrsError(JOURNAL_FAIL) if the disk failed."""
        if self.crashed:
            raise JournalFailed(Status.JOURNAL_FAIL, "the client crashed")
        if self.closed:
            raise JournalFailed(Status.JOURNAL_FAIL, f"client SAF journal {self.path} is closed")
        if self.count >= self.messages_max:
            raise JournalFull(
                Status.JOURNAL_FULL,
                f"client SAF journal {self.path} holds saf_messages_max={self.messages_max} "
                "records waiting to drain; raise saf_messages_max or let it drain",
            )
        seq = self._next_seq
        self._next_seq += 1
        record.seq = seq
        record.extra[KEY_ID_FIELD] = self.key_id
        batch = (
            WriteBatch.empty()
            .put_record(Journal.SAF, seq_key(seq), record)
            .put_raw(Journal.META, _META_NEXT_SEQ.encode(), _U64.pack(seq + 1))
        )
        self.count += 1
        done = trio.Event()
        outcome: list[JournalError | None] = []

        def committed(error: JournalError | None) -> None:
            self.appending -= 1
            outcome.append(error)
            done.set()

        self.appending += 1
        self.writer.submit(batch, committed)
        with trio.CancelScope(shield=True):  # once submitted, the caller learns the outcome
            await done.wait()
        error = outcome[0]
        if error is not None:
            self.count -= 1
            if isinstance(error, JournalFullError):  # LMDB's words named its map_size
                raise JournalFull(
                    Status.JOURNAL_FULL,
                    f"client SAF journal {self.path} is full: it reached "
                    f"saf_bytes_max={self.bytes_max} bytes; raise saf_bytes_max or let "
                    "it drain",
                )
            raise JournalFailed(Status.JOURNAL_FAIL, f"client SAF journal write failed: {error}")
        self._changed()
        return seq

    def key_id_of(self, record: Record) -> str:
        """The key id `record` is drained under: the same for every re-send of it."""
        return str(record.extra.get(KEY_ID_FIELD) or self.journal_id)

    def read_after(self, after_key: bytes | None, count_max: int) -> list[tuple[bytes, Record]]:
        """Up to count_max committed records after `after_key`, oldest first. A record
        found corrupt is kept in the journal, never sent, and reported once through
        `on_corrupt`; a journal LMDB cannot read sets `failure` and reads nothing."""
        out: list[tuple[bytes, Record]] = []
        try:
            items = self.store.items_after(Journal.SAF, b"", after_key, count_max, 1 << 20)
        except lmdb.Error as error:
            self.failure = f"client SAF journal {self.path} cannot be read: {error}"
            return out
        for key, value in items:
            try:
                out.append((key, decode_record(value, Journal.SAF.value, key)))
            except CorruptRecord as corrupt:
                if key not in self.corrupt:
                    self.corrupt[key] = corrupt.problem
                    self.on_corrupt(int.from_bytes(key, "big"), corrupt.problem)
        return out

    def remove(self, keys: list[bytes], done: Callable[[], None] = lambda: None) -> None:
        """Delete records the server has stored (one group-committed batch)."""
        if not keys or self.crashed:
            return
        batch = WriteBatch.empty()
        for key in keys:
            batch.delete(Journal.SAF, key)

        def committed(error: JournalError | None) -> None:
            if error is None:
                self.count -= len(keys)
                self._deletes_failing = False
            elif not (self._deletes_failing or self.crashed):  # one line per run of failures
                self._deletes_failing = True
                log.warning(
                    "client SAF journal %s: deleting drained records failed (%s); they "
                    "stay and are sent again (the server stores each once)",
                    self.path,
                    error,
                )
            self._changed()
            done()

        self.writer.submit(batch, committed)

    def crash(self) -> None:
        """Behave as if the process were SIGKILLed now (the simulator's client kill):
        writes not yet committed are lost, and nothing is written any more."""
        self.crashed = True
        pending, self.writer._pending = self.writer._pending, []
        for _batch, done in pending:
            done(JournalError("the client crashed before the commit"))

    def close(self) -> None:
        """Commit what is pending and close; later appends raise (`closed`)."""
        self.closed = True
        self.writer.stop()
        self.store.close()
        self._lock_file.close()


def _checked_path(path: object) -> Path:
    """`saf_journal` as a Path, or BadParameter (one line) for what is no path."""
    if not isinstance(path, str | os.PathLike) or not str(path):
        raise BadParameter(Status.BADPARAM, f"saf_journal must be a directory path, got {path!r}")
    return Path(path)


def _check_cap(name: str, value: object, low: int, high: int) -> None:
    """A journal cap is a whole number in low..high, else BadParameter (one line).
    Why: 0 or less made every put JOURNAL_FULL without a word, and a byte cap LMDB
    cannot map ended in OverflowError or MemoryError from inside LMDB."""
    if type(value) is not int or not low <= value <= high:
        raise BadParameter(
            Status.BADPARAM, f"{name} must be a whole number in {low}..{high}, got {value!r}"
        )


def _unusable(path: Path, error: BaseException) -> JournalFailed:
    """The one line for a journal directory that cannot be made or opened (a file in
    its place, no right to write there, a full disk), instead of a bare OSError."""
    why = os.strerror(error.errno) if isinstance(error, OSError) and error.errno else str(error)
    return JournalFailed(
        Status.JOURNAL_FAIL,
        f"client SAF journal {path} cannot be opened: {why}; nothing in it was changed "
        "(saf_journal must be a directory this process may write)",
    )


def _take_ownership(path: Path):
    """Lock `path/owner.lock` for this process, or raise JournalBusy naming the owner."""
    lock_file = open(path / LOCK_FILE, "a+")  # noqa: SIM115 - held for the journal's life
    try:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_file.seek(0)
        owner = lock_file.read().strip() or "?"
        lock_file.close()
        raise JournalBusy(
            Status.JOURNAL_FAIL,
            f"client SAF journal {path} is in use by another process (pid {owner}); "
            "one process at a time owns a journal",
        ) from None
    lock_file.seek(0)
    lock_file.truncate()
    lock_file.write(f"{os.getpid()}\n")
    lock_file.flush()
    return lock_file


def open_readonly(path: str | Path) -> JournalStore:
    """The journal for reading (e.g. `mrs dump --client-saf`), owner or not."""
    path = Path(path)
    if not (path / "data.mdb").exists():
        raise FileNotFoundError(f"no client SAF journal at {path}")
    return JournalStore(path, readonly=True)
