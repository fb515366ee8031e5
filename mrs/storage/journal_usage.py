"""How full a group's journals are, warnings before they fill, and online map growth.

Why: with the PCJ on, the LMDB map fills and recoverable puts start failing with
MRS_RES_EXH; before this module nothing said so until it happened. `usage()` measures
the map (bytes in use / map size, and the records of each journal) for status and
metrics; `UsageWatch` logs a WARNING when use crosses each configured threshold of the
cap (once per crossing, again after it falls back) and grows the map online towards
the cap when the current map is nearly used (LMDB allows `set_mapsize` while no
transaction of this process is open, which holds between inline commits).

A commit that finds the map full at its cap may grow it once more, by the journal
reserve (`make_room`): the reserve refuses new messages by the pages they hold, but
LMDB needs a contiguous run of free pages for each large record, and a confirm's PCJ
copy of a 40 KB message can find none among pages freed in ones and twos. Without
the headroom such a confirm failed MAP_FULL with the reserve still free, and a full
journal could not drain. New messages stay refused: the reserve measures against the
cap, not the map.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from journals import JournalStore
from journals.store import RECORD_JOURNALS, snapshot_holders
from mrs.storage import journal_measure
from mrs.storage.journal_reserve import reserve_bytes

log = logging.getLogger("mrs.journal")

WARN_PERCENTS_DEFAULT = (80, 95)
GROW_AT_FRACTION = 0.75
"""Grow the map when this much of the current map is in use."""
FRAGMENTED_MAP_FACTOR = 2
"""A map whose free pages lie in runs too short for a record may grow past the cap
and its headroom up to this many times the cap (`UsageWatch._grow_past_fragments`)."""


class JournalLimits(Protocol):
    """What the watch reads of a group's limits (mrs.config's `Limits`, a layer up)."""

    @property
    def journal_bytes_max(self) -> int: ...

    @property
    def message_bytes_max(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Usage:
    used_bytes: int
    """Pages up to the last one written: what the map must hold (it never goes down)."""
    map_bytes: int
    cap_bytes: int
    records: dict[str, int]
    in_use_bytes: int = 0
    """Pages the journals hold now, freed ones not counted: what the journal reserve
    measures, and what goes down as the journals drain."""

    @property
    def used_fraction(self) -> float:
        """Of the cap (journal_bytes_max): what 'full' means to an operator."""
        return self.in_use_bytes / self.cap_bytes if self.cap_bytes else 0.0

    def as_dict(self) -> dict:
        return {
            "used_bytes": self.in_use_bytes,
            "last_page_bytes": self.used_bytes,
            "map_bytes": self.map_bytes,
            "cap_bytes": self.cap_bytes,
            "used_percent": round(100.0 * self.used_fraction, 2),
            "records": dict(self.records),
        }


def usage(store: JournalStore, cap_bytes: int | None = None) -> Usage:
    """Bytes up to the last page written, bytes of the pages in use, records per journal."""
    info = store.env.info()
    page_bytes = store.env.stat()["psize"]
    used = (info["last_pgno"] + 1) * page_bytes
    map_bytes = info["map_size"]
    records = {journal.value: store.count(journal) for journal in RECORD_JOURNALS}
    in_use = journal_measure.pages_in_use_bytes(store)
    return Usage(used, map_bytes, cap_bytes or map_bytes, records, in_use)


@dataclass
class UsageWatch:
    """Warns at thresholds and grows the map; `check()` is cheap (one env.info)."""

    store: JournalStore
    cap_bytes: int
    group_id: int
    warn_percents: tuple[int, ...] = WARN_PERCENTS_DEFAULT
    can_grow: bool = True
    headroom_bytes: int = 0
    """How far past the cap a full map may grow, once, for the commits that drain it
    (the journal reserve; 0: never past the cap)."""
    _warned: set[int] = field(default_factory=set)
    grown_times: int = 0
    _page_bytes: int = 0

    @classmethod
    def for_limits(
        cls, store: JournalStore, limits: JournalLimits, group_id: int, **options: Any
    ) -> UsageWatch:
        """The watch of a group's journals, growing up to `limits.journal_bytes_max`
        and then once by its journal reserve; wired as the store's `grow_map` unless
        `can_grow` is off (an active's and a replica's alike: a replica applies the
        active's commits, so its map must reach as far)."""
        headroom_bytes = reserve_bytes(limits.journal_bytes_max, limits.message_bytes_max)
        watch = cls(
            store, limits.journal_bytes_max, group_id, headroom_bytes=headroom_bytes, **options
        )
        store.grow_map = watch.make_room if watch.can_grow else None
        return watch

    def _map_fill(self) -> tuple[int, int]:
        """(bytes in use up to the last page written, map size), as usage() has them."""
        if not self._page_bytes:
            self._page_bytes = self.store.env.stat()["psize"]
        info = self.store.env.info()
        return (info["last_pgno"] + 1) * self._page_bytes, info["map_size"]

    def check(self) -> Usage:
        current = usage(self.store, self.cap_bytes)
        percent = 100.0 * current.used_fraction
        for threshold in sorted(self.warn_percents):
            if percent >= threshold and threshold not in self._warned:
                self._warned.add(threshold)
                log.warning(
                    "group %d journal %.1f%% full (%d of %d bytes, threshold %d%%): "
                    "archive the PCJ (`mrs pcj archive`), drain queues or raise "
                    "journal_bytes_max",
                    self.group_id,
                    percent,
                    current.used_bytes,
                    self.cap_bytes,
                    threshold,
                )
            elif percent < threshold - 5 and threshold in self._warned:
                self._warned.discard(threshold)
                log.info(
                    "group %d journal back under %d%% (%.1f%%)", self.group_id, threshold, percent
                )
        if self.can_grow and self.grow_if_needed(current):
            current = usage(self.store, self.cap_bytes)
        return current

    def grow_if_needed(self, current: Usage | None = None) -> bool:
        """Double the map (up to the cap) once GROW_AT_FRACTION of it is used. Call only
        when no transaction of this process is open.

        Runs after every commit, so without `current` it reads only the map's fill
        (one env.info), not the record counts usage() takes a read transaction per
        journal for: that was ~17 us per commit, a commit per message at low load."""
        if current is None:
            return self._grow_towards_cap(*self._map_fill())
        return self._grow_towards_cap(current.used_bytes, current.map_bytes)

    def _grow_towards_cap(self, used_bytes: int, map_bytes: int) -> bool:
        if map_bytes >= self.cap_bytes:
            return False
        if used_bytes < GROW_AT_FRACTION * map_bytes:
            return False
        new_bytes = min(self.cap_bytes, map_bytes * 2)
        self.store.env.set_mapsize(new_bytes)
        self.grown_times += 1
        log.info(
            "group %d journal map grown from %d to %d bytes (cap %d)",
            self.group_id,
            map_bytes,
            new_bytes,
            self.cap_bytes,
        )
        return True

    def make_room(self) -> bool:
        """For a commit that found the map full: grow it towards the cap, or at the
        cap, once, by `headroom_bytes`; past that, by `headroom_bytes` again while the
        records hold no more than the cap (`_grow_past_fragments`). True if the map
        grew (try the commit again)."""
        used_bytes, map_bytes = self._map_fill()
        if self._grow_towards_cap(used_bytes, map_bytes):
            return True
        limit_bytes = self.cap_bytes + self.headroom_bytes
        if not self.headroom_bytes or used_bytes < GROW_AT_FRACTION * map_bytes:
            return False
        if map_bytes >= limit_bytes:
            return self._grow_past_fragments(map_bytes)
        self._grow_for_drain(
            limit_bytes,
            f"at its cap of {self.cap_bytes} bytes ({used_bytes} in use up to its last page)",
        )
        return True

    def _grow_for_drain(self, map_bytes: int, why: str) -> None:
        """Grow a full map to `map_bytes` so the drain can go on, with its WARNING."""
        self.store.env.set_mapsize(map_bytes)
        self.grown_times += 1
        log.warning(
            "group %d journal map full %s: grown by its reserve to %d bytes so deliveries, "
            "confirms and deletes can drain it; new messages stay refused until they have",
            self.group_id,
            why,
            map_bytes,
        )

    def _grow_past_fragments(self, map_bytes: int) -> bool:
        """A map full past its cap and its headroom, whose records hold no more than
        the cap: grow it by `headroom_bytes` again (at most to FRAGMENTED_MAP_FACTOR
        times the cap). True if it grew.

        Why: the headroom is the room LMDB's file may take past the records, but
        freed pages are reused only in runs as long as a record: after puts of mixed
        sizes (a 60 KB message beside 500-byte ones) the pages small records freed lay
        in runs too short for a large message's PCJ copy, the headroom went, and every
        confirm of a large message failed MRS_RES_EXH for good with the journal's
        records well inside the cap (a full journal with the PCJ on never drained).
        New messages stay refused: the reserve measures the records, not the map."""
        in_use_bytes = journal_measure.pages_in_use_bytes(self.store)
        grown_bytes = map_bytes + self.headroom_bytes
        if in_use_bytes > self.cap_bytes or grown_bytes > FRAGMENTED_MAP_FACTOR * self.cap_bytes:
            return False
        self._grow_for_drain(
            grown_bytes,
            f"at {map_bytes} bytes with {in_use_bytes} bytes of records (cap "
            f"{self.cap_bytes}): the free pages lie in runs too short for the record"
            f"{snapshot_holders(self.store)}",
        )
        return True
