"""The DQF's key index: every DQF key again, with an empty value, in a database of its own.

Why: a server restarting with a million messages in its DQF must know which seqs
each queue holds, not what they say. The DQF's leaf pages hold the records (1 KiB
messages: ~1.5 GB for a million), so even a keys-only cursor over the DQF reads
every one of them; this index holds 12-byte keys only (~20 MB for a million), so
start-up reads it in a fraction of a second and the records are read later, a
window at a time (mrs.group.recovery.ColdReader).

The index is written in the same transaction as the DQF (journals.store.apply_batches),
so it can never disagree with a commit of this library. Something else may have
written the environment (an older MRS, a tool using LMDB directly): every commit of
this library stamps its transaction id into the index under `STAMP_KEY` (one byte,
so it sorts before every 12-byte DQF key), and `open_index` rebuilds the index from
the DQF's keys when the stamp is not the environment's last transaction or the
counts differ (the upgrade path of a data directory written before the index
existed: its DQF is read once, keys only).

The stamp also holds how many entries each of the group's databases had after that
commit (`COUNTED`, in the same transaction as the records): a second witness, on
another page, that the start-up check (mrs.storage.journal_check) holds against what it
walks, so a damaged page that hides records, or a flipped key that files one under
another queue or seq, is found before the group serves instead of never.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

import lmdb

INDEX_DB = b"dqf-keys"
STAMP_KEY = b"\x00"
"""Index key holding the id of the last transaction that kept it (big-endian u64),
then the entry count of each COUNTED database after it (big-endian u64 each)."""
COUNTED = ("saf", "dqf", "dlj", "pcj", "meta", "marks", "notices", "dedupe")
"""The databases whose entries the stamp counts, in this order (journals.keys.Journal)."""
FIRST_KEY = bytes(12)
"""Every DQF key sorts at or after this, and the stamp before it."""
_STAMP = struct.Struct(">" + "Q" * (1 + len(COUNTED)))


def open_index(env: lmdb.Environment, dqf_db, *, readonly: bool, counted: Sequence = ()):
    """The index database, rebuilt first if it may be stale; None when it cannot be
    trusted and cannot be rebuilt (read-only, or the rebuild failed): callers then
    read the DQF's own keys, and writers leave the index alone. `counted`: the
    COUNTED databases, whose counts a rebuild stamps."""
    if readonly:
        try:
            index_db = env.open_db(INDEX_DB, create=False)
        except lmdb.NotFoundError:
            return None
        return index_db if dqf_db is not None and is_current(env, index_db, dqf_db) else None
    try:
        index_db = env.open_db(INDEX_DB, create=True)
        if not is_current(env, index_db, dqf_db):
            rebuild(env, index_db, dqf_db, counted)
    except lmdb.Error:
        return None  # e.g. a full map: start on the DQF's keys, rebuild at the next open
    return index_db


def is_current(env: lmdb.Environment, index_db, dqf_db) -> bool:
    """True if the last commit kept the index (and stamped its counts) and the index
    has as many keys as the DQF."""
    with env.begin() as txn:
        if read_stamp(txn, index_db) is None:
            return False
        return txn.stat(index_db)["entries"] == txn.stat(dqf_db)["entries"] + 1


def read_stamp(txn: lmdb.Transaction, index_db) -> dict[str, int] | None:
    """The entry count of each COUNTED database as the transaction `txn` reads was
    committed; None if that commit did not stamp them (another writer, an older MRS)."""
    stamped = txn.get(STAMP_KEY, db=index_db)
    if stamped is None or len(stamped) != _STAMP.size or _STAMP.unpack(stamped)[0] != txn.id():
        return None
    return dict(zip(COUNTED, _STAMP.unpack(stamped)[1:], strict=True))


def rebuild(env: lmdb.Environment, index_db, dqf_db, counted: Sequence = ()) -> int:
    """Refill the index from the DQF's keys in one synced transaction; the key count."""
    with env.begin(write=True) as txn:
        txn.drop(index_db, delete=False)
        stamp(txn, index_db, counted)
        cursor = txn.cursor(index_db)
        count = 0
        for key in txn.cursor(dqf_db).iternext(keys=True, values=False):
            cursor.put(key, b"", append=True)
            count += 1
    return count


def put_keys(txn: lmdb.Transaction, index_db, items: list[tuple[bytes, bytes]]) -> None:
    """Put (key, b"") items into the index in one C call (a put costs 0.4 us one by
    one, 0.17 us this way), and empty the list.

    Appended first (MDB_APPEND): keys arrive in order for each queue, and appended
    keys fill their pages where ordinary inserts split them in half. Should any key
    not sort after the last one (several queues, a key put again), the whole list is
    put again the ordinary way: the appended ones are overwritten with the same empty
    value."""
    if items:
        cursor = txn.cursor(index_db)
        _consumed, added = cursor.putmulti(items, append=True)
        if added < len(items):
            cursor.putmulti(items)
        items.clear()


def stamp(txn: lmdb.Transaction, index_db, counted: Sequence) -> None:
    """Record, in the transaction being written, that it keeps the index, and the
    entries each of the COUNTED databases (`counted`, their handles) holds after it.
    Last in the transaction: reading a database's count costs no page (LMDB keeps it
    in the transaction). Without all handles (a read-only store), nothing is counted
    and the stamp says the index is not current."""
    if len(counted) != len(COUNTED):
        return
    stat = txn.stat
    entries = [stat(db)["entries"] for db in counted]
    txn.put(STAMP_KEY, _STAMP.pack(txn.id(), *entries), db=index_db)


def keys(env: lmdb.Environment, db, start: bytes = b"") -> Iterator[bytes]:
    """Every key of `db` from `start` on, in key order, values never read, from one
    snapshot (the index from FIRST_KEY: its stamp is not a DQF key)."""
    with env.begin(db=db) as txn:
        cursor = txn.cursor(db)
        if cursor.set_range(start) if start else cursor.first():
            yield from cursor.iternext(keys=True, values=False)
