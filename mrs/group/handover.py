"""Room: hand messages to gets, and take their confirms — get, delivery marks, confirm, PCJ.

A journaled entry's delivery count is made durable before it is handed over, so a
crash can never hide that it was delivered (POSSDUPL stays exact). A confirm deletes
the DQF record (and writes the PCJ record, and the origin group's CONF notice) in
one transaction before it is answered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from msgspec.structs import astuple

from journals import Journal, JournalError, JournalFullError, WriteBatch, queue_key, seq_key
from mrs import protocol as wire
from mrs.core.delivery import CONF_POINT as _CONF_POINT
from mrs.core.delivery import (
    EMPTY_GET_TEXT,
    Refused,
    check_confirm,
    journal_on_confirm,
)
from mrs.core.delivery import SUCCESS_INT as _SUCCESS
from mrs.core.selection import Selection, from_wire
from mrs.group.confirm_run import ConfirmRun
from mrs.group.context import PACK_U32, GroupContext, Session, attached_queue
from mrs.group.dlq_leases import DlqReaders
from mrs.group.dqf import Dqf, forget_priority
from mrs.group.get_expiry import GetExpiry
from mrs.group.guarantees import KEPT, Guarantees
from mrs.group.notices import Notices
from mrs.group.put_deadlines import PutDeadlines
from mrs.group.queues import GetWaiter, TargetQueue
from mrs.group.shapes import Entry, delivery_event, record_from_entry
from mrs.model import ConfirmStyle, Status
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import CONFIRMED
from mrs.storage.journal_scan import PCJ_SEGMENT_FIELD

# Read per message: an enum member's alias saves ~30-50 ns per read once compiled
# (benchmarks/README.md, "Final aliases").
_MARKS: Final = Journal.MARKS
_IMPLICIT: Final = ConfirmStyle.IMPLICIT
ConfirmFields = tuple[int, int, int, Any]
"""A wire.Confirm's fields in order (request_id, seq, confirm_value, force_j)."""
Handed = tuple[Entry, wire.Delivery, bool]
"""An entry counted as delivered, its Delivery, and whether it awaits a confirm."""


