"""An application's reader of a group's PCJ or DLJ from its files (MessageQ's
pams_open_jrn / pams_read_jrn / pams_close_jrn): open, iterate the selected records,
close.

Why a reader in the client library: the reference's way to "handle all errors by
reading them from a file" and to resend confirmed messages is an application reading
the journals itself, on the group's host. The files are opened read-only and read in
short read transactions (JOURNAL_READ_CHUNK_MESSAGES records each, resumed after the
last seq), so reading is safe while the group runs and writes them, and a slow reader
never holds the server's old pages. The scan is the tools' own
(`mrs.storage.journal_scan`): `mrs dump` and this reader see the same records.

Selection (every criterion given must hold): seq range, journal time range, target
queue(s), source queue(s), class(es), type(s), PCJ segment(s), at most `limit`
records: `mrs.storage.journal_scan.RecordQuery`, the predicate the group uses for a
reader on another host (`Client.open_journal`, clients.journal_remote).
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from clients.errors import BadParameter, MrsError
from journals import CorruptRecord, Journal, JournalStore, Record
from mrs.limits import JOURNAL_READ_CHUNK_MESSAGES
from mrs.model import Address, DeliveryMode, Status, delivery_mode_of, status_of
from mrs.storage.journal_scan import (
    RecordQuery,
    find_journals,
    open_read_only,
    record_segment,
    record_time_ns,
    scan,
    seq_of_key,
)

READABLE = {"pcj": Journal.PCJ, "dlj": Journal.DLJ}
"""The journals an application reads (MessageQ's PCJ and DLJ)."""

TimeBound = datetime.datetime | float | int | None
"""A datetime (naive = local time), or seconds since the epoch."""
QueueSelection = str | Address | Iterable[str | Address] | None
IntSelection = int | Iterable[int] | None


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One journaled message as pams_read_jrn gives it, and what MRS adds."""

    journal: str
    """"pcj" or "dlj"."""
    seq: int
    """The message's sequence number (what confirm took)."""
    body: bytes
    target: Address
    """The original target: the queue the sender put it to."""
    source: Address
    msg_class: int
    msg_type: int
    priority: int
    delivery: DeliveryMode | int
    correlation_id: bytes
    put_time_ns: int
    write_time_ns: int
    """When the record was written to this journal (the confirm time in the PCJ)."""
    confirm_value: int
    """The value the receiver confirmed with (PCJ; 0 in the DLJ)."""
    status: Status | int
    """The MRS status: SUCCESS for a confirmed message (PCJ); in the DLJ, why it was
    dead-lettered (e.g. NO_DQF, MSGUNDEL)."""
    headers: dict | None = None
    segment: int = 0
    """The PCJ segment it was confirmed in (`Client.set_pcj(roll=True)` opens the
    next); 0 in the DLJ."""


def journal_record(journal: str, record: Record) -> JournalRecord:
    """A stored record as a reader gives it: the one conversion, for a local reader
    (`open_journal`) and a reader over the wire (`Client.open_journal`)."""
    extra = record.extra if isinstance(record.extra, dict) else {}
    try:
        delivery: DeliveryMode | int = delivery_mode_of(record.delivery)
    except ValueError:
        delivery = record.delivery
    if journal == "pcj":
        status: Status | int = Status.SUCCESS
    else:
        status = status_of(record.reason) if record.reason else Status.MSGUNDEL
    return JournalRecord(
        journal,
        record.seq,
        record.body,
        Address(record.target_group, record.target_queue),
        Address(record.source_group, record.source_queue),
        record.msg_class,
        record.msg_type,
        record.priority,
        delivery,
        record.correlation_id,
        record.put_time_ns,
        record_time_ns(record),
        record.confirm_value,
        status,
        extra.get("headers"),
        record_segment(record),
    )


def _refuse(problem: str) -> BadParameter:
    return BadParameter(Status.BADPARAM, f"open_journal: {problem}")


def checked_journal(journal: object, limit: object) -> str:
    """The journal's name ('pcj' or 'dlj') once `journal` and `limit` are checked: the
    local reader's and the wire reader's arguments alike (BadParameter, one line)."""
    if not isinstance(journal, str) or journal.lower() not in READABLE:
        raise _refuse(f"journal is 'pcj' or 'dlj', got {journal!r}")
    if limit is not None and (type(limit) is not int or limit < 1):
        raise _refuse(f"limit is a positive int, got {limit!r}")
    return journal.lower()


def _seq_bounds(seq: int | tuple[int | None, int | None] | None) -> tuple[int | None, int | None]:
    if seq is None:
        return None, None
    low: int | None
    high: int | None
    if type(seq) is int:
        low, high = seq, seq
    elif isinstance(seq, tuple) and len(seq) == 2:
        low, high = seq
    else:
        raise _refuse(f"seq is an int or a (first, last) pair, got {seq!r}")
    for bound in (low, high):
        if bound is not None and (type(bound) is not int or bound < 0):
            raise _refuse(f"seq bounds are ints >= 0 or None, got {seq!r}")
    if low is not None and high is not None and low > high:
        raise _refuse(f"seq {low}..{high} selects nothing (first > last)")
    return low, high


def _time_ns(value: TimeBound, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1e9)
    if type(value) in (int, float) and value >= 0:
        return int(value * 1e9)
    raise _refuse(f"{name} is a datetime or seconds since the epoch, got {value!r}")


def _addresses(value: QueueSelection, name: str) -> frozenset[tuple[int, int]] | None:
    """The (group, queue) pairs `target=` or `source=` names: "G.Q", an Address, or a
    list of them; BadParameter (one line) for anything else. Why the iterable test: a
    queue number (`target=10`) went to `list()` and raised TypeError to the caller,
    where every other bad argument of the readers is one BadParameter line."""
    if value is None:
        return None
    if isinstance(value, str | Address):
        items: list[Any] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, bytes | bytearray):
        items = list(value)
    else:
        raise _refuse(f"{name} is a queue address GROUP.QUEUE, an Address or a list, got {value!r}")
    found = set()
    for item in items:
        try:
            address = item if isinstance(item, Address) else Address.parse(item)
        except (ValueError, TypeError, AttributeError):
            raise _refuse(f"{name}: {item!r} is not a queue address GROUP.QUEUE") from None
        found.add((address.group, address.queue))
    if not found:
        raise _refuse(f"{name}: an empty list selects nothing")
    return frozenset(found)


