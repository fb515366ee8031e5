"""One log line when a journal's record bound is reached, one when it has room again.

Why: a group whose DQF held `dqf_messages_max` answered every recoverable put
DQF_FULL (and a peer's direct puts, which then took their UMA in the sender's group)
with nothing in either group's log: a consumer that stopped confirming filled the
DQF, a thousand senders' messages went to their DLJs, and the only sign was the
`ALARM` note of `mrs status`, which says neither which queue holds the DQF nor what
helps. The same held for the SAF at `saf_messages_max` and the DLJ at
`dlj_messages_max`. So the group says it once per state change, as it says a
journal in its reserve: a WARNING naming the bound, what is refused and what helps
(for the DQF, the queues that hold it), and an INFO once the count is back under
the alarm's threshold (ALARM_USE_HIGH of the bound), so a DQF kept at its edge by a
drain that waits for room is one pair of lines, not one per freed slot.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mrs.ops.alarms import alarm_threshold

if TYPE_CHECKING:
    from mrs.group import Group

log = logging.getLogger("mrs.ops")

QUEUES_NAMED_MAX = 3
"""How many of the queues holding the most DQF records the DQF's line names."""

_REFUSED = {
    "dqf": (
        "new recoverable puts to this group are answered DQF_FULL and take their UMA "
        "(a sender's UMA DLJ puts them in its own group's DLJ), and peers' SAF drains "
        "wait for room"
    ),
    "saf": (
        "new puts that need the SAF (SAF modes, SAF_FORCED behind a backlog, UMA SAF) "
        "are refused and take their UMA"
    ),
    "dlj": "dead letters of UMA DLJ fail (DLJ_FAILED), and so do purges to the DLJ",
}
_HELPS = {
    "dqf": (
        "have their receivers get and confirm (`mrs admin connections` names them; a "
        "queue at its unconfirmed_max waits for confirms), move or purge what waits "
        "(`mrs admin`), or raise dqf_messages_max"
    ),
    "saf": "bring the links whose SAF backlog `mrs status` shows back up, or raise "
    "saf_messages_max",
    "dlj": "look with `mrs dump --group G dlj`, redrive with `mrs jplay dlj --remove` or "
    "`mrs dlq-handler`, or raise dlj_messages_max",
}


class BoundLog:
    """Which of the DQF, SAF and DLJ are at their bound, logged as it changes."""

    def __init__(self, group_id: int) -> None:
        self.group_id = group_id
        self.full: set[str] = set()
        """The journals whose WARNING was logged and whose INFO is still owed."""

    def check(self, group: Group, records: dict[str, int]) -> None:
        """Compare each journal's records (`records`, as the journal usage reads them,
        with what the group's own counts hold in flight) with its bound."""
        limits = group.ctx.limits
        counts = group.ctx.counts
        bounds = (
            ("dqf", max(counts.dqf, records.get("dqf", 0)), limits.dqf_messages_max),
            ("saf", max(counts.saf, records.get("saf", 0)), limits.saf_messages_max),
            ("dlj", records.get("dlj", counts.dlj) + counts.dlj_in_flight, limits.dlj_messages_max),
        )
        for kind, count, limit in bounds:
            if limit <= 0:
                continue
            if count >= limit and kind not in self.full:
                self.full.add(kind)
                log.warning("%s", self._full_line(group, kind, count, limit))
            elif kind in self.full and count < alarm_threshold(limit):
                self.full.discard(kind)
                log.info(
                    "group %d: the %s holds %d of %s_messages_max %d again: new messages "
                    "are accepted",
                    self.group_id,
                    kind.upper(),
                    count,
                    kind,
                    limit,
                )

    def _full_line(self, group: Group, kind: str, count: int, limit: int) -> str:
        where = f"; the queues holding most: {dqf_holders(group)}" if kind == "dqf" else ""
        return (
            f"group {self.group_id}: the {kind.upper()} holds {count} of {kind}_messages_max "
            f"{limit}: {_REFUSED[kind]}{where}; what helps: {_HELPS[kind]}"
        )


def dqf_holders(group: Group) -> str:
    """The queues holding the most DQF records, in words: `2.10 ORDERS 266 (20
    unconfirmed, at its unconfirmed_max)`. Read once, when the DQF fills."""
    held = []
    for queue in group.ctx.queues.values():
        unconfirmed = sum(1 for entry in queue.unconfirmed.values() if entry.journaled)
        depth = queue.waiting - queue.memory_count + unconfirmed
        if depth > 0:
            held.append((depth, queue, len(queue.unconfirmed)))
    held.sort(key=lambda item: -item[0])
    words = []
    for depth, queue, unconfirmed in held[:QUEUES_NAMED_MAX]:
        note = ""
        if unconfirmed:
            at_max = ", at its unconfirmed_max" if unconfirmed >= queue.unconfirmed_max else ""
            note = f" ({unconfirmed} unconfirmed{at_max})"
        words.append(f"{queue.address} {queue.config.name} {depth}{note}")
    return ", ".join(words) or "none (messages of queues the config lacks: `mrs status`)"