@dataclass(eq=False)
class Handover:
    ctx: GroupContext
    dqf: Dqf
    notices: Notices
    dlq_readers: DlqReaders
    guarantees: Guarantees = KEPT
    """The rules of marking a delivery and of what a confirm deletes (mrs.group.guarantees)."""
    get_deadlines: PutDeadlines = field(init=False)
    """Parked gets' timeouts, in shared buckets as WF puts' are: a dict entry per get,
    not a timer and three closures (mrs.group.put_deadlines)."""
    marking_bytes: dict[int, int] = field(default_factory=dict)
    """Bytes of bodies handed to each session's gets (by session id) whose answers
    wait for their marks' commit (`send_when_marked`), so not yet in its outbox. The
    server counts them with what it has not read (OUTBOX_BYTES_HIGH): not counted, a
    client that pipelined thousands of gets and read nothing had a whole queue of
    journaled 1 MiB messages read back from disk and encoded in one pass (the
    server's RSS +1 GB, everyone's answers late by half a second)."""

    def __post_init__(self) -> None:
        self.get_deadlines = PutDeadlines(self.ctx.timers)

    # ------------------------------------------------------------------ get
    def get(self, session: Session, request: wire.Get) -> None:
        queue = attached_queue(session)
        select = None if request.select is None else from_wire(request.select)
        if queue.config.confirm == "implicit":
            self._confirm_implicitly(session, queue)
        if not queue.can_deliver():  # counts deliveries reserved by commits under way
            raise Refused(
                Status.EXCMAXUNCONF,
                f"{len(queue.unconfirmed) + queue.stores.reserved} messages unconfirmed on "
                f"{queue.address} "
                f"(unconfirmed_max={queue.config.unconfirmed_max})",
            )
        while (entry := queue.take(select)) is not None:
            if entry.body is None and not self.dqf.load_body(queue, entry):
                continue
            if self.hand_over(session, request.request_id, queue, entry):
                return
        if request.timeout_ms == 0:
            raise Refused(Status.NOMOREMSG, f"{EMPTY_GET_TEXT} {queue.address}{_matching(select)}")
        self._park(session, request, queue, select)

    def _park(
        self, session: Session, request: wire.Get, queue: TargetQueue, select: Selection | None
    ) -> None:
        """Wait for a message (a negative timeout waits for ever); a selective get
        for one it matches."""
        self.park(
            session,
            queue,
            request.request_id,
            request.timeout_ms,
            lambda arrived, premarked=False: self.hand_over(
                session, request.request_id, queue, arrived, premarked
            ),
            select,
        )

    def park(
        self,
        session: Session,
        queue: TargetQueue,
        request_id: int,
        timeout_ms: int,
        deliver: Callable[..., bool | None],
        select: Selection | None = None,
    ) -> None:
        """Park a get (single or batch) until `deliver` takes a message (with `select`,
        one it matches), or answer it TIMEOUT when `timeout_ms` passes. A get reserved
        by a commit under way (premark) is answered by that commit; it times out only
        if the commit fails."""
        waiter = GetWaiter(
            deliver=deliver, session_id=session.id, request_id=request_id, select=select
        )
        queue.park(waiter)
        if timeout_ms > 0:
            expiry = GetExpiry(session, queue, waiter)
            expiry.bucket = self.get_deadlines.add(timeout_ms / 1000, expiry)
            waiter.cancel_timer = expiry

    def cancel_get(self, session: Session, request: wire.CancelGet) -> None:
        """The client gave up a get: unpark it so no message is handed to a caller
        that is gone. A get already answered is left alone (its Delivery stands)."""
        queue = session.attached
        if queue is None:
            return
        for waiter in queue.waiters:
            if waiter.session_id == session.id and waiter.request_id == request.request_id:
                queue.unpark(waiter)
                waiter.cancel_timer()
                cancelled = f"{EMPTY_GET_TEXT} {queue.address}: get cancelled by the client"
                session.send(wire.Failure(request.request_id, Status.TIMEOUT, cancelled))
                return

    def hand_over(
        self,
        session: Session,
        request_id: int,
        queue: TargetQueue,
        entry: Entry,
        premarked: bool = False,
    ) -> bool:
        """Deliver one entry to a get: a batch of one (`count_delivery`, then
        `send_when_marked`) whose answer is its Delivery. `premarked`: its delivery mark
        was committed with the message (`premark`), and the unconfirmed cap was counted
        when the get was reserved. False if the entry could not be delivered at all
        (quarantined): the get is still waiting for a message."""
        if not premarked and not queue.can_deliver():
            queue.put_back(entry)
            session.send(
                wire.Failure(
                    request_id,
                    Status.EXCMAXUNCONF,
                    f"unconfirmed_max={queue.config.unconfirmed_max} reached",
                )
            )
            return True
        handed = self.count_delivery(request_id, queue, entry)
        if handed is None:
            return False
        if queue.shared:
            self.dlq_readers.leased(session.id, entry)
        self.send_when_marked(
            session, request_id, queue, [handed], handed[1], entry if premarked else None
        )
        return True

    def count_delivery(self, request_id: int, queue: TargetQueue, entry: Entry) -> Handed | None:
        """Count one entry as delivered to a get or a batch get: its Delivery built, its
        delivery count raised, awaiting its confirm if it needs one. None if it cannot
        be delivered at all (quarantined to the DLJ, or its body unreadable). Undone by
        `send_when_marked` if its mark's commit fails. A body left on disk is read here,
        whatever path brought the entry: an arrival offered straight to a parked
        selective get may have left its body on disk (mrs.group.dqf), and a Delivery
        without one broke the receiver's connection."""
        if entry.body is None and not self.dqf.load_body(queue, entry):
            return None  # reported by load_body; skipped, as a get skips it
        status, needs_confirm = self.guarantees.delivery_status(queue, entry)
        try:  # built first: a field no client could have put must not kill the server
            event = delivery_event(request_id, entry, status)
        except (wire.ProtocolError, ValueError, TypeError) as error:
            self.dqf.quarantine(queue, entry, f"cannot be delivered: {error}")
            return None
        entry.times_delivered += 1
        if needs_confirm:
            queue.unconfirmed[entry.seq] = entry
        return entry, event, needs_confirm

    def send_when_marked(
        self,
        session: Session,
        request_id: int,
        queue: TargetQueue,
        handed: list[Handed],
        answer: wire.Delivery | wire.DeliveryBatch,
        premarked: Entry | None = None,
    ) -> None:
        """Send `answer` (a get's Delivery, a batch get's DeliveryBatch) once the delivery
        counts of the journaled entries `handed` are durable: one commit for them all, so
        a crash can never hide that they were delivered (POSSDUPL stays exact); none
        when only memory entries or the `premarked` one (its mark committed with it)
        are handed. If that commit fails, `_mark_failed` undoes every hand-over."""
        batch: WriteBatch | None = None
        dequeued = False  # a memory entry's DEQ sender waits for the answer to go out
        marking = queue.marking if queue.confirm_style is _IMPLICIT else None
        marked_seqs: list[int] = []
        for entry, _, needs_confirm in handed:
            if not entry.journaled:
                dequeued = dequeued or entry.on_dequeue is not None
                if (
                    not needs_confirm
                    and entry.on_dequeue is None
                    and entry.on_confirm is None
                    and not queue.shared
                ):
                    # Lent as a read-ahead one is: a get given up as this answer came
                    # leaves it held by the client, which gives it back if it closes
                    # before another get takes it; before, it was lost at that close.
                    queue.lend(entry)
            elif entry is not premarked:
                if batch is None:
                    batch = WriteBatch.empty()
                key = queue_key(queue.address.queue, entry.seq)
                batch.put_raw(_MARKS, key, PACK_U32(entry.times_delivered))
                if marking is not None:
                    marking[entry.seq] = marking.get(entry.seq, 0) + 1
                    marked_seqs.append(entry.seq)
        if batch is None:
            session.send(answer)
            if premarked is not None:  # the only journaled one when no mark is written
                _bodies_sent(queue, handed)
            if dequeued:
                _tell_dequeued(handed)
            return
        dlq_seqs = [entry.seq for entry, _, _ in handed] if queue.shared else []
        if dlq_seqs:  # a detach meanwhile leaves their counts (mrs.group.dlq_leases)
            self.dlq_readers.marks_pending(session.id, dlq_seqs)
        answer_bytes = sum(len(entry.body or b"") for entry, _, _ in handed)
        waiting_bytes = self.marking_bytes
        waiting_bytes[session.id] = waiting_bytes.get(session.id, 0) + answer_bytes
        marked = MarkedAnswer(
            self, session, request_id, queue, handed, answer, answer_bytes,
            marking, marked_seqs, dlq_seqs, dequeued,
        )  # fmt: skip
        self.ctx.writer.submit(batch, marked)

    def _mark_failed(
        self,
        session: Session,
        request_id: int,
        queue: TargetQueue,
        handed: list[Handed],
        error: JournalError,
    ) -> None:
        """The delivery marks were not committed: nothing was handed out. Each entry's
        first delivery is still due: its count goes back and it returns to its place
        in its queue, unless the session left meanwhile and its detach gave it back
        already (one that awaited a confirm; another session may hold it by now).
        The get is answered JOURNAL_FAIL."""
        attached = session.attached is queue
        unconfirmed = queue.unconfirmed
        for entry, _, needs_confirm in reversed(handed):
            entry.times_delivered -= 1
            if queue.shared:  # its lease never began (mrs.group.dlq_leases)
                self.dlq_readers.released(session.id, entry.seq)
            queue.unlend(entry.seq)  # a read-ahead entry was never lent
            if not needs_confirm or (attached and unconfirmed.pop(entry.seq, None) is not None):
                queue.put_back(entry)
        session.send(
            wire.Failure(request_id, Status.JOURNAL_FAIL, f"cannot record delivery: {error}")
        )
        self.serve_waiting_gets(queue)

    def load_body(self, queue: TargetQueue, entry: Entry) -> bool:
        """Read the body of an entry taken for a get (left on disk); False if unusable."""
        return self.dqf.load_body(queue, entry)

    # ------------------------------------------------------------------ premarked
    def premark(self, queue: TargetQueue, entry: Entry, batch: WriteBatch) -> GetWaiter | None:
        """For a journaled message about to be stored: reserve a parked get for it and
        write its delivery mark into the same `batch`, or None (it is offered to its
        queue when durable, as usual). The get is answered by `deliver_premarked`
        after that one commit instead of after a second commit for the mark."""
        if queue.shared:
            return None
        waiter = queue.reserve_waiter()
        if waiter is None:
            return None
        key = queue_key(queue.address.queue, entry.seq)
        batch.put_raw(_MARKS, key, PACK_U32(entry.times_delivered + 1))
        return waiter

    def deliver_premarked(self, queue: TargetQueue, entry: Entry, waiter: GetWaiter) -> None:
        """The message and its mark are durable: answer the reserved get. If its
        session left meanwhile, the message is queued as delivered once (its get's
        answer was lost: a redelivery is POSSDUPL, as after any lost get)."""
        waiter.reserved = False
        if queue.attached_session != waiter.session_id:
            entry.times_delivered += 1
            queue.offer(entry)
            return
        if waiter.deliver(entry, True) is False:  # quarantined: the get still waits
            self.unreserve(queue, waiter)
        else:
            waiter.cancel_timer()

    def unreserve(self, queue: TargetQueue, waiter: GetWaiter) -> None:
        """A reserved get whose message was not delivered (its commit failed): it
        waits again at the front, or is answered TIMEOUT if its time ran out."""
        waiter.reserved = False
        if waiter.timed_out is not None:
            waiter.timed_out()
        elif queue.attached_session == waiter.session_id:
            queue.waiters.appendleft(waiter)
            self.serve_waiting_gets(queue)

    def serve_waiting_gets(self, queue: TargetQueue) -> None:
        """Hand waiting messages to parked gets as far as the unconfirmed cap allows."""
        queue.serve_waiters(
            lambda entry: entry.body is not None or self.dqf.load_body(queue, entry)
        )

    def _confirm_implicitly(self, session: Session, queue: TargetQueue) -> None:
        """Confirm what the session's earlier gets were handed, except a delivery whose
        mark is still being committed (`TargetQueue.marking`): a get pipelined behind
        its get confirms it only once it was sent."""
        marking = queue.marking
        for seq in list(queue.unconfirmed):
            if seq in marking:
                continue
            self._confirm_entry(
                session,
                queue,
                queue.unconfirmed.pop(seq),
                None,
                0,
                journal_on_confirm(0, self.ctx.pcj_default),
            )

    # ------------------------------------------------------------------ confirm
    def confirm(
        self, session: Session, request: wire.Confirm, run: ConfirmRun | None = None
    ) -> None:
        """Checked now; its deletes join `run` (the other confirms of the same receive,
        mrs.group.confirm_run) when they are all it writes, else go alone."""
        # one call for the fields: each read of a msgspec struct's attribute from
        # compiled code is a generic lookup (see Intake.put)
        request_id, seq, confirm_value, force_j = cast(ConfirmFields, astuple(request))
        queue = attached_queue(session)
        journal = journal_on_confirm(force_j, self.ctx.pcj_default)
        check_confirm(queue.confirm_style, queue.unconfirmed, seq)
        if queue.shared:  # the lease ends when the confirm is committed (_commit_ended)
            self.dlq_readers.confirming(session.id, seq, confirm_value)
        entry = queue.unconfirmed.pop(seq)
        if run is not None and not journal and self._deletes_only(entry):
            if run.queue is not queue:
                self.end_confirm_run(run)
            key = queue_key(queue.address.queue, entry.seq)
            self.guarantees.confirm_writes(run.batch, key)
            forget_priority(run.batch, key, entry.priority)
            run.add(queue, entry, request_id)
            return
        self._confirm_entry(session, queue, entry, request_id, confirm_value, journal)

    def _deletes_only(self, entry: Entry) -> bool:
        """A confirm of `entry` writes its deletes (`Guarantees.confirm_writes`) and
        nothing else (no CONF notice to its origin group), so it can share a batch."""
        return entry.journaled and (
            entry.origin_group is None or entry.delivery.interest_point is not _CONF_POINT
        )

    def end_confirm_run(self, run: ConfirmRun) -> None:
        """Submit the confirms gathered in `run` as one batch; each is answered after
        its commit (or fails with it)."""
        taken = run.take()
        if taken is None:
            return
        queue, batch, confirms = taken
        session = run.session
        self.ctx.writer.submit(
            batch,
            lambda error: self._commit_ended(session, queue, confirms, error),
            can_wait=queue.drained,  # the commit may wait a moment for a put (the server's)
        )

    def _confirm_entry(
        self,
        session: Session,
        queue: TargetQueue,
        entry: Entry,
        request_id: int | None,
        confirm_value: int,
        journal: bool,
    ) -> None:
        """Delete the DQF record (PCJ record, CONF notice) in one transaction, then answer."""
        if not entry.journaled:
            self._confirmed(session, queue, entry, request_id, None, None)
            return
        ctx = self.ctx
        key = queue_key(queue.address.queue, entry.seq)
        batch = WriteBatch.empty()
        self.guarantees.confirm_writes(batch, key)
        forget_priority(batch, key, entry.priority)
        if journal:
            if entry.body is None:  # left on disk once delivered (`_bodies_sent`)
                self.dqf.load_body(queue, entry)  # unreadable: reported, recorded empty
            now_ns = ctx.clock_ns()
            record = record_from_entry(entry, written_time_ns=now_ns)
            record.confirm_value = confirm_value
            record.confirm_time_ns = now_ns
            record.extra["deliveries"] = entry.times_delivered  # POSSDUPL for the audit
            if ctx.pcj_segment:  # segment 0 names none (mrs.group.pcj_control)
                record.extra[PCJ_SEGMENT_FIELD] = ctx.pcj_segment
            batch.put_record(Journal.PCJ, seq_key(entry.seq), record)
        notice = (
            entry.origin_group is not None
            and entry.delivery.interest_point is _CONF_POINT
            and self.notices.add_notice(batch, entry.origin_group, wire.ConfNotice, entry.seq)
        )
        notify = entry.origin_group if notice else None
        ctx.writer.submit(
            batch,
            lambda error: self._confirmed(session, queue, entry, request_id, notify, error),
            can_wait=queue.drained,  # the commit may wait a moment for a put (the server's)
        )

    def _confirmed(
        self,
        session: Session,
        queue: TargetQueue,
        entry: Entry,
        request_id: int | None,
        notify: int | None,
        error: JournalError | None,
    ) -> None:
        """A confirm's transaction ended: tell the origin group (its notice is durable
        now), then answer it as `_commit_ended` does."""
        if error is None and notify is not None:
            self.notices.notice_committed(notify)
        self._commit_ended(session, queue, [(entry, request_id)], error)

    def _commit_ended(
        self,
        session: Session,
        queue: TargetQueue,
        confirms: Sequence[tuple[Entry, int | None]],
        error: JournalError | None,
    ) -> None:
        """The transaction of these confirms (one, or a run's) ended. Failed: each
        message is unconfirmed again and each confirm answered with the failure. Done:
        each frees its DQF slot, is answered and tells whoever waits for it; then the
        queue's parked gets are served once. A request id None (an implicit confirm)
        gets no answer. A session that left before the failure was reported has had
        its detach already: its messages go back to the queue to come again (POSSDUPL),
        not to the unconfirmed ones of whoever attaches next, where they would block
        an in-order queue and never be delivered."""
        if error is not None:
            if session.attached is queue:
                queue.restore_unconfirmed([entry for entry, _ in confirms])
                if queue.shared:  # still held: its holder may confirm it again
                    for entry, _ in confirms:
                        self.dlq_readers.confirm_failed(session.id, entry.seq)
            else:
                for entry, _ in confirms:
                    queue.put_back(entry)
                self.serve_waiting_gets(queue)
            full = isinstance(error, JournalFullError)
            status = Status.MRS_RES_EXH if full else Status.JOURNAL_FAIL
            for _, request_id in confirms:
                if request_id is not None:
                    session.send(wire.Failure(request_id, status, f"confirm not recorded: {error}"))
            return
        ctx = self.ctx
        for entry, request_id in confirms:
            if queue.shared:
                self.dlq_readers.removed(session.id, entry.seq)
            if entry.journaled:
                ctx.counts.dqf_removed()
                self.notices.peers.dqf_freed()
            if request_id is not None:
                session.answer(build_unchecked(CONFIRMED, request_id, entry.seq, _SUCCESS))
            if entry.on_confirm is not None:
                entry.on_confirm(entry)
            if self.dqf.copies_awaiting_confirm:  # WF_CONF copies of it (mrs.group.dqf)
                self.dqf.confirmed(entry)
        self.serve_waiting_gets(queue)


