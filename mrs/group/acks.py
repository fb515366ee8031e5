"""Room: MRS_ACKs a group still owes, journaled so that none is lost when the group restarts:
the AK_CONF waits for other groups' confirms (`AckWaits`) and the MRS_ACKs on their way
to response queues in other groups (`AckOutbox`, and `RecentAcks` on the receiving side).

Why: an AK_CONF put returns at once; its MRS_ACK is due when the remote receiver
confirms, which may be after this group restarted. The remote group's confirm notice
travels durably, but the in-memory waiter that knew the response queue is gone after
a restart. So the response queue is journaled (META, key "ackwait:" + seq) when the
put is made, before the put is answered and before the message leaves, and deleted
when the acknowledgement is sent (or the put ends otherwise);
a confirm notice with no waiter in memory finds it here. A notice resent after a link
drop finds nothing (deleted, or being deleted), so the MRS_ACK is sent once. The record
names the group the message went to, and only that group's notice settles it: a peer
is not trusted for being any other group (docs/security.md).

The message itself is journaled beside its debt (META, "ackmsg:" + seq, the record a
SAF would hold), in the same batch. Why: the put is answered once the debt is durable,
and a message sent straight over the link was then in memory only until the peer
stored it: a SIGKILL of this group in that moment lost it, and its debt waited for a
confirm that never came. The copy goes when the message is safe elsewhere: in the
batch that writes its SAF record, once the peer answered it STORED (and only then is
the peer told it may forget its (origin, seq) dedupe key: `PeerState.forgets_held`),
or with its debt. A copy found at start-up is moved into the SAF with its original
seq (mrs.group.outbound `recover`), and the peer's dedupe drops it if it stored it.
"""

from __future__ import annotations

import logging
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import msgpack

from journals import Journal, JournalError, Record, WriteBatch
from mrs.core.refusals import RefusalLog
from mrs.group.context import GroupContext
from mrs.group.peers import Peers
from mrs.group.shapes import Entry, mrs_ack_entry, transfer_fields
from mrs.group.transfer import LINK_LOST
from mrs.limits import ACKS_OWED_PER_PEER_MAX as ACKS_OWED_PER_PEER_MAX
from mrs.limits import RECENT_ACKS_MAX as RECENT_ACKS_MAX
from mrs.model import Address, Status

log = logging.getLogger("mrs.ack_waits")

KEY_PREFIX = b"ackwait:"
MESSAGE_PREFIX = b"ackmsg:"
OUT_PREFIX = b"ackout:"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


def ack_wait_key(seq: int) -> bytes:
    return KEY_PREFIX + _U64.pack(seq)


def ack_message_key(seq: int) -> bytes:
    """The META key of the copy of an AK_CONF message to another group (its record)."""
    return MESSAGE_PREFIX + _U64.pack(seq)


