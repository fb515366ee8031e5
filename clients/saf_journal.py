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

A record the group refuses for good when it drains (NOTAUTHORIZED: the sender lost
its put right after the put was journaled; NOSUCHQUEUE for a name; NO_DQF;
MSGTOOBIG) was answered STORED when it was journaled, so it is never deleted: it
moves, in one transaction, to the journal's second database (`REFUSED`), with the
status and words of the refusal. The drain goes on with the others (a refused record
holds up nothing), and the application lists it (`refused_records`), sends it again
once the cause is fixed (`redrive`: back at the drain's tail under a new local seq)
or drops it on purpose (`discard`); `mrs dump dlj --client-saf PATH` lists them.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import time
import uuid
import weakref
from collections.abc import Callable, Collection
from pathlib import Path

import lmdb
import trio

from clients import saf_check
from clients.errors import BadParameter, JournalBusy, JournalFailed, JournalFull
from clients.journal_status import RefusedRecord
from journals import (
    CorruptRecord,
    InlineWriter,
    Journal,
    JournalDeviceError,
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
_META_HOME_GROUP = "home_group"
"""META: the id of the group the journal drains into (8 bytes), from its first Welcome."""
_META_HOME_INCARNATION = "home_incarnation"
"""META: that group's journals' incarnation (mrs.group.incarnation), from the first
Welcome that carried one."""
IDEMPOTENCY_HEADER = "idempotency_key"
"""The server's dedupe header (mrs.group.shapes.IDEMPOTENCY_HEADER; a test pins them equal)."""
KEY_ID_FIELD = "key_id"
"""The record field (`Record.extra`) holding the key id it was appended under."""
_U64 = struct.Struct(">Q")
REFUSED = Journal.DLJ
"""The database of records the group refused for good at drain time (module doc):
kept aside, never sent by the drain, moved back by `redrive`."""
REFUSED_MESSAGE_FIELD = "refused_message"
"""The record field (`Record.extra`) holding the group's words for its refusal; the
status is `Record.reason`, the time `Record.written_time_ns`."""
REFUSED_READ_MAX = 10_000
"""At most this many refused records are listed, moved or dropped per call."""
REFUSED_LISTED_DEFAULT = 1000
"""How many `refused_records` lists without a limit of the caller's."""
REDRIVE_BATCH_MAX = 256
"""Refused records moved back to the drain in one transaction (`redrive`)."""


class JournalMismatch(JournalFailed):
    """JOURNAL_FAIL: the journal holds records for another group, or for other journals
    of its group (another incarnation), than the server this client reached. Nothing
    was sent and nothing in the journal changed; `rehome` re-homes it deliberately."""


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
            _refuse_foreign(self.path)
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
        self.home = _stored_home(self.store)
        """(group id, incarnation) the journal drains into (0, b"": not yet known):
        `check_home`."""
        self.count = self.store.count(Journal.SAF)
        self.refused_count = self.store.count(REFUSED)
        """Records the group refused for good, kept aside (module doc)."""
        self._refused_lock = trio.Lock()
        """Held by `redrive` and `discard` from their read to their commit: two at once
        would move one record twice (sent twice, under two seqs)."""
        if self.refused_count:
            _warn_refused(self.path, self.refused_count)
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
        """A delete (or a move of a refused record aside) failed and none has worked
        since (its WARNING was logged)."""
        self.appending = 0
        """Appends submitted and not yet committed: records the drain cannot read yet."""
        self._owner_pid = os.getpid()
        """The process that opened it: a child forked since holds a copy it must not use
        (`_let_go_in_child`)."""
        _OPEN_JOURNALS.add(self)

    def _open_checked(self, bytes_max: int) -> JournalStore:
        """The journal's store, once saf_check found it whole (JournalFailed if not).
        The meta pages are put back from the commit log's checkpoint first, as the
        server does (after a power loss, or one damaged): the file as LMDB left it may
        name pages the disk never got, and the check refused a journal the log
        recovers, its acknowledged puts stranded. A file of it that cannot be opened
        or written there (another user's, a file system gone read-only) is the one
        line of `_unusable`: connect raised the bare OSError."""
        try:
            restore_after_restart(self.path)
        except OSError as error:
            raise _unusable(self.path, error) from None
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

    def check_home(self, group_id: int, incarnation: bytes) -> None:
        """Called with each Welcome, before anything is sent from the journal: raise
        JournalMismatch (nothing written) when the journal holds records and its home
        is another group, or its group with other journals (another incarnation: a
        group rebuilt, another bus's group of the same id); else record this group
        (and its incarnation, when the Welcome carries one) as the home.

        Why: a journal was tied to no group. One written while connected to group 1
        of one bus drained into whatever group the client reached next (a config
        change, a copied journal, a test machine's journal on production): records
        meant for one bus were stored by another, kept for ever in its SAF for a
        group it has no link to, or delivered to another application. A replicated
        group's instances share one incarnation, so a failover drains on. An empty
        journal holds nothing meant for anyone: it takes the new home, logged."""
        home_group, home_incarnation = self.home
        held = self.count + self.refused_count
        other_journals = bool(home_incarnation and incarnation and home_incarnation != incarnation)
        if held and home_group and (home_group != group_id or other_journals):
            raise JournalMismatch(Status.JOURNAL_FAIL, self._mismatch(group_id, incarnation))
        if home_group != group_id:
            home_incarnation = b""
        new_home = (group_id, incarnation or home_incarnation)
        if new_home == self.home or self.crashed or self.closed:
            return
        batch = WriteBatch.empty().put_raw(
            Journal.META, _META_HOME_GROUP.encode(), _U64.pack(group_id)
        )
        if new_home[1]:
            batch.put_raw(Journal.META, _META_HOME_INCARNATION.encode(), new_home[1])
        else:
            batch.delete(Journal.META, _META_HOME_INCARNATION.encode())
        try:
            self.store.commit_now(batch)
        except JournalError as error:  # a full disk: the drain is what frees room
            log.warning(
                "client SAF journal %s: recording %s as its group failed (%s); it drains "
                "all the same, and this process holds it to that group",
                self.path,
                _home_text(*new_home),
                error,
            )
        if home_group:
            log.info(
                "client SAF journal %s (empty) now drains into %s, not %s",
                self.path,
                _home_text(*new_home),
                _home_text(*self.home),
            )
        self.home = new_home

    def _mismatch(self, group_id: int, incarnation: bytes) -> str:
        """The one line of a journal refused for a group that is not its home."""
        home_group, home_incarnation = self.home
        if home_group != group_id:
            found = f"group {group_id}"
        else:
            found = f"group {group_id} with other journals ({incarnation.hex()[:12]})"
        return (
            f"client SAF journal {self.path} holds {self.count} record(s) waiting and "
            f"{self.refused_count} refused for {_home_text(home_group, home_incarnation)}, "
            f"but this server is {found}: nothing was sent from it and nothing in it "
            "changed. Connect to its group, or, if its records are meant for this one, "
            "re-home it with the application stopped: "
            f"clients.saf_journal.rehome({str(self.path)!r})"
        )

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
        Raises JournalFull at a cap or on a full disk, JournalFailed (JOURNAL_FAIL) if
        the disk failed otherwise."""
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
            if isinstance(error, JournalDeviceError) and error.errno_value == errno.ENOSPC:
                # Full as at a cap: the UMA applies (DISC/DISCL discard). Before, a full
                # disk raised JournalFailed whatever the UMA, where the group answers a
                # full device with the put's UMA (DQF_DEVICE_FAIL, DISC_SUCCESS).
                raise JournalFull(
                    Status.JOURNAL_FULL,
                    f"client SAF journal {self.path} is full: its disk has no space left "
                    f"({error}); free space on it or let it drain",
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

    def refuse(self, key: bytes, record: Record, status: int, message: str) -> None:
        """Move a record the group refused for good out of the drain into `REFUSED`
        (one group-committed batch), with the refusal's status, words and time. Why
        not delete it: its put was answered STORED, and a right taken away by mistake
        (NOTAUTHORIZED) or a name not yet configured (NOSUCHQUEUE) is fixed by an
        operator, after which the application sends it again (`redrive`)."""
        if self.crashed:
            return
        record.reason = status
        record.written_time_ns = time.time_ns()
        record.extra[REFUSED_MESSAGE_FIELD] = message
        batch = WriteBatch.empty().delete(Journal.SAF, key).put_record(REFUSED, key, record)

        def committed(error: JournalError | None) -> None:
            if error is None:
                self.count -= 1
                self.refused_count += 1
                self._deletes_failing = False
            elif not (self._deletes_failing or self.crashed):  # one line per run
                self._deletes_failing = True  # left in the drain: sent again, refused again
                log.warning(
                    "client SAF journal %s: keeping refused record %d aside failed (%s); "
                    "it stays in the drain",
                    self.path,
                    record.seq,
                    error,
                )
            self._changed()

        self.writer.submit(batch, committed)

    def refused_records(self, count_max: int = REFUSED_LISTED_DEFAULT) -> list[RefusedRecord]:
        """The records kept aside as refused, oldest first, at most count_max."""
        if type(count_max) is not int or not 1 <= count_max <= REFUSED_READ_MAX:
            raise BadParameter(
                Status.BADPARAM,
                f"refused_records: limit is 1..{REFUSED_READ_MAX}, got {count_max!r}",
            )
        out: list[RefusedRecord] = []
        for key, record in self._refused(count_max):
            extra = record.extra
            target = extra.get("target") or f"{record.target_group}.{record.target_queue}"
            out.append(
                RefusedRecord(
                    int.from_bytes(key, "big"),
                    str(target),
                    record.body,
                    _status_name(record.reason),
                    str(extra.get(REFUSED_MESSAGE_FIELD, "")),
                    record.written_time_ns,
                    record.msg_class,
                    record.msg_type,
                    record.correlation_id,
                    dict(extra.get("headers") or {}),
                )
            )
        return out

    async def redrive(self, local_seqs: Collection[int] | None = None) -> dict[int, int]:
        """Move refused records (all, or those of `local_seqs`; at most
        REFUSED_READ_MAX) back to the drain, at its tail, each under a new local seq:
        {old seq: new seq}. REDRIVE_BATCH_MAX records per transaction, as many as
        saf_messages_max leaves room for (JournalFull if it leaves none)."""
        wanted = _wanted_keys(local_seqs)
        moved: dict[int, int] = {}
        async with self._refused_lock:
            keys = self._refused_keys(wanted)  # those refused now: not those refused again
            for start in range(0, len(keys), REDRIVE_BATCH_MAX):
                room = self.messages_max - self.count
                if room <= 0 and not moved:
                    raise JournalFull(
                        Status.JOURNAL_FULL,
                        f"client SAF journal {self.path} holds saf_messages_max="
                        f"{self.messages_max} records waiting to drain: nothing redriven; "
                        "let it drain first",
                    )
                chosen = keys[start : start + min(room, REDRIVE_BATCH_MAX)]
                if not chosen:
                    break
                moved.update(await self._redrive(chosen))
        return moved

    async def _redrive(self, keys: list[bytes]) -> dict[int, int]:
        """`redrive`'s work for one transaction: the records of `keys` moved back."""
        moved: dict[int, int] = {}
        batch = WriteBatch.empty()
        for key in keys:
            try:
                record = self.store.get(REFUSED, key)
            except CorruptRecord:
                continue  # left where it is: saf_check refuses the journal at the next attach
            if record is None:
                continue
            # It keeps the key it was refused under (the group stored nothing under
            # it): two copies of a journal that both send it again store it once.
            headers = dict(record.extra.get("headers") or {})
            headers.setdefault(
                IDEMPOTENCY_HEADER, idempotency_key_for(self.key_id_of(record), record.seq)
            )
            record.extra["headers"] = headers
            old_seq, record.seq = record.seq, self._next_seq
            self._next_seq += 1
            record.reason = 0
            record.extra.pop(REFUSED_MESSAGE_FIELD, None)
            record.extra[KEY_ID_FIELD] = self.key_id
            record.written_time_ns = time.time_ns()
            batch.delete(REFUSED, key).put_record(Journal.SAF, seq_key(record.seq), record)
            moved[old_seq] = record.seq
        if not moved:
            return moved
        batch.put_raw(Journal.META, _META_NEXT_SEQ.encode(), _U64.pack(self._next_seq))
        await self._commit(batch, "redrive")
        self.refused_count -= len(moved)
        self.count += len(moved)
        self._changed()
        return moved

    async def discard(self, local_seqs: Collection[int]) -> int:
        """Drop the refused records of `local_seqs` for good (logged); how many."""
        wanted = _wanted_keys(local_seqs)
        async with self._refused_lock:
            chosen = self._refused_keys(wanted)
            if not chosen:
                return 0
            batch = WriteBatch.empty()
            for key in chosen:
                batch.delete(REFUSED, key)
            await self._commit(batch, "discard")
        self.refused_count -= len(chosen)
        log.warning(
            "client SAF journal %s: %d refused record(s) discarded by the application: %s",
            self.path,
            len(chosen),
            ", ".join(str(int.from_bytes(key, "big")) for key in chosen),
        )
        return len(chosen)

    def _refused_keys(self, wanted: set[bytes] | None) -> list[bytes]:
        """The keys of refused records (those of `wanted`, or all), oldest first, at
        most REFUSED_READ_MAX; no value is read."""
        self._check_usable()
        keys = [key for key in self.store.keys(REFUSED) if wanted is None or key in wanted]
        return keys[:REFUSED_READ_MAX]

    def _refused(self, count_max: int) -> list[tuple[bytes, Record]]:
        """Refused records, oldest first, at most count_max; one that cannot be
        decoded is left out (saf_check refuses the journal at the next attach)."""
        self._check_usable()
        out: list[tuple[bytes, Record]] = []
        after: bytes | None = None
        while len(out) < count_max:
            items = self.store.items_after(REFUSED, b"", after, count_max - len(out), 1 << 20)
            if not items:
                return out
            for key, value in items:
                after = key
                try:
                    out.append((key, decode_record(value, REFUSED.value, key)))
                except CorruptRecord:
                    continue
        return out

    def _check_usable(self) -> None:
        if self.crashed or self.closed:
            raise JournalFailed(Status.JOURNAL_FAIL, f"client SAF journal {self.path} is closed")

    async def _commit(self, batch: WriteBatch, what: str) -> None:
        """Commit `batch` (group commit), waiting shielded for it; JournalFailed if
        the disk refused it (then nothing of it was written)."""
        self._check_usable()
        done = trio.Event()
        outcome: list[JournalError | None] = []

        def committed(error: JournalError | None) -> None:
            outcome.append(error)
            done.set()

        self.writer.submit(batch, committed)
        with trio.CancelScope(shield=True):
            await done.wait()
        if outcome[0] is not None:
            raise JournalFailed(
                Status.JOURNAL_FAIL, f"client SAF journal {self.path}: {what} failed: {outcome[0]}"
            )

    def crash(self) -> None:
        """Behave as if the process were SIGKILLed now (the simulator's client kill):
        writes not yet committed are lost, and nothing is written any more."""
        self.crashed = True
        pending, self.writer._pending = self.writer._pending, []
        for _batch, done in pending:
            done(JournalError("the client crashed before the commit"))

    def close(self) -> None:
        """Commit what is pending and close; later appends raise (`closed`). In a child
        forked after the open, nothing: the journal is the parent's."""
        self.closed = True
        if os.getpid() != self._owner_pid:
            return
        self.writer.stop()
        self.store.close()
        self._lock_file.close()

    def _let_go_in_child(self) -> None:
        """Right after a fork, in the child: close its copies of the journal's locks
        and take the journal as closed here (never written, committed or closed from
        the child; the parent owns it).

        Why: both locks are flocks, which belong to the open file that fork shares. A
        child the application forked (a multiprocessing worker, a pre-fork server),
        which can use no client of its parent's, held them for as long as it lived:
        the parent SIGKILLed and restarted was refused its own journal, "in use by
        another process (pid <the dead parent>)", its acknowledged puts stranded
        until the child ended."""
        if self.closed or os.getpid() == self._owner_pid:
            return
        self.closed = True
        self._lock_file.close()
        self.store.let_go_in_forked_child()


_OPEN_JOURNALS: weakref.WeakSet[ClientJournal] = weakref.WeakSet()
"""The journals this process opened (`ClientJournal._let_go_in_child`)."""


def _let_go_of_journals_in_child() -> None:
    for journal in list(_OPEN_JOURNALS):
        journal._let_go_in_child()


os.register_at_fork(after_in_child=_let_go_of_journals_in_child)


def _warn_refused(path: Path, count: int) -> None:
    log.warning(
        "client SAF journal %s holds %d record(s) the group refused when they "
        "drained (kept aside, not sent): refused_records() lists them, "
        "redrive_refused() sends them again, discard_refused() drops them",
        path,
        count,
    )


def _stored_home(store: JournalStore) -> tuple[int, bytes]:
    raw_group = store.meta_get(_META_HOME_GROUP)
    raw_incarnation = store.meta_get(_META_HOME_INCARNATION)
    group_id = _U64.unpack(raw_group)[0] if raw_group else 0
    return group_id, bytes(raw_incarnation) if raw_incarnation else b""


def _home_text(group_id: int, incarnation: bytes) -> str:
    """A home as the log lines name it: `group 1 (journals 1a2b3c4d5e6f)`."""
    if not incarnation:
        return f"group {group_id}"
    return f"group {group_id} (journals {incarnation.hex()[:12]})"


def rehome(path: str | Path) -> str:
    """Forget the group a journal drains into (`ClientJournal.check_home`), so its
    records drain into the group the next client reaches: an operator's deliberate
    act, with the application stopped (it takes the journal's lock: JournalBusy while
    a client owns it). The journal is checked first as at attach (JournalFailed
    when damaged). Returns the home it forgot, in words."""
    if not (Path(path) / saf_check.DATA_FILE).exists():
        raise BadParameter(Status.BADPARAM, f"rehome: no client SAF journal at {path}")
    journal = ClientJournal(path)
    try:
        forgot = _home_text(*journal.home) if journal.home[0] else "no group"
        journal.store.commit_now(
            WriteBatch.empty()
            .delete(Journal.META, _META_HOME_GROUP.encode())
            .delete(Journal.META, _META_HOME_INCARNATION.encode())
        )
        log.warning(
            "client SAF journal %s re-homed: it drained into %s; its %d record(s) "
            "waiting and %d refused now drain into the group the next client reaches",
            journal.path,
            forgot,
            journal.count,
            journal.refused_count,
        )
        return forgot
    finally:
        journal.close()


def _wanted_keys(local_seqs: Collection[int] | None) -> set[bytes] | None:
    """The keys of `local_seqs` (None: every one), or BadParameter (one line)."""
    if local_seqs is None:
        return None
    if isinstance(local_seqs, str | bytes) or not isinstance(local_seqs, Collection):
        raise BadParameter(Status.BADPARAM, f"seqs is a collection of ints, got {local_seqs!r}")
    if any(type(seq) is not int or seq < 1 for seq in local_seqs):
        raise BadParameter(Status.BADPARAM, f"seqs holds local seqs >= 1, got {local_seqs!r}")
    return {seq_key(seq) for seq in local_seqs}


def _status_name(value: int) -> Status | int:
    try:
        return Status(value)
    except ValueError:
        return value


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


_CLIENT_META_KEYS = frozenset(
    key.encode() for key in (_META_ID, _META_NEXT_SEQ, _META_HOME_GROUP, _META_HOME_INCARNATION)
)


def _refuse_foreign(path: Path) -> None:
    """JournalFailed (one line) when `path` holds journals that are no client SAF
    journal, before anything is written there: a group server's (`saf_journal`
    pointed at a group's data directory), whose META records what a group keeps
    (its incarnation, its boots) and no client journal id.

    Why: such a directory was taken for a client journal: the client wrote its id
    into the group's journals, and each put it journaled went into the group's own
    SAF, answered STORED, where the group found it at its next start as a message
    for group 0, kept and never sent."""
    data = path / saf_check.DATA_FILE
    if saf_check.read_identity(path) is not None or not data.exists() or not data.stat().st_size:
        return  # a client journal made here, or a new one
    saf_check.check_before_open(path)  # a damaged file is refused first, in a child
    try:
        store = JournalStore(path, readonly=True, beside_owner=True)
    except (JournalError, lmdb.Error) as error:
        raise saf_check.refused(path, f"LMDB cannot open it: {error}") from None
    try:
        meta_keys = set(store.keys(Journal.META))
        held = sum(store.count(journal) for journal in (Journal.DQF, Journal.PCJ))
    finally:
        store.close()
    others = sorted(key.decode(errors="replace") for key in meta_keys - _CLIENT_META_KEYS)
    if _META_ID.encode() in meta_keys or not (others or held):
        return  # a client journal made before `journal.id` was written beside it
    what = f"its meta data records {', '.join(others[:3])}" if others else "DQF or PCJ records"
    raise JournalFailed(
        Status.JOURNAL_FAIL,
        f"{path} holds a group server's journals ({what}), not a client SAF journal; "
        "nothing in it was changed (give saf_journal a directory of its own)",
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
