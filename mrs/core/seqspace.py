"""Sequence numbers that no number of restarts can exhaust.

A seq is `group (15 bits) | counter (49 bits)`: unique on the whole bus (the group is
in it) and increasing per group across restarts. The counter is never written per
message: the group commits a *reservation* (`meta/seq_reserved`, the first counter
value not yet reserved) before it hands out any counter below it, and starts after a
crash from the reservation. A restart therefore costs at most one reservation block,
and blocks start small (1,024) and double with use up to 1M, so a crash loop at one
restart a second takes ~17,000 years to use the 2**49 counters, and a busy group
reserves once per 1M messages (one small synced commit).

A replicated group's active has a `fence` (its store's `seq_fence`,
mrs.replication.stream.SeqFence): each reservation is written `fence.ahead` further
than the allocator hands out, and a block no reservation on a majority covers is
refused (JOURNAL_FAIL): a seq leaves with a link transfer before any replica has its
commit, and the next active counts from the reservation its own journals hold.

A group's first start (journals with no reservation) does not count from 1 but from
its wall clock: `FRESH_COUNTERS_PER_S` counters for each second since
`FRESH_EPOCH_S` (`fresh_start`). Why: a group rebuilt from nothing (its machine lost,
no replicated group) keeps its id, and its peers still hold its old incarnation's
seqs: confirmed ones in their PCJ (keyed by seq alone), unconfirmed ones in their DQF
(keyed by queue and seq), confirm notices and dedupe keys (origin and seq). Counting
from 1 again, its first messages after `mrs admin reset-link` took those keys: a
confirm replaced the old PCJ record, the audit trail of a message already confirmed.
Counting from the clock, the new incarnation starts above every seq the old one
issued as long as the old one averaged fewer than 131,072 seqs a second over its
life (about the most one group puts at its peak on these machines); the counters
last until 2162 at that rate. A start with a reservation (every restart, failover and
upgrade) counts from the reservation as before, so the clock adds no gap to a running
group's seqs; a rebuilt group's first seq leaves one in its peers' audit (docs/audit.md).

A start on a *copy* of the journals (a backup restored, the data directory copied to
another disk, a salvage) counts from its clock too, when that is above the copy's
reservation: the original may have issued every seq above that reservation since the
copy was made. The journal keeps its file's inode and birth time (`LINEAGE_KEY`, the
store's `lineage`), and a start that finds other ones knows it runs on a copy.

The layout before this one was `group | boot epoch (17 bits) | counter (32 bits)`,
which ran out after 131,071 starts. A journal written with it is migrated at the
first start: the counter goes on from `(last epoch + 1) << 32`, above every seq the
old layout can have issued, so seqs keep increasing across the upgrade. A group whose
old epoch is so close to the old limit that this leaves fewer than 2**32 counters
(only a crash loop gets there) goes on from `last epoch << 32 | 2**31`, or above the
highest seq of its own in its journals if that is higher: it assumes its last old
boot issued fewer than 2**31 seqs, and keeps ~2**31 for the rest of its life.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mypy_extensions import mypyc_attr

from journals import Journal, JournalError, WriteBatch
from mrs.errors import MrsError, Refused
from mrs.model import Status

GROUP_SHIFT: Final = 49
COUNTER_MAX = (1 << GROUP_SHIFT) - 1
RESERVE_FIRST = 1 << 10
RESERVE_MAX = 1 << 20
FRESH_EPOCH_S: Final = 1_767_225_600
"""2026-01-01T00:00:00Z: a fresh group's counter is the seconds since then, scaled."""
FRESH_COUNTERS_PER_S: Final = 1 << 17
"""Counters per second of wall clock before a fresh group's first seq (module
docstring), counted to the nanosecond: a group rebuilt a moment after its first start
(a test, a script) still starts above the seqs its first incarnation issued since."""
LEGACY_EPOCH_SHIFT = 32
LEGACY_LAST_EPOCH_GAP = 1 << 31
RESERVED_KEY = b"seq_reserved"
LEGACY_EPOCH_KEY = b"epoch"
BOOTS_KEY = b"boots"
LINEAGE_KEY = b"journal_lineage"
"""The journal file's inode and birth time as the last start found them (the store's
`lineage`, mrs.storage.file_identity): a start that finds other ones runs on a copy."""
GROUP_KEY = b"journals_group"
"""The id of the group whose journals these are (decimal text), written with every
reservation: `mrs.storage.data_dir_owner.check_journals_group` refuses journals another
group wrote. Recorded here, not at open, so that an open commits nothing before the
start's first reservation (a full disk fails the start with the epoch untouched)."""
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