@dataclass(eq=False)
class AckWaits:
    ctx: GroupContext
    _deleting: set[int] = field(default_factory=set)
    """Seqs whose MRS_ACK was sent and whose record is being deleted, or could not be
    deleted yet (a failed disk): none is owed again. Why: a confirm notice that comes
    later (a SAF-stored AK_CONF message confirmed after its UMA's MRS_ACK, or a notice
    resent after a link drop) would find the record and send a second MRS_ACK (seed
    1795 of the replicated swarm). A record left behind is deleted again with the next
    one; until then it stays here, so the set is bounded by the records on disk."""
    _undeleted: set[int] = field(default_factory=set)
    """Seqs whose delete failed, deleted again with the next `done`."""
    messages: set[int] = field(default_factory=set)
    """Seqs whose message copy (`ack_message_key`) is on disk, or being written, and
    not yet being deleted."""
    misdirected: RefusalLog = field(init=False)
    """Confirm notices from a group the message was not sent to: one WARNING per
    peer at most every REFUSAL_LOG_INTERVAL_S, with the count of those not shown."""

    def __post_init__(self) -> None:
        self.misdirected = RefusalLog(log, line_format="{message}")

    def journal(
        self,
        seq: int,
        response_queue: Address,
        target_group: int,
        then: Callable[[JournalError | None], None] | None = None,
        message: Record | None = None,
    ) -> None:
        """Remember (durably) that an MRS_ACK for `seq`, put to a queue of group
        `target_group`, is owed to `response_queue`, and keep a copy of the `message`
        with it; `then(error)` once that is durable (the put is answered only then)."""
        value = msgpack.packb([response_queue.group, response_queue.queue, target_group])
        batch = WriteBatch.empty().put_raw(Journal.META, ack_wait_key(seq), value)
        if message is not None:
            batch.put_record(Journal.META, ack_message_key(seq), message)
            self.messages.add(seq)
        report = _log_failure(seq, "journal")

        def journaled(error: JournalError | None) -> None:
            report(error)
            if error is not None:
                self.messages.discard(seq)
            if then is not None:
                then(error)

        self.ctx.writer.submit(batch, journaled)

    def done(self, seq: int) -> None:
        """The MRS_ACK was sent (or the put ended otherwise): forget it."""
        if seq in self._deleting:
            return
        self._deleting.add(seq)
        self.messages.discard(seq)
        seqs = {seq} | self._undeleted
        self._undeleted = set()
        batch = WriteBatch.empty()
        for each in seqs:
            batch.delete(Journal.META, ack_wait_key(each))
            batch.delete(Journal.META, ack_message_key(each))
        report = _log_failure(seq, "delete")

        def deleted(error: JournalError | None) -> None:
            report(error)
            if error is None:
                self._deleting -= seqs
            else:  # still owed to nobody: kept out of `owed_to`, deleted again next time
                self._undeleted |= seqs

        self.ctx.writer.submit(batch, deleted)

    def message_moved(self, batch: WriteBatch, seq: int) -> None:
        """`batch` writes the message's SAF record: its copy goes in the same commit."""
        if seq in self.messages:
            self.messages.discard(seq)
            batch.delete(Journal.META, ack_message_key(seq))

    def drop_copy(self, seq: int, then: Callable[[], None]) -> None:
        """The message's UMA is about to run: delete its copy, and `then()` once that
        commit ended (a failed delete is logged and tried again with its debt's).
        Why first: the copy is resent from the SAF at the next start, so a crash after
        the UMA's outcome was seen (a returned copy read, an MRS_ACK saying
        DISC_SUCCESS) and before the copy's delete was durable both dead-lettered and
        delivered the message, the delivered copy unmarked."""
        self.messages.discard(seq)
        batch = WriteBatch.empty().delete(Journal.META, ack_message_key(seq))
        report = _log_failure(seq, "delete the message copy of")

        def deleted(error: JournalError | None) -> None:
            report(error)
            then()

        self.ctx.writer.submit(batch, deleted)

    def message_delivered(self, seq: int, then: Callable[[], None]) -> None:
        """The peer stored the message: delete its copy; `then()` once that is durable
        (the peer may forget its dedupe key only then). A failed delete leaves the copy,
        resent at the next start and dropped by the peer as one it has."""
        self.messages.discard(seq)
        batch = WriteBatch.empty().delete(Journal.META, ack_message_key(seq))
        report = _log_failure(seq, "delete the message copy of")

        def deleted(error: JournalError | None) -> None:
            report(error)
            if error is None:
                then()

        self.ctx.writer.submit(batch, deleted)

    def owed_to(self, seq: int, peer_id: int | None = None) -> Address | None:
        """The response queue still owed an MRS_ACK for `seq`, or None. The caller sends
        it, then calls `done(seq)`: the MRS_ACK (journaled, for another group's queue)
        is submitted before the record is deleted, so a crash between the two commits
        leaves the record behind, never loses the acknowledgement.

        `peer_id`: the group whose confirm notice asks. None (with one WARNING per
        interval) when the message went to another group: that group's notice is
        still owed the MRS_ACK. Why: group 2 could otherwise have the sender told
        SUCCESS for a put to group 3 its receiver never confirmed. A record of an
        earlier build names no group and is settled by any peer's notice, as then."""
        if seq in self._deleting:
            return None
        value = self.ctx.store.get_raw(Journal.META, ack_wait_key(seq))
        if value is None:
            return None
        group, queue, *sent_to = msgpack.unpackb(value)
        if peer_id is not None and sent_to and sent_to[0] != peer_id:
            self.misdirected.refused(
                "confirm_notice_group",
                str(peer_id),
                f"group {peer_id} sent a confirm notice for seq {seq}, which this group "
                f"sent to group {sent_to[0]}: no MRS_ACK sent for it (group "
                f"{sent_to[0]}'s confirm notice sends it)",
            )
            return None
        return Address(group, queue)

    def count(self) -> int:
        return sum(
            1 for key, _ in self.ctx.store.raw_items(Journal.META) if key.startswith(KEY_PREFIX)
        )


