"""A first-in first-out sequence of seqs stored as 4-byte deltas: a cold backlog's memory.

Why: a queue's cold backlog (mrs.group.backlog) holds one seq per journaled message it
does not keep in memory, a million for a million-message DQF. As 8-byte ints in an
`array('Q')` that was 8 MB, a fifth of an empty server; a seq differs from the one
before it in the same queue by a small positive number (one group's counter), so
each is kept as that difference in an `array('I')`: 4 MB. A difference that does
not fit (the first seq, a message from another group, an older seq put back) is
stored whole in a second array, marked by ESCAPE, so any order of any 64-bit seqs
costs at most 12 bytes each and is given back exactly.

Compiled (mrs.native.loader): a compiled instance has a fixed layout, so the class
declares no `__slots__`.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from itertools import accumulate, chain
from operator import sub

assert array("I").itemsize == 4, "a delta slot is 4 bytes"
ESCAPE = 0xFFFF_FFFF
"""A delta slot holding this says: the seq is the next one of the escaped array."""
COMPACT_AFTER = 1 << 16
"""Consumed slots dropped once there are this many (and they are most of it)."""


class SeqDeltas:
    """Seqs in arrival order: append at the end, take from the front."""

    def __init__(self) -> None:
        self._deltas = array("I")
        self._escaped = array("Q")
        self._head = 0
        self._escaped_head = 0
        self._before_head = 0
        """The seq just before the first one not yet taken (what its delta is from)."""
        self._last = 0
        """The seq appended last (what the next delta is from)."""

    def __len__(self) -> int:
        return len(self._deltas) - self._head

    def append(self, seq: int) -> None:
        delta = seq - self._last
        if 0 <= delta < ESCAPE:
            self._deltas.append(delta)
        else:
            self._deltas.append(ESCAPE)
            self._escaped.append(seq)
        self._last = seq

    def extend(self, seqs: array) -> None:
        """Append many (start-up recovery: a million keys' seqs), in C where the
        deltas all fit, one by one where they do not."""
        if not seqs:
            return
        try:
            deltas = array("I", map(sub, seqs, chain((self._last,), seqs)))
        except OverflowError:  # a negative or too large delta: some need escaping
            deltas = None
        if deltas is None or ESCAPE in deltas:
            for seq in seqs:
                self.append(seq)
            return
        self._deltas.extend(deltas)
        self._last = seqs[-1]

    def take(self, count: int) -> list[int]:
        """The next `count` seqs (fewer if fewer are left), oldest first."""
        end = min(self._head + count, len(self._deltas))
        deltas = self._deltas[self._head : end]
        self._head = end
        if ESCAPE not in deltas:
            seqs = list(accumulate(deltas, initial=self._before_head))[1:]
        else:
            seqs, seq = [], self._before_head
            for delta in deltas:
                if delta == ESCAPE:
                    seq = self._escaped[self._escaped_head]
                    self._escaped_head += 1
                else:
                    seq += delta
                seqs.append(seq)
        if seqs:
            self._before_head = seqs[-1]
        self._compact()
        return seqs

    def _compact(self) -> None:
        if self._head == len(self._deltas):
            self._deltas, self._escaped = array("I"), array("Q")
            self._head = self._escaped_head = 0
        elif self._head >= COMPACT_AFTER and self._head * 2 >= len(self._deltas):
            del self._deltas[: self._head]
            del self._escaped[: self._escaped_head]
            self._head = self._escaped_head = 0

    def __iter__(self) -> Iterator[int]:
        """The seqs not yet taken, oldest first, without taking them (tests, status)."""
        seq, escaped = self._before_head, self._escaped_head
        for delta in self._deltas[self._head :]:
            if delta == ESCAPE:
                seq = self._escaped[escaped]
                escaped += 1
            else:
                seq += delta
            yield seq