def _ints(value: IntSelection, name: str) -> frozenset[int] | None:
    if value is None:
        return None
    if type(value) is int:
        items: list[Any] = [value]
    elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
        items = list(value)
    else:
        items = [value]
    if not items or any(type(item) is not int for item in items):
        raise _refuse(f"{name} is an int or a list of ints, got {value!r}")
    return frozenset(items)


def selection(
    seq: Any = None,
    since: TimeBound = None,
    until: TimeBound = None,
    target: Any = None,
    source: Any = None,
    msg_class: Any = None,
    msg_type: Any = None,
    segment: Any = None,
) -> RecordQuery:
    """The reader's arguments as a RecordQuery (mrs.storage.journal_scan), checked:
    BadParameter with one line for a bad one."""
    seq_min, seq_max = _seq_bounds(seq)
    since_ns, until_ns = _time_ns(since, "since"), _time_ns(until, "until")
    if since_ns is not None and until_ns is not None and since_ns > until_ns:
        raise _refuse("since is after until: nothing can match")
    return RecordQuery(
        seq_min,
        seq_max,
        since_ns,
        until_ns,
        _addresses(target, "target"),
        _addresses(source, "source"),
        _ints(msg_class, "msg_class"),
        _ints(msg_type, "msg_type"),
        _ints(segment, "segment"),
    )


@dataclass(eq=False)
class ReadAhead:
    """Where a journal reader is, for the reader of the files (`JournalReader`) and the
    reader over the wire (clients.journal_remote.RemoteJournalReader) alike: records
    read and not handed out yet, the last seq read past, how many were read against
    the `limit`, the records that could not be decoded, and an end not reported yet.
    Pure logic: each reader only reads (the files, or pages from the group) and hands
    what it read here.

    Why one class: the two readers kept a copy each of this bookkeeping, and a fix
    made in one (records read and not handed out kept for the next loop, reading on
    after the end) had to be found again in the other."""

    journal: str
    """"pcj" or "dlj"."""
    limit: int | None = None
    after_seq: int | None = None
    """The last seq read past (None: none yet): the next read starts after it."""
    corrupt: list[str] = field(default_factory=list)
    _unread: deque[JournalRecord] = field(default_factory=deque)
    """Records read and not handed out yet: the next iteration hands them out first.
    Why: a loop stopped part way through a chunk (a `break`, a cancel scope, Ctrl-C in
    the blocking client) and iterated again went on after the chunk, so the rest of
    it was never read."""
    _read: int = 0
    _end_unreported: bool = False
    """A read reached the end and brought records: the end is reported (without
    reading) once they are handed out, and the read after that reads on."""

    @property
    def unread(self) -> int:
        """Records read and not handed out yet."""
        return len(self._unread)

    def take(self) -> JournalRecord:
        """The oldest record read and not handed out yet (there is one)."""
        return self._unread.popleft()

    def take_all(self) -> list[JournalRecord]:
        records = list(self._unread)
        self._unread.clear()
        return records

    def wants_read(self) -> bool:
        """Whether a reader should read now: nothing waits to be handed out, the limit
        leaves room, and no end waits to be reported (reported by this False: the
        next call says read on, for the records written since)."""
        if self._unread:
            return False
        if self._end_unreported:
            self._end_unreported = False
            return False
        return self.room(1) > 0

    def room(self, chunk_max: int) -> int:
        """How many records to read now: chunk_max, less what the limit leaves."""
        if self.limit is None:
            return chunk_max
        return max(0, min(chunk_max, self.limit - self._read))

    def passed(self, seq: int) -> None:
        """The read went past `seq`: the next one starts after it."""
        self.after_seq = seq

    def add(self, record: Record | CorruptRecord) -> bool:
        """A record read: kept to be handed out (False, and not kept, once the limit
        is reached); one that could not be decoded is listed in `corrupt`."""
        if isinstance(record, CorruptRecord):
            self.corrupt.append(str(record))
            return True
        if self.room(1) == 0:
            return False
        self._unread.append(journal_record(self.journal, record))
        self._read += 1
        return True

    def reached_end(self) -> None:
        """The read found the end of the journal (the last page, or nothing left)."""
        self._end_unreported = bool(self._unread)

    def clear(self) -> None:
        self._unread.clear()


