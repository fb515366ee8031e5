"""A queue's selection index: the attributes of every pending message by seq, the
seqs holding each correlation id, and those of each (priority, class), in the queue's
order — a message given back after its receiver left included, at its place.

Why: a selective get by correlation id (IBM MQ's CorrelId match, MessageQ's
`sel_filter`) on a queue of a million messages must not read a million records
(most are cold, on disk: mrs.group.backlog). The index holds what a selection may
test for each pending message, in memory, cold or not, so the group finds the
message a selective get takes with dict lookups (`TargetQueue.find`): the seqs of its
correlation id, or per non-empty priority lane the first seq of its class, that
satisfy every other key. Its size is bounded (SELECT_INDEX_MESSAGES_MAX per queue); the
memory per message is measured by benchmarks/selective_get.py.

The index of a queue starts with its first selective get (`TargetQueue.build_index`):
a queue no selective get ever reads pays nothing for it (one flag test per put and
get), and that first get reads once the records of the queue's cold messages, which
are known by seq alone (mrs.group.backlog, mrs.group.recovery); from then on every
put, get and put-back keeps it.

The order is the index's own number (`Attributes.order`), given as a message joins
the index, in the queue's order (the queue's messages at the first selective get,
lane by lane, then each arrival), and kept on the entry while it is out
(`Entry.select_order`) so a put-back one takes its place again. Not the seq: a seq
carries its sending group in its high bits, so in seq order another group's older
message came after this group's newer one, and a selective get took the newer.
"""

from __future__ import annotations

from bisect import insort
from typing import NamedTuple

from mrs.limits import SELECT_INDEX_MESSAGES_MAX


class Attributes(NamedTuple):
    """What a selection tests of one message (mrs.core.selection attribute names)."""

    priority: int
    correlation_id: bytes
    msg_class: int
    msg_type: int
    source: str
    order: int
    """The message's place in the queue's order (the module docstring)."""


class SelectIndex:
    def __init__(self) -> None:
        self.attributes: dict[int, Attributes] = {}
        self.by_correlation: dict[bytes, int | list[int]] = {}
        """Correlation id -> the seq holding it (a list for several, arrival order):
        an int, not a collection, for the usual one message per id."""
        self.by_class: dict[tuple[int, int], dict[int, None]] = {}
        """(priority, class) -> seqs, arrival order (an ordered set)."""
        self.unsorted: set[tuple[int, int]] = set()
        """Classes a message came back to out of order (given back, its receiver left):
        sorted by order at their next read (`of_class`), once for a whole detach's
        worth, rather than an ordered set rebuilt at each message."""
        self.orders_given = 0
        """The last `Attributes.order` given."""
        self.enabled = False
        """Kept from the queue's first selective get on (`TargetQueue.build_index`)."""
        self.overflowed = 0
        """Messages left out because the index was full (status, docs)."""
        self.scanned = 0
        """Messages selective gets looked at, in all (`TargetQueue.find`): a
        connection's round of requests ends once its gets looked at
        SELECT_SCANNED_PER_ROUND_MAX (mrs.server.request_dispatch)."""
        self.cut = False
        """The last look found nothing and stopped at SELECT_SCAN_MESSAGES_MAX with
        messages it never saw (`TargetQueue.find`): its get, parked, looks again at
        each serve (`GetWaiter.looked`), since a take ahead brings them in reach."""

    def __len__(self) -> int:
        return len(self.attributes)

    def number(self, entry) -> None:
        """Give `entry` its place in the queue's order without indexing it (a message
        handed to a parked get as it arrived: given back, it goes after the older
        ones still waiting and before the newer)."""
        if self.enabled and not entry.select_order:
            self.orders_given += 1
            entry.select_order = self.orders_given

    def add(self, entry, priority: int) -> None:
        """Index a pending message (again: a second add of a seq does nothing), at its
        place in the queue's order: the one it had if it was out, else the last."""
        if not self.enabled:
            return
        seq = entry.seq
        attributes = self.attributes
        if seq in attributes:
            return
        if len(attributes) >= SELECT_INDEX_MESSAGES_MAX:
            self.overflowed += 1
            return
        self.number(entry)
        order = entry.select_order
        correlation_id = entry.correlation_id
        attributes[seq] = Attributes(
            priority, correlation_id, entry.msg_class, entry.msg_type, entry.source.text, order
        )
        key = (priority, entry.msg_class)
        group = self.by_class.get(key)
        if group is None:
            group = self.by_class[key] = {}
        elif order < attributes[next(reversed(group))].order:
            self.unsorted.add(key)
        group[seq] = None
        if correlation_id:
            held = self.by_correlation.get(correlation_id)
            if held is None:
                self.by_correlation[correlation_id] = seq
            elif type(held) is int:
                first = attributes[held].order < order
                self.by_correlation[correlation_id] = [held, seq] if first else [seq, held]
            else:
                insort(held, seq, key=lambda s: attributes[s].order)  # type: ignore[arg-type]

    def remove(self, seq: int) -> int:
        """The message left the pending messages (got, dropped): its order (0 if it was
        not indexed), for the entry to keep while it is out (`Entry.select_order`)."""
        if not self.enabled:
            return 0
        found = self.attributes.pop(seq, None)
        if found is None:
            return 0
        key = (found.priority, found.msg_class)
        group = self.by_class.get(key)
        if group is not None:
            group.pop(seq, None)
            if not group:
                del self.by_class[key]
                self.unsorted.discard(key)
        correlation_id = found.correlation_id
        if correlation_id:
            held = self.by_correlation.get(correlation_id)
            if type(held) is list:
                held.remove(seq)
                if len(held) == 1:
                    self.by_correlation[correlation_id] = held[0]
            elif held == seq:
                del self.by_correlation[correlation_id]
        return found.order

    def with_correlation_id(self, correlation_id: bytes) -> list[int]:
        """The seqs of pending messages holding `correlation_id`, arrival order."""
        held = self.by_correlation.get(correlation_id)
        if held is None:
            return []
        return [held] if type(held) is int else list(held)  # type: ignore[arg-type]

    def of_class(self, priority: int, msg_class: int) -> dict[int, None]:
        """The seqs of pending messages of (priority, class), the queue's order."""
        key = (priority, msg_class)
        group = self.by_class.get(key)
        if group is None:
            return {}
        if key in self.unsorted:
            self.unsorted.discard(key)
            attributes = self.attributes
            ordered = sorted(group, key=lambda seq: attributes[seq].order)
            group = self.by_class[key] = dict.fromkeys(ordered)
        return group

    def clear(self) -> None:
        self.attributes.clear()
        self.by_correlation.clear()
        self.by_class.clear()
        self.unsorted.clear()
