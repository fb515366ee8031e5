"""Room: the SAF drain's journal side — read the backlog in order, settle the peer's answers.

The drain is ordered (channel rules): the receiver stores the messages of a transfer
that fit, in order, and refuses the first one it cannot store and every later one
(LINK_DOWN) until the sender resyncs and resends from the refused one, so later
messages never overtake a stuck one. A stored record is deleted here only once the
peer has it; a permanent refusal moves the message to this group's DLQ; anything
else keeps it and puts the drain in RETRY (the link session's backoff).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import trio

from journals import CorruptRecord, Journal, JournalError, Record, WriteBatch, group_key, split_key
from mrs.group.acks import AckWaits
from mrs.group.context import GroupContext
from mrs.group.peers import Peers, PeerState
from mrs.group.quarantine import quarantine_batch, record_problem
from mrs.group.reply import report_waiting_sender
from mrs.group.shapes import entry_from_record, transfer_fields
from mrs.group.transfer import LINK_LOST, PERMANENT_REFUSALS, decode_saf, status_name
from mrs.group.umas import Umas
from mrs.limits import LINK_RETRY_S_MAX, LINK_RETRY_S_MIN, LINK_WINDOW_MESSAGES_MAX
from mrs.model import Psb, Status
from mrs.protocol.link_events import TransferredMessage

log = logging.getLogger("mrs.forwarding")

SEQ_HELD: Final = 0
"""The `stored_seq` of a DQF_FULL answer to a SAF-drained message whose seq the
receiving group holds already under another message (a peer rebuilt and reset counts
its seqs from the start again, mrs.group.inbound): no seq is 0. Room in that DQF does
not help; only the confirm of the message held does, so the drain backs off (RETRY)
instead of asking for room, which the peer would grant at once and the drain spend
resending the message in a tight loop."""


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


def _no_forget(seqs: list[int]) -> None:
    pass


@dataclass(eq=False)
class Drain:
    ctx: GroupContext
    peers: Peers
    umas: Umas
    copy_failed: dict[bytes, tuple[int, float]] = field(default_factory=dict)
    """SAF records whose DLQ copy failed after the journal took it (the commit, not
    a refusal known at once) -> (failures, when the copy may be tried again, trio
    time): until then each refusal of it goes into RETRY (the link's backoff) without
    a copy. Without it a journal that kept failing the copy made the drain resend it
    at the link's round-trip rate, an ERROR line each time. At most
    LINK_WINDOW_MESSAGES_MAX entries (the oldest forgotten: it is tried at once)."""
    ack_waits: AckWaits | None = None
    """The AK_CONF MRS_ACKs this group owes (journaled): a SAF message dead-lettered
    on its way will never be confirmed, so its MRS_ACK is sent when it leaves the SAF."""
    delete_failures: dict[int, int] = field(default_factory=dict)
    """Per peer, the commits deleting drained SAF records that failed in a row: the
    drain starts again only after a backoff (`_delete_failed`)."""

    def saf_batch(
        self, peer_id: int, after_key: bytes | None, count_max: int, bytes_max: int = 1 << 20
    ) -> tuple[list[tuple[bytes, TransferredMessage]], bytes | None]:
        """Up to count_max SAF records for a peer after `after_key`, in seq order, as
        (key, message), and the last key looked at (corrupt records are
        reported and skipped, never forwarded)."""
        prefix = group_key(peer_id, 0)[:4]
        batch: list[tuple[bytes, TransferredMessage]] = []
        last_key = after_key
        deleting = self.peers[peer_id].deleting
        for key, value in self.ctx.store.items_after(
            Journal.SAF, prefix, after_key, count_max, bytes_max
        ):
            last_key = key
            if key in deleting:
                continue
            try:
                record = decode_saf(value, key)
            except CorruptRecord as corrupt:
                self.ctx.report_corrupt(corrupt, "not forwarded", once=True)
                continue
            if (problem := record_problem(record)) is not None:
                self._quarantine_saf(peer_id, key, record, problem)
                continue
            batch.append((key, transfer_fields(entry_from_record(record), ordered=True)))
        return batch, last_key

    def _quarantine_saf(self, peer_id: int, key: bytes, record: Record, problem: str) -> None:
        """A SAF record no peer could accept (e.g. a delivery mode that does not exist)
        moves to the DLJ with its reason, instead of blocking the drain or vanishing."""
        ctx = self.ctx
        peer = self.peers[peer_id]
        peer.deleting.add(key)
        batch = quarantine_batch(record, problem).delete(Journal.SAF, key)

        def done(error: JournalError | None) -> None:
            peer.deleting.discard(key)
            if error is not None:
                log.error("SAF message %d could not be quarantined: %s", record.seq, error)
                return
            ctx.counts.saf_removed(peer)
            peer.saf_keys.forget((record.seq,))
            ctx.counts.dlj_added()
            ctx.quarantined += 1
            log.error(
                "SAF message %d for group %d quarantined to the DLJ: %s",
                record.seq,
                peer_id,
                problem,
            )
            if peer.link is not None:
                peer.link.poke()

        ctx.writer.submit(batch, done)

    def saf_answered(
        self, peer_id: int, answers: list[tuple[bytes, int]], forgettable=_no_forget
    ) -> DrainAnswer:
        """The peer answered SAF records. Stored ones are deleted from the SAF. A
        permanent refusal (unknown queue, too big) follows the channel rules: the
        message moves to the local DLQ with a dead-letter header; if that put fails
        (no DLQ, DLQ full) it stays in the SAF and the link goes into RETRY. A passing
        refusal (peer's DQF full, its disk failing) also keeps it, in RETRY. LINK_DOWN
        (refused behind an earlier failure) keeps a record for the restarted drain.
        `forgettable(seqs)`: the stored ones, once their deletion is durable."""
        peer = self.peers[peer_id]
        batch = WriteBatch.empty()
        moved = WriteBatch.empty()  # records whose DLQ copies are on their way
        moved.stream = object()
        outcome = DrainAnswer()
        stored: list[int] = []
        dead_lettered: list[tuple[int, Status]] = []  # by the receiver, on its DLQ
        moved_away: list[tuple[int, Status]] = []  # to this group's DLQ
        gone = self._settled_before(peer, answers)
        for key, status in answers:
            if status == LINK_LOST or key in peer.deleting or key in gone:
                continue
            if status == Status.STORED:
                batch.delete(Journal.SAF, key)
                stored.append(split_key(key)[1])
                continue
            if status == Status.DLQ_SUCCESS:  # the receiver dead-lettered it: done here
                batch.delete(Journal.SAF, key)
                dead_lettered.append((split_key(key)[1], Status.NO_DQF))
                continue
            outcome.restart = True
            if status == Status.LINK_DOWN:
                continue
            if status in PERMANENT_REFUSALS:
                if self._copy_waits(key):  # its copy failed lately: RETRY, no copy
                    pass
                elif self._saf_to_dead_letter_queue(key, status, moved.stream):
                    moved.delete(Journal.SAF, key)
                    moved_away.append((split_key(key)[1], Status(status)))
                    continue
            if not outcome.retry:
                outcome.retry = True
                outcome.stuck_seq, outcome.stuck_status = split_key(key)[1], status
                outcome.reason = refusal_reason(peer_id, status)
        if batch:
            # The receiver keeps a dead-lettered one's origin key too (mrs.group.umas
            # `dead_lettered`): forgotten with the stored ones'.
            stored.extend(seq for seq, _ in dead_lettered)
            self._delete_drained(peer, batch, stored, forgettable, settled=dead_lettered)
        if moved:
            # After the copies, in their stream: a commit that fails is tried again
            # batch by batch, and a deletion whose copy failed is then not attempted
            # (stays in the SAF, drained again) instead of landing alone: lost.
            self._delete_drained(
                peer, moved, [], forgettable, self._copies_failed, settled=moved_away
            )
        return outcome

    def _settled_before(self, peer: PeerState, answers: list[tuple[bytes, int]]) -> set[bytes]:
        """The answered keys no longer in the SAF: answered again after their record
        was settled (a drain that restarts sends again what was on its way, and the
        peer answers each copy). Why: such an answer deleted the key again and counted
        it again, so the SAF count went below zero and its assertion stopped the group
        (a refused record's restart, then the peer's DLQ_SUCCESS answered twice); a
        stale refusal read the missing record as corrupt. One read of the batch."""
        keys = [key for key, status in answers if status != LINK_LOST and key not in peer.deleting]
        if not keys:
            return set()
        values = self.ctx.store.get_raw_many(Journal.SAF, keys)
        return {key for key, value in zip(keys, values, strict=True) if value is None}

    def _delete_drained(
        self,
        peer: PeerState,
        batch: WriteBatch,
        stored: list[int],
        forgettable,
        failed: Callable[[list[bytes], JournalError], None] | None = None,
        settled: list[tuple[int, Status]] | None = None,
    ) -> None:
        """Commit the deletion of answered SAF records; a failed one is drained again
        (the peer answers its copies STORED again, so they are deleted in the end).
        `settled`: (seq, cause) of those dead-lettered, whose senders are told once
        the deletion is durable (`_dead_lettered`)."""
        ctx = self.ctx
        deleted = len(batch.deletes)
        keys = [key for _, key in batch.deletes]
        peer.deleting.update(keys)

        def done(error: JournalError | None) -> None:
            peer.deleting.difference_update(keys)
            if error is None:
                self.delete_failures.pop(peer.group_id, None)
                ctx.counts.saf_removed(peer, deleted)
                if peer.saf_keys.key_by_seq:  # keyed ones: a copy is answered as one
                    dead = {seq for seq, _ in settled or ()}
                    delivered = [seq for seq in stored if seq not in dead]
                    peer.saf_keys.drained(delivered, ctx.clock_ns())
                peer.saf_keys.forget([split_key(key)[1] for key in keys])
                forgettable(stored)
                for seq, cause in settled or ():
                    self._dead_lettered(peer, seq, cause)
            elif failed is not None:
                failed(keys, error)
            if error is not None:
                self._delete_failed(peer, deleted if failed is None else 0, error)
            elif peer.link is not None:
                peer.link.poke()

        ctx.writer.submit(batch, done)

    def _delete_failed(self, peer: PeerState, deleted: int, error: JournalError) -> None:
        """A commit deleting drained SAF records failed: they stay in the SAF and the
        drain starts again from its oldest record (the peer answers its copies STORED
        again, so they are deleted in the end), after a backoff of 0.2 s doubling to
        5 s while such commits fail in a row; `deleted` records (0: said elsewhere)
        are logged at most once per interval. Why: the drain started again at once,
        at the link's round-trip rate, with an ERROR line each time: a journal failing
        its commits (a full map, EIO, ENOSPC) wrote 1,000 lines a second to the log,
        with both groups busy resending and answering the same records."""
        failures = self.delete_failures.get(peer.group_id, 0) + 1
        self.delete_failures[peer.group_id] = failures
        if deleted:
            self.umas.failures.refused(
                "saf-delete",
                str(peer.group_id),
                f"could not delete {deleted} SAF records group {peer.group_id} stored: "
                f"{error}; they stay in the SAF and are drained again",
            )
        if peer.link is not None:
            peer.link.resend_saf(min(LINK_RETRY_S_MAX, LINK_RETRY_S_MIN * 2 ** (failures - 1)))

    def _dead_lettered(self, peer: PeerState, seq: int, cause: Status) -> None:
        """A SAF message went to a DLQ instead of its target: a WF_CONF / AK_CONF
        sender still waiting for its confirm is told now (cause, DLQ_SUCCESS). Why:
        no confirm notice will ever come for it, so before, a SAF_FORCED WF_CONF put
        timed out and an AK_CONF sender never got its MRS_ACK (its journaled debt
        stayed for ever). After a restart of this group the journal says where the
        MRS_ACK goes."""
        psb = Psb(Status.SUCCESS, cause, seq, Status.DLQ_SUCCESS)
        waiter = peer.waiters.pop(seq, None)
        if waiter is not None and report_waiting_sender(waiter, psb):
            return
        if self.ack_waits is not None and (queue := self.ack_waits.owed_to(seq)) is not None:
            self.umas.send_mrs_ack(queue, psb)
            self.ack_waits.done(seq)

    def _copy_waits(self, key: bytes) -> bool:
        """Whether the DLQ copy of this refused SAF record failed too lately to try
        again now (`copy_failed`)."""
        failed = self.copy_failed.get(key)
        return failed is not None and trio.current_time() < failed[1]

    def _copies_failed(self, keys: list[bytes], error: JournalError) -> None:
        """The DLQ copies of these refused SAF records failed in their commit, so
        their deletions were not attempted: they stay in the SAF, drained again, and
        their refusals go into RETRY until a backoff per record has passed
        (`copy_failed`). Logged at most once per interval."""
        now_s = trio.current_time()
        for key in keys:
            failures = self.copy_failed.pop(key, (0, 0.0))[0] + 1
            wait_s = min(LINK_RETRY_S_MAX, LINK_RETRY_S_MIN * 2**failures)
            self.copy_failed[key] = (failures, now_s + wait_s)
        while len(self.copy_failed) > LINK_WINDOW_MESSAGES_MAX:
            del self.copy_failed[next(iter(self.copy_failed))]
        self.umas.failures.refused(
            "saf-dlq-copy",
            "",
            f"{len(keys)} SAF records refused for good stay in the SAF, the link in "
            f"RETRY: their DLQ copies were not stored ({error})",
        )

    def _saf_to_dead_letter_queue(self, key: bytes, status: int, stream: object) -> bool:
        """Put a copy of a SAF record the peer refused for good on this group's DLQ,
        in `stream` (the batch deleting the record follows it there). False when the
        DLQ refused it at once: the record stays, the link goes into RETRY."""
        value = self.ctx.store.get_raw(Journal.SAF, key)
        try:
            record = decode_saf(value, key)
        except CorruptRecord as corrupt:
            log.error("%s: refused by the peer and unreadable; left in the SAF", corrupt)
            return False
        entry = entry_from_record(record)
        entry.journaled = False
        moved = self.umas.put_on_dead_letter_queue(
            entry,
            Status(status),
            f"group {record.target_group} refused it over the link",
            stream=stream,
            acknowledged=True,  # journaled: a SAF record was answered STORED
        )
        # A failed DLQ put is logged by the link once, when its drain goes into RETRY.
        (log.warning if moved else log.debug)(
            "group %d refused SAF message %d (%s): %s",
            record.target_group,
            record.seq,
            status_name(status),
            "moved to the DLQ" if moved else "DLQ put failed, link goes into RETRY",
        )
        return moved


def refusal_reason(peer_id: int, status: int, seq_held: bool = False) -> str:
    """Why a drain waits, for `mrs status`."""
    if seq_held:
        return (
            f"group {peer_id} holds this seq under another message (this group's journals "
            "were replaced and the link reset): waiting for that one to be confirmed"
        )
    if status == Status.DQF_FULL:
        return f"group {peer_id}'s DQF is full: waiting for its receivers to confirm"
    if status in PERMANENT_REFUSALS:
        return (
            f"group {peer_id} refused it ({status_name(status)}) and this group's DLQ "
            "could not take it (no DLQ, or DLQ full)"
        )
    return f"group {peer_id} could not store it ({status_name(status)})"
