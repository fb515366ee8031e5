"""A unit of durability: the write batch, and the errors that say it was not stored.

A `WriteBatch` is made durable whole or not at all; `JournalError` (and its kinds)
means nothing in the batch was stored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journals.keys import Journal
from journals.record import Record, encode_record


class JournalError(Exception):
    """A journal write could not be made durable; nothing in the batch was stored.

    Its own root by design, outside `mrs.errors`: journals/ is a library without MRS
    concepts (no statuses); the group turns these into JOURNAL_FAIL/JOURNAL_FULL."""


class JournalFullError(JournalError):
    """The LMDB map is full (MRS resource exhaustion)."""


class JournalDeviceError(JournalError):
    """The device failed the write or the fsync (EIO, ENOSPC, ...)."""

    def __init__(self, message: str, errno_value: int | None = None) -> None:
        super().__init__(message)
        self.errno_value = errno_value


@dataclass
class WriteBatch:
    """Operations that must be durable together, in one transaction: deletes first,
    then puts.

    `stream` names an ordered sequence of batches (e.g. what one link connection
    delivered): once a batch of a stream fails, the writer does not commit the later
    batches of that stream queued with it, so they cannot overtake it. `guard`, if
    given, is asked just before committing; False skips the batch (not attempted).
    """

    puts: list[tuple[Journal, bytes, bytes]]
    deletes: list[tuple[Journal, bytes]]
    stream: Any = None  # any hashable; `object` here trips mypyc (mrs.native.loader)
    guard: Callable[[], bool] | None = None
    submitted_s: float = 0.0
    """perf_counter() when handed to a writer thread (its commit_wait statistic)."""

    def __init__(
        self,
        puts: list[tuple[Journal, bytes, bytes]],
        deletes: list[tuple[Journal, bytes]],
        stream: Any = None,
        guard: Callable[[], bool] | None = None,
        submitted_s: float = 0.0,
    ) -> None:
        # written out: a dataclass's generated __init__ stays interpreted (docs/native.md)
        self.puts = puts
        self.deletes = deletes
        self.stream = stream
        self.guard = guard
        self.submitted_s = submitted_s

    @classmethod
    def empty(cls) -> WriteBatch:
        return cls([], [])

    def put_record(self, journal: Journal, key: bytes, record: Record) -> WriteBatch:
        self.puts.append((journal, key, encode_record(record)))
        return self

    def put_raw(self, journal: Journal, key: bytes, value: bytes) -> WriteBatch:
        self.puts.append((journal, key, value))
        return self

    def delete(self, journal: Journal, key: bytes) -> WriteBatch:
        self.deletes.append((journal, key))
        return self

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes)


def encode_batches(batches: list[WriteBatch]) -> list[list[Any]]:
    """Batches as plain msgpack-able data, in order: each batch's puts as
    [journal, key, value] and deletes as [journal, key]. The one form a commit takes
    outside LMDB: a commit log record (journals.commit_log) and a replicated commit
    (mrs.replication.wire)."""
    return [
        [
            [[str(j), k, v] for j, k, v in batch.puts],
            [[str(j), k] for j, k in batch.deletes],
        ]
        for batch in batches
    ]


def decode_batches(raw: list[list[Any]]) -> list[WriteBatch]:
    """WriteBatches from `encode_batches`' form; ValueError when one is malformed."""
    try:
        return [
            WriteBatch(
                [(Journal(j), as_bytes(k), as_bytes(v)) for j, k, v in puts],
                [(Journal(j), as_bytes(k)) for j, k in deletes],
            )
            for puts, deletes in raw
        ]
    except (TypeError, ValueError) as error:
        raise ValueError(f"malformed commit: {error}") from None


def as_bytes(value: Any) -> bytes:
    """A key or value as sent: bytes, never converted (`bytes(n)` of an int sent in
    its place would allocate n zero bytes)."""
    if type(value) is not bytes:
        raise ValueError(f"{type(value).__name__} where bytes belong")
    return value
