"""A queue's selection index: the attributes of every pending message by seq, and the
seqs of each (priority, correlation id) and (priority, class), in arrival order.

Why: a selective get by correlation id (IBM MQ's CorrelId match, MessageQ's
`sel_filter`) on a queue of a million messages must not read a million records
(most are cold, on disk: mrs.group.backlog). The index holds what a selection may
test for each pending message, in memory, cold or not, so the group finds the
message a selective get takes with dict lookups: per non-empty priority lane, the
first seq of the key's group that satisfies every other key
(`TargetQueue.find`). Its size is bounded (SELECT_INDEX_MESSAGES_MAX per queue); the
memory per message is measured by benchmarks/selective_get.py.

The index of a queue starts with its first selective get (`TargetQueue.build_index`):
a queue no selective get ever reads pays nothing for it (one flag test per put and
get), and that first get reads once the records of the queue's cold messages, which
are known by seq alone (mrs.group.backlog, mrs.group.recovery); from then on every
put, get and put-back keeps it.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from mrs.limits import SELECT_INDEX_MESSAGES_MAX

_INDEX_MAX: Final = SELECT_INDEX_MESSAGES_MAX
CLASS_KEY: Final = 0
CORRELATION_KEY: Final = 1


class Attributes(NamedTuple):
    """What a selection tests of one message (mrs.core.selection attribute names)."""

    priority: int
    correlation_id: bytes
    msg_class: int
    msg_type: int
    source: str


class SelectIndex:
    def __init__(self) -> None:
        self.attributes: dict[int, Attributes] = {}
        self.groups: dict[tuple[int, int, object], dict[int, None]] = {}
        """(priority, CLASS_KEY or CORRELATION_KEY, value) -> seqs, arrival order."""
        self.enabled = False
        """Kept from the queue's first selective get on (`TargetQueue.build_index`)."""
        self.overflowed = 0
        """Messages left out because the index was full (status, docs)."""

    def __len__(self) -> int:
        return len(self.attributes)

    def add(self, entry, priority: int) -> None:
        """Index a pending message (again: a second add of a seq does nothing)."""
        if not self.enabled:
            return
        seq = entry.seq
        attributes = self.attributes
        if seq in attributes:
            return
        if len(attributes) >= _INDEX_MAX:
            self.overflowed += 1
            return
        correlation_id = entry.correlation_id
        attributes[seq] = Attributes(
            priority, correlation_id, entry.msg_class, entry.msg_type, entry.source.text
        )
        groups = self.groups
        key = (priority, CLASS_KEY, entry.msg_class)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {}
        group[seq] = None
        if correlation_id:
            key = (priority, CORRELATION_KEY, correlation_id)
            group = groups.get(key)
            if group is None:
                group = groups[key] = {}
            group[seq] = None

    def remove(self, seq: int) -> None:
        """The message left the pending messages (got, dropped)."""
        if not self.enabled:
            return
        found = self.attributes.pop(seq, None)
        if found is None:
            return
        self._ungroup((found.priority, CLASS_KEY, found.msg_class), seq)
        if found.correlation_id:
            self._ungroup((found.priority, CORRELATION_KEY, found.correlation_id), seq)

    def _ungroup(self, key: tuple[int, int, object], seq: int) -> None:
        group = self.groups.get(key)
        if group is not None:
            group.pop(seq, None)
            if not group:
                del self.groups[key]

    def group(self, priority: int, kind: int, value: object) -> dict[int, None] | None:
        return self.groups.get((priority, kind, value))

    def clear(self) -> None:
        self.attributes.clear()
        self.groups.clear()
