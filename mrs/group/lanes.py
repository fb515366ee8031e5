"""A queue's pending messages by priority: one FIFO lane per priority (0..99), the
highest non-empty lane first — MessageQ's "by priority and then in FIFO order".

Why lanes and not a heap: a put and a get stay O(1) (an append to a lane, a pop from
the lane that the bitmask of non-empty lanes names with one `bit_length`), a queue
whose messages all have one priority pays nothing for the others, and each lane keeps
the window/cold split of mrs.group.backlog as it was (a priority that arrives while
the window is full goes cold in its own lane and is read back first). A queue's
in-memory window is the sum of its lanes' windows.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator
from typing import Generic

from mrs.group.backlog import ColdBacklog, E


class Lane(Generic[E]):
    """The messages of one priority: a window in memory, then a cold backlog."""

    __slots__ = ("cold", "priority", "window")

    def __init__(self, priority: int) -> None:
        self.priority = priority
        self.window: deque[E] = deque()
        self.cold: ColdBacklog[E] = ColdBacklog()


class PriorityLanes(Generic[E]):
    """Every lane of a queue; `count` entries in windows, `cold_count` in backlogs."""

    def __init__(self) -> None:
        self._lanes: dict[int, Lane[E]] = {}
        self._mask = 0
        """Bit p set when lane p holds anything (window or cold)."""
        self.count = 0
        self.cold_count = 0

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[E]:
        """Window entries in delivery order (highest priority first)."""
        for lane in self.lanes():
            yield from lane.window

    def lanes(self) -> list[Lane[E]]:
        """The non-empty lanes, highest priority first."""
        mask, found = self._mask, []
        while mask:
            top = mask.bit_length() - 1
            found.append(self._lanes[top])
            mask ^= 1 << top
        return found

    def lane(self, priority: int) -> Lane[E]:
        lane = self._lanes.get(priority)
        if lane is None:
            lane = self._lanes[priority] = Lane(priority)
        return lane

    def top(self) -> Lane[E] | None:
        """The highest lane holding anything, or None."""
        mask = self._mask
        return self._lanes[mask.bit_length() - 1] if mask else None

    def settle(self, lane: Lane[E]) -> None:
        """Clear the lane's bit once it holds nothing."""
        if not lane.window and not lane.cold.count:
            self._mask &= ~(1 << lane.priority)

    def append(self, entry: E, priority: int) -> None:
        self.lane(priority).window.append(entry)
        self._mask |= 1 << priority
        self.count += 1

    def append_cold(self, entry: E, priority: int, cold: bool) -> None:
        self.lane(priority).cold.append(entry, entry.seq, cold)
        self._mask |= 1 << priority
        self.cold_count += 1

    def extend_cold(self, priority: int, seqs: array) -> None:
        """Recovered seqs of one priority, in seq order (start-up)."""
        if not seqs:
            return
        cold = self.lane(priority).cold
        before = cold.count
        cold.extend(seqs)
        self.cold_count += cold.count - before
        self._mask |= 1 << priority

    def has_cold(self, priority: int) -> bool:
        lane = self._lanes.get(priority)
        return lane is not None and lane.cold.count > 0

    def insert(self, entry: E, priority: int, before: int) -> None:
        """Put `entry` back at `before` in its lane's window (its arrival place)."""
        lane = self.lane(priority)
        lane.window.insert(before, entry)
        self._mask |= 1 << priority
        self.count += 1

    def popleft(self, lane: Lane[E]) -> E:
        entry = lane.window.popleft()
        self.count -= 1
        if not lane.window and not lane.cold.count:
            self._mask &= ~(1 << lane.priority)
        return entry

    def remove(self, lane: Lane[E], entry: E) -> None:
        """Take `entry` out of the middle of its lane's window (a selective get)."""
        lane.window.remove(entry)
        self.count -= 1
        self.settle(lane)

    def discard_cold(self, lane: Lane[E], seq: int) -> E | None:
        """Take `seq` out of its lane's cold backlog (a selective get): its held
        entry, or None when it is on disk only."""
        held = lane.cold.discard(seq)
        self.cold_count -= 1
        self.settle(lane)
        return held

    def restore_cold(self, entry: E, priority: int) -> bool:
        """Put `entry` back in its lane's cold backlog at its arrival place, if a
        selective get took it from there and no refill has passed that place
        (`ColdBacklog.restore`); False otherwise (nothing changed)."""
        lane = self._lanes.get(priority)
        if lane is None or not lane.cold.restore(entry.seq, entry):
            return False
        self.cold_count += 1
        self._mask |= 1 << priority
        return True

    def pass_cold(self, entry: E, priority: int) -> None:
        """`entry` arrived while its lane has messages on disk and went straight to a
        selective get: its arrival place is kept in the lane's cold backlog, taken
        (`ColdBacklog.append_taken`), for `restore_cold` if it comes back."""
        lane = self._lanes.get(priority)
        if lane is not None and lane.cold.count:
            lane.cold.append_taken(entry.seq)

    def took_cold(self, lane: Lane[E], count_before: int) -> None:
        """A refill moved entries out of `lane`'s backlog: keep `cold_count` exact."""
        self.cold_count -= count_before - lane.cold.count
