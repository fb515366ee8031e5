"""Messages between groups, without sockets: where a remote put goes, the SAF backlog,
what arrives over a link, and the notices that travel back.

The rules (MessageQ MRS, DESIGN.md §2):
- DQF/CONF modes go straight over the link when it is up and the target group has no
  SAF backlog; the peer stores them in its DQF and answers once durable.
- SAF modes, and every recoverable put to a group whose SAF backlog is not empty
  (SAF_FORCED), are stored in the local SAF first; the link drains the SAF in seq
  order (FIFO per target group) and deletes a record only when the peer has it.
- A link that is down makes the put undeliverable (LINK_DOWN): its UMA runs, and UMA
  SAF stores it in the local SAF (SAF_SUCCESS). A recoverable message in flight when
  the link drops goes to the SAF (SAF_FORCED) and is resent: the peer may have it.
- The receiving group dedupes by (origin group, seq), so a message resent after a
  link drop is stored once. CONF confirms travel back as durable notices.
- The SAF drain is ordered: the receiver stores the messages of a transfer that fit,
  in order, and refuses the first one it cannot store and every later one (LINK_DOWN)
  until the sender resyncs and resends from the refused one (channel rules: later
  messages never overtake a stuck one). A direct message stands alone: its refusal
  takes its own UMA and holds nothing up. A drain refused DQF_FULL waits for room
  (`mrs.drain_room`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import msgpack

from journals import (
    CorruptRecord,
    Journal,
    JournalError,
    JournalFullError,
    Record,
    WriteBatch,
    decode_record,
    group_key,
    split_key,
)
from mrs.ack_waits import AckOutbox, AckWaits, RecentAcks
from mrs.drain_room import DqfRoom
from mrs.errors import ProtocolError
from mrs.idempotency import scoped_key
from mrs.model import MRS_ACK_TYPE, MRS_CLASS, Address, DeliveryMode, Psb, Status
from mrs.quarantine import PoisonTransfer, quarantine_batch, record_problem, transfer_problem
from mrs.receipts import Receipts
from mrs.records import entry_from_record, idempotency_key, record_from_entry

if TYPE_CHECKING:
    from mrs.group import Group, PutReply
    from mrs.queues import Entry

log = logging.getLogger("mrs.forwarding")

TRANSFER_FIELDS = (
    "seq", "target_queue", "source_group", "source_queue", "body", "msg_class", "msg_type",
    "priority", "delivery", "uma", "correlation_id", "put_time_ns", "headers", "ordered",
)  # fmt: skip
PERMANENT_REFUSALS = frozenset(
    {Status.NO_DQF, Status.NOSUCHQUEUE, Status.MSGTOOBIG, Status.BADPARAM, Status.KEY_REUSED}
)
"""Refusals that no retry will cure: the channel rules send these to the DLQ."""
RECEIVER_DEAD_LETTERED = frozenset({Status.NO_DQF, Status.NOSUCHQUEUE})
"""A SAF-drained message the receiving group refuses for these goes to the receiving
group's DLQ ("receiver channels place undelivered messages to the local DLQ") and is
answered DLQ_SUCCESS; the sender's own refusals (too big for the link, poison) and a
failed receiver DLQ put stay with the sender's channel rules."""
LINK_LOST = -1
"""Result given to a message in flight when its link drops before the answer."""

Result = Callable[[int, int], None]
"""on_result(status, stored_seq) for one message sent over a link."""


class LinkPort(Protocol):
    """What a group needs of an up link (implemented by `mrs.links.PeerLink`)."""

    def send_message(self, fields: list, on_result: Result) -> None: ...

    def poke(self) -> None: ...

    def resend_saf(self) -> None: ...

    def send_notices(self, notices: list, answered: Callable[[], None] | None = None) -> None: ...


class Inbound(Protocol):
    """Per-connection state of what a peer sends (kept by `mrs.links.PeerLink`)."""

    inbound_failed_at: int | None
    """Ordinal of the first ordered message of this connection that failed."""
    inbound_ordinal: int
    """Ordered messages received on this connection so far."""


