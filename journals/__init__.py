"""A small durable-journal library: LMDB, versioned checksummed records, group commit.

It imports nothing of `mrs` or `clients`; `mrs` converts its messages to `Record`s.
The only MRS words inside are the names of the journals a group keeps (SAF, DQF, DLJ,
PCJ, META, MARKS, NOTICES, DEDUPE) and the record's address fields. Any store the
server runs on satisfies `journals.protocol.Store`, checked by one suite,
`journals.conformance` (the LMDB store here and the simulator's in-memory store).
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
