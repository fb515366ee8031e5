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
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import accumulate, chain, islice
from operator import sub

assert array("I").itemsize == 4, "a delta slot is 4 bytes"
ESCAPE = 0xFFFF_FFFF
"""A delta slot holding this says: the seq is the next one of the escaped array."""
COMPACT_AFTER = 1 << 16
"""Consumed slots dropped once there are this many (and they are most of it)."""
MARK_SLOTS = 1024
"""Slots between two marks (`after`): where decoding may start, and the seq before it."""


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
        self._descent_slot = -1
        """The last slot whose seq is below the one before it (-1: none): seqs from a
        slot past it ascend (`after` bisects them)."""
        self._mark_slots = array("Q")
        self._mark_seqs = array("Q")
        self._mark_escapes = array("Q")
        """Every MARK_SLOTS-th slot: its index, the seq before it, the escaped array's
        index there (`after` decodes from one). Built when first sought, not per append."""
        self._marked_to = 0
        self._marked_seq = 0
        self._marked_escaped = 0
        """Where the marks end: the slot, the seq before it, the escaped index there."""

    def __len__(self) -> int:
        return len(self._deltas) - self._head

    def append(self, seq: int) -> None:
        delta = seq - self._last
        if 0 <= delta < ESCAPE:
            self._deltas.append(delta)
        else:
            if seq < self._last:
                self._descent_slot = len(self._deltas)
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
        head = self._head
        if head == len(self._deltas):
            self._deltas, self._escaped = array("I"), array("Q")
            self._head = self._escaped_head = 0
        elif head >= COMPACT_AFTER and head * 2 >= len(self._deltas):
            del self._deltas[:head]
            del self._escaped[: self._escaped_head]
            self._head = self._escaped_head = 0
        else:
            return
        self._descent_slot = max(-1, self._descent_slot - head)  # the slots moved by `head`
        if self._marked_to:  # the slots moved: marks are built again when next sought
            self._mark_slots, self._mark_seqs = array("Q"), array("Q")
            self._mark_escapes = array("Q")
            self._marked_to = self._marked_escaped = 0
        self._marked_seq = self._before_head

    def after(self, seq: int) -> Iterator[int] | None:
        """The seqs not yet taken that follow `seq`, oldest first, without taking them;
        None when `seq` is not among them. Why not a walk from the front: an operator's
        next browse page (mrs.ops.admin_actions) starts after a seq, and a walk cost
        every page time in proportion to the queue's depth, on the event loop (55 ms
        for the last page of 200,000). When every seq left follows the one before (no
        escaped slot: one group's counter), the marks are bisected and one stretch of
        MARK_SLOTS decoded; otherwise (seqs of several groups) the seqs are decoded
        from the front until `seq`."""
        head, end = self._head, len(self._deltas)
        if head == end:
            return None
        self._extend_marks()
        start, stop = head, end
        if self._descent_slot <= head:  # ascending from the head: bisect the marks
            first = bisect_right(self._mark_slots, head)  # marks past the head: live seqs
            found = bisect_left(self._mark_seqs, seq, first)  # the first mark >= seq
            if found > first:
                start = self._mark_slots[found - 1]
            if found < len(self._mark_slots):
                stop = self._mark_slots[found]
        for slot, value in enumerate(islice(self._seqs_from(start), stop - start), start):
            if value == seq:
                return self._seqs_from(slot + 1)
        return None

    def _seqs_from(self, slot: int) -> Iterator[int]:
        """The seqs from `slot` (at least the head) to the end, decoded from the mark
        before it."""
        if slot == self._head:
            seq, escaped, at = self._before_head, self._escaped_head, slot
        else:
            mark = bisect_right(self._mark_slots, slot) - 1
            at = self._mark_slots[mark]
            seq, escaped = self._mark_seqs[mark], self._mark_escapes[mark]
        for delta in self._deltas[at:]:
            if delta == ESCAPE:
                seq = self._escaped[escaped]
                escaped += 1
            else:
                seq += delta
            if at >= slot:
                yield seq
            at += 1

    def _extend_marks(self) -> None:
        """Marks up to the last slot appended, a stretch of MARK_SLOTS at a time (one
        sum for a stretch without an escaped slot)."""
        deltas, end = self._deltas, len(self._deltas)
        slot, seq, escaped = self._marked_to, self._marked_seq, self._marked_escaped
        while slot < end:
            if slot % MARK_SLOTS == 0:
                self._mark_slots.append(slot)
                self._mark_seqs.append(seq)
                self._mark_escapes.append(escaped)
            stretch = deltas[slot : min(end, slot - slot % MARK_SLOTS + MARK_SLOTS)]
            if ESCAPE in stretch:
                for delta in stretch:
                    if delta == ESCAPE:
                        seq = self._escaped[escaped]
                        escaped += 1
                    else:
                        seq += delta
            else:
                seq += sum(stretch)
            slot += len(stretch)
        self._marked_to, self._marked_seq, self._marked_escaped = slot, seq, escaped

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
