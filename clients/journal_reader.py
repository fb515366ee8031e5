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
    if value is None:
        return None
    items = [value] if isinstance(value, str | Address) else list(value)
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
    corrupt: list[str] = field(default_factory=list)
    _after_seq: int | None = None
    _read: int = 0
    _unread: deque[JournalRecord] = field(default_factory=deque)
    """Records read and not handed out yet: the next iteration hands them out first.
    Why: a loop stopped part way through a chunk (a `break`, a cancel scope) and
    iterated again went on after the chunk, so the rest of it was never read."""

    def read_chunk(self) -> list[JournalRecord]:
        """The next records (at most JOURNAL_READ_CHUNK_MESSAGES): those read and not
        handed out yet, else the next ones, read in one short read transaction; [] at
        the end. Blocking: `async for` runs it in a thread."""
        self.fill()
        records = list(self._unread)
        self._unread.clear()
        return records

    def fill(self) -> bool:
        """Unless records read before wait to be handed out, read the next chunk of
        them (blocking); whether any wait now (False: the end)."""
        if self._store is None:
            raise MrsError(Status.NOTACTIVE, f"journal {self.path} ({self.journal}) is closed")
        if not self._unread:
            self._unread.extend(self._next_chunk())
        return bool(self._unread)

    def _next_chunk(self) -> list[JournalRecord]:
        """The records of the next chunk(s) the selection leaves; [] at the end."""
        store = self._store
        assert store is not None  # checked by `fill`
        records: list[JournalRecord] = []
        scanned = True
        while not records and scanned:  # a chunk of corrupt records only: read on
            room = JOURNAL_READ_CHUNK_MESSAGES
            if self.limit is not None:
                room = min(room, self.limit - self._read)
            if room <= 0:
                return []
            scanned = False
            for key, item in scan(
                store,
                READABLE[self.journal],
                self._selection,
                after_seq=self._after_seq,
                chunk=room,
            ):
                scanned = True
                self._after_seq = seq_of_key(key)
                if isinstance(item, CorruptRecord):
                    self.corrupt.append(str(item))
                    continue
                records.append(journal_record(self.journal, item))
        self._read += len(records)
        return records

    def __iter__(self) -> Iterator[JournalRecord]:
        while self._unread or self.fill():
            yield self._unread.popleft()  # handed out: a loop stopped now has it

    async def _records(self) -> AsyncIterator[JournalRecord]:
        while self._unread or await self._filled():
            yield self._unread.popleft()

    async def _filled(self) -> bool:
        """`fill` in a worker thread (it reads the files)."""
        return await trio.to_thread.run_sync(self.fill)

    def __aiter__(self) -> AsyncIterator[JournalRecord]:
        return self._records()

    def close(self) -> None:
        self._unread.clear()
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