class TransferError(ProtocolError, ValueError):
    """A peer sent a transfer that does not decode: the link is broken."""


@dataclass(eq=False)
class PeerState:
    group_id: int
    link: LinkPort | None = None
    saf_backlog: int = 0
    """SAF records for this group, committed or being committed."""
    waiters: dict[int, Callable[[str, int], None]] = field(default_factory=dict)
    """seq -> what to do when the peer reports the message confirmed / got."""
    notices_pending: int = 0
    deleting: set[bytes] = field(default_factory=set)
    """SAF keys whose deletion is being committed: neither resent nor deleted again."""


@dataclass(eq=False)
class DrainAnswer:
    """What the peer's answer to one SAF transfer means for the drain."""

    restart: bool = False
    """Something was not stored: the peer refuses the rest until a resync, so the
    drain starts again from its oldest record."""
    retry: bool = False
    """...after a backoff (RETRY), for the stuck message below."""
    stuck_seq: int = 0
    stuck_status: int = 0
    reason: str = ""


@dataclass(eq=False)
class Forwarding:
    group: Group
    peers: dict[int, PeerState] = field(default_factory=dict)
    saf_count: int = 0
    room: DqfRoom = field(default_factory=DqfRoom)
    """Receiving side: slots of this group's DQF held for other groups' drains."""
    _room_refused_at: dict[int, int] = field(default_factory=dict)
    ack_waits: AckWaits | None = None
    """Sending side: MRS_ACKs owed for AK_CONF puts to other groups (journaled)."""
    ack_outbox: AckOutbox | None = None
    """MRS_ACKs on their way to other groups' queues (journaled until answered)."""
    recent_acks: RecentAcks = field(default_factory=RecentAcks)
    """Receiving side: MRS_ACKs other groups sent here, so a resent one is dropped."""
    receipts: Receipts = field(default_factory=Receipts)
    """Receiving side: DEQ/ACK notices of other groups' messages, kept until answered."""

    def __post_init__(self) -> None:
        self.ack_waits = AckWaits(self.group)
        self.ack_outbox = AckOutbox(self.group)
        for peer_id in self.group.config.links_to():
            self.peers[peer_id] = PeerState(peer_id)

    # ------------------------------------------------------------------ start-up
    def recover(self) -> None:
        """Count each target group's SAF backlog and the notices still to send."""
        store = self.group.store
        for key, item in store.scan(Journal.SAF):
            peer_group, _seq = split_key(key)
            self.saf_count += 1
            if isinstance(item, CorruptRecord):
                self.group.corrupt.append(str(item))
                log.error("%s; left in place, not forwarded", item)
                continue
            peer = self.peers.get(peer_group)
            if peer is None:
                log.warning(
                    "SAF holds messages for group %s, which is no longer linked", peer_group
                )
                continue
            peer.saf_backlog += 1
        for key, _ in store.raw_items(Journal.NOTICES):
            peer = self.peers.get(split_key(key)[0])
            if peer is not None:
                peer.notices_pending += 1
        for peer in self.peers.values():
            if peer.saf_backlog:
                log.info("SAF backlog for group %d: %d messages", peer.group_id, peer.saf_backlog)
        self.ack_outbox.recover()

    # ------------------------------------------------------------------ sending side
    def put(self, entry: Entry, reply: PutReply) -> None:
        peer = self.peers.get(entry.target.group)
        if peer is None:
            self.group.undeliverable(
                entry,
                reply,
                Status.LINK_DOWN,
                f"group {entry.target.group} is not linked to group {self.group.config.id}",
            )
            return
        limit = self.group.bus.group(peer.group_id).limits.message_bytes_max
        if len(entry.body) > limit:
            self.group.undeliverable(
                entry,
                reply,
                Status.MSGTOOBIG,
                f"body of {len(entry.body)} bytes exceeds group {peer.group_id}'s "
                f"message_bytes_max {limit}",
            )
            return
        mode = entry.delivery
        if mode.recoverable and (mode.interest_point == "SAF" or peer.saf_backlog > 0):
            reached = Status.STORED if mode.interest_point == "SAF" else Status.SAF_FORCED
            self._put_via_saf(peer, entry, reply, reached)
        elif peer.link is not None:
            self._send_direct(peer, entry, reply)
        else:
            self.group.undeliverable(
                entry, reply, Status.LINK_DOWN, f"link to group {peer.group_id} is down"
            )

    def _put_via_saf(self, peer: PeerState, entry: Entry, reply: PutReply, reached: Status) -> None:
        if entry.delivery.interest_point == "CONF":
            peer.waiters[entry.seq] = _confirmed_reporter(entry, reply)
            self._owe_ack(entry, reply)

        def stored(error: JournalError | None) -> None:
            if error is not None:
                peer.waiters.pop(entry.seq, None)
                cause = (
                    Status.MRS_RES_EXH
                    if isinstance(error, JournalFullError)
                    else Status.SAF_DEVICE_FAIL
                )
                self.group.undeliverable(entry, reply, cause, str(error))
            elif entry.delivery.interest_point != "CONF":
                reply.report(Psb(Status.SUCCESS, reached, entry.seq, Status.NO_UMA))
            else:
                reply.stored(Psb(Status.SUCCESS, reached, entry.seq, Status.NO_UMA))

        self.store_in_saf(entry, stored)

    def put_owing_ack(
        self, entry: Entry, reply: PutReply, answer: Callable[[int, Status | None], None]
    ) -> None:
        """AK_CONF to another group: journal the MRS_ACK owed (mrs.ack_waits) before the
        put is answered and before the message leaves, so no restart of this group
        loses it. `answer(seq, None)` accepts the put; `answer(seq, status)` refuses it."""

        def journaled(error: JournalError | None) -> None:
            if error is not None:
                full = isinstance(error, JournalFullError)
                answer(entry.seq, Status.MRS_RES_EXH if full else Status.SAF_DEVICE_FAIL)
                return
            answer(entry.seq, None)
            reply.on_done = lambda: self.ack_waits.done(entry.seq)  # whatever its outcome
            self.put(entry, reply)

        self.ack_waits.journal(entry.seq, reply.response_queue, journaled)

    def _owe_ack(self, entry: Entry, reply: PutReply) -> None:
        """AK_CONF: once its outcome is reported, forget the MRS_ACK journaled as owed."""
        if reply.mode.notification != "AK" or reply.done:
            return
        seq = entry.seq
        reply.on_done = lambda: self.ack_waits.done(seq)

    def store_in_saf(self, entry: Entry, done: Callable[[JournalError | None], None]) -> None:
        """Journal an entry in the SAF for its target group; `done(error)` when durable."""
        peer = self.peers[entry.target.group]
        limit = self.group.limits.saf_messages_max
        if self.saf_count >= limit:
            done(JournalFullError(f"SAF holds saf_messages_max={limit}"))
            return
        reserve = self.group.reserve
        if reserve is not None and (full := reserve.accepts(len(entry.body or b""))):
            done(JournalFullError(full))
            return
        self.saf_count += 1
        peer.saf_backlog += 1
        record = record_from_entry(entry, written_time_ns=self.group.clock_ns())
        batch = WriteBatch.empty().put_record(
            Journal.SAF, group_key(peer.group_id, entry.seq), record
        )

        def stored(error: JournalError | None) -> None:
            if error is not None:
                self.saf_count -= 1
                peer.saf_backlog -= 1
            elif peer.link is not None:
                peer.link.poke()
            done(error)

        self.group.writer.submit(batch, stored)

    def _send_direct(self, peer: PeerState, entry: Entry, reply: PutReply) -> None:
        waits_for_receiver = entry.delivery.interest_point in ("CONF", "DEQ", "ACK")
        if waits_for_receiver:
            # Registered before sending: the peer's notice can overtake its LinkAck.
            peer.waiters[entry.seq] = _confirmed_reporter(entry, reply)
            if entry.delivery.interest_point == "CONF":
                self._owe_ack(entry, reply)

        def on_result(status: int, stored_seq: int) -> None:
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
                    else f"group {peer.group_id} answered {status}"
                )
                self.group.undeliverable(entry, reply, cause, reason)
            elif not waits_for_receiver:
                reply.report(Psb(Status.SUCCESS, Status(status), stored_seq, Status.NO_UMA))
            elif stored_seq != entry.seq:  # a duplicate of a message stored before
                peer.waiters.pop(entry.seq, None)
                reply.report(Psb(Status.SUCCESS, Status.STORED, stored_seq, Status.NO_UMA))
            elif entry.delivery.recoverable:
                reply.stored(Psb(Status.SUCCESS, Status(status), stored_seq, Status.NO_UMA))

        peer.link.send_message(transfer_fields(entry), on_result)

    # ------------------------------------------------------------------ SAF drain
    def saf_batch(
        self, peer_id: int, after_key: bytes | None, count_max: int, bytes_max: int = 1 << 20
    ) -> tuple[list[tuple[bytes, list]], bytes | None]:
        """Up to count_max SAF records for a peer after `after_key`, in seq order, as
        (key, transfer fields), and the last key looked at (corrupt records are
        reported and skipped, never forwarded)."""
        prefix = group_key(peer_id, 0)[:4]
        batch: list[tuple[bytes, list]] = []
        last_key = after_key
        for key, value in self.group.store.items_after(
            Journal.SAF, prefix, after_key, count_max, bytes_max
        ):
            last_key = key
            if key in self.peers[peer_id].deleting:
                continue
            try:
                record = _decode(value, key)
            except CorruptRecord as corrupt:
                if str(corrupt) not in self.group.corrupt:
                    self.group.corrupt.append(str(corrupt))
                    log.error("%s; left in place, not forwarded", corrupt)
                continue
            if (problem := record_problem(record)) is not None:
                self._quarantine_saf(peer_id, key, record, problem)
                continue
            batch.append((key, transfer_fields(entry_from_record(record), ordered=True)))
        return batch, last_key

    def _quarantine_saf(self, peer_id: int, key: bytes, record: Record, problem: str) -> None:
        """A SAF record no peer could accept (e.g. a delivery mode that does not exist)
        moves to the DLJ with its reason, instead of blocking the drain or vanishing."""
        peer = self.peers[peer_id]
        peer.deleting.add(key)
        batch = quarantine_batch(record, problem).delete(Journal.SAF, key)

        def done(error: JournalError | None) -> None:
            peer.deleting.discard(key)
            if error is not None:
                log.error("SAF message %d could not be quarantined: %s", record.seq, error)
                return
            self.saf_count -= 1
            peer.saf_backlog -= 1
            self.group.dlj_count += 1
            self.group.quarantined += 1
            log.error(
                "SAF message %d for group %d quarantined to the DLJ: %s",
                record.seq,
                peer_id,
                problem,
            )
            if peer.link is not None:
                peer.link.poke()

        self.group.writer.submit(batch, done)

    def saf_answered(
        self,
        peer_id: int,
        answers: list[tuple[bytes, int]],
        forgettable: Callable[[list[int]], None] = lambda seqs: None,
    ) -> DrainAnswer:
        """The peer answered SAF records. Stored ones are deleted from the SAF. A
        permanent refusal (unknown queue, too big) follows the channel rules: the
        message moves to the local DLQ with a dead-letter header; if that put fails
        (no DLQ, DLQ full) it stays in the SAF and the link goes into RETRY. A passing
        refusal (peer's DQF full, its disk failing) also keeps it, in RETRY. LINK_DOWN
        (refused behind an earlier failure) keeps a record for the restarted drain."""
        peer = self.peers[peer_id]
        batch = WriteBatch.empty()
        outcome = DrainAnswer()
        stored: list[int] = []
        for key, status in answers:
            if status == LINK_LOST or key in peer.deleting:
                continue
            if status == Status.STORED:
                batch.delete(Journal.SAF, key)
                stored.append(split_key(key)[1])
                continue
            if status == Status.DLQ_SUCCESS:  # the receiver dead-lettered it: done here
                batch.delete(Journal.SAF, key)
                continue
            outcome.restart = True
            if status == Status.LINK_DOWN:
                continue
            if status in PERMANENT_REFUSALS and self._saf_to_dead_letter_queue(key, status):
                batch.delete(Journal.SAF, key)
                continue
            if not outcome.retry:
                outcome.retry = True
                outcome.stuck_seq, outcome.stuck_status = split_key(key)[1], status
                outcome.reason = _refusal_reason(peer_id, status)
        if batch:
            deleted = len(batch.deletes)
            keys = [key for _, key in batch.deletes]
            peer.deleting.update(keys)

            def done(error: JournalError | None) -> None:
                peer.deleting.difference_update(keys)
                if error is None:
                    self.saf_count -= deleted
                    peer.saf_backlog -= deleted
                    forgettable(stored)
                else:
                    log.error("could not delete %d drained SAF records: %s", deleted, error)
                if peer.link is not None and error is not None:
                    peer.link.resend_saf()  # the peer answers STORED again; delete again
                elif peer.link is not None:
                    peer.link.poke()

            self.group.writer.submit(batch, done)
        return outcome

    def _saf_to_dead_letter_queue(self, key: bytes, status: int) -> bool:
        value = self.group.store.get_raw(Journal.SAF, key)
        try:
            record = _decode(value, key)
        except CorruptRecord as corrupt:
            log.error("%s: refused by the peer and unreadable; left in the SAF", corrupt)
            return False
        entry = entry_from_record(record)
        entry.journaled = False
        moved = self.group.put_on_dead_letter_queue(
            entry,
            Status(status),
            f"group {record.target_group} refused it over the link",
        )
        log.warning(
            "group %d refused SAF message %d (%s): %s",
            record.target_group,
            record.seq,
            status_name(status),
            "moved to the DLQ" if moved else "DLQ put failed, link goes into RETRY",
        )
        return moved

    # ------------------------------------------------------------------ receiving side
    def accept_transfer(
        self, peer_id: int, messages: list, respond: Callable[[list], None], inbound: Inbound
    ) -> None:
        """Store/queue what a peer sent; `respond` gets one [seq, status, stored_seq]
        per message, in order, once every recoverable one is durable.

        FIFO across failures: once an ordered (SAF drain) recoverable message of this
        connection could not be stored, every later ordered one is answered LINK_DOWN
        without being stored, until the peer says it starts over ("resync"), so
        nothing overtakes the message that failed. The ordered messages before it
        are stored (a transfer does not need room for all of its messages)."""
        decoded = [self._entry_or_poison(peer_id, fields) for fields in messages]
        entries = [entry for entry, _ in decoded]
        results: list = [None] * len(entries)
        remaining = [len(entries)]
        all_ordered_stored = [any(ordered for _, ordered in decoded)]
        first_ordinal = inbound.inbound_ordinal

        def answer(index: int, seq: int, ordinal: int | None) -> Callable[[Status, int, str], None]:
            def outcome(status: Status, stored_seq: int, reason: str) -> None:
                if ordinal is not None and status not in (Status.STORED, Status.DLQ_SUCCESS):
                    all_ordered_stored[0] = False
                    failed_at = inbound.inbound_failed_at
                    if failed_at is None or ordinal < failed_at:
                        inbound.inbound_failed_at = ordinal
                    if status == Status.DQF_FULL:
                        self.room.refused(peer_id)
                        self._room_refused_at[peer_id] = ordinal
                results[index] = [seq, int(status), stored_seq]
                remaining[0] -= 1
                if remaining[0] == 0:
                    if all_ordered_stored[0]:
                        self._drain_satisfied(peer_id, first_ordinal)
                    respond(results)

            return outcome

        if not entries:
            respond([])
        for index, (entry, ordered) in enumerate(decoded):
            ordinal = None
            poison = isinstance(entry, PoisonTransfer)
            if ordered and (poison or entry.delivery.recoverable):
                ordinal = inbound.inbound_ordinal
                inbound.inbound_ordinal += 1
            outcome = answer(index, entry.seq, ordinal)
            if ordinal is not None and not poison:
                outcome = self._dead_letter_here(peer_id, entry, outcome)
            if ordinal is not None and inbound.inbound_failed_at is not None:
                outcome(Status.LINK_DOWN, entry.seq, "an earlier message of this link failed")
            elif poison:
                log.error(
                    "group %d sent message %d that no client could put (%s): refused BADPARAM",
                    peer_id,
                    entry.seq,
                    entry.problem,
                )
                outcome(Status.BADPARAM, entry.seq, entry.problem)
            elif len(entry.body) > self.group.limits.message_bytes_max:
                # This group's own limit, whatever the sender checked (e.g. a message
                # its SAF UMA stored): a permanent refusal, dead-lettered by the sender.
                outcome(Status.MSGTOOBIG, entry.seq, "body exceeds message_bytes_max")
            elif entry.delivery.recoverable:
                keys = [f"origin:{peer_id}:{entry.seq}"]
                if (key := idempotency_key(entry.headers)) is not None:
                    keys.append(scoped_key(entry.source, entry.target, key))
                if ordinal is None:
                    self.group.store_in_dqf(entry, keys, outcome)
                    continue
                self.group.store_in_dqf(
                    entry,
                    keys,
                    outcome,
                    stream=inbound,
                    guard=lambda ordinal=ordinal: (
                        inbound.inbound_failed_at is None or ordinal < inbound.inbound_failed_at
                    ),
                )
            else:
                self._accept_memory(peer_id, entry, outcome)

    def _dead_letter_here(
        self, peer_id: int, entry: Entry, outcome: Callable[[Status, int, str], None]
    ) -> Callable[[Status, int, str], None]:
        """Channel rules, receiving side: a SAF-drained message this group refuses for
        good goes to this group's DLQ, answered DLQ_SUCCESS once it is there."""

        def refused_here(status: Status, stored_seq: int, reason: str) -> None:
            if status not in RECEIVER_DEAD_LETTERED:
                outcome(status, stored_seq, reason)
                return

            def moved(done: bool) -> None:
                outcome(Status.DLQ_SUCCESS if done else status, stored_seq, reason)

            text = f"group {self.group.config.id} refused it from group {peer_id}: {reason}"
            self.group.put_on_dead_letter_queue(entry, status, text, moved)

        return refused_here

    # ------------------------------------------------------------------ DQF room
    def dqf_freed(self) -> None:
        """A DQF slot of this group freed: hold it for a waiting drain and tell it."""
        peer_id = self.room.freed(self.group.dqf_count, self.group.limits.dqf_messages_max)
        if peer_id is None:
            return
        peer = self.peers.get(peer_id)
        if peer is not None and peer.link is not None:
            peer.link.send_notices([["room", 0, 0]])

    def _drain_satisfied(self, peer_id: int, first_ordinal: int) -> None:
        """A transfer sent after the drain's last DQF_FULL stored everything: the
        drain no longer waits; its unused held slots go to the next one."""
        if self.room.held.get(peer_id) is None:
            return
        if first_ordinal <= self._room_refused_at.get(peer_id, -1):
            return  # sent before the refusal: says nothing about room now
        for _ in range(self.room.satisfied(peer_id)):
            self.dqf_freed()

    def _accept_memory(
        self, peer_id: int, entry: Entry, outcome: Callable[[Status, int, str], None]
    ) -> None:
        is_ack = entry.msg_class == MRS_CLASS and entry.msg_type == MRS_ACK_TYPE
        if is_ack and not self.recent_acks.first_time(peer_id, entry.seq):
            outcome(Status.ENQUEUED, entry.seq, "")  # resent after a link drop: queued once
            return
        point = entry.delivery.interest_point
        if point == "DEQ":
            entry.on_dequeue = lambda _e: self.notify_now(peer_id, "deq", entry.seq)
        elif point == "ACK":
            entry.on_confirm = lambda _e: self.notify_now(peer_id, "ack", entry.seq)
        status, reason = self.group.enqueue_in_memory(entry)
        outcome(status, entry.seq, reason)

    def _entry_or_poison(self, peer_id: int, fields: object) -> tuple[Entry | PoisonTransfer, bool]:
        """The entry for a transferred message, or why a client could not have put it
        (refused alone); a message with no usable seq breaks the link (TransferError)."""
        try:
            return self._entry_from_fields(peer_id, fields)
        except PoisonTransfer as poison:
            return poison, fields[-1] is True

    def _entry_from_fields(self, peer_id: int, fields: object) -> tuple[Entry, bool]:
        from mrs.queues import Entry

        if not isinstance(fields, list) or len(fields) != len(TRANSFER_FIELDS):
            raise TransferError(
                f"a transferred message must be a list of {len(TRANSFER_FIELDS)} fields"
            )
        values = dict(zip(TRANSFER_FIELDS, fields, strict=True))
        if type(values["seq"]) is not int or not 0 <= values["seq"] < 1 << 64:
            raise TransferError("bad transferred message: seq must be an int in 0..2**64-1")
        if (problem := transfer_problem(values)) is not None:
            raise PoisonTransfer(values["seq"], problem)
        try:
            mode = DeliveryMode(values["delivery"])
            entry = Entry(
                seq=values["seq"],
                body=values["body"],
                source=Address(values["source_group"], values["source_queue"]),
                target=Address(self.group.config.id, values["target_queue"]),
                delivery=mode,
                uma=values["uma"],
                msg_class=values["msg_class"],
                msg_type=values["msg_type"],
                priority=values["priority"],
                correlation_id=values["correlation_id"],
                put_time_ns=values["put_time_ns"],
                headers=values["headers"],
                dead_letter_header=(values["headers"] or {}).get("dead_letter_header"),
                origin_group=peer_id if mode.recoverable else None,
            )
        except (ValueError, TypeError) as error:
            raise TransferError(f"bad transferred message: {error}") from None
        if not isinstance(entry.body, bytes) or not isinstance(entry.seq, int):
            raise TransferError("bad transferred message: body must be bytes, seq an int")
        return entry, values["ordered"] is True

    # ------------------------------------------------------------------ notices
    def add_notice(self, batch: WriteBatch, peer_id: int, kind: str, seq: int) -> bool:
        """Add a durable notice for the origin group to a confirm's batch; call
        `notice_committed` once that batch is durable."""
        if peer_id not in self.peers:
            return False
        batch.put_raw(
            Journal.NOTICES,
            group_key(peer_id, seq),
            msgpack.packb([kind, seq, int(Status.SUCCESS)]),
        )
        return True

    def notice_committed(self, peer_id: int) -> None:
        peer = self.peers[peer_id]
        peer.notices_pending += 1
        if peer.link is not None:
            peer.link.poke()

    def notify_now(self, peer_id: int, kind: str, seq: int) -> None:
        """A notice for a nonrecoverable DEQ/ACK message: kept until the peer answers
        it, sent again when the link comes back (mrs.receipts)."""
        peer = self.peers.get(peer_id)
        if peer is not None:
            self.receipts.add(peer_id, kind, seq, peer.link)

    def pending_notices(self, peer_id: int, count_max: int) -> list[tuple[bytes, list]]:
        prefix = group_key(peer_id, 0)[:4]
        notices = []
        for key, value in self.group.store.raw_items(Journal.NOTICES):
            if key.startswith(prefix):
                notices.append((key, msgpack.unpackb(value)))
                if len(notices) >= count_max:
                    break
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

        self.group.writer.submit(batch, done)

    def accept_notices(self, peer_id: int, notices: list, inbound: Inbound) -> list:
        """News from a peer about messages this group sent: report to the waiters."""
        peer = self.peers[peer_id]
        results = []
        forget = WriteBatch.empty()
        for notice in notices:
            if not isinstance(notice, list) or len(notice) != 3:
                raise TransferError("a notice must be [kind, seq, status]")
            kind, seq, status = notice
            if kind == "resync":
                inbound.inbound_failed_at = None
                results.append([seq, int(Status.SUCCESS), seq])
                continue
            if kind == "room":
                if peer.link is not None and hasattr(peer.link, "room"):
                    peer.link.room()
                results.append([seq, int(Status.SUCCESS), seq])
                continue
            if kind == "forget":
                forget.delete(Journal.DEDUPE, f"origin:{peer_id}:{seq}".encode())
                results.append([seq, int(Status.SUCCESS), seq])
                continue
            waiter = peer.waiters.pop(seq, None)
            if waiter is not None:
                waiter(kind, status)
            elif kind == "conf" and (response_queue := self.ack_waits.owed_to(seq)) is not None:
                # this group restarted since the AK_CONF put: the journal knows where
                self.group.send_mrs_ack(
                    response_queue, Psb(Status.SUCCESS, Status.SUCCESS, seq, Status.NO_UMA)
                )
                self.ack_waits.done(seq)
            results.append([seq, int(Status.SUCCESS), seq])
        if forget:
            self.group.writer.submit(forget, lambda error: None)  # best effort: a kept key
        return results

    # ------------------------------------------------------------------ link state
    def link_up(self, peer_id: int, link: LinkPort) -> None:
        peer = self.peers[peer_id]
        peer.link = link
        log.info("link to group %d up (SAF backlog %d)", peer_id, peer.saf_backlog)
        self.ack_outbox.link_up(peer_id)
        self.receipts.link_up(peer_id, link)

    def link_down(self, peer_id: int) -> None:
        self.peers[peer_id].link = None
        log.warning("link to group %d down", peer_id)
        for _ in range(self.room.satisfied(peer_id)):  # its drain restarts anyway
            self.dqf_freed()

    def status_info(self) -> dict:
        return {
            str(peer.group_id): {
                "state": "up" if peer.link is not None else "down",
                "saf_backlog": peer.saf_backlog,
                "notices_pending": peer.notices_pending,
                "mrs_acks_owed": self.ack_outbox.owed.get(peer.group_id, 0),
                "receipts_pending": self.receipts.count(peer.group_id),
                **(
                    peer.link.status_info()
                    if peer.link is not None and hasattr(peer.link, "status_info")
                    else {}
                ),
            }
            for peer in self.peers.values()
        }


