"""Room: a queue's address by its name (MessageQ's pams_locate_q) and how many messages
wait on given queues (putil_show_pending), answered by this group and, for another
group's queues, over the link to that group.

Why names resolve here, without asking the other group: every group loads the whole
bus file, which is the bus's name space (MessageQ's global name table), so a name of
another group is answered at once, even while its link is down. A count is the other
group's live state, so it is asked over the link (LinkPendingQuery), nothing
journaled: a link lost before the answer answers the request LINK_DOWN.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mrs import protocol as wire
from mrs.config.bus import BusConfig
from mrs.core.delivery import Refused
from mrs.group.context import GroupContext, lookup_refusal
from mrs.group.peers import Peers
from mrs.limits import PENDING_QUERY_WAIT_S
from mrs.model import Address, Status

Answer = Callable[[object], None]
"""Sends the request's answer (a PendingCounts or a Failure) on its connection."""


def locate(ctx: GroupContext, text: str) -> Address:
    """The address `text` names, as group `ctx.group_id` sees it (`locate_in`)."""
    return locate_in(ctx.bus, ctx.group_id, text)


def locate_in(bus: BusConfig, group_id: int, text: str) -> Address:
    """The address `text` names: `G.Q`, `GROUP.NAME`, or a bare name looked up in
    group `group_id`'s queues first, then in every group of the bus. Refused
    NOSUCHQUEUE when no configured queue has it, BADPARAM when a bare name is a queue
    of several other groups (the caller must say which: `GROUP.NAME`)."""
    text = text.strip()
    try:
        address = bus.resolve(text, group_id)
    except (LookupError, ValueError) as error:
        if "." in text:  # G.Q or GROUP.NAME: no other group's bare name can be it
            raise lookup_refusal(text, error) from None
        address = _bus_wide(bus, text)
    group = bus.groups.get(address.group)
    if group is None or address.queue not in group.queues:
        raise Refused(Status.NOSUCHQUEUE, f"no queue {address} on this bus ({text!r})")
    return address


def _bus_wide(bus: BusConfig, text: str) -> Address:
    """A bare name of another group's queue, or Refused."""
    found = [
        Address(group.id, queue.id)
        for group in bus.groups.values()
        for queue in group.queues.values()
        if "." not in text and queue.name == text
    ]
    if not found:
        raise Refused(Status.NOSUCHQUEUE, f"no queue named {text!r} on this bus")
    if len(found) > 1:
        where = ", ".join(str(address) for address in found)
        raise Refused(Status.BADPARAM, f"queue name {text!r} is used by {where}: say GROUP.NAME")
    return found[0]


def local_counts(ctx: GroupContext, queue_ids: list[int]) -> list[int]:
    """Messages waiting on each of this group's queues (the memory window and the cold
    backlog), or NOSUCHQUEUE (a negative Status) for a queue it does not have."""
    queues = ctx.queues
    return [
        queues[queue_id].waiting if queue_id in queues else int(Status.NOSUCHQUEUE)
        for queue_id in queue_ids
    ]


@dataclass(eq=False)
class _Query:
    """One ShowPending waiting for the groups it asked over links."""

    request_id: int
    addresses: list[Address]
    answer: Answer
    counts: dict[Address, int] = field(default_factory=dict)
    groups_left: set[int] = field(default_factory=set)
    done: bool = False
    cancel_timer: Callable[[], None] | None = None


@dataclass(eq=False)
class QueueLookup:
    """Locate and ShowPending for the server; LinkPendingQuery for a peer."""

    ctx: GroupContext
    peers: Peers

    def locate(self, request: wire.Locate) -> wire.Located:
        address = locate(self.ctx, request.name)
        return wire.Located(request.request_id, address.group, address.queue)

    def show_pending(self, request: wire.ShowPending, answer: Answer) -> None:
        """Count this group's queues now and ask each other group over its link; answer
        once every group has. Every queue and link is checked before anything is
        asked, so a bad request is refused whole (Refused, raised here)."""
        addresses = [locate(self.ctx, text) for text in request.queues]
        query = _Query(request.request_id, addresses, answer)
        by_group: dict[int, list[int]] = {}
        for address in addresses:
            by_group.setdefault(address.group, [])
            if address.queue not in by_group[address.group]:
                by_group[address.group].append(address.queue)
        links = {}
        for group_id in by_group:
            if group_id != self.ctx.group_id:
                links[group_id] = self._link_to(group_id)
        own = by_group.pop(self.ctx.group_id, [])
        self._settle(query, self.ctx.group_id, own, local_counts(self.ctx, own))
        query.groups_left = set(by_group)
        if by_group:
            query.cancel_timer = self.ctx.timers.call_later(
                PENDING_QUERY_WAIT_S, lambda: self._expired(query)
            )
        for group_id, queue_ids in by_group.items():
            links[group_id].ask_pending(
                queue_ids,
                lambda counts, g=group_id, ids=queue_ids: self._answered(query, g, ids, counts),
            )
        self._finish_if_done(query)

    def _link_to(self, group_id: int):  # -> LinkPort
        peer = self.peers.get(group_id)
        if peer is None:
            raise Refused(
                Status.LINK_DOWN,
                f"group {self.ctx.group_id} has no link to group {group_id}: "
                "its queues' counts cannot be asked",
            )
        if peer.link is None:
            raise Refused(Status.LINK_DOWN, f"the link to group {group_id} is down")
        return peer.link

    @staticmethod
    def _expired(query: _Query) -> None:
        """A group asked has not answered in PENDING_QUERY_WAIT_S (its link went
        silent): the client hears TIMEOUT now rather than waiting for the watchdog."""
        if query.done:
            return
        query.done = True
        groups = ", ".join(str(group_id) for group_id in sorted(query.groups_left))
        query.answer(
            wire.Failure(
                query.request_id,
                int(Status.TIMEOUT),
                f"group {groups} did not answer the pending counts "
                f"within {PENDING_QUERY_WAIT_S:g} s",
            )
        )

    def _answered(
        self, query: _Query, group_id: int, queue_ids: list[int], counts: list[int] | None
    ) -> None:
        """A peer's answer (None: the link went down before it came)."""
        if query.done:
            return
        if counts is None or len(counts) != len(queue_ids):
            _end(query)
            problem = "went down" if counts is None else "answered a malformed count list"
            query.answer(
                wire.Failure(
                    query.request_id,
                    int(Status.LINK_DOWN),
                    f"the link to group {group_id} {problem} before the pending counts came",
                )
            )
            return
        self._settle(query, group_id, queue_ids, counts)
        query.groups_left.discard(group_id)
        self._finish_if_done(query)

    @staticmethod
    def _settle(query: _Query, group_id: int, queue_ids: list[int], counts: list[int]) -> None:
        for queue_id, count in zip(queue_ids, counts, strict=True):
            query.counts[Address(group_id, queue_id)] = count

    @staticmethod
    def _finish_if_done(query: _Query) -> None:
        if query.done or query.groups_left:
            return
        _end(query)
        for address in query.addresses:
            count = query.counts[address]
            if count < 0:
                query.answer(
                    wire.Failure(
                        query.request_id,
                        count,
                        f"no queue {address} in group {address.group} (as that group says)",
                    )
                )
                return
        query.answer(
            wire.PendingCounts(query.request_id, [query.counts[a] for a in query.addresses])
        )


def _end(query: _Query) -> None:
    """The query is answered now: no later answer or timer answers it again."""
    query.done = True
    if query.cancel_timer is not None:
        query.cancel_timer()
