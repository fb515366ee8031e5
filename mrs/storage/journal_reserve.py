"""The journal reserve: new messages stop before the journal is full, so the group can
always record deliveries, confirms and deletes — and drain.

Why: once the LMDB map (or the disk) was full, a get could not write its delivery
mark, a confirm could not delete its message, so nothing could drain, and after a
restart the group could not even commit its start. Now new recoverable messages
(DQF, SAF, DLJ records) are refused with MRS_RES_EXH (and take their UMA) once the
journal's pages in use come within `reserve_bytes` of `journal_bytes_max`, or the
disk holding it has less than `reserve_bytes` free. Everything else (delivery marks,
confirms with their PCJ record, deletes, seq reservations, quarantine) may use the
reserve. A group that starts with a journal already in its reserve (a lowered cap,
an older version) gets its map grown by the reserve, so it starts and drains.

The reserve is max(5% of journal_bytes_max, 4 x message_bytes_max), at most half the
cap. Pages in use are measured (one read transaction, a stat per database) at most
every RESERVE_MEASURE_INTERVAL_S, plus an estimate of what was accepted since.

Compiled (mrs.native.loader): every recoverable put asks `accepts`. The measures
themselves live in the interpreted `mrs.storage.journal_measure`, called through the module,
so tests can stand in for the journal and the disk.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from time import monotonic
from typing import Any

from mrs.limits import RESERVE_MEASURE_INTERVAL_S
from mrs.storage import journal_measure

log = logging.getLogger("mrs.journal")

RESERVE_FRACTION = 0.05
RECORD_OVERHEAD_BYTES = 256
"""Estimated B-tree and record-header bytes per message on top of its body."""
RESERVE_RESUME_DIVISOR = 4
"""Refusing, a journal accepts again once a quarter of the reserve more is free."""


DISK_PROBLEM = "disk holding the journal has"


def _commit_number(store: Any) -> int | None:
    """The number of the journal's last commit (`JournalStore.log_number`), or None
    for a stand-in that has none. Read here, compiled, on every accepted put, not
    through the interpreted `journal_measure` (a call per put for one attribute)."""
    number: int | None = getattr(store, "log_number", None)
    return number


def reserve_bytes(cap_bytes: int, message_bytes_max: int) -> int:
    return min(cap_bytes // 2, max(int(cap_bytes * RESERVE_FRACTION), 4 * message_bytes_max))


def disk_problem(free_bytes: int, reserve: int, cap_bytes: int) -> str:
    """Why the disk refuses new messages, and what helps. Why the advice: LMDB's file
    never shrinks, so a journal that drains frees no disk; and a reserve sized from a
    cap larger than the disk (journal_bytes_max = 16 TiB on a 59 GB disk: 880 GB kept
    free) refused every recoverable put with nothing said of the cap."""
    why = (
        f"{DISK_PROBLEM} {free_bytes} bytes free, under the journal reserve of {reserve} "
        f"bytes (ENOSPC ahead)"
    )
    if reserve > int(cap_bytes * RESERVE_FRACTION):
        return f"{why}: free space on that disk"
    return (
        f"{why}: free space on that disk, or lower journal_bytes_max ({cap_bytes} bytes; "
        f"the reserve is 5% of it) to what the disk holds"
    )


@dataclass
class JournalReserve:
    """Decides whether a new message may be journaled; cheap per call."""

    store: Any
    """A store with an LMDB map (`env`, `path`): see `for_store`."""
    cap_bytes: int
    reserve: int
    refusing: str | None = None
    """Why new messages are refused now (None: they are accepted)."""
    _measured_at: float = -1.0
    _used_bytes: int = 0
    _disk_free: int = 1 << 62
    _accepted_bytes: int = 0
    _fresh_until_s: float = -1.0
    """When the last measure goes stale (`_measured_at` + RESERVE_MEASURE_INTERVAL_S)."""
    _room_bytes: int = -1
    """How many bytes may be accepted since the last measure before either test could
    say no (-1 while refusing): below it, `accepts` answers without the tests."""
    _pending_bytes: int = 0
    """Bytes accepted since the journal's commit numbered `_pending_commit`: not in
    its pages until the next commit lands (`_uncommitted_bytes`)."""
    _pending_commit: int | None = None

    @classmethod
    def for_store(cls, store, cap_bytes: int, message_bytes_max: int) -> JournalReserve | None:
        """None for a store without an LMDB map (the simulator's)."""
        if not hasattr(store, "env"):
            return None
        return cls(store, cap_bytes, reserve_bytes(cap_bytes, message_bytes_max))

    def say_at_start(self) -> None:
        """A disk with less free than the reserve, said once when the group has started
        (its start committed: a start the full disk refuses fails in its own one line),
        in the words of the puts it will refuse. Why: the first such put was the first
        sign, and a reserve larger than the disk (a cap sized for another machine) made
        a group that started cleanly and then stored nothing."""
        try:
            free_bytes = journal_measure.disk_free_bytes(self.store.path)
        except OSError:
            return  # the first put's measure says why
        if free_bytes < self.reserve:
            self._note(disk_problem(free_bytes, self.reserve, self.cap_bytes))

    def accepts(self, size_bytes: int) -> str | None:
        """None if a new message of about size_bytes may be journaled; else why not.

        Every recoverable put asks, so the common answer takes one comparison with the
        room left since the last measure (`_room_bytes`, counted so that both tests
        below would pass); near a limit, or with the measure stale, the tests decide."""
        needed = size_bytes + RECORD_OVERHEAD_BYTES
        accepted = self._accepted_bytes + needed
        if accepted <= self._room_bytes and monotonic() < self._fresh_until_s:
            self._accepted_bytes = accepted
            self._count_pending(needed)
            return None
        return self._accepts_tested(needed)

    def _accepts_tested(self, needed: int) -> str | None:
        now = monotonic()
        if now - self._measured_at >= RESERVE_MEASURE_INTERVAL_S:
            self._measure(now)
        # Once refusing, accept again only with a margin more than the reserve free: a
        # journal sitting at its reserve (a confirm frees a page, a put takes it) would
        # otherwise switch, and log the switch, several times a second.
        margin = self.reserve // RESERVE_RESUME_DIVISOR if self.refusing is not None else 0
        limit = self.cap_bytes - self.reserve - margin
        used = self._used_bytes + 2 * self._accepted_bytes
        if used + needed > limit and now > self._measured_at:
            # The estimate (twice what was accepted since the last measure) is
            # deliberately pessimistic; before refusing on it, measure what the pages
            # really hold, so a burst of puts is not refused early.
            self._measure(now)
            used = self._used_bytes + 2 * self._accepted_bytes
        if used + needed > limit:
            problem = (
                f"journal {used} of {self.cap_bytes} bytes in use: within its reserve of "
                f"{self.reserve} bytes kept for deliveries, confirms and deletes"
            )
            if margin:
                problem += f" (accepting again below {limit} bytes)"
        elif self._disk_free - self._accepted_bytes - needed < self.reserve + margin:
            problem = disk_problem(self._disk_free, self.reserve, self.cap_bytes)
        else:
            problem = None
        if problem is None:
            self._accepted_bytes += needed
            self._count_pending(needed)
        self._note(problem)
        return problem

    def _measure(self, now: float) -> None:
        self._measured_at = now
        self._fresh_until_s = now + RESERVE_MEASURE_INTERVAL_S
        self._accepted_bytes = self._uncommitted_bytes()
        try:
            self._used_bytes = journal_measure.pages_in_use_bytes(self.store)
            self._disk_free = journal_measure.disk_free_bytes(self.store.path)
        except Exception as error:  # noqa: BLE001 - a failed measure must not fail a put
            log.warning("cannot measure the journal: %s", error)
        # The journal test counts accepted bytes twice (used + 2 x accepted + needed),
        # so room for both tests is half the journal's headroom, at most the disk's.
        journal_room = (self.cap_bytes - self.reserve - self._used_bytes) // 2
        disk_room = self._disk_free - self.reserve
        self._room_bytes = -1 if self.refusing is not None else min(journal_room, disk_room)

    def _count_pending(self, needed: int) -> None:
        """Count an accepted message against the journal's last commit."""
        number = _commit_number(self.store)
        if number != self._pending_commit:
            self._pending_commit, self._pending_bytes = number, 0
        self._pending_bytes += needed

    def _uncommitted_bytes(self) -> int:
        """What was accepted and is not in the journal's pages yet: the bytes accepted
        since its last commit (the server's inline writer commits between rounds on
        the thread that accepts, so the next commit takes them all). A measure keeps
        them in its estimate.

        Why: a measure used to forget every put accepted before it. Puts arriving
        faster than commits land (three clients' `put_many` bursts of 60 KB messages)
        were measured again and again against pages that did not hold them yet, were
        accepted far past the reserve into the room kept for the confirms that drain
        a full journal, and with the PCJ on a confirm of a large message then failed
        MRS_RES_EXH for good."""
        number = _commit_number(self.store)
        if number is None or number != self._pending_commit:
            return 0
        return self._pending_bytes

    def _note(self, problem: str | None) -> None:
        if (problem is None) == (self.refusing is None):
            return
        if problem is not None:
            self._room_bytes = -1  # refusing: every put is tested until a measure clears it
            until = "the disk has room" if problem.startswith(DISK_PROBLEM) else "it drains"
            log.warning(
                "%s: new recoverable messages are refused (MRS_RES_EXH) until %s", problem, until
            )
        else:
            log.info("journal back out of its reserve: new recoverable messages accepted")
        self.refusing = problem


def ensure_headroom(store, cap_bytes: int, message_bytes_max: int) -> None:
    """At start-up, before any transaction: give a journal already in its reserve a
    map with the reserve free above what it holds, so it can start and drain."""
    if not hasattr(store, "env"):
        return
    reserve = reserve_bytes(cap_bytes, message_bytes_max)
    used = journal_measure.pages_in_use_bytes(store)
    map_bytes = store.env.info()["map_size"]
    if used <= cap_bytes - reserve or used + reserve <= map_bytes:
        return
    wanted = -(-(used + reserve) // (1 << 20)) * (1 << 20)
    store.env.set_mapsize(wanted)
    log.warning(
        "journal holds %d bytes, within its reserve of %d: map grown from %d to %d bytes "
        "so the group can start and drain (new messages are refused until it has)",
        used,
        reserve,
        map_bytes,
        wanted,
    )
