"""Reading one group's PCJ or DLJ for the audit: plan key ranges, scan them to Arrow.

Spark-free, so the planner and the scan can be tested and benchmarked on their own;
`mrs.audit.source` wraps them as the `mrs-pcj` / `mrs-dlj` data source.

The snapshot boundary. LMDB gives every reader a consistent snapshot, but one Spark
scan is many readers (tasks, retries, other processes) opened at different moments
while the group may keep writing. So a scan fixes its boundary once, at planning:
a record belongs to the scan if its key is at most the last key seen at planning
AND it was written (journaled) no later than the planning time. Planning waits
`settle_s` after taking that time before it reads the keys, so a commit that was in
flight at the planning time has landed before any task reads. Every task and every
retry applies the same rule and so sees the same records, whatever the group wrote
since. (PCJ keys are sequence numbers, and messages are confirmed out of sequence
order, so a key bound alone would not do.) Records *deleted* after planning (a DLJ
redrive with --remove, an archive) cannot be seen by a later task; the scan reports
what is there.

Each environment is opened read-only *with* LMDB's lock file, so a reader takes a
reader slot like any other and the writer never reuses pages it still reads.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgpack
import pyarrow as pa

from journals import Journal, JournalStore, checksum
from journals.record import FORMAT_VERSION, MAGIC
from mrs.audit.columns import (
    SEQ_SIGN,
    batch_from_values,
    corrupt_batch,
    decode_values,
    seq_of_key,
    signed_seq,
    stored_seq,
)

BATCH_ROWS = 8192
BATCH_BYTES_MAX = 16 << 20
"""A chunk ends at this many stored bytes even before BATCH_ROWS records: bodies are
up to 1 GiB (`message_bytes_max`), and 8192 of 1 MiB each made one batch of 8 GiB
(9.5 GB resident) whose body column Arrow cannot hold in one array (2 GiB): the
audit of such a PCJ died of "Cannot convert pyarrow.lib.ChunkedArray"."""
RECORDS_PER_PARTITION = 131_072
SETTLE_S = 0.2
"""Longer than a group commit takes on a healthy disk (milliseconds)."""
PARTITIONS_PER_GROUP_MAX = 1024

# Indices into a decoded record's field list (journals.Record order).
SEQ, TARGET_GROUP, TARGET_QUEUE, SOURCE_GROUP, SOURCE_QUEUE = 0, 1, 2, 3, 4
CLASS, TYPE, PRIORITY, PUT_TIME_NS, WRITTEN_TIME_NS, CONFIRM_TIME_NS = 6, 7, 8, 12, 13, 15
TIME_FIELDS = {"put_time": PUT_TIME_NS, "written_time": WRITTEN_TIME_NS,
               "confirm_time": CONFIRM_TIME_NS}  # fmt: skip
INT_FIELDS = {
    "target_group": TARGET_GROUP,
    "target_queue": TARGET_QUEUE,
    "source_group": SOURCE_GROUP,
    "source_queue": SOURCE_QUEUE,
    "class": CLASS,
    "type": TYPE,
    "priority": PRIORITY,
}


@dataclass(frozen=True, slots=True)
class Range:
    """An inclusive integer range with an optional set of allowed values."""

    low: int | None = None
    high: int | None = None
    values: frozenset[int] | None = None

    def both(self, other: Range) -> Range:
        low = max((v for v in (self.low, other.low) if v is not None), default=None)
        high = min((v for v in (self.high, other.high) if v is not None), default=None)
        values: frozenset[int] | None
        if self.values is not None and other.values is not None:
            values = self.values & other.values
        else:
            values = self.values if self.values is not None else other.values
        return Range(low, high, values)

    def admits(self, value: int) -> bool:
        if self.low is not None and value < self.low:
            return False
        if self.high is not None and value > self.high:
            return False
        return self.values is None or value in self.values

    def empty(self) -> bool:
        if self.low is not None and self.high is not None and self.low > self.high:
            return True
        return self.values is not None and not any(self.admits(v) for v in self.values)


@dataclass(frozen=True, slots=True)
class Conditions:
    """What pushed filters ask for: a seq range, and ranges over record fields.

    Time ranges are in microseconds (the columns' unit); a record whose time is
    unset (0, e.g. no confirm time in the DLJ) fails any range on it, as NULL does.
    """

    seq: Range = Range()
    group: Range = Range()
    fields: tuple[tuple[int, bool, Range], ...] = ()
    """(field index, is a time in ns, range)."""

    def admits(self, values: list) -> bool:
        for index, is_time, wanted in self.fields:
            value = values[index]
            if is_time:
                if not value:
                    return False
                value //= 1000
            if not wanted.admits(value):
                return False
        return True


@dataclass(frozen=True, slots=True)
class Part:
    """One task's work: a key range of one group's journal, and the scan's boundary."""

    path: str
    group: int
    journal: str
    low_key: bytes
    high_key: bytes
    """Inclusive; no greater than the last key at planning."""
    boundary_ns: int
    conditions: Conditions = field(default_factory=Conditions)


def journal_dir(path: str | Path) -> Path:
    """The LMDB directory of a group: `path` itself or its `journals/` (a data_dir)."""
    directory = Path(path)
    if (directory / "data.mdb").is_file():
        return directory
    if (directory / "journals" / "data.mdb").is_file():
        return directory / "journals"
    raise FileNotFoundError(f"no group journal (data.mdb) in {directory} or {directory}/journals")


def open_store(path: str | Path) -> JournalStore:
    """A read-only handle with locking; a clear error if there is no journal there."""
    return JournalStore(journal_dir(path), readonly=True)


def unfinished_copy_problem(path: str | Path) -> str | None:
    """One line when the journals at `path` are a replica's unfinished full copy
    (mrs.offline.journal_files `unfinished_copy`), else None: an audit of them counted
    part of the group's messages (none confirmed, none waiting) with nothing to say so."""
    from mrs.offline.journal_files import UNFINISHED_COPY_ADVICE, unfinished_copy

    store = open_store(path)
    try:
        why = unfinished_copy(store)
    finally:
        store.close()
    if why is None:
        return None
    return f"{journal_dir(path)}: these journals {why}; {UNFINISHED_COPY_ADVICE}"


def _key(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


def plan(
    sources: list[tuple[str, int]],
    journal: str,
    conditions: Conditions = Conditions(),  # noqa: B008 - immutable
    *,
    records_per_partition: int = RECORDS_PER_PARTITION,
    settle_s: float = SETTLE_S,
    boundary_ns: int | None = None,
) -> list[Part]:
    """Parts covering every record of `journal` in each (data dir, group) source."""
    boundary_ns = time.time_ns() if boundary_ns is None else boundary_ns
    if settle_s > 0:
        time.sleep(settle_s)
    parts: list[Part] = []
    for path, group in sources:
        if conditions.group.admits(group):
            parts.extend(_plan_one(path, group, journal, conditions, boundary_ns,
                                   max(1, records_per_partition)))  # fmt: skip
    return parts


def _plan_one(
    path: str, group: int, journal: str, conditions: Conditions, boundary_ns: int, per_part: int
) -> list[Part]:
    if conditions.seq.empty():
        return []
    store = open_store(path)
    try:
        db = store.db(Journal(journal))
        if db is None:
            return []
        with store.env.begin(db=db) as txn:
            cursor = txn.cursor(db)
            ranges = key_ranges(conditions.seq)
            spans = [_split(cursor, low, high, per_part) for low, high in ranges]
    finally:
        store.close()
    return [
        Part(path, group, journal, start, end, boundary_ns, conditions)
        for span in spans
        for start, end in span
    ]


_SEQ_END = (SEQ_SIGN << 1) - 1


def key_ranges(seqs: Range) -> list[tuple[bytes | None, bytes | None]]:
    """The key ranges (inclusive; None: the journal's start or end) holding the seqs
    a range over the signed `seq` column admits, in key order: column values from 0
    up are keys below 2**63, negative ones (`columns.signed_seq`) the keys above."""
    low = -SEQ_SIGN if seqs.low is None else seqs.low
    high = SEQ_SIGN - 1 if seqs.high is None else seqs.high
    stored: list[tuple[int, int]] = []
    if high >= 0:
        stored.append((max(low, 0), high))
    if low < 0:
        stored.append((stored_seq(low), stored_seq(min(high, -1))))
    stored = [(a, b) for a, b in stored if a <= b]
    if len(stored) == 2 and stored[0][1] + 1 == stored[1][0]:
        stored = [(stored[0][0], stored[1][1])]
    return [(_key(a) if a else None, _key(b) if b != _SEQ_END else None) for a, b in stored]


def _split(cursor, low: bytes | None, high: bytes | None, per_part: int) -> list[tuple]:
    """(first key, last key) of each part of the keys from `low` to `high`."""
    if not (cursor.set_range(low) if low is not None else cursor.first()):
        return []
    splits: list[bytes] = []
    last: bytes | None = None
    for count, key in enumerate(cursor.iternext(keys=True, values=False)):
        if high is not None and key > high:
            break
        if count % per_part == 0 and len(splits) < PARTITIONS_PER_GROUP_MAX:
            splits.append(key)
        last = key
    if last is None:
        return []
    ends = [_before(key) for key in splits[1:]] + [last]
    return list(zip(splits, ends, strict=True))


def _before(key: bytes) -> bytes:
    """The greatest key of the same length sorting before `key` (keys are distinct)."""
    value = int.from_bytes(key, "big") - 1
    return value.to_bytes(len(key), "big")


def _seq_admits(conditions: Conditions, seq: int | None) -> bool:
    """Whether the seq (as stored; None or not an int: unknown) is in the pushed
    range, which is over the signed `seq` column (`columns.signed_seq`)."""
    return type(seq) is not int or conditions.seq.admits(signed_seq(seq))


_GOOD_HEADER = bytes([MAGIC, FORMAT_VERSION])
_HEADER_BYTES = 6
_FIELDS = 18


def scan_chunks(
    part: Part, chunk_rows: int = BATCH_ROWS
) -> Iterator[tuple[list[list], list[tuple[bytes, str]]]]:
    """(decoded records, corrupt (key, reason) pairs) in chunks of about chunk_rows
    (fewer once they hold BATCH_BYTES_MAX stored bytes), for every record of the part
    inside its boundary that the conditions admit, in key order, from one LMDB snapshot.

    The loop is the scan's hot path: a well-formed record costs one slice, one CRC,
    one unpackb and a few comparisons; anything unusual goes through `decode_values`,
    which says exactly what is wrong."""
    store = open_store(part.path)
    try:
        db = store.db(Journal(part.journal))
        if db is None:
            return
        conditions = part.conditions
        filter_fields = bool(conditions.fields)
        seq_values = conditions.seq.values is not None
        boundary_ns, high = part.boundary_ns, part.high_key
        unpackb, crc32, from_bytes = msgpack.unpackb, checksum.crc32, int.from_bytes
        with store.env.begin(db=db, buffers=False) as txn:
            cursor = txn.cursor(db)
            if not cursor.set_range(part.low_key):
                return
            rows: list[list] = []
            corrupt: list[tuple[bytes, str]] = []
            chunk_bytes = 0
            for key, value in cursor.iternext():
                if key > high:
                    break
                chunk_bytes += len(value)
                payload = value[_HEADER_BYTES:]
                decoded = None
                if value[:2] == _GOOD_HEADER and crc32(payload) == from_bytes(value[2:6], "big"):
                    try:
                        decoded = unpackb(payload, raw=False, strict_map_key=False)
                    except Exception:  # noqa: BLE001 - decode_values names the problem
                        decoded = None
                    if type(decoded) is not list or len(decoded) != _FIELDS:
                        decoded = None
                if decoded is None:
                    problem = decode_values(key, value)
                    if isinstance(problem, str):
                        if not filter_fields and _seq_admits(conditions, seq_of_key(key)):
                            corrupt.append((key, problem))
                        continue
                    decoded = problem
                written = decoded[WRITTEN_TIME_NS]
                if type(written) is int and written > boundary_ns:
                    continue
                if seq_values and not _seq_admits(conditions, decoded[SEQ]):
                    continue
                if filter_fields and not conditions.admits(decoded):
                    continue
                rows.append(decoded)
                if len(rows) >= chunk_rows or chunk_bytes >= BATCH_BYTES_MAX:
                    yield rows, corrupt
                    rows, corrupt, chunk_bytes = [], [], 0
            if rows or corrupt:
                yield rows, corrupt
    finally:
        store.close()


def scan_values(part: Part) -> Iterator[tuple[bytes | None, list | str]]:
    """(key, field list) per record, or (key, reason) per corrupt record (the
    row-at-a-time path and tests; a chunk's corrupt records come after its rows)."""
    for rows, corrupt in scan_chunks(part):
        for values in rows:
            yield None, values
        yield from corrupt


def scan_batches(part: Part, batch_rows: int = BATCH_ROWS,
                 exact: bool = False) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """The part as Arrow batches in the audit schema (with `exact`, the times to the
    nanosecond too: `columns.EXACT_SCHEMA`); corrupt records as report rows."""
    for rows, corrupt in scan_chunks(part, batch_rows):
        if rows:
            yield _to_batch(rows, part, exact)
        if corrupt:
            yield corrupt_batch(corrupt, part.group, part.journal, exact)


_WRONG_FIELDS = (TypeError, ValueError, OverflowError, AttributeError, pa.ArrowException)


def _to_batch(rows: list[list], part: Part, exact: bool = False) -> pa.RecordBatch:
    """One batch; if a checksummed record still holds fields of the wrong type, build
    the batch record by record so only that record is reported as corrupt."""
    try:
        return batch_from_values(rows, part.group, part.journal, exact)
    except _WRONG_FIELDS:
        good, bad = [], []
        for values in rows:
            try:
                batch_from_values([values], part.group, part.journal, exact)
                good.append(values)
            except _WRONG_FIELDS as error:
                seq = values[SEQ] if isinstance(values[SEQ], int) else 0
                bad.append((_key(seq % (1 << 64)), f"field of the wrong type: {error}"))
        batches = [batch_from_values(good, part.group, part.journal, exact)] if good else []
        if bad:
            batches.append(corrupt_batch(bad, part.group, part.journal, exact))
        return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


__all__ = [
    "BATCH_ROWS",
    "Conditions",
    "INT_FIELDS",
    "Part",
    "Range",
    "TIME_FIELDS",
    "open_store",
    "unfinished_copy_problem",
    "plan",
    "scan_batches",
    "scan_values",
]