@dataclass(eq=False)
class JournalReader:
    """An open journal: iterate it (`for` or `async for`) for its selected records, in
    seq order; close it (or use it as a context manager, `with` or `async with`).

    Records the reader cannot decode are skipped and listed in `corrupt` (one line
    each), never raised mid-read: check it after the loop."""

    path: Path
    journal: str
    _store: JournalStore | None
    _selection: RecordQuery
    limit: int | None = None
    _ahead: ReadAhead = field(init=False)

    def __post_init__(self) -> None:
        self._ahead = ReadAhead(self.journal, self.limit)

    @property
    def corrupt(self) -> list[str]:
        """A line for each record that could not be decoded (skipped)."""
        return self._ahead.corrupt

    def read_chunk(self) -> list[JournalRecord]:
        """The next records (at most JOURNAL_READ_CHUNK_MESSAGES): those read and not
        handed out yet, else the next ones, read in one short read transaction; [] at
        the end. Blocking: `async for` runs it in a thread."""
        self.fill()
        return self._ahead.take_all()

    def fill(self) -> bool:
        """Unless records read before wait to be handed out, read the next chunk of
        them (blocking); whether any wait now (False: the end). A chunk of records
        the selection leaves out, or of corrupt ones only, is read on."""
        store = self._store
        if store is None:
            raise MrsError(Status.NOTACTIVE, f"journal {self.path} ({self.journal}) is closed")
        ahead = self._ahead
        while ahead.wants_read():
            scanned = False
            for key, item in scan(
                store,
                READABLE[self.journal],
                self._selection,
                after_seq=ahead.after_seq,
                chunk=ahead.room(JOURNAL_READ_CHUNK_MESSAGES),
            ):
                scanned = True
                ahead.passed(seq_of_key(key))
                ahead.add(item)
            if not scanned:
                ahead.reached_end()
                break
        return ahead.unread > 0

    def __iter__(self) -> Iterator[JournalRecord]:
        ahead = self._ahead
        while ahead.unread or self.fill():
            yield ahead.take()  # handed out: a loop stopped now has it

    async def _records(self) -> AsyncIterator[JournalRecord]:
        ahead = self._ahead
        while ahead.unread or await self._filled():
            yield ahead.take()

    async def _filled(self) -> bool:
        """`fill` in a worker thread (it reads the files)."""
        return await trio.to_thread.run_sync(self.fill)

    def __aiter__(self) -> AsyncIterator[JournalRecord]:
        return self._records()

    def close(self) -> None:
        self._ahead.clear()
        if self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> JournalReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


def open_journal(
    data_dir: str | Path,
    journal: str = "pcj",
    *,
    seq: int | tuple[int | None, int | None] | None = None,
    since: TimeBound = None,
    until: TimeBound = None,
    target: QueueSelection = None,
    source: QueueSelection = None,
    msg_class: IntSelection = None,
    msg_type: IntSelection = None,
    segment: IntSelection = None,
    limit: int | None = None,
) -> JournalReader:
    """Open a group's PCJ or DLJ read-only (pams_open_jrn): `data_dir` is the group's
    data directory (holding `journals/`) or the journals directory itself.

    seq: one seq or a (first, last) pair, either end None; since/until: the journal
    time (the confirm time in the PCJ, the time written in the DLJ), a datetime or
    epoch seconds; target/source: "G.Q" or Address, or a list; msg_class/msg_type:
    an int or a list; segment: the PCJ segment(s) (`Client.set_pcj`); limit: at most
    that many records. Raises BadParameter (one
    line) for a bad argument, MrsError NOSUCHPCJ when no journal is there."""
    name = checked_journal(journal, limit)
    query = selection(seq, since, until, target, source, msg_class, msg_type, segment)
    if not isinstance(data_dir, str | Path):
        raise _refuse(f"data_dir is a path, got {type(data_dir).__name__}")
    path = Path(data_dir)
    journals_path = find_journals(path) if path.is_dir() else None
    if journals_path is None:
        raise MrsError(
            Status.NOSUCHPCJ,
            f"no journals in {path} (looked for {path / 'journals' / 'data.mdb'})",
        )
    try:
        store = open_read_only(journals_path)
    except Exception as error:  # noqa: BLE001 - lmdb's errors: one line, no traceback
        raise MrsError(
            Status.JOURNAL_FAIL, f"cannot open the journals in {journals_path}: {error}"
        ) from None
    return JournalReader(journals_path, name, store, query, limit)
