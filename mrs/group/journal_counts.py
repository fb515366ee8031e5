"""How many records the group's journals hold: one owner for the DQF, SAF and DLJ counts.

Why one owner: these counts decide DQF_FULL, the SAF and DLJ bounds and the room a
drain is offered. Changed in place at a dozen sites in six rooms, a count that went
wrong (a failed commit undone twice, a deletion counted before it was durable) would
show only much later, as a wrong refusal. Every change goes through these methods,
which assert what must hold: no count below zero, a peer's backlog never below zero
and never above the SAF count. The assertions stay on in production; each is an int
comparison beside an LMDB commit (benchmarks/README.md, "journal counts").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class SafBacklog(Protocol):
    """A linked peer as these counts see it (mrs.group.peers.PeerState)."""

    group_id: int
    saf_backlog: int


@dataclass(eq=False, slots=True)
class JournalCounts:
    """Records held (or being committed) in each journal of one group."""

    dqf: int = 0
    saf: int = 0
    dlj: int = 0
    dlj_in_flight: int = 0
    """DLJ records counted before their commit (`dlj_reserved`), not yet on disk."""

    def dqf_added(self, count: int = 1) -> None:
        """`count` DQF records are being stored (undone by `dqf_removed` if that fails)."""
        self.dqf += count

    def dqf_removed(self, count: int = 1) -> None:
        self.dqf -= count
        assert self.dqf >= 0, f"DQF count below zero ({self.dqf})"

    def saf_added(self, peer: SafBacklog | None) -> None:
        """One SAF record for `peer` (None: a group no longer linked, found at start)."""
        self.saf += 1
        if peer is not None:
            peer.saf_backlog += 1
            assert peer.saf_backlog <= self.saf, f"group {peer.group_id}: backlog above SAF"

    def saf_removed(self, peer: SafBacklog, count: int = 1) -> None:
        self.saf -= count
        peer.saf_backlog -= count
        assert self.saf >= 0, f"SAF count below zero ({self.saf})"
        assert peer.saf_backlog >= 0, f"group {peer.group_id}: SAF backlog below zero"

    def dlj_added(self) -> None:
        self.dlj += 1

    def dlj_removed(self) -> None:
        self.dlj -= 1
        assert self.dlj >= 0, f"DLJ count below zero ({self.dlj})"

    def dlj_reserved(self) -> None:
        """One DLJ record counted before its commit (a UMA's dead letter, checked against
        dlj_messages_max first); `dlj_reservation_done` when the commit is over."""
        self.dlj += 1
        self.dlj_in_flight += 1

    def dlj_reservation_done(self, stored: bool) -> None:
        self.dlj_in_flight -= 1
        assert self.dlj_in_flight >= 0, f"DLJ records in flight below zero ({self.dlj_in_flight})"
        if not stored:
            self.dlj_removed()

    def dlj_recounted(self, count: int) -> None:
        """The DLJ as found on disk (`count`), with what is being committed to it."""
        assert count >= 0
        self.dlj = count + self.dlj_in_flight

    def dlj_full(
        self, messages_max: int, count_on_disk: Callable[[], int], adding: int = 1
    ) -> bool:
        """Whether `adding` more records would take the DLJ past `messages_max`. At the
        cap the DLJ is counted again on disk first: `mrs jplay --remove` and the DLQ
        handler delete dead letters from beside the group, which never hears of it, and
        a count kept from the group's start refused every dead letter until a restart."""
        if self.dlj + adding <= messages_max:
            return False
        self.dlj_recounted(count_on_disk())
        return self.dlj + adding > messages_max
