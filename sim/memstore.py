"""An in-memory journal store with LMDB's commit semantics, for the deterministic
simulation.

A commit applies all its batches or none. Nothing uncommitted survives a crash:
the group's writer holds uncommitted batches, and a crashed group's writer is simply
dropped, while this store (the "disk") lives on for the restart. A `fault` callback,
drawn from the simulation's seed, can fail any commit with EIO, ENOSPC or map full,
and `bytes_max` (the map size) makes a commit that would hold more fail as map full.
A commit that stores a new message (a DQF, SAF or DLJ record, deleting none) fails so
already `RESERVE_FRACTION` of the map before its end, as a group's journal reserve
refuses new messages on LMDB (mrs.storage.journal_reserve, which a store without a
map does not get): the rest is for delivery marks, confirms and deletes, so a backlog
that fills the map is still drained (without it, a fill that left less room than one
delivery mark stopped every get for good).
It offers the same methods as `journals.JournalStore` that the server uses.
"""

from __future__ import annotations

import bisect
import errno
from collections.abc import Callable, Iterator
from pathlib import Path

from journals.record import CorruptRecord, Record, decode_record
from journals.store import (
    Journal,
    JournalDeviceError,
    JournalFullError,
    Selection,
    WriteBatch,
    decode_selected,
)

Fault = Callable[[list[WriteBatch]], str | None]
"""Given a commit's batches, returns None, "EIO", "ENOSPC" or "MAPFULL"."""
RESERVE_FRACTION = 0.05
"""The part of `bytes_max` new messages may not use (mrs.storage.journal_reserve's)."""
_MESSAGE_JOURNALS = frozenset({Journal.DQF, Journal.SAF, Journal.DLJ})


def _stores_a_new_message(batch: WriteBatch) -> bool:
    """Puts a message record and deletes none (a confirm, a move or a quarantine
    deletes the record it replaces: those may use the reserve)."""
    return any(journal in _MESSAGE_JOURNALS for journal, _, _ in batch.puts) and not any(
        journal in _MESSAGE_JOURNALS for journal, _ in batch.deletes
    )


class MemoryJournalStore:
    def __init__(
        self,
        path: Path | str = "memory",
        fault: Fault | None = None,
        bytes_max: int | None = None,
        on_full: Callable[[], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.fault = fault
        self.bytes_max = bytes_max
        self.on_full = on_full
        """Told whenever `bytes_max` refuses a commit (the history records it)."""
        self.size_bytes = 0
        """Keys and values held (what `bytes_max` bounds)."""
        self.commits = 0
        self._data: dict[Journal, dict[bytes, bytes]] = {journal: {} for journal in Journal}
        self._keys: dict[Journal, list[bytes]] = {journal: [] for journal in Journal}

    def close(self) -> None:
        pass

    # ----- writes
    def commit_now(self, batch: WriteBatch) -> None:
        self.apply([batch])

    def apply(
        self, batches: list[WriteBatch], before_commit: Callable[[], None] | None = None
    ) -> None:
        failure = self.fault(batches) if self.fault is not None else None
        if failure == "MAPFULL":
            raise JournalFullError("journal map full (simulated)")
        if self.bytes_max is not None and self._size_after(batches) > self._limit(batches):
            if self.on_full is not None:
                self.on_full()
            raise JournalFullError(f"journal map full ({self.bytes_max} bytes, simulated)")
        if before_commit is not None:
            before_commit()  # LMDB's writes are done: a full map came before, a flush's error after
        if failure in ("EIO", "ENOSPC"):
            raise JournalDeviceError(
                f"journal device failed: {failure} (simulated)", getattr(errno, failure)
            )
        for batch in batches:
            for journal, key in batch.deletes:
                self._delete(journal, key)
            for journal, key, value in batch.puts:
                self._put(journal, key, value)
        self.commits += 1

    def _limit(self, batches: list[WriteBatch]) -> int:
        """The size this commit may reach: less the reserve if it stores a new message."""
        assert self.bytes_max is not None
        if any(_stores_a_new_message(batch) for batch in batches):
            return self.bytes_max - int(self.bytes_max * RESERVE_FRACTION)
        return self.bytes_max

    def _size_after(self, batches: list[WriteBatch]) -> int:
        size = self.size_bytes
        changed: dict[tuple[Journal, bytes], int] = {}

        def held(journal: Journal, key: bytes) -> int:
            if (journal, key) in changed:
                return changed[(journal, key)]
            value = self._data[journal].get(key)
            return 0 if value is None else len(key) + len(value)

        for batch in batches:
            for journal, key in batch.deletes:
                size -= held(journal, key)
                changed[(journal, key)] = 0
            for journal, key, value in batch.puts:
                size += len(key) + len(value) - held(journal, key)
                changed[(journal, key)] = len(key) + len(value)
        return size

    def _put(self, journal: Journal, key: bytes, value: bytes) -> None:
        data = self._data[journal]
        old = data.get(key)
        if old is None:
            bisect.insort(self._keys[journal], key)
            self.size_bytes += len(key)
        else:
            self.size_bytes -= len(old)
        data[key] = value
        self.size_bytes += len(value)

    def _delete(self, journal: Journal, key: bytes) -> None:
        old = self._data[journal].pop(key, None)
        if old is not None:
            self.size_bytes -= len(key) + len(old)
            keys = self._keys[journal]
            del keys[bisect.bisect_left(keys, key)]

    # ----- reads
    def count(self, journal: Journal) -> int:
        return len(self._data[journal])

    def meta_get(self, name: str) -> bytes | None:
        return self._data[Journal.META].get(name.encode())

    def get_raw(self, journal: Journal, key: bytes) -> bytes | None:
        return self._data[journal].get(key)

    def get_raw_many(self, journal: Journal, keys: list[bytes]) -> list[bytes | None]:
        data = self._data[journal]
        return [data.get(key) for key in keys]

    def get(self, journal: Journal, key: bytes) -> Record | None:
        value = self._data[journal].get(key)
        return None if value is None else decode_record(value, journal.value, key)

    def raw_items(self, journal: Journal) -> Iterator[tuple[bytes, bytes]]:
        data = self._data[journal]
        for key in list(self._keys[journal]):
            yield key, data[key]

    def keys(self, journal: Journal) -> Iterator[bytes]:
        yield from list(self._keys[journal])

    def release_pages(self) -> int:
        return 0

    def start_writeback(self) -> None:
        """Nothing to write: memory is the store."""

    def scan(
        self, journal: Journal, selection: Selection | None = None
    ) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
        selection = selection or Selection()
        prefix = selection.prefix.to_bytes(4, "big") if selection.prefix is not None else b""
        start = bisect.bisect_left(self._keys[journal], prefix)
        data = self._data[journal]
        items = ((key, data[key]) for key in list(self._keys[journal][start:]))
        yield from decode_selected(journal, items, selection, prefix)

    def items_after(
        self,
        journal: Journal,
        prefix: bytes,
        after_key: bytes | None,
        count_max: int,
        bytes_max: int,
    ) -> list[tuple[bytes, bytes]]:
        keys = self._keys[journal]
        start = (
            bisect.bisect_right(keys, after_key) if after_key else bisect.bisect_left(keys, prefix)
        )
        items: list[tuple[bytes, bytes]] = []
        size = 0
        for key in keys[start:]:
            if not key.startswith(prefix) or len(items) >= count_max:
                break
            value = self._data[journal][key]
            if items and size + len(value) > bytes_max:
                break
            size += len(value)
            items.append((key, value))
        return items