def _matching(select: Selection | None) -> str:
    """What an empty answer adds for a selective get."""
    return "" if select is None else " matching the selection"


@dataclass(eq=False)
class MarkedAnswer:
    """A get's answer waiting for its delivery marks' commit (`Handover.send_when_marked`),
    called with the commit's outcome: sent, or the hand-over undone.

    Why an object and not a nested function: compiled (mypyc), a nested function and
    its environment refer to each other, so each get's answer, its bodies with it,
    stayed in memory until the cyclic collector ran, which `mrs serve` runs rarely
    (mrs.server.gc_tuning; the measurement is in benchmarks/README.md)."""

    handover: Handover
    session: Session
    request_id: int
    queue: TargetQueue
    handed: list[Handed]
    answer: wire.Delivery | wire.DeliveryBatch
    answer_bytes: int
    marking: dict[int, int] | None
    """The queue's seqs whose marks are being committed (implicit confirms), or None."""
    marked_seqs: list[int]
    dlq_seqs: list[int]
    dequeued: bool
    """A memory entry's DEQ sender waits for the answer to go out."""

    def __call__(self, error: JournalError | None) -> None:
        handover, session, queue, handed = self.handover, self.session, self.queue, self.handed
        _answer_made(handover.marking_bytes, session.id, self.answer_bytes)
        if self.marking is not None:  # first: a failed mark may hand its entry out again
            _marks_ended(self.marking, self.marked_seqs)
        if error is not None:
            handover._mark_failed(session, self.request_id, queue, handed, error)
            return
        if self.dlq_seqs:
            handover.dlq_readers.marks_committed(session.id, self.dlq_seqs)
        session.send(self.answer)
        _bodies_sent(queue, handed)
        if self.dequeued:
            _tell_dequeued(handed)


