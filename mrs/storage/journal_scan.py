"""Read a group's journal records from its files, without its server: find the
journals environment in a data directory, open it read-only, and scan one journal in
key order with a selection.

Why here, below `offline` and `clients`: the shell's tools (`mrs dump`, `mrs jplay`,
the DLQ handler, through `mrs.offline.journal_files`) and an application's journal
reader (`clients.journal_reader`) read the same files the same way, so the rules are
written once: never create an empty environment by mistake, read from one snapshot
(LMDB readers never block the server's writer), start a seq selection of the DLJ or
PCJ at its first key, and report corrupt records instead of stopping.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import lmdb

from journals import CorruptRecord, Journal, JournalStore, Record, decode_record, seq_key
from journals.store import split_key
from mrs.exit_status import EXIT_RUNTIME, CommandError
from mrs.model import Status
from mrs.storage.journal_check import damaged_line

SEQ_KEYED = (Journal.DLJ, Journal.PCJ)
"""Journals keyed by the message's seq: a seq selection starts at its first key."""
PAGE_RECORDS = 1024
PAGE_BYTES = 16 << 20
"""A page of `scan_paged`: so many records, or once its bodies hold so many bytes."""
MAP_BYTES_DEFAULT = 1 << 30
"""The LMDB map a reader opens with when nothing says the server's (at least the file)."""
PCJ_SEGMENT_FIELD = "pcj_segment"
"""The PCJ record's `extra` entry naming its segment (docs/journals.md, "PCJ
segments"): absent in segment 0, so a PCJ written before segments reads as one."""


class JournalUnreadable(CommandError):
    """LMDB cannot read a journal's pages (a damaged page): one line naming the file
    and pointing to `mrs journal verify` / `salvage`, status JOURNAL_FAIL, exit 1."""

    def __init__(self, journals_path: Path, journal: Journal, error: lmdb.Error) -> None:
        problem = " ".join(f"{type(error).__name__}: {error}".split())
        super().__init__(
            damaged_line(journals_path, f" (in its {journal.value} database): {problem}"),
            EXIT_RUNTIME,
        )
        self.status = Status.JOURNAL_FAIL


def record_time_ns(record: Record) -> int:
    """The journal time of a record: the confirm time in the PCJ, else the time it was
    written. What a selection's since/until, `mrs dump` and a journal reader show."""
    return record.confirm_time_ns or record.written_time_ns


def record_segment(record: Record) -> int:
    """The PCJ segment a record was confirmed in (0 when it names none)."""
    extra = record.extra
    segment = extra.get(PCJ_SEGMENT_FIELD, 0) if type(extra) is dict else 0
    return segment if type(segment) is int else 0


@dataclass(frozen=True, slots=True)
class RecordQuery:
    """A selection of DLJ/PCJ records as plain values (each criterion given must
    hold): what an application's journal reader asks, read from local files
    (clients.journal_reader) or by the group for a reader on another host
    (mrs.group.journal_pages), so both select with this one predicate."""

    seq_min: int | None = None
    seq_max: int | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    targets: frozenset[tuple[int, int]] | None = None
    sources: frozenset[tuple[int, int]] | None = None
    classes: frozenset[int] | None = None
    types: frozenset[int] | None = None
    segments: frozenset[int] | None = None

    @property
    def selects_all(self) -> bool:
        """True when only the seq range (which the scan seeks) selects."""
        return (
            self.since_ns is None
            and self.until_ns is None
            and self.targets is None
            and self.sources is None
            and self.classes is None
            and self.types is None
            and self.segments is None
        )

    def matches(self, record: Record) -> bool:
        if self.seq_min is not None and record.seq < self.seq_min:
            return False
        if self.seq_max is not None and record.seq > self.seq_max:
            return False
        moment = record_time_ns(record)
        if self.since_ns is not None and moment < self.since_ns:
            return False
        if self.until_ns is not None and moment > self.until_ns:
            return False
        if self.targets is not None and (record.target_group, record.target_queue) not in (
            self.targets
        ):
            return False
        if self.sources is not None and (record.source_group, record.source_queue) not in (
            self.sources
        ):
            return False
        if self.classes is not None and record.msg_class not in self.classes:
            return False
        if self.types is not None and record.msg_type not in self.types:
            return False
        return self.segments is None or record_segment(record) in self.segments


class Selection(Protocol):
    """What a scan needs of a selection (`mrs.offline.selection.RecordFilter` is one)."""

    @property
    def seq_min(self) -> int | None: ...

    @property
    def seq_max(self) -> int | None: ...

    @property
    def selects_all(self) -> bool: ...

    def matches(self, record: Record) -> bool: ...


def find_journals(data_dir: Path) -> Path | None:
    """The journals environment of a group data directory (`data_dir/journals`), or
    `data_dir` itself when it is one; None when neither holds a `data.mdb`."""
    if (data_dir / "journals" / "data.mdb").exists():
        return data_dir / "journals"
    if (data_dir / "data.mdb").exists():
        return data_dir
    return None


