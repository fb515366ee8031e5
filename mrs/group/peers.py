"""The groups this group is linked to: per-peer state, and DQF room held for their drains.

Shared by the outbound room (what goes to a peer), the drain, the inbound room
(what a peer sends) and the notices; none of them owns another's state.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from mrs.group.context import GroupContext
from mrs.group.drain_room import DqfRoom
from mrs.group.saf_keys import SafKeys
from mrs.limits import LINK_WINDOW_MESSAGES_MAX, PEER_NOTICE_WAITERS_MAX
from mrs.protocol.link_events import AnyNotice, RoomNotice, TransferredMessage

log = logging.getLogger("mrs.links")

WAITERS_SWEEP_MIN = 1024
"""A peer's waiters are first swept of answered puts' entries at this many
(`PeerState.wait_for_notice`), then each time they double."""

Result = Callable[[int, int], None]
"""on_result(status, stored_seq) for one message sent over a link."""


class LinkPort(Protocol):
    """What a group needs of an up link (implemented by `mrs.group.link_session.PeerLink`)."""

    def send_message(self, message: TransferredMessage, on_result: Result) -> None: ...

    @property
    def direct_full(self) -> bool:
        """True when LINK_DIRECT_MESSAGES_MAX messages, or LINK_DIRECT_BYTES_MAX bytes of
        bodies, wait for the window."""
        ...

    def poke(self) -> None: ...

    def saf_submitted(self, key: bytes) -> None:
        """A SAF record for this peer is submitted to the writer (its key may land
        behind the drain's cursor)."""
        ...

    def saf_written(self, key: bytes, committed: bool) -> None:
        """That record's commit is answered (`committed`) or failed: drain it."""
        ...

    def resend_saf(self, after_s: float = 0.0) -> None:
        """Drained records could not be deleted: drain again from the oldest record,
        once `after_s` has passed."""
        ...

    def send_notices(
        self, notices: list[AnyNotice], answered: Callable[[], None] | None = None
    ) -> None: ...

    def ask_pending(
        self, queue_ids: list[int], answered: Callable[[list[int] | None], None]
    ) -> None:
        """Ask the peer how many messages wait on its queues `queue_ids`;
        `answered(counts)` with its answer, or `answered(None)` if the link drops first."""
        ...


class Inbound(Protocol):
    """Per-connection state of what a peer sends (kept by the link session)."""

    inbound_failed_at: int | None
    """Ordinal of the first ordered message of this connection that failed."""
    inbound_ordinal: int
    """Ordered messages received on this connection so far."""


@dataclass(eq=False)
class PeerState:
    group_id: int
    link: LinkPort | None = None
    saf_backlog: int = 0
    """SAF records for this group, committed or being committed."""
    waiters: dict[int, Callable[[AnyNotice], None]] = field(default_factory=dict)
    """seq -> what to do when the peer's notice reports the message confirmed / got."""
    sweep_at: int = WAITERS_SWEEP_MIN
    """`waiters` are swept of answered puts' entries when they reach this many."""
    waiters_max: int = PEER_NOTICE_WAITERS_MAX
    """Unanswered waiters kept at most; beyond, the oldest are given up (`_give_up_oldest`)."""
    notices_pending: int = 0
    deleting: set[bytes] = field(default_factory=set)
    """SAF keys whose deletion is being committed: neither resent nor deleted again."""
    messages_sent: int = 0
    """Messages and notices sent to this peer since the server started, over every
    connection of its link (`PeerLink.messages_sent`): kept here, not on the link
    session alone, so the status (and the metric `mrs_link_messages_sent_total`) still
    has it while the link is down; it read 0 then, and `rate()` counted it all again.
    A message counts here once, at its first send: its resends count in `messages_resent`."""
    messages_resent: int = 0
    """Messages sent to this peer again (`PeerLink.messages_resent`): a RETRY's stuck
    message, a drain restarted after a refusal, what was in flight when the link
    dropped. Why apart: counted with the first sends, `rate()` of
    `mrs_link_messages_sent_total` grew while a peer refused everything (the docs call
    it the drain rate) and `MrsSafNotDraining` never fired for a drain stuck in RETRY."""
    held_seq_max: int = 0
    """At least the highest of this peer's seqs this group's DQF may hold (from the
    DQF's keys at start, raised by every transfer since): a transferred seq above it
    cannot be held already, so its DQF key is not read (mrs.group.inbound
    `_held_already`)."""
    saf_keys: SafKeys = field(default_factory=SafKeys)
    """Idempotency keys of the keyed puts waiting in the SAF for this peer."""
    forgets_held: set[int] = field(default_factory=set)
    """Seqs of AK_CONF messages sent directly whose copy is journaled beside their
    debt (mrs.group.acks): their STORED answer does not make the link send a forget
    notice; the copy's deletion does, once durable (`forgets_due`). Why: a copy
    resent after a restart must still find the peer's dedupe key."""
    forgets_due: list[int] = field(default_factory=list)
    """Seqs the peer may now forget, taken into the link's forget notices at its next
    flush (kept while the link is down)."""

    def wait_for_notice(self, seq: int, waiter: Callable[[AnyNotice], None]) -> None:
        """Register `waiter` for the peer's notice about `seq`, keeping the table bounded
        by the puts still waiting.

        Why: a notice may never come (the peer restarted and lost a memory message,
        or dropped notices beyond RECEIPTS_PER_PEER_MAX), and an entry stayed for
        ever, holding its put's reply and client session, after that put had timed
        out: each restart of the receiving group left its WF_DEQ / WF_ACK / WF_CONF
        puts' entries behind. An answered put's entry does nothing when called, so
        a sweep drops those once the table doubles (amortised O(1) per put)."""
        self.waiters[seq] = waiter
        if len(self.waiters) < self.sweep_at:
            return
        for answered in [s for s, w in self.waiters.items() if _answered(w)]:
            del self.waiters[answered]
        if len(self.waiters) > self.waiters_max:
            self._give_up_oldest()
        self.sweep_at = max(WAITERS_SWEEP_MIN, 2 * len(self.waiters))

    def _give_up_oldest(self) -> None:
        """Keep the `waiters_max` newest unanswered waiters. Why: an AK_DEQ / AK_ACK put
        has no deadline (its sender waits for an MRS_ACK), so its waiter is never
        answered when the peer lost the memory message (restarted): each restart of
        the receiving group left one per such put, for ever. The oldest are those
        least likely to be answered; an AK_CONF one is also journaled (mrs.group.acks),
        so its notice still finds its MRS_ACK."""
        excess = len(self.waiters) - self.waiters_max
        for seq in list(itertools.islice(self.waiters, excess)):
            del self.waiters[seq]
        log.warning(
            "group %d: %d puts' notices given up (their messages, not recoverable, were "
            "likely lost by a restart of that group; at most %d are awaited per group)",
            self.group_id,
            excess,
            self.waiters_max,
        )


def _answered(waiter: Callable[[AnyNotice], None]) -> bool:
    """Whether `waiter` is a reporter (mrs.group.reply `PutReply.reporter`) of a put
    already answered (timed out, or reported): calling it would do nothing."""
    reporters = getattr(waiter, "reporters", None)  # mrs.group.reply Reporters
    if reporters is not None:
        return all(_answered(reporter) for reporter in reporters)
    reply = getattr(waiter, "reply", None)
    return bool(getattr(reply, "done", False))


@dataclass(eq=False)
class Peers:
    ctx: GroupContext
    by_id: dict[int, PeerState] = field(default_factory=dict)
    room: DqfRoom = field(default_factory=DqfRoom)
    """Receiving side: slots of this group's DQF held for other groups' drains."""
    room_refused_at: dict[int, int] = field(default_factory=dict)
    """Peer -> inbound ordinal of its drain's last DQF_FULL refusal."""
    unlinked_notices: dict[int, int] = field(default_factory=dict)
    """Group -> confirm notices journaled for it though the config links it no more
    (its `[[link]]` taken out of the file): kept, sent once the link is back; `mrs
    status` shows them (`owed_unlinked_groups`)."""

    def __post_init__(self) -> None:
        for peer_id in self.ctx.config.links_to():
            self.by_id[peer_id] = PeerState(peer_id)

    def get(self, peer_id: int | None) -> PeerState | None:
        return self.by_id.get(peer_id) if peer_id is not None else None

    def __getitem__(self, peer_id: int) -> PeerState:
        return self.by_id[peer_id]

    def __contains__(self, peer_id: object) -> bool:
        return peer_id in self.by_id

    def __iter__(self):
        return iter(self.by_id)

    def values(self):
        return self.by_id.values()

    def may_store(self, origin_group: int | None) -> bool:
        """Whether a message may take a DQF slot now: not full, and the free slots are
        not held for other groups' waiting SAF drains (uses one held for its group)."""
        return self.room.may_store(
            origin_group, self.ctx.counts.dqf, self.ctx.limits.dqf_messages_max
        )

    def dqf_freed(self) -> None:
        """A DQF slot of this group freed: hold it for a waiting drain and tell it."""
        peer_id = self.room.freed(self.ctx.counts.dqf, self.ctx.limits.dqf_messages_max)
        if peer_id is not None:
            self._tell_room(peer_id, 1)

    def _tell_room(self, peer_id: int, slots: int) -> None:
        peer = self.by_id.get(peer_id)
        if peer is not None and peer.link is not None:
            peer.link.send_notices([RoomNotice(slots, 0)])

    def drain_satisfied(self, peer_id: int, first_ordinal: int) -> None:
        """A transfer sent after the drain's last DQF_FULL stored everything: it used
        the slots held for it; if the DQF has free room now, hold that for it too."""
        if self.room.held.get(peer_id) is None:
            return
        if first_ordinal <= self.room_refused_at.get(peer_id, -1):
            return  # sent before the refusal: says nothing about room now
        slots = self.room.grant(
            peer_id, self.ctx.counts.dqf, self.ctx.limits.dqf_messages_max, LINK_WINDOW_MESSAGES_MAX
        )
        if slots:
            self._tell_room(peer_id, slots)

    def drain_waits(self, peer_id: int) -> int:
        """The peer's drain waits for room (WaitNotice): the slots held for it now."""
        return self.room.wait(
            peer_id, self.ctx.counts.dqf, self.ctx.limits.dqf_messages_max, LINK_WINDOW_MESSAGES_MAX
        )

    def drain_left(self, peer_id: int) -> None:
        """The peer's drain has nothing left (LeaveNotice): its held slots go back."""
        for _ in range(self.room.satisfied(peer_id)):
            self.dqf_freed()

    def drain_refused(self, peer_id: int, ordinal: int) -> None:
        """The peer's drain was refused DQF_FULL at `ordinal`: it waits for room."""
        self.room.refused(peer_id)
        self.room_refused_at[peer_id] = ordinal

    def status_info(self, acks_owed: dict[int, int], receipts: Callable[[int], int]) -> dict:
        """Each link for `mrs status`; `acks_owed`: MRS_ACKs owed per peer (mrs.group.acks),
        `receipts(peer)`: its DEQ/ACK notices not yet answered (mrs.group.receipts)."""
        return {
            str(peer.group_id): {
                "state": "up" if peer.link is not None else "down",
                "saf_backlog": peer.saf_backlog,
                "notices_pending": peer.notices_pending,
                "mrs_acks_owed": acks_owed.get(peer.group_id, 0),
                "receipts_pending": receipts(peer.group_id),
                "messages_sent": peer.messages_sent,
                "messages_resent": peer.messages_resent,
                **(
                    peer.link.status_info()
                    if peer.link is not None and hasattr(peer.link, "status_info")
                    else {}
                ),
            }
            for peer in self.by_id.values()
        }