@mypyc_attr(native_class=False)  # two bases: an interpreted class in the compiled module
class SeqSpaceExhausted(MrsError, RuntimeError):
    """All 2**49 counters of this group were reserved (never in practice)."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.MRS_RES_EXH, message)


@dataclass
class SeqAllocator:
    """Hands out a group's seqs; `store` is anything with meta_get and commit_now."""

    store: Any
    """Anything with meta_get and commit_now (a JournalStore, the simulator's)."""
    group_id: int
    boots: int = 0
    """How many times the group started (for status and logs)."""
    fence: Any = None
    """A replicated active's SeqFence (taken from the store's `seq_fence` at start):
    `ahead`, `covered()`, `committed(reached)`; None writes what it hands out."""
    clock_ns: Callable[[], int] | None = None
    """The wall clock a fresh group's first counter is read from (`fresh_start`);
    None counts a fresh group from 1 (unit tests of the allocator alone)."""
    copied_from: int = 0
    """The counter a start on a copy of the journals would have gone on from, before it
    went to its clock instead (0: not a copy, or not moved): for its log line."""
    first_of_run: int = 0
    """The first seq this start may hand out: a seq below it was made by an earlier
    run (or, in a replicated group, an earlier active), whose memory died with it."""
    _next: int = 1
    _reserved: int = 1
    _block: int = RESERVE_FIRST

    def start(self) -> None:
        """Read (or migrate) the reservation, count this start, reserve a first block."""
        if self.fence is None:
            self.fence = getattr(self.store, "seq_fence", None)
        reserved = self.store.meta_get(RESERVED_KEY.decode())
        if reserved is not None:
            start = _U64.unpack(reserved)[0]
        else:
            legacy = self.store.meta_get(LEGACY_EPOCH_KEY.decode())
            if legacy:
                start = legacy_start(self.store, self.group_id, _U32.unpack(legacy)[0])
            else:
                start = 1 if self.clock_ns is None else fresh_start(self.clock_ns())
        if reserved is not None:
            start = self._above_the_original(start)
        boots = self.store.meta_get(BOOTS_KEY.decode())
        self.boots = (_U64.unpack(boots)[0] if boots else 0) + 1
        self._next = self._reserved = max(start, 1)
        self.first_of_run = (self.group_id << GROUP_SHIFT) | self._next
        self._block = RESERVE_FIRST
        self._reserve()

    def _above_the_original(self, start: int) -> int:
        """Where a start whose journals reserved up to `start` counts from: above the
        data directory's own reservation mark when the journals end below it, and
        above the clock on a copy (`_on_a_copy`); `copied_from` says it moved.

        Why the mark (the store's `reservation_mark`, a file beside the journals): a
        backup copied over the journal file in place (`cp -a backup/. g1/`, `rsync
        --inplace`) keeps the original's inode and birth time, so the lineage check
        misses it, while the mark, not in the backup of the journals, still holds
        the last reservation the original made: every seq it issued is below it."""
        moved = start
        mark = self._reservation_mark()
        marked = mark.read() if mark is not None else None
        if marked is not None and marked > moved:
            moved = marked
        if self._on_a_copy() and self.clock_ns is not None:
            moved = max(moved, fresh_start(self.clock_ns()))
        if moved > start:
            self.copied_from = start
        return moved

    def _reservation_mark(self) -> Any:
        """The store's reservation mark (read() -> int | None, write(int)), for an
        unreplicated group's store only (a replica's journals are fenced by the term)."""
        if self.fence is not None:
            return None
        return getattr(self.store, "reservation_mark", None)

    def _on_a_copy(self) -> bool:
        """Whether the journal file is not the one the last start wrote its lineage
        into: restored from a backup, moved, or salvaged. Why it matters: the copy's
        reservation is its own at the time of the copy, and the original may have
        issued every seq above it since, to peers that still hold them (in their PCJ,
        DQF and dedupe keys); a start on a copy counts from its clock instead, as a
        fresh group does, above all of them. A replicated group's store keeps no
        lineage: its replicas' journals are copies by design, fenced by the term."""
        lineage = self._lineage()
        if lineage is None:
            return False
        kept = self.store.meta_get(LINEAGE_KEY.decode())
        return kept is not None and not same_file(bytes(kept), lineage)

    def _lineage(self) -> bytes | None:
        """The journal file's lineage, for an unreplicated group's store only."""
        if self.fence is not None:
            return None
        lineage = getattr(self.store, "lineage", None)
        return lineage if isinstance(lineage, bytes) else None

    def next(self) -> int:
        if self._next >= self._reserved:
            self._block = min(self._block * 2, RESERVE_MAX)
            try:
                self._reserve()
            except JournalError as error:  # a full or failing disk: the put's answer
                raise Refused(
                    Status.JOURNAL_FAIL, f"cannot reserve sequence numbers: {error}"
                ) from None
        seq = (self.group_id << GROUP_SHIFT) | self._next
        self._next += 1
        return seq

    def _reserve(self) -> None:
        reserved = min(self._next + self._block, COUNTER_MAX + 1)
        if reserved <= self._next:
            raise SeqSpaceExhausted(
                f"group {self.group_id} has used all {COUNTER_MAX} sequence numbers"
            )
        fence = self.fence
        written = reserved
        if fence is not None:
            covered = fence.covered()
            if covered is not None and reserved > covered:
                raise JournalError(
                    "the group's last reservation of sequence numbers is not on a majority "
                    "of its instances yet (no replica acknowledges): try again"
                )
            written = min(reserved + fence.ahead, COUNTER_MAX + 1)
        batch = (
            WriteBatch.empty()
            .put_raw(Journal.META, RESERVED_KEY, _U64.pack(written))
            .put_raw(Journal.META, BOOTS_KEY, _U64.pack(self.boots))
            .put_raw(Journal.META, GROUP_KEY, str(self.group_id).encode())
        )
        lineage = self._lineage()
        if lineage is not None:
            batch.put_raw(Journal.META, LINEAGE_KEY, lineage)
        self.store.commit_now(batch)
        if fence is not None:
            fence.committed(written)
        elif (mark := self._reservation_mark()) is not None:
            mark.write(written)  # after the commit: never above what the journal holds
        self._reserved = reserved