def transfer_fields(entry: Entry, ordered: bool = False) -> list:
    """An entry as sent over a link; `ordered` for the SAF drain (see accept_transfer)."""
    return [
        entry.seq,
        entry.target.queue,
        entry.source.group,
        entry.source.queue,
        entry.body,
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(entry.uma),
        entry.correlation_id,
        entry.put_time_ns,
        entry.headers,
        ordered,
    ]


def _decode(value: bytes | None, key: bytes) -> Record:
    if value is None:
        raise CorruptRecord("saf", key, "record vanished")
    return decode_record(value, "saf", key)


def _confirmed_reporter(entry: Entry, reply: PutReply) -> Callable[[str, int], None]:
    def report(kind: str, status: int) -> None:
        reply.report(Psb(Status.SUCCESS, Status.SUCCESS, entry.seq, Status.NO_UMA))

    return report


def _refusal_reason(peer_id: int, status: int) -> str:
    """Why a drain waits, for `mrs status`."""
    if status == Status.DQF_FULL:
        return f"group {peer_id}'s DQF is full: waiting for its receivers to confirm"
    if status in PERMANENT_REFUSALS:
        return (
            f"group {peer_id} refused it ({status_name(status)}) and this group's DLQ "
            "could not take it (no DLQ, or DLQ full)"
        )
    return f"group {peer_id} could not store it ({status_name(status)})"


def status_name(status: int) -> str:
    if status == LINK_LOST:
        return "LINK_LOST"
    try:
        return Status(status).name
    except ValueError:
        return str(status)
