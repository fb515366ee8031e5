"""Room: undeliverable messages — the UMAs (discard, log, return, DLQ, DLJ, SAF) and
the MRS_ACKs owed to AK senders.

Why together: both make a new message out of an old one for someone other than its
receiver; the outcome is reported to the sender with the UMA's status.
"""

from __future__ import annotations

import json
import logging
import os
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from journals import Journal, JournalError, WriteBatch, seq_key
from mrs.core.deadletter import dead_letter_header
from mrs.core.delivery import AK, WF, uma_status
from mrs.core.refusals import RefusalLog
from mrs.group.acks import AckOutbox, AckWaits
from mrs.group.context import GroupContext
from mrs.group.dqf import Dqf
from mrs.group.held_offers import HeldOffers, MrsAcks
from mrs.group.idempotency import origin_key
from mrs.group.memory_quota import memory_quota_problem
from mrs.group.peers import Peers
from mrs.group.queues import TargetQueue
from mrs.group.reply import PutReply
from mrs.group.sequence import Sequence
from mrs.group.shapes import DEAD_LETTER_HEADER, Entry, nonrecoverable_copy, record_from_entry
from mrs.limits import EVENT_LOG_BYTES_MAX, RECENT_ACKS_MAX
from mrs.model import (
    DEAD_LETTER_QUEUE,
    RETURNED_HEADER,
    Address,
    Psb,
    Status,
    Uma,
)
from mrs.protection.dead_letter import (
    DeadLetterProtection,
    DeadLetterRefused,
    dead_letter_protection,
)

log = logging.getLogger("mrs.group")


class SafPort(Protocol):
    """What the UMAs need of the outbound room (mrs.group.outbound.Outbound)."""

    def store_in_saf(self, entry: Entry, done: Callable[[JournalError | None], None]) -> None: ...


