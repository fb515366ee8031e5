"""DQF room for the SAF drains of other groups: who waits for a slot, and slots held
for them, so a drain into a full DQF progresses and is never starved.

Why: a remote group's SAF drain refused DQF_FULL backs off and retries, while this
group's own senders (and other links) put as soon as a confirm frees a slot; the
drain could lose every race, and its backlog would never move ("MRS attempts
redelivery ... until delivery is confirmed"). So a drain refused DQF_FULL waits
here in FIFO order; each freed slot is held for the next waiting drain (the others
see the DQF as full) and that drain is told at once ("room" notice) instead of
waiting out its backoff. Held slots are bounded: they come only from free slots,
so stored + held never exceeds dqf_messages_max.

A drain stays in line until its sender says it has nothing left ("leave") or the
link drops: its sender sends only into slots held for it, so the DQF never has to
refuse what it refused before. While it is in line, a transfer of it that stored
everything also gets the DQF's free room (up to `held_max`), so a drain into a DQF
that has room again is not held to one message per confirm.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)
class DqfRoom:
    held: dict[int, int] = field(default_factory=dict)
    """Peer group whose drain waits for room -> slots held for it (FIFO order)."""

    @property
    def held_total(self) -> int:
        return sum(self.held.values())

    def may_store(self, origin_group: int | None, stored: int, stored_max: int) -> bool:
        """Whether a message may take a DQF slot now (uses one held for its group)."""
        if not self.held:  # no drain waits: the common case, once per put (benchmarks/README.md)
            return stored < stored_max
        if origin_group is not None and (held := self.held.get(origin_group, 0)) > 0:
            self.held[origin_group] = held - 1
            return True
        return stored + self.held_total < stored_max

    def refused(self, peer_group: int) -> None:
        """The peer's drain was refused DQF_FULL: it waits for a slot."""
        self.held.setdefault(peer_group, 0)

    def freed(self, stored: int, stored_max: int) -> int | None:
        """A slot freed: hold it for the first waiting drain (which then goes to the
        back of the line) and return that peer, or None if no drain waits."""
        if not self.held or stored + self.held_total >= stored_max:
            return None
        peer_group = next(iter(self.held))
        self.held[peer_group] = self.held.pop(peer_group) + 1
        return peer_group

    def grant(self, peer_group: int, stored: int, stored_max: int, held_max: int) -> int:
        """Hold the free room, up to `held_max` slots in all, for a drain in line;
        returns how many slots were added (0 if it is not in line or nothing is free)."""
        held = self.held.get(peer_group)
        if held is None:
            return 0
        free = stored_max - stored - self.held_total
        added = max(min(free, held_max - held), 0)
        self.held[peer_group] = held + added
        return added

    def wait(self, peer_group: int, stored: int, stored_max: int, held_max: int) -> int:
        """The peer's drain waits and counts on no slot held before (a new connection,
        or its counts disagreed): hold the free room afresh; returns the slots held."""
        self.held[peer_group] = 0
        return self.grant(peer_group, stored, stored_max, held_max)

    def satisfied(self, peer_group: int) -> int:
        """The peer's drain has nothing left (or its link went down): it no longer
        waits; returns how many held slots it gives back."""
        return self.held.pop(peer_group, 0)

    def status_info(self) -> dict:
        return {str(peer): held for peer, held in self.held.items()}
