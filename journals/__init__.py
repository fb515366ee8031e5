"""A small durable-journal library: LMDB, versioned checksummed records, group commit.

It imports nothing of `mrs` or `clients`; `mrs` converts its messages to `Record`s.
"""

from journals.record import CorruptRecord, Record, decode_record, encode_record
from journals.store import (
    RECORD_JOURNALS,
    Journal,
    JournalDeviceError,
    JournalError,
    JournalFullError,
    JournalStore,
    Selection,
    WriteBatch,
    group_key,
    queue_key,
    seq_key,
    split_key,
)
from journals.writer import GroupCommitWriter, InlineWriter, WriterStats

__all__ = [
    "RECORD_JOURNALS",
    "CorruptRecord",
    "GroupCommitWriter",
    "InlineWriter",
    "Journal",
    "JournalDeviceError",
    "JournalError",
    "JournalFullError",
    "JournalStore",
    "Record",
    "Selection",
    "WriteBatch",
    "WriterStats",
    "decode_record",
    "encode_record",
    "group_key",
    "queue_key",
    "seq_key",
    "split_key",
]
