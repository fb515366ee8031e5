"""Room: messages for another group — direct over an up link, or via the local SAF.

The rules (MessageQ MRS, DESIGN.md §2):
- DQF/CONF modes go straight over the link when it is up and the target group has no
  SAF backlog; the peer stores them in its DQF and answers once durable.
- SAF modes, and every recoverable put to a group whose SAF backlog is not empty
  (SAF_FORCED), are stored in the local SAF first; the link drains the SAF in seq
  order (mrs.group.drain).
- A link that is down makes the put undeliverable (LINK_DOWN): its UMA runs, and UMA
  SAF stores it in the local SAF (SAF_SUCCESS). A recoverable message in flight when
  the link drops goes to the SAF (SAF_FORCED) and is resent: the peer may have it
  (its (origin group, seq) dedupe stores it once).
- An AK_CONF put's message is journaled beside its MRS_ACK debt (mrs.group.acks) before
  the put is answered; a copy found at start-up goes into the SAF with its seq and is
  resent (`_resend_copies`): a SIGKILL before the peer stored it loses nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalFullError,
    WriteBatch,
    decode_record,
    group_key,
    split_key,
)
from mrs.core.refusals import RefusalLog
from mrs.group.acks import MESSAGE_PREFIX, AckOutbox, AckWaits
from mrs.group.context import GroupContext
from mrs.group.peers import LinkPort, Peers, PeerState
from mrs.group.receipts import Receipts
from mrs.group.reply import PutReply, Reporters
from mrs.group.saf_keys import copy_key, record_saf_key, saf_key
from mrs.group.shapes import Entry, idempotency_key, record_from_entry, transfer_fields
from mrs.group.transfer import LINK_LOST
from mrs.group.umas import Umas
from mrs.limits import DEDUPE_WAITERS_MAX, LINK_DIRECT_BYTES_MAX, LINK_DIRECT_MESSAGES_MAX
from mrs.model import Address, InterestPoint, Notification, Psb, Status, Uma

log = logging.getLogger("mrs.forwarding")


@dataclass(eq=False)
class Outbound:
    ctx: GroupContext
    peers: Peers
    umas: Umas
    ack_waits: AckWaits
    """MRS_ACKs owed for AK_CONF puts to other groups (journaled)."""
    ack_outbox: AckOutbox
    """MRS_ACKs on their way to other groups' queues (journaled until answered)."""
    receipts: Receipts
    """DEQ/ACK notices for other groups' messages, sent again when their link is up."""
    unlinked_saf: dict[int, int] = field(default_factory=dict)
    """SAF messages found at start-up for groups the config does not link: kept, sent
    once the link is back in the file (and both groups restarted); `mrs status` shows them."""
    _peer_lines: RefusalLog = field(
        default_factory=lambda: RefusalLog(log, line_format="{message}"), repr=False
    )
    """Peers' answers worth a line, at most one per 10 s each: a message stored under
    a seq not its own (`_alien_stored_seq`), direct puts refused (`_peer_refused`)."""

    def recover(self) -> None:
        """Count each target group's SAF backlog and the notices still to send."""
        self._resend_copies()
        store = self.ctx.store
        for key, item in store.scan(Journal.SAF):
            peer_group, _seq = split_key(key)
            peer = self.peers.get(peer_group)
            if isinstance(item, CorruptRecord):
                self.ctx.counts.saf_added(None)
                self.ctx.report_corrupt(item, "not forwarded")
                continue
            self.ctx.counts.saf_added(peer)
            if peer is not None and (saf_id := record_saf_key(item)) is not None:
                peer.saf_keys.add(saf_id, item.seq, durable=True)
            if peer is None:  # one line per group below, not one per message
                group_id = item.target_group if peer_group is None else peer_group
                self.unlinked_saf[group_id] = self.unlinked_saf.get(group_id, 0) + 1
        unlinked_notices = self.peers.unlinked_notices
        for key, _ in store.raw_items(Journal.NOTICES):
            notice_group = split_key(key)[0]
            peer = self.peers.get(notice_group)
            if peer is not None:
                peer.notices_pending += 1
            elif notice_group is not None:
                unlinked_notices[notice_group] = unlinked_notices.get(notice_group, 0) + 1
        for peer_group, count in sorted(self.unlinked_saf.items()):
            log.warning(
                "group %d: the SAF keeps %d messages for group %d, which the config does not "
                "link to it: kept, not sent, until a [[link]] between them is back in the file",
                self.ctx.group_id,
                count,
                peer_group,
            )
        for peer in self.peers.values():
            if peer.saf_backlog:
                log.info("SAF backlog for group %d: %d messages", peer.group_id, peer.saf_backlog)
        self.ack_outbox.recover()
        self._warn_unlinked_owed()

    def unlinked_owed(self) -> dict[str, dict[str, int]]:
        """What this group owes groups the config does not link (confirm notices,
        MRS_ACKs for their queues), per group, for `mrs status` (`owed_unlinked_groups`)."""
        notices = self.peers.unlinked_notices
        acks = {peer: n for peer, n in self.ack_outbox.owed.items() if n and peer not in self.peers}
        return {
            str(group_id): {
                "confirm_notices": notices.get(group_id, 0),
                "mrs_acks": acks.get(group_id, 0),
            }
            for group_id in sorted(set(notices) | set(acks))
        }

    def _warn_unlinked_owed(self) -> None:
        """One WARNING per group the config does not link that this group owes confirm
        notices or MRS_ACKs. Why: kept on disk and sent once the link is back, they
        were shown nowhere (the SAF's line only), so an operator who took a link out
        of the file saw no reason why AK senders of that group got no MRS_ACK."""
        for group_id, owed in self.unlinked_owed().items():
            log.warning(
                "group %d: %d confirm notices and %d MRS_ACKs are owed to group %s, which "
                "the config does not link to it: kept, not sent, until a [[link]] between "
                "them is back in the file",
                self.ctx.group_id,
                owed["confirm_notices"],
                owed["mrs_acks"],
                group_id,
            )

    def _resend_copies(self) -> None:
        """Move each AK_CONF message copy journaled beside its debt into the SAF, under
        its own seq (one transaction): the drain resends it in seq order, and the peer
        answers one it stored already STORED without storing it again (its dedupe key
        is kept until this group's forget notice, sent only once the copy is gone)."""
        store = self.ctx.store
        batch = WriteBatch.empty()
        moved = 0
        for key, value in store.raw_items(Journal.META):
            if not key.startswith(MESSAGE_PREFIX):
                continue
            try:
                record = decode_record(value, Journal.META.value, key)
            except CorruptRecord as corrupt:
                self.ctx.report_corrupt(corrupt, "not resent")
                continue
            batch.put_raw(Journal.SAF, group_key(record.target_group, record.seq), value)
            batch.delete(Journal.META, key)
            moved += 1
        if not moved:
            return
        try:
            store.commit_now(batch)
        except JournalError as error:  # kept beside their debts: moved at the next start
            log.error("AK_CONF messages journaled with their debts not resent: %s", error)
            return
        log.info(
            "group %d: %d AK_CONF messages in flight at the last stop resent via the SAF",
            self.ctx.group_id,
            moved,
        )

    def put(self, entry: Entry, reply: PutReply) -> None:
        """A put for another group: direct, via the SAF, or undeliverable."""
        peer = self.peers.get(entry.target.group)
        undeliverable = self.umas.undeliverable
        if peer is None:
            reason = f"group {entry.target.group} is not linked to group {self.ctx.group_id}"
            undeliverable(entry, reply, Status.LINK_DOWN, reason)
            return
        limit = self.ctx.bus.group(peer.group_id).limits.message_bytes_max
        body = entry.body
        assert body is not None, "a put arrives with its body"
        if len(body) > limit:
            reason = (
                f"body of {len(body)} bytes exceeds group {peer.group_id}'s "
                f"message_bytes_max {limit}"
            )
            undeliverable(entry, reply, Status.MSGTOOBIG, reason)
            return
        if entry.delivery.recoverable and self.umas.memory_dead_letter_queue(entry.target):
            # As a recoverable put to this group's own DLQ: whatever the link's state.
            reason = f"no DQF for target {entry.target}: group {peer.group_id}'s DLQ is memory only"
            undeliverable(entry, reply, Status.NO_DQF, reason)
            return
        if (first_seq := self._first_copy_in_saf(peer, entry)) is not None:
            self._answer_copy(peer, entry, reply, first_seq)
            return
        mode = entry.delivery
        to_saf_point = mode.interest_point is InterestPoint.SAF
        if mode.recoverable and (to_saf_point or peer.saf_backlog > 0):
            reached = Status.STORED if to_saf_point else Status.SAF_FORCED
            self._put_via_saf(peer, entry, reply, reached)
        elif peer.link is not None and peer.link.direct_full:
            self._link_full(peer, entry, reply)
        elif peer.link is not None:
            self._send_direct(peer, entry, reply)
        else:
            undeliverable(entry, reply, Status.LINK_DOWN, f"link to group {peer.group_id} is down")

    def saf_copy_busy(self, target_group: int, key: str, body: bytes) -> bool:
        """Whether copies of a put under scoped idempotency `key` with this `body` to
        `target_group` wait at their bound while its first copy is written to the SAF
        (mrs.group.saf_keys)."""
        peer = self.peers.get(target_group)
        if peer is None or not peer.saf_keys.writing:
            return False
        return peer.saf_keys.busy(copy_key(key, body))

    def _answer_copy(self, peer: PeerState, entry: Entry, reply: PutReply, first_seq: int) -> None:
        """A copy of a keyed put whose first copy waits in the SAF: answered with that
        seq (no second record, no second MRS_ACK) once the first copy is durable; if its
        write failed, the copy is put as a message of its own."""
        if first_seq not in peer.saf_keys.writing:
            self._report_copy(peer, entry, reply, first_seq)
            return

        def first_written(ok: bool) -> None:
            if ok:
                self._report_copy(peer, entry, reply, first_seq)
            else:
                self.put(entry, reply)

        peer.saf_keys.wait(first_seq, first_written)

    def _report_copy(self, peer: PeerState, entry: Entry, reply: PutReply, first_seq: int) -> None:
        """A copy is answered as a put of it would be now: a WF_CONF one, with the link
        up, at the peer's notice of the first copy's confirm (mrs.group.reply
        `Reporters`); any other now. Why the link: with the link down a WF_CONF put is
        answered at once by its UMA (SAF_SUCCESS), and so was its first copy."""
        if peer.link is not None and _waits_with_first_copy(peer, entry, reply, first_seq, True):
            return
        reply.report_copy(first_seq, self.umas.sequence.made_in_this_run(first_seq))

    def _first_copy_in_saf(self, peer: PeerState, entry: Entry) -> int | None:
        """The seq of the first copy of a keyed put (same idempotency key) that still
        waits in the SAF for this peer, or that the peer stored already (but for a
        WF_CONF put: its copy is answered at the first copy's confirm, which may be
        told already; mrs.group.saf_keys), or None."""
        keys = peer.saf_keys
        if not (keys.seq_by_key or keys.delivered) or (key := saf_key(entry)) is None:
            return None
        store = self.ctx.store
        peer_id = peer.group_id
        first_seq = keys.first_copy(
            key, lambda seq: store.get_raw(Journal.SAF, group_key(peer_id, seq)) is not None
        )
        mode = entry.delivery
        wf_conf = mode.interest_point is InterestPoint.CONF and mode.notification is Notification.WF
        if first_seq is not None or wf_conf:
            return first_seq
        window_s = self.ctx.bus.group(peer_id).limits.dedupe_window_s
        return keys.delivered_copy(key, self.ctx.clock_ns(), window_s * 1_000_000_000)

    def _put_via_saf(self, peer: PeerState, entry: Entry, reply: PutReply, reached: Status) -> None:
        if entry.delivery.interest_point is InterestPoint.CONF:
            peer.wait_for_notice(entry.seq, reply.reporter(entry.seq))
            self._owe_ack(entry, reply)

        def stored(error: JournalError | None) -> None:
            if error is not None:
                peer.waiters.pop(entry.seq, None)
                cause = (
                    Status.MRS_RES_EXH
                    if isinstance(error, JournalFullError)
                    else Status.SAF_DEVICE_FAIL
                )
                self.umas.undeliverable(entry, reply, cause, str(error))
            elif entry.delivery.interest_point is not InterestPoint.CONF:
                reply.report(Psb(Status.SUCCESS, reached, entry.seq, Status.NO_UMA))
            else:
                reply.stored(Psb(Status.SUCCESS, reached, entry.seq, Status.NO_UMA))

        self.store_in_saf(entry, stored)

    def put_owing_ack(
        self, entry: Entry, reply: PutReply, answer: Callable[[int, Status | None], None]
    ) -> None:
        """AK_CONF to another group: journal the MRS_ACK owed (mrs.group.acks), and the
        message with it, before the put is answered and before the message leaves, so
        no restart of this group loses either. `answer(seq, None)` accepts the put;
        `answer(seq, status)` refuses it."""

        def journaled(error: JournalError | None) -> None:
            if error is not None:
                full = isinstance(error, JournalFullError)
                answer(entry.seq, Status.MRS_RES_EXH if full else Status.SAF_DEVICE_FAIL)
                return
            answer(entry.seq, None)
            reply.on_done = lambda: self.ack_waits.done(entry.seq)  # whatever its outcome
            self.put(entry, reply)

        message = record_from_entry(entry, written_time_ns=self.ctx.clock_ns())
        self.ack_waits.journal(
            entry.seq, reply.response_queue, entry.target.group, journaled, message
        )

    def _owe_ack(self, entry: Entry, reply: PutReply) -> None:
        """AK_CONF: once its outcome is reported, forget the MRS_ACK journaled as owed."""
        if reply.mode.notification is not Notification.AK or reply.done:
            return
        seq = entry.seq
        reply.on_done = lambda: self.ack_waits.done(seq)

    def store_in_saf(self, entry: Entry, done: Callable[[JournalError | None], None]) -> None:
        """Journal an entry in the SAF for its target group; `done(error)` when durable."""
        ctx = self.ctx
        peer = self.peers[entry.target.group]
        limit = ctx.limits.saf_messages_max
        if ctx.counts.saf >= limit:
            done(JournalFullError(f"SAF holds saf_messages_max={limit}"))
            return
        if full := self.umas.dqf.journal_full(len(entry.body or b"")):
            done(JournalFullError(full))
            return
        ctx.counts.saf_added(peer)
        record = record_from_entry(entry, written_time_ns=ctx.clock_ns())
        key = group_key(peer.group_id, entry.seq)
        batch = WriteBatch.empty().put_record(Journal.SAF, key, record)
        self.ack_waits.message_moved(batch, entry.seq)  # now the SAF holds it
        if (saf_id := saf_key(entry)) is not None:
            peer.saf_keys.add(saf_id, entry.seq, durable=False)

        def stored(error: JournalError | None) -> None:
            if saf_id is not None:
                peer.saf_keys.written(entry.seq, error is None)
            if error is not None:
                ctx.counts.saf_removed(peer)
            if peer.link is not None:
                peer.link.saf_written(key, error is None)
            done(error)

        if peer.link is not None:
            peer.link.saf_submitted(key)
        ctx.writer.submit(batch, stored)

    def _link_full(self, peer: PeerState, entry: Entry, reply: PutReply) -> None:
        """The link's direct queue is at its bound: nothing more waits in memory; a
        recoverable put goes to the SAF (and later ones follow it there, in order)."""
        if entry.delivery.recoverable:
            self._put_via_saf(peer, entry, reply, Status.SAF_FORCED)
            return
        reason = (
            f"{LINK_DIRECT_MESSAGES_MAX} messages or {LINK_DIRECT_BYTES_MAX} bytes "
            f"already wait for the link to group {peer.group_id}"
        )
        self.umas.undeliverable(entry, reply, Status.MRS_RES_EXH, reason)

    def _send_direct(self, peer: PeerState, entry: Entry, reply: PutReply) -> None:
        waits_for_receiver = entry.delivery.waits_for_receiver
        if waits_for_receiver:
            # Registered before sending: the peer's notice can overtake its LinkAck.
            peer.wait_for_notice(entry.seq, reply.reporter(entry.seq))
            if entry.delivery.interest_point is InterestPoint.CONF:
                self._owe_ack(entry, reply)
        if entry.seq in self.ack_waits.messages:  # forgotten by the peer once the copy is gone
            peer.forgets_held.add(entry.seq)

        def on_result(status: int, stored_seq: int) -> None:
            self._direct_answered(peer, entry, reply, waits_for_receiver, status, stored_seq)

        link = peer.link
        assert link is not None, "put() sends directly only while the link is up"
        link.send_message(transfer_fields(entry), on_result)

    def _direct_answered(
        self,
        peer: PeerState,
        entry: Entry,
        reply: PutReply,
        waits_for_receiver: bool,
        status: int,
        stored_seq: int,
    ) -> None:
        """The peer answered a direct message (or its link dropped first)."""
        if status > 0 and stored_seq != entry.seq and idempotency_key(entry.headers) is None:
            stored_seq = self._alien_stored_seq(peer, entry, stored_seq)
        if entry.seq in peer.forgets_held:
            peer.forgets_held.discard(entry.seq)
            if status == Status.STORED:
                self.ack_waits.message_delivered(entry.seq, lambda: self._forget(peer, entry.seq))
        if status in (LINK_LOST, Status.LINK_DOWN) and entry.delivery.recoverable:
            # The peer may or may not have it: keep it in the SAF and resend; the
            # peer's (origin, seq) dedupe makes that safe. Taking the UMA here
            # could deliver the message *and* dead-letter it.
            self._put_via_saf(peer, entry, reply, Status.SAF_FORCED)
        elif status == LINK_LOST or status < 0:
            peer.waiters.pop(entry.seq, None)
            cause = Status.LINK_DOWN if status == LINK_LOST else Status(status)
            reason = (
                f"link to group {peer.group_id} dropped before it answered"
                if status == LINK_LOST
                else f"group {peer.group_id} answered {cause.name}"  # words, not -1004
            )
            if status < 0 and entry.uma != Uma.SAF:  # (a SAF drain's wait says it)
                self._peer_refused(peer, cause, entry.target)
            self.umas.undeliverable(entry, reply, cause, reason)
        elif stored_seq != entry.seq:  # a copy (same idempotency key) of one stored before
            peer.waiters.pop(entry.seq, None)
            self._stored_by_peer(peer, entry, status, stored_seq)
            if not _waits_with_first_copy(peer, entry, reply, stored_seq, False):
                reply.report_copy(stored_seq, self.umas.sequence.made_in_this_run(stored_seq))
        elif not waits_for_receiver:
            self._stored_by_peer(peer, entry, status, stored_seq)
            reply.report(Psb(Status.SUCCESS, Status(status), stored_seq, Status.NO_UMA))
        elif entry.delivery.recoverable:
            self._stored_by_peer(peer, entry, status, stored_seq)
            reply.stored(Psb(Status.SUCCESS, Status(status), stored_seq, Status.NO_UMA))

    def _peer_refused(self, peer: PeerState, cause: Status, target: Address) -> None:
        """A WARNING, at most once per 10 s per peer and status (the count of the rest
        after it), that the peer refuses direct puts. Why: a full DQF there answered
        every put DQF_FULL, each took its UMA here (708 went into this group's DLJ in
        an incident drill), and this group's log said nothing of it. A refusal of one
        queue (QUEUE_REFUSALS) names that queue, not the group: "group 2 refuses direct
        puts NO_DQF; `mrs status` of group 2 says why" sent operators to a group that
        was well, for a queue number it never had."""
        what = QUEUE_REFUSALS.get(cause)
        line = (
            f"group {peer.group_id} refuses direct puts {cause.name}: each takes its "
            f"UMA here (DLJ, DLQ, RTS, ...); `mrs status` of group {peer.group_id} says why"
            if what is None
            else f"group {peer.group_id} refuses puts to {target} ({cause.name}: {what}): "
            "each takes its UMA here"
        )
        self._peer_lines.refused(
            "peer_refused",
            str(peer.group_id),
            line,
            key=("peer_refused", peer.group_id, int(cause)),
        )

    def _alien_stored_seq(self, peer: PeerState, entry: Entry, stored_seq: int) -> int:
        """The seq to report for `entry`, which the peer answered stored under
        `stored_seq`, another seq, though it has no idempotency key: only a copy of a
        keyed put is stored under its first copy's seq, so the peer lies (or is
        broken). Its own seq, with a WARNING at most once per 10 s per peer. Why:
        taken for a copy's, the alien seq was the put's answer: the sender was told
        its message is seq 12345, which no group issued for it, and a WF_CONF put
        waited for that seq's confirm notice instead of its own."""
        self._peer_lines.refused(
            "alien_stored_seq",
            str(peer.group_id),
            f"group {peer.group_id} answered message {entry.seq} stored under seq "
            f"{stored_seq}, though it has no idempotency key (no copy of another): "
            "answered under its own seq",
        )
        return entry.seq

    def _forget(self, peer: PeerState, seq: int) -> None:
        """The peer may forget the dedupe key of `seq`: sent with the link's next flush."""
        peer.forgets_due.append(seq)
        if peer.link is not None:
            peer.link.poke()

    def _stored_by_peer(self, peer: PeerState, entry: Entry, status: int, seq: int) -> None:
        """A keyed recoverable put the peer stored directly (as `seq`): a copy put while
        the link is down is answered with `seq` (mrs.group.saf_keys `delivered`)."""
        if status != Status.STORED or not entry.headers:
            return
        if (key := saf_key(entry)) is not None:
            peer.saf_keys.stored_by_peer(key, seq, self.ctx.clock_ns())

    def link_up(self, peer_id: int, link: LinkPort) -> None:
        peer = self.peers[peer_id]
        peer.link = link  # the link logs the line (mrs.group.link_session `up`)
        self.ack_outbox.link_up(peer_id)
        self.receipts.link_up(peer_id, link)

    def link_down(self, peer_id: int) -> None:
        self.peers[peer_id].link = None  # the link logs the WARNING, with why
        for _ in range(self.peers.room.satisfied(peer_id)):  # its drain restarts anyway
            self.peers.dqf_freed()