@dataclass(eq=False)
class Umas:
    ctx: GroupContext
    sequence: Sequence
    dqf: Dqf
    peers: Peers
    ack_outbox: AckOutbox
    outbound: SafPort | None = None
    """Set once the outbound room exists (it needs this room too)."""
    ack_waits: AckWaits | None = None
    """The MRS_ACKs owed for AK_CONF puts to other groups, whose messages are
    journaled beside them: a UMA deletes such a copy first (`_after_copy`)."""
    dead_letter_protection: DeadLetterProtection | None = None
    """The DLQ's AMS-style policy (mrs.protection.dead_letter), None without one."""
    offers: HeldOffers = field(default_factory=HeldOffers)
    """MRS_ACKs made in one commit's report go out together (mrs.group.held_offers)."""
    dead_lettered: OrderedDict[str, tuple[int, str]] = field(default_factory=OrderedDict)
    """Origin key of each message another group drained here that this group put on
    its DLQ lately -> (put time, target), oldest first, at most RECENT_ACKS_MAX. Why:
    the peer resends it when the link drops before the DLQ_SUCCESS answer reached it,
    and each resend queued one more copy, delivered CONFIRMREQ (no POSSDUPL). The
    put time and target tell a resend from a new message under a reused seq (a peer
    rebuilt and reset). A recoverable DLQ also journals the origin key with the copy,
    so a resend after a restart of this group is answered without a second one."""

    def __post_init__(self) -> None:
        self.dead_letter_protection = dead_letter_protection(self.ctx.bus, self.ctx.group_id)
        self.acks = MrsAcks(self.ctx, self.sequence, self.ack_outbox, self.offers)
        """Makes and offers the MRS_ACKs (compiled: one per AK put)."""
        self.failures = RefusalLog(log, level=logging.ERROR, line_format="{message}")
        """A UMA that failed, logged at most once per kind per REFUSAL_LOG_INTERVAL_S
        with a count: one client's puts must not write one line each (a put flood
        into a full journal wrote 16,485)."""
        self.refused_puts = RefusalLog(log, line_format="{message}")
        """A UMA that failed for a put whose sender is told so (`_lost`): a WARNING,
        as throttled as `failures`."""

    def undeliverable(self, entry: Entry, reply: PutReply, cause: Status, reason: str) -> None:
        """Take the entry's UMA and report cause + UMA status to the sender. An AK_CONF
        message to another group has a copy journaled beside its MRS_ACK debt, resent
        from the SAF at the next start: a DLJ record or a SAF store deletes it in its
        own commit; any other UMA runs once its delete is durable (`_after_copy`)."""
        action = Uma(entry.uma)
        if action in _DELETES_THE_COPY or (action is Uma.SAF and self._saf_takes(entry)):
            self._take(entry, reply, cause, reason)
        else:
            self._after_copy(entry, partial(self._take, entry, reply, cause, reason))

    def _saf_takes(self, entry: Entry) -> bool:
        """Whether UMA SAF stores `entry` (in the SAF towards another linked group)."""
        return (
            self.outbound is not None
            and self._other_linked_group(entry.target)
            and not self.memory_dead_letter_queue(entry.target)
        )

    def memory_dead_letter_queue(self, target: Address) -> bool:
        """Whether `target` is another group's DLQ that is memory only (the bus file
        says so: `dead_letter_queue_recoverable` changes only with a restart). Why: no
        DQF will ever take a recoverable message there, so it answers NO_DQF and UMA
        SAF fails, as for the sender's own DLQ; held in the SAF instead (SAF_SUCCESS,
        even LINK_DOWN + SAF_SUCCESS), it was drained to that very DLQ by the channel
        rules, journaled there under a dead-letter header that replaced its own."""
        if target.queue != DEAD_LETTER_QUEUE or target.group == self.ctx.group_id:
            return False
        group = self.ctx.bus.groups.get(target.group)
        queue = None if group is None else group.queues.get(DEAD_LETTER_QUEUE)
        return queue is not None and not queue.recoverable

    def _after_copy(self, entry: Entry, then: Callable[[], None]) -> None:
        """`then()` once the journaled copy of `entry` (mrs.group.acks) is deleted; at
        once when it has none. Why: with the copy still on disk, a crash after the
        UMA's outcome was seen (an MRS_ACK saying DISC_SUCCESS, a returned or
        dead-lettered copy read) resent it from the SAF: delivered as well, unmarked."""
        waits = self.ack_waits
        if waits is None or entry.seq not in waits.messages:
            then()
            return
        waits.drop_copy(entry.seq, then)

    def _take(self, entry: Entry, reply: PutReply, cause: Status, reason: str) -> None:
        """Run the entry's UMA (`undeliverable`) and report its outcome. A UMA that was
        to replace the journaled copy of an AK_CONF message (SAF, DLJ, a journaled DLQ)
        and failed deletes that copy before the failure is told. Why: its write failed
        with it, and a crash before the debt's own delete resent the copy from the SAF
        at the next start: delivered, though its sender was told the put failed (and
        puts it again)."""
        action = Uma(entry.uma)
        waits = self.ack_waits
        copy = waits is not None and entry.seq in waits.messages

        def report(succeeded: bool) -> None:
            if not succeeded:  # before the report: it marks the reply done
                self._lost(entry, action, cause, _tells_sender(reply))
            reply.report(Psb(Status.SUCCESS, cause, entry.seq, uma_status(action, succeeded)))

        def finish(succeeded: bool) -> None:
            if succeeded or not copy or waits is None:
                report(succeeded)
            else:
                waits.drop_copy(entry.seq, partial(report, False))

        if action is Uma.DISC:
            finish(True)
        elif action is Uma.DISCL:
            finish(self._log_event("discarded", entry, cause, reason))
        elif action is Uma.RTS:
            finish(self._return_to_sender(entry, reply.response_queue, cause, reason))
        elif action is Uma.DLQ:
            self._to_dead_letter_queue(entry, cause, reason, finish)
        elif action is Uma.DLJ:
            self._to_dead_letter_journal(entry, cause, finish)
        elif self.outbound is not None and self._saf_takes(entry):
            self.outbound.store_in_saf(entry, lambda error: finish(error is None))
        else:
            # Store and forward is for another group's DQF; the local DQF is the store.
            kind, why = self._saf_refusal(entry.target)
            self.failures.refused(kind, "", f"UMA SAF for {entry.target}: {why}")
            finish(False)

    def _saf_refusal(self, target: Address) -> tuple[str, str]:
        """Why UMA SAF cannot keep a message for `target` (the kind of line, the words).
        Why a case for a group the config does not link: it was said to be the
        sender's own group, and the operator looked for a mistake in the put."""
        if self.memory_dead_letter_queue(target):
            return "uma-saf-memory-dlq", "that DLQ is memory only: no DQF to forward to"
        if target.group == self.ctx.group_id:
            return "uma-saf-own-group", "no SAF towards the sender's own group"
        return (
            "uma-saf-unlinked",
            f"the config has no [[link]] between groups {self.ctx.group_id} and "
            f"{target.group}: no SAF towards group {target.group}",
        )

    def _other_linked_group(self, target: Address) -> bool:
        """Whether `target` is in another group this one links to (a SAF can hold it)."""
        return target.group != self.ctx.group_id and target.group in self.peers

    def _log_event(self, what: str, entry: Entry, cause: Status, reason: str) -> bool:
        line = json.dumps(
            {
                "time_ns": self.ctx.clock_ns(),
                "event": what,
                "seq": entry.seq,
                "sender": str(entry.source),
                "target": str(entry.target),
                "cause": cause.name,
                "reason": reason,
            }
        )
        path = self.ctx.config.data_dir / "events.jsonl"
        try:
            _roll_when_full(path)
            with open(path, "a", encoding="utf-8") as event_log:
                event_log.write(line + "\n")
        except OSError as error:
            self.failures.refused(
                "discl-event-log", "", f"cannot write the event log {path}: {error}"
            )
            return False
        return True

    def _lost(self, entry: Entry, action: Uma, cause: Status, told: bool) -> None:
        """Say in the log that a UMA failed, so the message is gone. Why: an NN sender
        is told nothing, so without this line the loss would be silent (an ERROR). A
        sender `told` the outcome (a WF PutDone, an AK MRS_ACK) keeps what it put: the
        put was refused, and it knows (a WARNING); "the message is lost" at ERROR
        for a WF_DQF put answered SAF_FAILED said a message was lost that no one was
        told was stored. One line per UMA kind and outcome per REFUSAL_LOG_INTERVAL_S,
        with a count, bounds a flood of them."""
        undelivered = (
            f"message {entry.seq} from {entry.source} to {entry.target} could not be "
            f"delivered ({cause.name}) and its UMA {action.name} failed"
        )
        if not told:
            failed = f"uma-{action.name.lower()}-failed"
            self.failures.refused(failed, "", f"{undelivered}: the message is lost")
            return
        self.refused_puts.refused(
            f"uma-{action.name.lower()}-failed-told",
            "",
            f"{undelivered}: the put was refused and its sender told so "
            f"({uma_status(action, False).name})",
        )

    def _return_to_sender(
        self, entry: Entry, response_queue: Address, cause: Status, reason: str = ""
    ) -> bool:
        """Queue a copy for the sender (MSGUNDEL) that says where it was going and why
        (the RETURNED_HEADER, read as Message.original_target / return_reason). False
        (RTS_FAIL) where a memory put there would be refused EXCEEDQUOTA, bytes too:
        a returned copy past `queue_bytes_max` had the queue refuse every later put,
        `mrs status` blaming "messages given back"."""
        queue = (
            self.ctx.queues.get(response_queue.queue)
            if response_queue.group == self.ctx.group_id
            else None
        )
        if (
            queue is None
            or not queue.active  # a temporary queue nobody is attached to: NOTACTIVE
            or queue.memory_count >= queue.config.messages_max
        ):
            return False
        returned = nonrecoverable_copy(entry, target=response_queue)
        if memory_quota_problem(queue, returned, self.ctx.config.guards) is not None:
            return False
        returned.delivery_status = Status.MSGUNDEL
        returned.headers = {
            **(entry.headers or {}),
            RETURNED_HEADER: {
                "original_target": str(entry.target),
                "reason": int(cause),
                "detail": reason,
            },
        }
        queue.offer(returned)
        return True

    def _to_dead_letter_queue(
        self, entry: Entry, cause: Status, reason: str, finish: Callable[[bool], None]
    ) -> None:
        """UMA DLQ. A journaled DLQ copy deletes the message's copy (mrs.group.acks) in
        its own commit, as a DLJ record does; a memory copy, or none (refused), only
        then finishes, once that copy is deleted (`_after_copy`). Why in one commit:
        deleted first, a crash before the DLQ copy was stored lost the message; deleted
        after, one after the store resent it from the SAF as well, unmarked."""
        copy_moved: list[bool] = []

        def moved(batch: WriteBatch) -> None:
            copy_moved.append(True)
            if self.ack_waits is not None:
                self.ack_waits.message_moved(batch, entry.seq)

        def done(succeeded: bool) -> None:
            if copy_moved or not succeeded:  # a failure: `_take` deletes the copy
                finish(succeeded)
            else:
                self._after_copy(entry, partial(finish, succeeded))

        self.put_on_dead_letter_queue(entry, cause, reason, done, moved=moved)

    def put_on_dead_letter_queue(
        self,
        entry: Entry,
        cause: Status | int,
        reason: str,
        done: Callable[[bool], None] = lambda moved: None,
        stream: object = None,
        acknowledged: bool = False,
        moved: Callable[[WriteBatch], None] | None = None,
    ) -> bool:
        """Queue a copy of `entry` on this group's DLQ with a dead-letter header naming
        this group as the putter (MRS redirected it). Memory only, as in MessageQ,
        unless `dead_letter_queue_recoverable`, or the copy is of a recoverable message
        a group `acknowledged` as stored (a link's channel rules, on either side): then
        the copy is journaled in the DQF (its batch in `stream`, journals.writer) and
        `done(True)` comes once it is durable. Why the second: its sender was told
        STORED, and a memory DLQ lost it with the next crash of the group holding it,
        where IBM MQ's DLQ, whose rule the link follows, keeps a persistent message
        persistent. False (and done(False)) if the group has no DLQ, it is full (its
        messages_max; queue_bytes_max for a copy in memory), or its journal refuses the
        copy at once. A message another group drained here (`dead_lettered`) and resent
        once on the DLQ is answered True, no second copy."""
        queue = self.ctx.queues.get(DEAD_LETTER_QUEUE)
        origin = "" if entry.origin_group is None else origin_key(entry.origin_group, entry.seq)
        if origin and self.dead_lettered.get(origin) == _fingerprint(entry):
            done(True)
            return True
        if queue is None or _dead_letters_held(queue) >= queue.config.messages_max:
            done(False)
            return False
        dead = nonrecoverable_copy(entry, target=queue.address)
        if self.dead_letter_protection is not None:
            try:
                dead.body = self.dead_letter_protection.place(dead.body or b"")
            except DeadLetterRefused as refused:
                self.failures.refused(
                    "dlq-protection", "", f"message {entry.seq} not put on the DLQ: {refused}"
                )
                done(False)
                return False
        # MQDLH: put date/time are when it was put on the DLQ, not the original put's.
        header = dead_letter_header(
            cause, entry.target, self.ctx.config.name, self.ctx.clock_ns(), reason
        )
        dead.dead_letter_header = header
        journaled = queue.config.recoverable or (acknowledged and entry.delivery.recoverable)
        if not journaled:
            return self._offer_dead_letter(queue, dead, origin, entry, done)
        dead.headers = {**(entry.headers or {}), DEAD_LETTER_HEADER: header}
        refusals: list[Status] = []

        def stored(status: Status, _seq: int, _reason: str) -> None:
            if status != Status.STORED:
                refusals.append(status)
            else:
                self._remember_dead_letter(origin, entry)
            done(status == Status.STORED)

        self.dqf.store_in_dqf(
            dead, [origin] if origin else [], stored, stream=stream, dead_letter=True, moved=moved
        )
        # A refusal known now (DQF full, journal map full, no room) is a failed put: a
        # caller that deletes its own copy on True (a SAF drain) must keep it.
        return not refusals

    def _offer_dead_letter(
        self,
        queue: TargetQueue,
        dead: Entry,
        origin: str,
        entry: Entry,
        done: Callable[[bool], None],
    ) -> bool:
        """Queue the memory copy `dead` of `entry` on the DLQ (`put_on_dead_letter_queue`),
        bound by queue_bytes_max as a client's memory put there is. Why: without it a
        UMA DLQ queued 10,000 dead letters of any size, and the DLQ, over its bound,
        refused every client's put EXCEEDQUOTA."""
        if memory_quota_problem(queue, dead, self.ctx.config.guards) is not None:
            done(False)
            return False
        dead.delivery_status = Status.SUCCESS
        queue.offer(dead)
        self._remember_dead_letter(origin, entry)
        done(True)
        return True

    def _remember_dead_letter(self, origin: str, entry: Entry) -> None:
        """Note a drained message put on the DLQ (`dead_lettered`), bounded."""
        if not origin:
            return
        self.dead_lettered[origin] = _fingerprint(entry)
        if len(self.dead_lettered) > RECENT_ACKS_MAX:
            self.dead_lettered.popitem(last=False)  # the oldest

    def _to_dead_letter_journal(
        self, entry: Entry, cause: Status, finish: Callable[[bool], None]
    ) -> None:
        ctx = self.ctx
        if full := self.dqf.journal_full(len(entry.body or b"")):
            self.failures.refused(
                "dlj-journal-full", "", f"message {entry.seq} not dead-lettered: {full}"
            )
            finish(False)  # (`_take` deletes the message's copy first)
            return
        if ctx.counts.dlj_full(ctx.limits.dlj_messages_max, partial(ctx.store.count, Journal.DLJ)):
            self.failures.refused(
                "dlj-messages-max",
                "",
                f"DLJ holds dlj_messages_max={ctx.limits.dlj_messages_max}: "
                f"message {entry.seq} not dead-lettered",
            )
            finish(False)
            return
        ctx.counts.dlj_reserved()
        record = record_from_entry(entry, written_time_ns=ctx.clock_ns())
        record.reason = int(cause)
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(entry.seq), record)
        if self.ack_waits is not None:  # the record replaces the message's copy
            self.ack_waits.message_moved(batch, entry.seq)

        def written(error: JournalError | None) -> None:
            ctx.counts.dlj_reservation_done(error is None)
            finish(error is None)

        ctx.writer.submit(batch, written)

    def ack_after_restart(self, entry: Entry) -> None:
        """A recovered AK_CONF message was confirmed: the MRS_ACK its sender asked for."""
        if entry.response_queue is None:  # journaled without one: no AK_CONF put
            return
        self.send_mrs_ack(
            entry.response_queue, Psb(Status.SUCCESS, Status.SUCCESS, entry.seq, Status.NO_UMA)
        )

    def send_mrs_ack(self, response_queue: Address, psb: Psb) -> None:
        """Queue an MRS_ACK (class 28, type -801, body = the PSB) for an AK sender; a
        response queue in another group gets it over the link, like any message.
        Here, not only in `MrsAcks`, so that every MRS_ACK passes one interpreted
        method a test can replace (tests/sim/test_sim_conformance.py)."""
        self.acks.send(response_queue, psb)