def same_file(kept: bytes, now: bytes) -> bool:
    """Whether two lineages (mrs.storage.file_identity `lineage_of`: the inode, then the
    birth time where the filesystem gave one) name the same file. Where one of them has
    no birth time, the inodes alone decide. Why: the same file read once with statx and
    once without it (a container whose seccomp refuses statx, an older kernel) gives
    the inode alone one time and the inode and birth time the other; compared whole,
    every such start counted as one on a copy, and its seqs jumped to its clock."""
    if kept == now:
        return True
    inode = _U64.size
    return (len(kept) == inode or len(now) == inode) and kept[:inode] == now[:inode]


def fresh_start(now_ns: int) -> int:
    """The first counter of a group whose journals never reserved any: scaled from the
    wall clock, so a rebuilt group starts above its old incarnation's seqs (module
    docstring); 1 for a clock before FRESH_EPOCH_S (a simulator's)."""
    since_ns = now_ns - FRESH_EPOCH_S * 1_000_000_000
    counter = since_ns * FRESH_COUNTERS_PER_S // 1_000_000_000  # one every ~7.6 µs
    return min(max(counter, 1), COUNTER_MAX // 2)


def counter_of(seq: int) -> int:
    return seq & COUNTER_MAX


def group_of(seq: int) -> int:
    return seq >> GROUP_SHIFT


def legacy_start(store, group_id: int, epoch: int) -> int:
    """The first counter above every seq the old `group | epoch | counter` layout can
    have issued (see the module docstring for a group at the old limit)."""
    start = (epoch + 1) << LEGACY_EPOCH_SHIFT
    if start <= COUNTER_MAX + 1 - (1 << LEGACY_EPOCH_SHIFT):
        return start
    highest = max((counter_of(seq) for seq in own_seqs(store, group_id)), default=0)
    return max((epoch << LEGACY_EPOCH_SHIFT) | LEGACY_LAST_EPOCH_GAP, highest + 1)


def own_seqs(store, group_id: int):
    """Every seq of this group that its journals hold (keys of SAF, DQF, DLJ, PCJ)."""
    from journals.store import split_key

    for journal in (Journal.SAF, Journal.DQF, Journal.DLJ, Journal.PCJ):
        for key, _ in store.raw_items(journal):
            seq = split_key(key)[1]
            if group_of(seq) == group_id:
                yield seq