def _answer_made(waiting_bytes: dict[int, int], session_id: int, answer_bytes: int) -> None:
    """A delivery's mark was committed (or failed): its bytes no longer wait for it
    (`Handover.marking_bytes`); a session with none waiting leaves the table."""
    left = waiting_bytes.get(session_id, 0) - answer_bytes
    if left > 0:
        waiting_bytes[session_id] = left
    else:
        waiting_bytes.pop(session_id, None)


def _marks_ended(marking: dict[int, int], seqs: list[int]) -> None:
    """The mark commit of `seqs` ended: they count once less in `marking` (a seq may
    count twice: handed out again, after a detach, while its first mark was committed)."""
    for seq in seqs:
        left = marking.pop(seq, 0) - 1
        if left > 0:
            marking[seq] = left


def _bodies_sent(queue: TargetQueue, handed: list[Handed]) -> None:
    """The Delivery of `handed` went out: the body of each journaled one that awaits
    its reader's confirm goes back to disk (its DQF record keeps it until the confirm):
    a redelivery after its reader left, or a PCJ record at its confirm, reads it back.
    Why: every body a reader held unconfirmed stayed in memory, so a client that got
    and held 1,000 journaled 1 MB messages (the default unconfirmed_max) grew the
    server by 1 GB. Only one still in `unconfirmed` as this very entry: one given back
    meanwhile (its reader left while its mark was committed) waits counted with its
    body (`TargetQueue.journaled_body_bytes`). Memory messages keep theirs: it is
    their only copy."""
    unconfirmed = queue.unconfirmed
    for entry, _, _ in handed:
        if entry.journaled and unconfirmed.get(entry.seq) is entry:
            entry.body = None


def _tell_dequeued(handed: list[Handed]) -> None:
    """The answer went out: each memory entry's DEQ sender learns it was got."""
    for entry, _, _ in handed:
        if not entry.journaled and entry.on_dequeue is not None:
            entry.on_dequeue(entry)
