"""Room: notices between groups — confirms (durable), gets and acks (best effort),
room, resync and forget — sent to and received from peers, as the typed notices of
`mrs.protocol.link_events`.

A CONF notice is written in the confirm's own transaction, so the origin group
hears of every confirm even across restarts; it is deleted once the peer answered.
The notice journal keeps a notice in its wire form (``[kind, seq, status]``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from journals import Journal, JournalError, WriteBatch, group_key
from mrs.group.acks import AckWaits
from mrs.group.context import GroupContext
from mrs.group.idempotency import origin_key
from mrs.group.peers import Inbound, Peers
from mrs.group.receipts import Receipts
from mrs.group.transfer import Answer, link_results
from mrs.group.umas import Umas
from mrs.model import Psb, Status
from mrs.protocol.link_events import (
    AnyNotice,
    ConfNotice,
    ForgetNotice,
    LeaveNotice,
    LinkResult,
    Notice,
    ResyncNotice,
    RoomNotice,
    WaitNotice,
    decode_notice,
    encode_notice,
)

log = logging.getLogger("mrs.forwarding")

_NOTICE_BYTES_MAX = 64
"""Room a journaled notice takes at most in a read of a peer's (its wire form,
`[kind, seq, status]`, is under 20 bytes): `pending_notices` reads count_max of them."""


@dataclass(eq=False)
class Notices:
    ctx: GroupContext
    peers: Peers
    umas: Umas
    ack_waits: AckWaits
    receipts: Receipts
    """Receiving side: DEQ/ACK notices of other groups' messages, kept until answered."""

    def add_notice(self, batch: WriteBatch, peer_id: int, kind: type[Notice], seq: int) -> bool:
        """Add a durable notice (e.g. ConfNotice) for the origin group to a confirm's
        batch; call `notice_committed` once that batch is durable. Journaled for a
        group the config links no more too, as the SAF keeps what waits for it. Why:
        left out, a message of that group confirmed while its `[[link]]` was out of
        the file never told it, and its AK_CONF sender never got the MRS_ACK once the
        link was back."""
        notice = kind(seq, int(Status.SUCCESS))
        batch.put_raw(Journal.NOTICES, group_key(peer_id, seq), encode_notice(notice))
        return True

    def notice_committed(self, peer_id: int) -> None:
        peer = self.peers.get(peer_id)
        if peer is None:  # kept until a [[link]] to it is back (`add_notice`)
            unlinked = self.peers.unlinked_notices
            if not unlinked.get(peer_id):
                log.warning(
                    "group %d: a confirm notice for group %d, which the config does not link "
                    "to it, is kept, not sent, until a [[link]] between them is back in the file",
                    self.ctx.group_id,
                    peer_id,
                )
            unlinked[peer_id] = unlinked.get(peer_id, 0) + 1
            return
        peer.notices_pending += 1
        if peer.link is not None:
            peer.link.poke()

    def notify_now(self, peer_id: int, kind: type[Notice], seq: int) -> None:
        """A notice (DeqNotice, AckNotice) for a nonrecoverable message: kept until the
        peer answers it, sent again when the link comes back (mrs.group.receipts)."""
        peer = self.peers.get(peer_id)
        if peer is not None:
            self.receipts.add(peer_id, kind, seq, peer.link)

    def pending_notices(self, peer_id: int, count_max: int) -> list[tuple[bytes, AnyNotice]]:
        """Up to count_max journaled notices for a peer, with their keys (one that does
        not decode is reported and left out). Read from the peer's own keys on: a walk
        of the whole journal read every other group's notices on each link flush,
        among them all those kept for a group the config links no more (`add_notice`:
        as many as its messages confirmed here; figures in benchmarks/README.md)."""
        prefix = group_key(peer_id, 0)[:4]
        notices: list[tuple[bytes, AnyNotice]] = []
        after: bytes | None = None
        while len(notices) < count_max:
            wanted = count_max - len(notices)
            items = self.ctx.store.items_after(
                Journal.NOTICES, prefix, after, wanted, wanted * _NOTICE_BYTES_MAX
            )
            for key, value in items:
                try:
                    notices.append((key, decode_notice(value)))
                except msgspec.DecodeError as error:
                    log.error("notice %s for group %d unreadable: %s", key.hex(), peer_id, error)
            if not items:
                break
            after = items[-1][0]
        return notices

    def notices_delivered(self, peer_id: int, keys: list[bytes], then: Callable[[], None]) -> None:
        peer = self.peers[peer_id]
        batch = WriteBatch.empty()
        for key in keys:
            batch.delete(Journal.NOTICES, key)

        def done(error: JournalError | None) -> None:
            if error is None:
                peer.notices_pending -= len(keys)
            then()

        self.ctx.writer.submit(batch, done)

    def accept_notices(
        self, peer_id: int, notices: list[AnyNotice], inbound: Inbound
    ) -> list[LinkResult]:
        """News from a peer about messages this group sent: report to the waiters."""
        peer = self.peers[peer_id]
        success = int(Status.SUCCESS)
        answers: list[Answer] = []
        forget = WriteBatch.empty()
        for notice in notices:
            seq = notice.seq
            answers.append((seq, success, seq))
            if isinstance(notice, ForgetNotice):  # a drain's many notices: asked first
                key = origin_key(peer_id, seq)
                forget.delete(Journal.DEDUPE, key.encode())
                self.umas.dead_lettered.pop(key, None)  # no resend can follow
                continue
            match notice:
                case ResyncNotice():
                    inbound.inbound_failed_at = None
                case RoomNotice():
                    if peer.link is not None and hasattr(peer.link, "room"):
                        peer.link.room(notice.seq)
                case WaitNotice():  # the answer says how many slots are held for it
                    held = self.peers.drain_waits(peer_id)
                    answers[-1] = (seq, success, held)
                case LeaveNotice():
                    self.peers.drain_left(peer_id)
                case _ if (waiter := peer.waiters.pop(seq, None)) is not None:
                    waiter(notice)
                case ConfNotice() if (
                    response_queue := self.ack_waits.owed_to(seq, peer_id)
                ) is not None:
                    # this group restarted since the AK_CONF put: the journal knows where.
                    # A notice from a group the message did not go to finds None (one
                    # WARNING) and is still answered taken: refused, a confused peer
                    # would drop the link and send it again for ever.
                    self.umas.send_mrs_ack(
                        response_queue, Psb(Status.SUCCESS, Status.SUCCESS, seq, Status.NO_UMA)
                    )
                    self.ack_waits.done(seq)
        if forget:
            self.ctx.writer.submit(forget, lambda error: None)  # best effort: a kept key
        return link_results(answers)