def _log_failure(seq: int, what: str):
    def report(error: JournalError | None) -> None:
        if error is not None:
            log.error("could not %s the MRS_ACK owed for seq %d: %s", what, seq, error)

    return report


# ---------------------------------------------------------------------- the outbox
def ack_out_key(peer_id: int, ack_seq: int) -> bytes:
    return OUT_PREFIX + _U32.pack(peer_id) + _U64.pack(ack_seq)


@dataclass(eq=False)
class AckOutbox:
    """MRS_ACKs for response queues in other groups, journaled before they leave.

    Why: such an MRS_ACK waits while the link is down, and a restart of this group
    must not lose it. So it is journaled (META, "ackout:" + peer + seq), sent over the
    link once durable and the link is up, and deleted when the peer answered it; one
    whose link dropped before the answer, and every one found at start-up, is sent
    again with the same seq, and the receiving group drops a copy it already queued
    (`RecentAcks`). At most `ACKS_OWED_PER_PEER_MAX` are owed to one peer: beyond that
    an MRS_ACK is refused and logged, as the bound on everything says."""

    ctx: GroupContext
    peers: Peers
    owed: dict[int, int] = field(default_factory=dict)
    """Peer group -> MRS_ACKs journaled (or being journaled) for it and not yet answered."""
    unsent: dict[int, list[Entry]] = field(default_factory=dict)
    """Peer group -> durable MRS_ACKs waiting for the link (sent when it comes up)."""
    lost: RefusalLog = field(init=False)
    """MRS_ACKs lost (the outbox for a peer full, their record not written, or refused
    by the peer: e.g. NOTACTIVE, a temporary queue nobody is attached to): one
    line per peer and cause at most every REFUSAL_LOG_INTERVAL_S, with the count of
    those not shown. Why: a peer group down for long with its outbox full wrote one
    ERROR line per message its AK senders had got, thousands a second."""

    def __post_init__(self) -> None:
        self.lost = RefusalLog(log, level=logging.ERROR, line_format="{message}")

    def recover(self) -> None:
        """Every MRS_ACK still owed after a restart is sent again once its link is up."""
        for key, value in self.ctx.store.raw_items(Journal.META):
            if not key.startswith(OUT_PREFIX):
                continue
            try:
                entry = self._entry(*msgpack.unpackb(value))
            except (ValueError, TypeError) as error:
                log.error("unreadable owed MRS_ACK %r left in place: %s", key, error)
                continue
            peer_id = entry.target.group
            self.owed[peer_id] = self.owed.get(peer_id, 0) + 1
            self.unsent.setdefault(peer_id, []).append(entry)
        if self.owed:
            log.info("MRS_ACKs owed to other groups' queues after restart: %s", self.owed)

    def send(self, ack_seq: int, response_queue: Address, psb_wire: list, put_time_ns: int) -> None:
        """Journal an MRS_ACK for another group's queue; it leaves once durable."""
        peer_id = response_queue.group
        if self.owed.get(peer_id, 0) >= ACKS_OWED_PER_PEER_MAX:
            self.lost.refused(
                "mrs_acks_owed",
                str(peer_id),
                f"MRS_ACK for seq {psb_wire[2]} to {response_queue} lost: "
                f"{ACKS_OWED_PER_PEER_MAX} already owed to group {peer_id}",
            )
            return
        self.owed[peer_id] = self.owed.get(peer_id, 0) + 1
        fields = [ack_seq, response_queue.group, response_queue.queue, psb_wire, put_time_ns]
        batch = WriteBatch.empty().put_raw(
            Journal.META, ack_out_key(peer_id, ack_seq), msgpack.packb(fields)
        )
        entry = self._entry(*fields)

        def journaled(error: JournalError | None) -> None:
            if error is not None:
                self.owed[peer_id] -= 1
                self.lost.refused(
                    "journal",
                    str(peer_id),
                    f"MRS_ACK for seq {psb_wire[2]} to {response_queue} lost: {error}",
                )
                return
            self._go(entry)

        self.ctx.writer.submit(batch, journaled)

    def link_up(self, peer_id: int) -> None:
        for entry in self.unsent.pop(peer_id, []):
            self._go(entry)

    def count(self) -> int:
        return sum(self.owed.values())

    def _go(self, entry: Entry) -> None:
        peer_id = entry.target.group
        peer = self.peers.get(peer_id)
        if peer is None or peer.link is None:
            self.unsent.setdefault(peer_id, []).append(entry)
            return

        def on_result(status: int, _stored_seq: int) -> None:
            if status == LINK_LOST:
                self.unsent.setdefault(peer_id, []).append(entry)  # sent again at link up
                return
            if status < 0:  # lost: said once per peer and status per interval, with a count
                self.lost.refused(
                    f"refused {status}",
                    str(peer_id),
                    f"group {peer_id} refused the MRS_ACK {entry.seq} for {entry.target}: "
                    f"{_status_name(status)}; it is lost",
                )
            self._forget(peer_id, entry.seq)

        peer.link.send_message(transfer_fields(entry), on_result)

    def _forget(self, peer_id: int, ack_seq: int) -> None:
        batch = WriteBatch.empty().delete(Journal.META, ack_out_key(peer_id, ack_seq))

        def deleted(error: JournalError | None) -> None:
            if error is None:
                self.owed[peer_id] -= 1
            else:  # still on disk: sent again after a restart, dropped there as a copy
                log.error("could not forget the MRS_ACK %d sent: %s", ack_seq, error)

        self.ctx.writer.submit(batch, deleted)

    def _entry(
        self, ack_seq: int, group: int, queue: int, psb_wire: list, put_time_ns: int
    ) -> Entry:
        return mrs_ack_entry(
            ack_seq,
            msgpack.packb(psb_wire),
            Address(self.ctx.config.id, 0),
            Address(group, queue),
            put_time_ns,
            False,  # read back from the journal: checked again at delivery
        )


def _status_name(status: int) -> str:
    """A peer's refusal as MessageQ names it (NOTACTIVE: a temporary queue nobody is
    attached to), the number when it names none."""
    try:
        return Status(status).name
    except ValueError:
        return f"status {status}"


@dataclass(eq=False)
class RecentAcks:
    """Receiving side: MRS_ACKs other groups sent here lately, by (origin, seq), so one
    resent after a link drop (its answer was lost) is not queued twice. In memory,
    like the MRS_ACKs themselves: a restart of this group empties both."""

    seen: OrderedDict[tuple[int, int], None] = field(default_factory=OrderedDict)
    """Oldest first. Not a dict: its oldest key, found by `next(iter())` after many
    deletions from the front, costs a scan over their holes (19 µs an MRS_ACK once
    RECENT_ACKS_MAX are remembered, benchmarks/README.md)."""

    def first_time(self, origin_group: int, ack_seq: int) -> bool:
        key = (origin_group, ack_seq)
        if key in self.seen:
            return False
        self.seen[key] = None
        if len(self.seen) > RECENT_ACKS_MAX:
            self.seen.popitem(last=False)  # the oldest
        return True