def read_only_map_bytes(journals_path: Path) -> int:
    """A map large enough for the file as it is now (a reader maps what it reads)."""
    data_file = journals_path / "data.mdb"
    size = data_file.stat().st_size if data_file.exists() else 0
    return max(MAP_BYTES_DEFAULT, size)


def open_read_only(journals_path: Path, map_bytes: int | None = None) -> JournalStore:
    """The environment, read-only: safe while the server runs and writes it."""
    size = read_only_map_bytes(journals_path) if map_bytes is None else map_bytes
    return JournalStore(journals_path, size, readonly=True)


def scan(
    store: JournalStore,
    journal: Journal,
    selection: Selection,
    *,
    after_seq: int | None = None,
    chunk: int | None = None,
    after_key: bytes | None = None,
) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
    """Yield (key, record) of the selected records in key order, from ONE read
    transaction (a consistent snapshot even while the server writes).

    Corrupt records are yielded as CorruptRecord whatever the selection (they cannot
    be matched), so callers report them. `after_seq` resumes a DLJ/PCJ scan after a
    seq; `chunk` stops after that many yielded items (a long read goes in short
    transactions, so it does not hold the server's old pages); `after_key` resumes any
    journal after a key an earlier scan of the same selection yielded. A selection's limit
    is applied by the caller across chunks. A page LMDB cannot read (a damaged
    file) raises JournalUnreadable: one line, never LMDB's own error.
    """
    db = store.db(journal)
    if db is None:
        return
    try:
        yield from _scan(store, db, journal, selection, after_seq, chunk, after_key)
    except lmdb.Error as error:  # a damaged page: LMDB refuses to read on
        raise JournalUnreadable(Path(store.path), journal, error) from None


def _scan(
    store: JournalStore,
    db: object,
    journal: Journal,
    selection: Selection,
    after_seq: int | None,
    chunk: int | None,
    after_key: bytes | None = None,
) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
    seq_keyed = journal in SEQ_KEYED
    start_seq = selection.seq_min
    if after_seq is not None:
        start_seq = after_seq + 1 if start_seq is None else max(start_seq, after_seq + 1)
    seq_max = selection.seq_max if seq_keyed else None
    matches: Callable[[Record], bool] | None = None if selection.selects_all else selection.matches
    yielded = 0
    with store.env.begin(db=db, buffers=False) as txn:
        cursor = txn.cursor(db)
        first_key = seq_key(start_seq) if seq_keyed and start_seq is not None else None
        if after_key is not None and (first_key is None or after_key >= first_key):
            positioned = cursor.set_range(after_key)
            if positioned and cursor.key() == after_key:
                positioned = cursor.next()
        elif first_key is not None:
            positioned = cursor.set_range(first_key)
        else:
            positioned = cursor.first()
        name = journal.value
        while positioned:
            key, value = cursor.item()
            if seq_max is not None and len(key) == 8 and split_key(key)[1] > seq_max:
                return
            try:
                record = decode_record(value, name, key)
            except CorruptRecord as corrupt:
                yield key, corrupt
                yielded += 1
            else:
                if matches is None or matches(record):
                    yield key, record
                    yielded += 1
            if chunk is not None and yielded >= chunk:
                return
            positioned = cursor.next()


def scan_paged(
    store: JournalStore,
    journal: Journal,
    selection: Selection,
    *,
    page_records: int = PAGE_RECORDS,
    page_bytes: int = PAGE_BYTES,
) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
    """`scan`, read in pages: each page (at most `page_records` items, and about
    `page_bytes` of bodies) is read whole in a read transaction of its own, which
    ends before any of it is yielded.

    Why: a caller that waits between records (`mrs dump | less` left open, a pipe
    nobody reads) held ONE snapshot for as long as it waited, and LMDB can reuse no
    page the server freed after it: under load the server's journal filled in
    seconds and the group refused puts and confirms ("journal map full"). Each page is
    one committed state; a record committed or removed while the pages are read may
    be in them or not, never twice (a page resumes after the last key yielded)."""
    after: bytes | None = None
    while True:
        page, ended = read_page(store, journal, selection, after, page_records, page_bytes)
        yield from page
        if ended or not page:
            return
        after = page[-1][0]


def read_page(
    store: JournalStore,
    journal: Journal,
    selection: Selection,
    after: bytes | None,
    records_max: int,
    bytes_max: int,
) -> tuple[list[tuple[bytes, Record | CorruptRecord]], bool]:
    """One page of `scan_paged` after the key `after` (None: from the start), read in
    one read transaction that ends before it returns, and whether the journal ended
    in it (the scan reached its last record, so no page follows)."""
    page: list[tuple[bytes, Record | CorruptRecord]] = []
    size = 0
    scanned = scan(store, journal, selection, after_key=after)
    try:
        for key, record in scanned:
            page.append((key, record))
            size += len(record.body) if isinstance(record, Record) else 0
            if len(page) >= records_max or size >= bytes_max:
                return page, False
    finally:
        scanned.close()  # ends the read transaction now, not when collected
    return page, True


def seq_of_key(key: bytes) -> int:
    return split_key(key)[1]
