"""A queue's cold backlog: the journaled messages behind its in-memory window, kept as
seqs in compact arrays and read back from the DQF when the window runs low.

Why: a DQF of a million messages must not keep a million Python objects in the
server (an `Entry` costs some 300 bytes before its body; the seq alone costs 4, as
its difference from the one before, mrs.group.seq_deltas). A message goes cold only
when nothing in memory waits on it (no callbacks): its record and delivery mark
on disk say all there is to say. An entry
that cannot go cold (a nonrecoverable message, or one whose sender waits for its
confirm) but arrives behind cold ones is held here by seq, so arrival order stays
exact. Held entries are bounded by what bounds them anyway (messages_max, the
senders' outstanding requests).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

from mrs.group.seq_deltas import SeqDeltas

WINDOW_ENTRIES_MAX = 1000
"""Entries a queue keeps in memory before later journaled arrivals go cold."""
REFILL_BELOW = 500
"""The window is refilled from the cold backlog when it holds fewer entries than this."""
REFILL_MIN = 64
"""Entries a priority lane reads back at least when the window is full of lower
priorities (mrs.group.lanes): so a higher priority is never stuck behind them."""


class Entry(Protocol):
    """What the backlog reads of a queued message (mrs.group.shapes.Entry); read-only, so
    an entry whose callbacks are typed more narrowly still is one."""

    @property
    def seq(self) -> int: ...
    @property
    def journaled(self) -> bool: ...
    @property
    def on_confirm(self) -> object: ...
    @property
    def on_dequeue(self) -> object: ...


E = TypeVar("E", bound=Entry)


Loader = Callable[[list[int]], list]
"""Read journaled messages back by seq, in the order given (a missing one is skipped)."""


class ColdBacklog(Generic[E]):
    """Seqs in arrival order; entries held in memory for the few that cannot go cold."""

    def __init__(self) -> None:
        self._seqs = SeqDeltas()
        self._held: dict[int, E] = {}
        self._skipped: set[int] = set()
        """Seqs a selective get took out of the middle (mrs.group.select_index): left in
        the array, dropped when `take` reaches them."""
        self.count = 0
        """Messages in the backlog: a plain attribute, because a queue asks whether
        it is empty several times per message (`len()` was two Python calls)."""

    def __len__(self) -> int:
        return self.count

    @staticmethod
    def can_go_cold(entry: Entry) -> bool:
        """Only a journaled entry nobody waits on: the DQF record says all about it."""
        return entry.journaled and entry.on_confirm is None and entry.on_dequeue is None

    def append(self, entry: E, seq: int, cold: bool) -> None:
        """Append `entry` (its `seq`); `cold`: `can_go_cold(entry)`, which the caller
        tests on its concrete entry type (through this module's Protocol each of the
        three reads is a generic lookup, and a deep queue appends every put)."""
        self._seqs.append(seq)
        self.count += 1
        if not cold:
            self._held[seq] = entry

    def extend(self, seqs: array) -> None:
        """Append journaled messages known by seq alone (start-up recovery: every
        one can be read back, whatever its mode)."""
        self._seqs.extend(seqs)
        self.count = len(self._seqs) - len(self._skipped)

    def discard(self, seq: int) -> E | None:
        """Take `seq` out wherever it is (a selective get chose it): returns its held
        entry, or None when it is on disk only (the caller reads it back)."""
        self._skipped.add(seq)
        self.count -= 1
        return self._held.pop(seq, None)

    def restore(self, seq: int, entry: E) -> bool:
        """A message `discard` took out comes back (not delivered after all, or its
        receiver left): True if `take` has not reached its seq yet, and it waits there
        again, at its arrival place, held in memory; False if `take` passed it (its
        queue placed it by the arrival number it was given then, mrs.group.queues)."""
        skipped = self._skipped
        if seq not in skipped:
            return False
        skipped.discard(seq)
        self._held[seq] = entry
        self.count += 1
        return True

    def append_taken(self, seq: int) -> None:
        """A message handed straight to a get as it arrived behind this backlog: its
        seq takes its arrival place as if a selective get had taken it out at once, so
        that if it comes back (`restore`) it goes behind the older ones."""
        self._seqs.append(seq)
        self._skipped.add(seq)

    def held_entry(self, seq: int) -> E | None:
        """The entry held in memory for `seq`, or None (cold: on disk only)."""
        return self._held.get(seq)

    def __iter__(self) -> Iterator[int]:
        """The seqs still in the backlog, oldest first (a selective get's scan), one at
        a time. A generator function, not a generator expression returned: compiled
        (mypyc), the expression became a list of the whole backlog, up to a million
        seqs built for a scan that reads SELECT_SCAN_MESSAGES_MAX."""
        skipped = self._skipped
        for seq in self._seqs:
            if seq not in skipped:
                yield seq

    def after(self, seq: int) -> Iterator[tuple[int, E | None]] | None:
        """The (seq, entry held in memory or None) that wait behind `seq`, without
        taking them, or None when `seq` does not wait here: where an operator's next
        browse page starts (mrs.ops.admin_actions), found by a seek
        (`SeqDeltas.after`), not by a walk from the front."""
        skipped = self._skipped
        rest = None if seq in skipped else self._seqs.after(seq)
        if rest is None:
            return None
        return self._held_of(rest)

    def _held_of(self, seqs: Iterator[int]) -> Iterator[tuple[int, E | None]]:
        """(seq, entry held or None) for each of `seqs` still here, one at a time (a
        generator function: see `__iter__`; a browse page reads a few of them)."""
        held, skipped = self._held, self._skipped
        for one in seqs:
            if one not in skipped:
                yield one, held.get(one)

    def take(self, count: int, load: Loader, order: list[int] | None = None) -> list[E]:
        """The next `count` messages, oldest first, cold ones read back with `load`.
        `order`: when this passes seqs taken out before (`discard`), filled with every
        seq it covered, in order, those included: where each of them stood among the
        messages taken (its queue numbers one still out in its place)."""
        seqs = self._seqs.take(count)
        if self._skipped:
            kept = [seq for seq in seqs if seq not in self._skipped or self._unskip(seq)]
            if order is not None and len(kept) < len(seqs):
                order.extend(seqs)
            seqs = kept
        self.count = len(self._seqs) - len(self._skipped)
        taken: list[E] = []
        cold: list[int] = []
        for seq in seqs:
            held = self._held.pop(seq, None)
            if held is None:
                cold.append(seq)
                continue
            if cold:
                taken.extend(load(cold))
                cold = []
            taken.append(held)
        if cold:
            taken.extend(load(cold))
        return taken

    def _unskip(self, seq: int) -> bool:
        """`take` reached a seq taken out before: forget it (False: not returned)."""
        self._skipped.discard(seq)
        return False