QUEUE_REFUSALS: dict[Status, str] = {
    Status.NO_DQF: "it has no such queue, or no DQF for it",
    Status.NOSUCHQUEUE: "it has no such queue",
    Status.EXCEEDQUOTA: "that queue is full (messages_max or queue_bytes_max)",
    Status.NOTACTIVE: "that queue is temporary and nobody is attached to it",
}
"""A peer's refusals of one queue, not of every put (`Outbound._peer_refused`)."""


def _waits_with_first_copy(
    peer: PeerState, entry: Entry, reply: PutReply, first_seq: int, start: bool
) -> bool:
    """Whether a WF_CONF copy of message `first_seq` (same idempotency key) now waits
    for the peer's confirm notice of it beside the first copy's sender, answered with
    it as that sender is. `start`: the notice is sure to come (the first copy waits in
    this group's SAF), so the wait is begun if nobody waits yet; else the copy joins
    only a wait begun by the first copy's put, which ends at that notice (no waiter
    left: confirmed already, or a run that ended; answered now). False for any other
    mode, and beyond DEDUPE_WAITERS_MAX copies. Why: a copy sent straight over the
    link was answered STORED as soon as the peer deduped it, so a WF_CONF put re-sent
    after a TIMEOUT returned before the receiver confirmed. A copy that asked to hear
    only when stored (a client SAF drain, `PutReply.stored_reply`) waits for nothing:
    its drain could not end before the receiver confirmed (mrs.group.intake `_copy`)."""
    mode = entry.delivery
    if mode.interest_point is not InterestPoint.CONF or mode.notification is not Notification.WF:
        return False
    if reply.stored_reply:
        return False
    reporter = reply.reporter(first_seq)
    waiting = peer.waiters.get(first_seq)
    if isinstance(waiting, Reporters):
        if len(waiting.reporters) > DEDUPE_WAITERS_MAX:
            return False
        waiting.reporters.append(reporter)
        return True
    if waiting is None and not start:
        return False
    reporters = [reporter] if waiting is None else [waiting, reporter]
    peer.wait_for_notice(first_seq, Reporters(reporters))
    return True
