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
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import lmdb

INDEX_DB = b"dqf-keys"
STAMP_KEY = b"\x00"
"""Index key holding the id of the last transaction that kept it (big-endian u64)."""
FIRST_KEY = bytes(12)
"""Every DQF key sorts at or after this, and the stamp before it."""
_U64 = struct.Struct(">Q")


def open_index(env: lmdb.Environment, dqf_db, *, readonly: bool):
    """The index database, rebuilt first if it may be stale; None when it cannot be
    trusted and cannot be rebuilt (read-only, or the rebuild failed): callers then
    read the DQF's own keys, and writers leave the index alone."""
    if readonly:
        try:
            index_db = env.open_db(INDEX_DB, create=False)
        except lmdb.NotFoundError:
            return None
        return index_db if dqf_db is not None and is_current(env, index_db, dqf_db) else None
    try:
        index_db = env.open_db(INDEX_DB, create=True)
        if not is_current(env, index_db, dqf_db):
            rebuild(env, index_db, dqf_db)
    except lmdb.Error:
        return None  # e.g. a full map: start on the DQF's keys, rebuild at the next open
    return index_db


def is_current(env: lmdb.Environment, index_db, dqf_db) -> bool:
    """True if the last commit kept the index and it has as many keys as the DQF."""
    with env.begin() as txn:
        stamped = txn.get(STAMP_KEY, db=index_db)
        if stamped is None or len(stamped) != _U64.size or _U64.unpack(stamped)[0] != txn.id():
            return False
        return txn.stat(index_db)["entries"] == txn.stat(dqf_db)["entries"] + 1


def rebuild(env: lmdb.Environment, index_db, dqf_db) -> int:
    """Refill the index from the DQF's keys in one synced transaction; the key count."""
    with env.begin(write=True) as txn:
        txn.drop(index_db, delete=False)
        stamp(txn, index_db)
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


def stamp(txn: lmdb.Transaction, index_db) -> None:
    """Record, in the transaction being written, that it keeps the index."""
    txn.put(STAMP_KEY, _U64.pack(txn.id()), db=index_db)


def keys(env: lmdb.Environment, db, start: bytes = b"") -> Iterator[bytes]:
    """Every key of `db` from `start` on, in key order, values never read, from one
    snapshot (the index from FIRST_KEY: its stamp is not a DQF key)."""
    with env.begin(db=db) as txn:
        cursor = txn.cursor(db)
        if cursor.set_range(start) if start else cursor.first():
            yield from cursor.iternext(keys=True, values=False)