_DELETES_THE_COPY = frozenset({Uma.DLJ, Uma.DLQ})
"""UMAs whose own commit deletes an AK_CONF message's journaled copy (`undeliverable`)."""


def _fingerprint(entry: Entry) -> tuple[int, str]:
    """What tells a resent message from another under the same seq (`dead_lettered`)."""
    return (entry.put_time_ns, str(entry.target))


def _dead_letters_held(queue: TargetQueue) -> int:
    """What the DLQ's messages_max bounds: its messages waiting (in memory, journaled in
    memory or cold) or being stored. Why not `memory_count` alone: journaled ones are
    DQF records (a recoverable DLQ's, or a memory DLQ's copies of acknowledged
    messages), and a flood of dead letters would fill the group's whole DQF, refusing
    every sender DQF_FULL."""
    return queue.waiting + queue.stores.storing


def _tells_sender(reply: PutReply) -> bool:
    """Whether `reply`'s report will tell the sender the put's outcome: not told yet,
    and a WF caller, an AK sender (its MRS_ACK) or a client SAF journal draining
    (`stored_reply`) waits for it; an NN sender is told nothing."""
    if reply.done:
        return False
    notification = reply.mode.notification
    return notification is WF or notification is AK or reply.stored_reply


def _roll_when_full(path: Path) -> None:
    """Start a new event log once this one holds EVENT_LOG_BYTES_MAX, the last one kept
    as `events.jsonl.1`: a flood of DISCL puts (one line each) would otherwise fill the
    disk the journals live on."""
    try:
        size_bytes = path.stat().st_size
    except FileNotFoundError:
        return
    if size_bytes >= EVENT_LOG_BYTES_MAX:
        os.replace(path, path.with_name(path.name + ".1"))
