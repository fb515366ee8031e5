"""The store protocol: what every journal store offers its user, LMDB or in memory.

Why a protocol: the server runs on `JournalStore` (LMDB) in production and on
`sim.memstore.MemoryJournalStore` in the simulator and the fast tests. Both must keep
the same promises (atomic batches, key order, a corrupt value never returned as a
record), or a test on one proves nothing about the other; `journals.conformance`
checks those promises against any store that claims this protocol.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

from journals.record import CorruptRecord, Record
from journals.store import Journal, Selection, WriteBatch


@runtime_checkable
class Store(Protocol):
    """A set of named key-ordered journals written in atomic, durable batches."""

    path: Path

    def close(self) -> None: ...

    def commit_now(self, batch: WriteBatch) -> None:
        """Make one batch durable on the calling thread (raises JournalError)."""

    def apply(
        self, batches: list[WriteBatch], before_commit: Callable[[], None] | None = None
    ) -> None:
        """Make all `batches` durable together, or none (raises JournalError); within a
        batch deletes come before puts, and a later batch sees an earlier one.
        `before_commit` runs once the writes are done and before they are made durable
        (a failure found while writing comes before it)."""

    def count(self, journal: Journal) -> int: ...

    def get(self, journal: Journal, key: bytes) -> Record | None:
        """The record at `key` or None; raises CorruptRecord if the value is corrupt."""

    def get_raw(self, journal: Journal, key: bytes) -> bytes | None: ...

    def get_raw_many(self, journal: Journal, keys: list[bytes]) -> list[bytes | None]:
        """The values at `keys` (None where absent), read in one read transaction."""

    def meta_get(self, name: str) -> bytes | None:
        """The META journal's value under `name` (a str key)."""

    def scan(
        self, journal: Journal, selection: Selection | None = None
    ) -> Iterator[tuple[bytes, Record | CorruptRecord]]:
        """(key, record) in key order; a corrupt value comes out as a CorruptRecord."""

    def raw_items(self, journal: Journal) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value) in key order, undecoded."""

    def keys(self, journal: Journal) -> Iterator[bytes]:
        """Every key in key order, without reading the values (start-up recovery)."""

    def release_pages(self) -> int:
        """Let go of whatever memory reads left mapped (LMDB's pages); bytes covered."""

    def start_writeback(self) -> None:
        """Start writing what the last commits left to write, without waiting: called
        once their answers are out, so it is off the answer's path."""

    def items_after(
        self,
        journal: Journal,
        prefix: bytes,
        after_key: bytes | None,
        count_max: int,
        bytes_max: int,
    ) -> list[tuple[bytes, bytes]]:
        """Raw pairs with keys starting with `prefix` after `after_key`, in key order:
        at most count_max, and about bytes_max (always at least one)."""
