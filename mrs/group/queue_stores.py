"""The DQF stores under way for one target queue, and the parked gets they took: one owner.

Why one owner: these two counts decide whether an arriving message may take a parked
get with it (`TargetQueue.reserve_waiter`: arrival order is kept only while every
store under way took one) and how many deliveries the unconfirmed cap counts before
they exist (`TargetQueue.can_deliver`). Changed from the DQF room, an operator's move
and the queue itself, a count that went wrong would show only later, as a get
answered out of order or a cap never freed. Every change goes through these methods,
which assert what must hold: neither count below zero, and never more stores that
took a get than stores under way. The assertions stay on in production: each is an
int comparison beside an LMDB commit (benchmarks/README.md, "one hand-over").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class QueueStores:
    """Stores of messages for one queue submitted to the writer and not yet ended."""

    storing: int = 0
    """DQF stores (or moves into the queue) submitted and not yet committed."""
    reserved: int = 0
    """Of those, the ones that took a parked get with them (their delivery mark rides
    in the same commit: mrs.group.handover.Handover.premark)."""

    def submitted(self, took_get: bool = False) -> None:
        """A store for this queue goes to the writer; `took_get`: with a parked get."""
        self.storing += 1
        if took_get:
            self.reserved += 1
            assert self.reserved <= self.storing, f"{self.reserved} gets for {self.storing}"

    def ended(self, took_get: bool = False) -> None:
        """A store `submitted` before has committed or failed."""
        self.storing -= 1
        if took_get:
            self.reserved -= 1
        assert 0 <= self.reserved <= self.storing, (
            f"stores under way {self.storing}, with a get {self.reserved}"
        )

    def all_took_gets(self) -> bool:
        """Every store under way took a parked get (or none is under way)."""
        return self.storing == self.reserved
