"""One group's message recovery service: put, get, confirm, recovery — without sockets.

The group holds its target queues, its journal store and its writer, and answers
requests from `Session`s (anything with an `id` and a `send(event)`). Storage,
clock and timers are passed in, so the same code serves real TCP clients and runs
inside a deterministic simulation.

The path of a recoverable put: validate -> allocate seq -> submit the DQF record to
the group-commit writer -> when durable, offer the message to its queue and report
the interest point (or wait for the confirm, for CONF modes). Nothing is reported
as stored before its transaction is on disk.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import msgpack

from journals import (
    CorruptRecord,
    GroupCommitWriter,
    Journal,
    JournalError,
    JournalFullError,
    JournalStore,
    WriteBatch,
    queue_key,
    seq_key,
)
from journals.writer import NOT_ATTEMPTED
from mrs import protocol as wire
from mrs.config import BusConfig, GroupConfig
from mrs.deadletter import dead_letter_header, header_problem
from mrs.delivery import (
    Refused,
    check_confirm,
    check_mode_and_uma,
    delivery_status_on_get,
    journal_on_confirm,
    reached_status,
    uma_status,
)
from mrs.dlq_leases import (
    CONTEXT_HEADER,
    POSSIBLE_DUPLICATE_HEADER,
    DlqReaders,
    is_shared,
    passed_source,
)
from mrs.forwarding import Forwarding
from mrs.idempotency import APP_PREFIX, PURGE_INTERVAL_S, AppKeys, fingerprint, scoped_key
from mrs.journal_reserve import JournalReserve
from mrs.model import (
    DEAD_LETTER_QUEUE,
    DEFAULT_PUT_TIMEOUT_S,
    MRS_ACK_TYPE,
    MRS_CLASS,
    RETURNED_HEADER,
    Address,
    DeliveryMode,
    Psb,
    Status,
    Uma,
)
from mrs.protection.dead_letter import (
    DeadLetterProtection,
    DeadLetterRefused,
    dead_letter_protection,
)
from mrs.quarantine import QUARANTINE_EXTRA, record_problem
from mrs.queues import Entry, GetWaiter, TargetQueue, memory_quota_problem
from mrs.records import (
    DEAD_LETTER_HEADER,
    entry_from_record,
    idempotency_key,
    record_from_entry,
)
from mrs.seqspace import SeqAllocator

log = logging.getLogger("mrs.group")

UNSAFE_ACK_BEFORE_COMMIT = "ack-before-commit"
UNSAFE_SKIP_POSSDUPL = "skip-possdupl"
UNSAFE_POSSDUPL_ALWAYS = "possdupl-always"
UNSAFE_CONFIRM_WITHOUT_DELETE = "confirm-without-delete"
UNSAFE_FORGET_UNCONFIRMED_ON_DETACH = "forget-unconfirmed-on-detach"
UNSAFE_SWITCHES = frozenset(
    {
        UNSAFE_ACK_BEFORE_COMMIT,
        UNSAFE_SKIP_POSSDUPL,
        UNSAFE_POSSDUPL_ALWAYS,
        UNSAFE_CONFIRM_WITHOUT_DELETE,
        UNSAFE_FORGET_UNCONFIRMED_ON_DETACH,
    }
)
"""Broken builds the fault harness can switch on to show the checker catches them;
a server honours them only when given them (`GroupServer(unsafe=...)`; `mrs serve`
reads MRS_HARNESS_UNSAFE at the CLI edge)."""

BODIES_IN_MEMORY_PER_QUEUE_MAX = 1000
"""A journaled message further back in its queue than this keeps its body only on
disk (read back at delivery), so memory stays flat while a DQF backlog grows."""
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class Session(Protocol):
    id: int
    attached: TargetQueue | None

    def send(self, event: object) -> None: ...


class Timers(Protocol):
    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Callable[[], None]:
        """Run callback after delay_s; returns a function that cancels it."""
        ...


@dataclass(eq=False)
class PutReply:
    """Where the outcome of one put goes: the WF caller, an MRS_ACK, or nowhere (NN)."""

    group: Group
    session: Session
    request_id: int
    mode: DeliveryMode
    response_queue: Address
    seq: int = 0
    done: bool = False
    cancel_timer: Callable[[], None] = lambda: None
    on_done: Callable[[], None] = lambda: None
    """Called once the outcome is reported (e.g. forget a journaled MRS_ACK owed)."""
    stored_reply: bool = False
    """The put asked for its PutDone once stored, whatever its mode (a client SAF
    journal draining: it may delete its record only then)."""
    stored_answered: bool = False

    def stored(self, psb: Psb) -> None:
        """The message is durable here (DQF or SAF): answer a stored_reply put now."""
        if self.stored_reply and not self.stored_answered:
            self.stored_answered = True
            self.session.send(wire.PutDone(self.request_id, *psb.to_wire()))

    def report(self, psb: Psb) -> None:
        if self.done:
            return
        self.done = True
        self.cancel_timer()
        self.on_done()
        self.stored(psb)
        notification = self.mode.notification
        if notification == "WF" and not self.stored_reply:
            self.session.send(wire.PutDone(self.request_id, *psb.to_wire()))
        elif notification == "AK":
            self.group.send_mrs_ack(self.response_queue, psb)

    def time_out(self, timeout_s: float) -> None:
        if self.done:
            return
        self.done = True
        if self.stored_answered:
            return
        self.session.send(
            wire.Failure(
                self.request_id,
                Status.TIMEOUT,
                f"interest point {self.mode.interest_point} not reached in {timeout_s:g} s; "
                "the message may or may not have been stored",
            )
        )


@dataclass(eq=False)
class Group:
    bus: BusConfig
    config: GroupConfig
    store: JournalStore
    writer: GroupCommitWriter
    timers: Timers
    clock_ns: Callable[[], int] = time.time_ns
    queues: dict[int, TargetQueue] = field(default_factory=dict)
    dqf_count: int = 0
    dlj_count: int = 0
    """DLJ records, counted at start-up (jplay --remove may lower it on disk meanwhile)."""
    corrupt: list[str] = field(default_factory=list)
    quarantined: int = 0
    """Messages moved to the DLJ because they could not be delivered (mrs.quarantine)."""
    epoch: int = 0
    """How many times this group has started (status and logs; not part of seqs)."""
    _seqs: SeqAllocator | None = None
    app_keys: AppKeys | None = None
    reserve: JournalReserve | None = None
    """Refuses new messages before the journal is full (mrs.journal_reserve)."""
    _dedupe_waiting: dict[str, list[Callable[[Status, int, str], None]]] = field(
        default_factory=dict
    )
    _event_log_path: Path | None = None
    forwarding: Forwarding | None = None
    dlq_readers: DlqReaders = field(default_factory=DlqReaders)
    unsafe: frozenset[str] = frozenset()
    """Deliberately broken behaviours, for proving the checker (harness only)."""
    dead_letter_protection: DeadLetterProtection | None = None
    """The DLQ's AMS-style policy (mrs.protection.dead_letter), None without one."""

    def __post_init__(self) -> None:
        self.dead_letter_protection = dead_letter_protection(self.bus, self.config.id)
        self.forwarding = Forwarding(self)
        self.app_keys = AppKeys(self.store, self.limits.dedupe_window_s, self.clock_ns)
        self.reserve = JournalReserve.for_store(
            self.store, self.limits.journal_bytes_max, self.limits.message_bytes_max
        )
        for queue_config in self.config.queues.values():
            address = Address(self.config.id, queue_config.id)
            self.queues[queue_config.id] = TargetQueue(queue_config, address)
        self._event_log_path = self.config.data_dir / "events.jsonl"

    @property
    def limits(self):
        return self.config.limits

    # ------------------------------------------------------------------ recovery
    def recover(self) -> None:
        """Count this start, reserve seqs (mrs.seqspace), and reload every unconfirmed
        DQF message into its queue."""
        self._seqs = SeqAllocator(self.store, self.config.id)
        self._seqs.start()
        self.epoch = self._seqs.boots
        self.purge_dedupe_keys(now=True)
        self.dlj_count = self.store.count(Journal.DLJ)
        self.forwarding.recover()
        marks = {key: _U32.unpack(value)[0] for key, value in self.store.raw_items(Journal.MARKS)}
        recovered = 0
        for key, item in self.store.scan(Journal.DQF):
            if isinstance(item, CorruptRecord):
                self.corrupt.append(str(item))
                log.error("%s; left in place, not delivered", item)
                self.dqf_count += 1
                continue
            if (problem := record_problem(item)) is not None:
                self._quarantine_record(key, item, problem)
                continue
            self.dqf_count += 1
            queue = self.queues.get(item.target_queue)
            if queue is None:
                log.warning(
                    "DQF message %d for unconfigured queue %d kept, not delivered",
                    item.seq,
                    item.target_queue,
                )
                continue
            entry = entry_from_record(item)
            entry.times_delivered = marks.get(key, 0)
            if entry.response_queue is not None and entry.origin_group is None:
                entry.on_confirm = self._ack_after_restart
            if len(queue.pending) >= BODIES_IN_MEMORY_PER_QUEUE_MAX:
                entry.body = None
            queue.put_back(entry, front=False)
            recovered += 1
        log.info(
            "group %d epoch %d: recovered %d DQF messages", self.config.id, self.epoch, recovered
        )

    def _quarantine_record(self, key: bytes, record, problem: str) -> None:
        """At start-up: move a DQF record that cannot become a message to the DLJ."""
        record.reason = int(Status.BADPARAM)
        record.extra = {**(record.extra or {}), QUARANTINE_EXTRA: problem}
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(record.seq), record)
        batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)
        try:
            self.store.commit_now(batch)
        except JournalError as error:
            self.dqf_count += 1
            self.corrupt.append(f"dqf record {key.hex()}: {problem}")
            log.error(
                "DQF message %d cannot be delivered (%s) nor quarantined (%s); left in place",
                record.seq,
                problem,
                error,
            )
            return
        self.dlj_count += 1
        self.quarantined += 1
        log.error("DQF message %d quarantined to the DLJ: %s", record.seq, problem)

    def quarantine(self, queue: TargetQueue, entry: Entry, problem: str) -> None:
        """A message that cannot be delivered goes to the DLJ (reason BADPARAM, the
        problem in extra) in one transaction with its DQF removal; never fatal."""
        log.error("message %d on %s quarantined to the DLJ: %s", entry.seq, queue.address, problem)
        record = record_from_entry(entry, written_time_ns=self.clock_ns())
        record.reason = int(Status.BADPARAM)
        record.extra[QUARANTINE_EXTRA] = problem
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(entry.seq), record)
        if entry.journaled:
            key = queue_key(queue.address.queue, entry.seq)
            batch.delete(Journal.DQF, key).delete(Journal.MARKS, key)

        def written(error: JournalError | None) -> None:
            if error is not None:
                # Still in the DQF (if it was journaled): quarantined again after a restart.
                log.error("message %d could not be quarantined: %s", entry.seq, error)
                return
            self.quarantined += 1
            self.dlj_count += 1
            if entry.journaled:
                self.dqf_count -= 1

        self.writer.submit(batch, written)

    def next_seq(self) -> int:
        return self._seqs.next()

    # ------------------------------------------------------------------ attach
    def attach(self, session: Session, request: wire.Attach) -> None:
        if session.attached is not None:
            raise Refused(Status.BADPARAM, f"already attached to {session.attached.address}")
        address = self._resolve(request.queue)
        if address.group != self.config.id:
            raise Refused(
                Status.NOSUCHQUEUE,
                f"{request.queue} is in group {address.group}: attach to a queue of group "
                f"{self.config.id} (this server)",
            )
        queue = self.queues.get(address.queue)
        if queue is None:
            raise Refused(
                Status.NOSUCHQUEUE, f"group {self.config.id} has no queue {address.queue}"
            )
        if is_shared(queue):  # several DLQ readers at once (mrs.dlq_leases)
            self.dlq_readers.attach(queue, session.id, getattr(session, "peer", "?"))
        elif queue.attached_session is not None:
            raise Refused(Status.QUEUE_BUSY, f"queue {address} is attached by another program")
        else:
            queue.attached_session = session.id
        session.attached = queue
        session.send(wire.Attached(request.request_id, address.group, address.queue))

    def detach(self, session: Session) -> None:
        queue = session.attached
        if queue is None:
            return
        session.attached = None
        if is_shared(queue):
            returned = self.dlq_readers.detach(queue, session.id)
        else:
            returned = queue.detach()
            if UNSAFE_FORGET_UNCONFIRMED_ON_DETACH in self.unsafe:
                for entry in returned:
                    queue.pending.remove(entry)
                    queue.memory_count -= not entry.journaled
        if returned:
            log.info(
                "queue %s detached with %d unconfirmed messages; they will be redelivered",
                queue.address,
                len(returned),
            )

    # ------------------------------------------------------------------ put
    def put(self, session: Session, request: wire.Put) -> None:
        source = self._attached(session).address
        mode, action = check_mode_and_uma(request.delivery, request.uma)
        target = self._resolve(request.target)
        if len(request.body) > self.limits.message_bytes_max:
            raise Refused(
                Status.MSGTOOBIG,
                f"body of {len(request.body)} bytes exceeds message_bytes_max "
                f"{self.limits.message_bytes_max}",
            )
        key = idempotency_key(request.headers)  # refuse a malformed key before anything else
        own_header = (request.headers or {}).get(DEAD_LETTER_HEADER)
        if own_header is not None and (problem := header_problem(own_header)) is not None:
            raise Refused(Status.BADPARAM, problem)
        response_queue = self._resolve(request.resp_q) if request.resp_q else source
        if (
            mode.notification == "AK"
            and response_queue.group != self.config.id
            and response_queue.group not in self.forwarding.peers
        ):
            raise Refused(
                Status.NOSUCHQUEUE,
                f"response queue {response_queue}: group {response_queue.group} is not "
                f"linked to group {self.config.id}, so no MRS_ACK could reach it",
            )
        put_time_ns = self.clock_ns()
        headers = request.headers
        if headers is not None and CONTEXT_HEADER in headers:
            source, put_time_ns = self._passed_context(session, headers, put_time_ns)
            headers = {key: value for key, value in headers.items() if key != CONTEXT_HEADER}
        if key is not None:
            key = scoped_key(source, target, key)
            local = target.group == self.config.id and mode.recoverable
            if local and (conflict := self.app_keys.conflict(key, request.body)) is not None:
                raise Refused(Status.KEY_REUSED, conflict)
        seq = self.next_seq()
        reply = PutReply(self, session, request.request_id, mode, response_queue, seq)
        reply.stored_reply = bool((request.headers or {}).get(wire.REPLY_WHEN_STORED_HEADER))
        entry = Entry(
            seq=seq,
            body=request.body,
            source=source,
            target=target,
            delivery=mode,
            uma=action,
            msg_class=request.msg_class,
            msg_type=request.msg_type,
            priority=request.priority,
            correlation_id=request.correlation_id,
            put_time_ns=put_time_ns,
            headers=headers,
            dead_letter_header=own_header,
            account=getattr(session, "account", None),
        )
        if mode.notification == "WF":
            timeout_s = request.timeout_ms / 1000 if request.timeout_ms else DEFAULT_PUT_TIMEOUT_S
            reply.cancel_timer = self.timers.call_later(
                timeout_s, lambda: reply.time_out(timeout_s)
            )
        answer_now = mode.notification != "WF" and not reply.stored_reply
        if (
            mode.notification == "AK"
            and mode.interest_point == "CONF"
            and target.group != self.config.id
        ):
            # the MRS_ACK owed is journaled before the put is answered (mrs.ack_waits)
            self.forwarding.put_owing_ack(entry, reply, _accepted(session, request, answer_now))
            return
        if answer_now:
            session.send(
                wire.PutDone(request.request_id, Status.SUCCESS, Status.SUCCESS, seq, Status.UMA_NA)
            )
        if target.group != self.config.id:
            self.forwarding.put(entry, reply)
        elif mode.recoverable:
            self._put_recoverable(entry, reply, key)
        else:
            self._put_memory(entry, reply)

    def _passed_context(
        self, session: Session, headers: dict, put_time_ns: int
    ) -> tuple[Address, int]:
        """A DLQ reader forwarding a dead letter keeps its original sender and time."""
        if session.attached is None or not is_shared(session.attached):
            raise Refused(
                Status.BADPARAM, f"only a dead-letter queue reader may pass {CONTEXT_HEADER}"
            )
        source_text, original_ns, dlq_seq = passed_source(headers[CONTEXT_HEADER])
        self.dlq_readers.counted_put(session.id, dlq_seq)
        return self._resolve(source_text), original_ns or put_time_ns

    def _put_recoverable(self, entry: Entry, reply: PutReply, key: str | None) -> None:
        if entry.delivery.interest_point == "CONF":
            entry.on_confirm = lambda _entry: reply.report(
                Psb(Status.SUCCESS, Status.SUCCESS, entry.seq, Status.NO_UMA)
            )
            if entry.delivery.notification == "AK":
                # journaled with the message: the MRS_ACK is owed after a restart too
                entry.response_queue = reply.response_queue

        def outcome(status: Status, seq: int, reason: str) -> None:
            if status != Status.STORED:
                self.undeliverable(entry, reply, status, reason)
            elif entry.delivery.interest_point != "CONF" or seq != entry.seq:
                reply.report(Psb(Status.SUCCESS, Status.STORED, seq, Status.NO_UMA))
            else:
                reply.stored(Psb(Status.SUCCESS, Status.STORED, seq, Status.NO_UMA))

        keys = [key] if key is not None else []
        if UNSAFE_ACK_BEFORE_COMMIT in self.unsafe and entry.delivery.interest_point != "CONF":
            reply.report(Psb(Status.SUCCESS, Status.STORED, entry.seq, Status.NO_UMA))
        self.store_in_dqf(entry, keys, outcome)

    def store_in_dqf(
        self,
        entry: Entry,
        dedupe_keys: list[str],
        outcome: Callable[[Status, int, str], None],
        stream: object = None,
        guard: Callable[[], bool] | None = None,
    ) -> None:
        """Store a recoverable entry in this group's DQF and offer it to its queue once
        durable. `outcome(status, seq, reason)`: STORED with the seq stored (the first
        copy's, for a duplicate key), or the cause that makes it undeliverable
        (NO_DQF, DQF_FULL, MRS_RES_EXH, DQF_DEVICE_FAIL)."""
        queue = self.queues.get(entry.target.queue)
        if queue is None or not queue.config.recoverable:
            outcome(Status.NO_DQF, entry.seq, f"no DQF for target {entry.target}")
            return
        digest = fingerprint(entry.body)
        for key in dedupe_keys:
            if self._answer_duplicate(key, outcome, digest):
                return
        if self.reserve is not None and (full := self.reserve.accepts(len(entry.body or b""))):
            outcome(Status.MRS_RES_EXH, entry.seq, full)
            return
        if not self.forwarding.room.may_store(
            entry.origin_group, self.dqf_count, self.limits.dqf_messages_max
        ):  # full, or its free slots are held for other groups' waiting SAF drains
            outcome(
                Status.DQF_FULL,
                entry.seq,
                f"DQF holds dqf_messages_max={self.limits.dqf_messages_max}",
            )
            return
        self.dqf_count += 1
        entry.journaled = True
        record = record_from_entry(entry, written_time_ns=self.clock_ns())
        batch = WriteBatch.empty().put_record(
            Journal.DQF, queue_key(queue.address.queue, entry.seq), record
        )
        batch.stream, batch.guard = stream, guard
        for key in dedupe_keys:
            self._dedupe_waiting[key] = []
            if key.startswith(APP_PREFIX):
                self.app_keys.inflight[key] = digest
                value = self.app_keys.value(entry.seq, digest)
            else:
                value = _U64.pack(entry.seq)
            batch.put_raw(Journal.DEDUPE, key.encode(), value)

        def stored(error: JournalError | None) -> None:
            cause = Status.STORED
            reason = ""
            if error is not None:
                self.dqf_count -= 1
                self.forwarding.dqf_freed()
                entry.journaled = False
                full = isinstance(error, JournalFullError)
                cause = Status.MRS_RES_EXH if full else Status.DQF_DEVICE_FAIL
                if error is NOT_ATTEMPTED:
                    cause = Status.LINK_DOWN  # an earlier message of its link failed
                reason = str(error)
            for key in dedupe_keys:
                self.app_keys.inflight.pop(key, None)
                for waiting in self._dedupe_waiting.pop(key, []):
                    waiting(cause, entry.seq, reason)
            if error is None:
                if len(queue.pending) >= BODIES_IN_MEMORY_PER_QUEUE_MAX:
                    entry.body = None
                queue.offer(entry)
            outcome(cause, entry.seq, reason)

        self.writer.submit(batch, stored)

    def _answer_duplicate(
        self, key: str, outcome: Callable[[Status, int, str], None], digest: bytes
    ) -> bool:
        """A message whose dedupe key was already stored is answered with the first
        copy's seq and not stored again (one in flight: answered when it lands); an
        application key reused for another body is refused KEY_REUSED
        (mrs.idempotency); an expired one stores the message again."""
        if key in self._dedupe_waiting:
            if self.app_keys.inflight.get(key, digest) != digest:
                outcome(Status.KEY_REUSED, 0, "idempotency key reused for another body")
            else:
                self._dedupe_waiting[key].append(outcome)
            return True
        found = self.app_keys.lookup(key, digest)
        if found is None:
            return False
        seq, same = found
        if not same:
            outcome(Status.KEY_REUSED, seq, "idempotency key reused for another body")
        else:
            outcome(Status.STORED, seq, "")
        return True

    def purge_dedupe_keys(self, *, now: bool = False) -> None:
        """Delete expired application keys (and old unscoped ones); every
        PURGE_INTERVAL_S, and at start-up (`now`, before the writer runs)."""
        batch = self.app_keys.purge_batch()
        if batch is not None:
            log.info("purging %d expired idempotency keys", len(batch))
            if now:
                self.store.commit_now(batch)
            else:
                self.writer.submit(batch, lambda error: None)
        self.timers.call_later(PURGE_INTERVAL_S, self.purge_dedupe_keys)

    def _put_memory(self, entry: Entry, reply: PutReply) -> None:
        done = Psb(Status.SUCCESS, Status.SUCCESS, entry.seq, Status.NO_UMA)
        point = entry.delivery.interest_point
        if point == "DEQ":
            entry.on_dequeue = lambda _entry: reply.report(done)
        elif point == "ACK":
            entry.on_confirm = lambda _entry: reply.report(done)
        status, reason = self.enqueue_in_memory(entry)
        if not status.ok:
            self.undeliverable(entry, reply, status, reason)
        elif point == "MEM":
            reply.report(Psb(Status.SUCCESS, status, entry.seq, Status.NO_UMA))

    def enqueue_in_memory(self, entry: Entry) -> tuple[Status, str]:
        """Queue a nonrecoverable entry; ENQUEUED/UNATTACHEDQ, or why it cannot be."""
        queue = self.queues.get(entry.target.queue)
        if queue is None:
            return Status.NOSUCHQUEUE, f"no queue {entry.target}"
        attached = queue.attached_session is not None
        if not attached and not queue.config.permanent:
            return Status.NOTACTIVE, f"queue {entry.target} is not attached"
        if queue.memory_count >= queue.config.messages_max:
            return (
                Status.EXCEEDQUOTA,
                f"queue {entry.target} holds messages_max={queue.config.messages_max}",
            )
        if (problem := memory_quota_problem(queue, entry, self.config.guards)) is not None:
            return Status.EXCEEDQUOTA, problem
        queue.offer(entry)
        return reached_status(entry.delivery, attached), ""

    # ------------------------------------------------------------------ UMAs
    def undeliverable(self, entry: Entry, reply: PutReply, cause: Status, reason: str) -> None:
        """Take the entry's UMA and report cause + UMA status to the sender."""
        action = Uma(entry.uma)

        def finish(succeeded: bool) -> None:
            reply.report(Psb(Status.SUCCESS, cause, entry.seq, uma_status(action, succeeded)))

        if action is Uma.DISC:
            finish(True)
        elif action is Uma.DISCL:
            finish(self._log_event("discarded", entry, cause, reason))
        elif action is Uma.RTS:
            finish(self._return_to_sender(entry, reply.response_queue, cause, reason))
        elif action is Uma.DLQ:
            self.put_on_dead_letter_queue(entry, cause, reason, finish)
        elif action is Uma.DLJ:
            self._to_dead_letter_journal(entry, cause, finish)
        elif entry.target.group != self.config.id and entry.target.group in self.forwarding.peers:
            self.forwarding.store_in_saf(entry, lambda error: finish(error is None))
        else:
            # Store and forward is for another group's DQF; the local DQF is the store.
            log.error("UMA SAF for %s: no SAF towards the sender's own group", entry.target)
            finish(False)

    def _log_event(self, what: str, entry: Entry, cause: Status, reason: str) -> bool:
        line = json.dumps(
            {
                "time_ns": self.clock_ns(),
                "event": what,
                "seq": entry.seq,
                "sender": str(entry.source),
                "target": str(entry.target),
                "cause": cause.name,
                "reason": reason,
            }
        )
        try:
            with open(self._event_log_path, "a", encoding="utf-8") as event_log:
                event_log.write(line + "\n")
        except OSError as error:
            log.error("cannot write the event log %s: %s", self._event_log_path, error)
            return False
        return True

    def _return_to_sender(
        self, entry: Entry, response_queue: Address, cause: Status, reason: str = ""
    ) -> bool:
        """Queue a copy for the sender (MSGUNDEL) that says where it was going and why
        (the RETURNED_HEADER, read as Message.original_target / return_reason)."""
        queue = (
            self.queues.get(response_queue.queue)
            if response_queue.group == self.config.id
            else None
        )
        if queue is None or queue.memory_count >= queue.config.messages_max:
            return False
        returned = _copy_nonrecoverable(entry, target=response_queue)
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

    def put_on_dead_letter_queue(
        self,
        entry: Entry,
        cause: Status | int,
        reason: str,
        done: Callable[[bool], None] = lambda moved: None,
    ) -> bool:
        """Queue a copy of `entry` on this group's DLQ with a dead-letter header naming
        this group as the putter (MRS redirected it). Memory only, as in MessageQ,
        unless `dead_letter_queue_recoverable`: then the copy is journaled in the DQF
        and `done(True)` comes once it is durable. False (and done(False)) if the group
        has no DLQ or it is full."""
        queue = self.queues.get(DEAD_LETTER_QUEUE)
        if queue is None or queue.memory_count >= queue.config.messages_max:
            done(False)
            return False
        dead = _copy_nonrecoverable(entry, target=queue.address)
        if self.dead_letter_protection is not None:
            try:
                dead.body = self.dead_letter_protection.place(dead.body)
            except DeadLetterRefused as refused:
                log.warning("message %d not put on the DLQ: %s", entry.seq, refused)
                done(False)
                return False
        # MQDLH: put date/time are when it was put on the DLQ, not the original put's.
        header = dead_letter_header(cause, entry.target, self.config.name, self.clock_ns(), reason)
        dead.dead_letter_header = header
        if not queue.config.recoverable:
            dead.delivery_status = Status.SUCCESS
            queue.offer(dead)
            done(True)
            return True
        dead.headers = {**(entry.headers or {}), DEAD_LETTER_HEADER: header}
        self.store_in_dqf(dead, [], lambda status, _seq, _reason: done(status == Status.STORED))
        return True

    def _to_dead_letter_journal(
        self, entry: Entry, cause: Status, finish: Callable[[bool], None]
    ) -> None:
        if self.reserve is not None and (full := self.reserve.accepts(len(entry.body or b""))):
            log.error("message %d not dead-lettered: %s", entry.seq, full)
            finish(False)
            return
        if self.dlj_count >= self.limits.dlj_messages_max:
            log.error(
                "DLJ holds dlj_messages_max=%d: message %d not dead-lettered",
                self.limits.dlj_messages_max,
                entry.seq,
            )
            finish(False)
            return
        self.dlj_count += 1
        record = record_from_entry(entry, written_time_ns=self.clock_ns())
        record.reason = int(cause)
        batch = WriteBatch.empty().put_record(Journal.DLJ, seq_key(entry.seq), record)

        def written(error: JournalError | None) -> None:
            if error is not None:
                self.dlj_count -= 1
            finish(error is None)

        self.writer.submit(batch, written)

    def _ack_after_restart(self, entry: Entry) -> None:
        """A recovered AK_CONF message was confirmed: the MRS_ACK its sender asked for."""
        self.send_mrs_ack(
            entry.response_queue, Psb(Status.SUCCESS, Status.SUCCESS, entry.seq, Status.NO_UMA)
        )

    def send_mrs_ack(self, response_queue: Address, psb: Psb) -> None:
        """Queue an MRS_ACK (class 28, type -801, body = the PSB) for an AK sender; a
        response queue in another group gets it over the link, like any message."""
        remote = response_queue.group != self.config.id
        queue = None if remote else self.queues.get(response_queue.queue)
        if queue is None and not remote:
            log.error(
                "MRS_ACK for seq %d: group %d has no queue %s",
                psb.seq,
                self.config.id,
                response_queue,
            )
            return
        ack = Entry(
            seq=self.next_seq(),
            body=msgpack.packb(psb.to_wire()),
            source=Address(self.config.id, 0),
            target=response_queue,
            delivery=DeliveryMode.NN_MEM,
            msg_class=MRS_CLASS,
            msg_type=MRS_ACK_TYPE,
            put_time_ns=self.clock_ns(),
        )
        if remote:  # journaled until the peer has it (mrs.ack_waits.AckOutbox)
            self.forwarding.ack_outbox.send(ack.seq, response_queue, psb.to_wire(), ack.put_time_ns)
            return
        queue.offer(ack)

    # ------------------------------------------------------------------ get
    def get(self, session: Session, request: wire.Get) -> None:
        queue = self._attached(session)
        if queue.config.confirm == "implicit":
            self._confirm_implicitly(session, queue)
        if len(queue.unconfirmed) >= queue.config.unconfirmed_max:
            raise Refused(
                Status.EXCMAXUNCONF,
                f"{len(queue.unconfirmed)} messages unconfirmed on {queue.address} "
                f"(unconfirmed_max={queue.config.unconfirmed_max})",
            )
        while (entry := queue.take()) is not None:
            if entry.body is None and not self._load_body(queue, entry):
                continue
            if self._hand_over(session, request.request_id, queue, entry):
                return
        if request.timeout_ms == 0:
            raise Refused(Status.NOMOREMSG, f"no message on {queue.address}")
        waiter = GetWaiter(
            deliver=lambda arrived: self._hand_over(session, request.request_id, queue, arrived),
            session_id=session.id,
            request_id=request.request_id,
        )
        queue.park(waiter)
        if request.timeout_ms > 0:
            timeout_s = request.timeout_ms / 1000

            def expire() -> None:
                if queue.unpark(waiter):
                    session.send(
                        wire.Failure(
                            request.request_id,
                            Status.TIMEOUT,
                            f"no message on {queue.address} in {timeout_s:g} s",
                        )
                    )

            waiter.cancel_timer = self.timers.call_later(timeout_s, expire)

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
                session.send(
                    wire.Failure(request.request_id, Status.TIMEOUT, "get cancelled by the client")
                )
                return

    def _load_body(self, queue: TargetQueue, entry: Entry) -> bool:
        """Read a journaled body left on disk; False (and reported) if it is unusable."""
        key = queue_key(queue.address.queue, entry.seq)
        try:
            record = self.store.get(Journal.DQF, key)
        except CorruptRecord as corrupt:
            self.corrupt.append(str(corrupt))
            log.error("%s; left in place, not delivered", corrupt)
            return False
        if record is None:
            log.error("DQF message %d of %s vanished from the journal", entry.seq, queue.address)
            return False
        entry.body = record.body
        return True

    def _hand_over(
        self, session: Session, request_id: int, queue: TargetQueue, entry: Entry
    ) -> bool:
        """Deliver one entry to a get. A journaled entry's delivery count is made durable
        first, so a crash can never hide that it was delivered (POSSDUPL stays exact).
        False if the entry could not be delivered at all (quarantined): the get is
        still waiting for a message."""
        if len(queue.unconfirmed) >= queue.config.unconfirmed_max:
            queue.put_back(entry)
            session.send(
                wire.Failure(
                    request_id,
                    Status.EXCMAXUNCONF,
                    f"unconfirmed_max={queue.config.unconfirmed_max} reached",
                )
            )
            return True
        # A returned (RTS) or dead-lettered copy has a forced status and needs no confirm,
        # whatever its original mode (an ACK-mode copy would otherwise stay unconfirmed).
        leased = is_shared(queue)  # a DLQ get is a lease (mrs.dlq_leases)
        needs_confirm = leased or (entry.needs_confirm and entry.delivery_status is None)
        status = (not leased and entry.delivery_status) or delivery_status_on_get(
            needs_confirm, entry.times_delivered
        )
        if status == Status.CONFIRMREQ and (entry.headers or {}).get(POSSIBLE_DUPLICATE_HEADER):
            status = Status.POSSDUPL
        if leased:
            self.dlq_readers.leased(session.id, entry)
        if UNSAFE_SKIP_POSSDUPL in self.unsafe and status == Status.POSSDUPL:
            status = Status.CONFIRMREQ
        if UNSAFE_POSSDUPL_ALWAYS in self.unsafe and status == Status.CONFIRMREQ:
            status = Status.POSSDUPL
        try:  # built first: a field no client could have put must not kill the server
            event = delivery_event(request_id, entry, status)
        except (wire.ProtocolError, ValueError, TypeError) as error:
            self.quarantine(queue, entry, f"cannot be delivered: {error}")
            return False
        entry.times_delivered += 1
        if needs_confirm:
            queue.unconfirmed[entry.seq] = entry
        if not entry.journaled:
            session.send(event)
            if entry.on_dequeue is not None:
                entry.on_dequeue(entry)
            return True
        key = queue_key(queue.address.queue, entry.seq)
        batch = WriteBatch.empty().put_raw(Journal.MARKS, key, _U32.pack(entry.times_delivered))

        def marked(error: JournalError | None) -> None:
            if error is None:
                session.send(event)
                return
            entry.times_delivered -= 1  # never handed out: its first delivery is still due
            if queue.unconfirmed.pop(entry.seq, None) is not None:
                queue.put_back(entry)
            session.send(
                wire.Failure(request_id, Status.JOURNAL_FAIL, f"cannot record delivery: {error}")
            )
            self.serve_waiting_gets(queue)

        self.writer.submit(batch, marked)
        return True

    def serve_waiting_gets(self, queue: TargetQueue) -> None:
        """Hand waiting messages to parked gets as far as the unconfirmed cap allows."""
        queue.serve_waiters(lambda entry: entry.body is not None or self._load_body(queue, entry))

    def _confirm_implicitly(self, session: Session, queue: TargetQueue) -> None:
        for seq in list(queue.unconfirmed):
            self._confirm_entry(
                session,
                queue,
                queue.unconfirmed.pop(seq),
                None,
                0,
                journal_on_confirm(0, self.config.pcj_default),
            )

    # ------------------------------------------------------------------ confirm
    def confirm(self, session: Session, request: wire.Confirm) -> None:
        queue = self._attached(session)
        journal = journal_on_confirm(request.force_j, self.config.pcj_default)
        check_confirm(queue.config.confirm, queue.unconfirmed, request.seq)
        if is_shared(queue):
            self.dlq_readers.check_holder(session.id, request.seq)
            self.dlq_readers.removed(session.id, request.seq)
        entry = queue.unconfirmed.pop(request.seq)
        self._confirm_entry(
            session, queue, entry, request.request_id, request.confirm_value, journal
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
        def confirmed(error: JournalError | None) -> None:
            if error is not None:
                queue.unconfirmed[entry.seq] = entry
                _sort_unconfirmed(queue)
                status = (
                    Status.MRS_RES_EXH
                    if isinstance(error, JournalFullError)
                    else Status.JOURNAL_FAIL
                )
                if request_id is not None:
                    session.send(wire.Failure(request_id, status, f"confirm not recorded: {error}"))
                return
            if entry.journaled:
                self.dqf_count -= 1
                self.forwarding.dqf_freed()
            if request_id is not None:
                session.send(wire.Confirmed(request_id, entry.seq, Status.SUCCESS))
            if entry.on_confirm is not None:
                entry.on_confirm(entry)
            self.serve_waiting_gets(queue)

        if not entry.journaled:
            confirmed(None)
            return
        key = queue_key(queue.address.queue, entry.seq)
        batch = WriteBatch.empty().delete(Journal.DQF, key).delete(Journal.MARKS, key)
        if UNSAFE_CONFIRM_WITHOUT_DELETE in self.unsafe:
            batch = WriteBatch.empty()
        if journal:
            now_ns = self.clock_ns()
            record = record_from_entry(entry, written_time_ns=now_ns)
            record.confirm_value = confirm_value
            record.confirm_time_ns = now_ns
            record.extra["deliveries"] = entry.times_delivered  # POSSDUPL for the audit
            batch.put_record(Journal.PCJ, seq_key(entry.seq), record)
        notice = (
            entry.origin_group is not None
            and entry.delivery.interest_point == "CONF"
            and self.forwarding.add_notice(batch, entry.origin_group, "conf", entry.seq)
        )

        def confirmed_with_notice(error: JournalError | None) -> None:
            if error is None and notice:
                self.forwarding.notice_committed(entry.origin_group)
            confirmed(error)

        self.writer.submit(batch, confirmed_with_notice)

    # ------------------------------------------------------------------ status
    def status_info(self) -> dict:
        return {
            "group": self.config.id,
            "name": self.config.name,
            "epoch": self.epoch,
            "dqf_messages": self.dqf_count,
            "dedupe_keys": self.store.count(Journal.DEDUPE),
            "corrupt_records": list(self.corrupt),
            "quarantined": self.quarantined,
            "writer": self.writer.stats.as_dict(),
            "links": self.forwarding.status_info(),
            "dqf_held_for_drains": self.forwarding.room.status_info(),
            "dlq_readers": self.dlq_readers.status_info(),
            "queues": {
                str(queue.address): {
                    "name": queue.config.name,
                    "pending": len(queue.pending),
                    "unconfirmed": len(queue.unconfirmed),
                    "dqf_depth": len(queue.pending)
                    - queue.memory_count
                    + sum(1 for entry in queue.unconfirmed.values() if entry.journaled),
                    "attached": queue.attached_session is not None,
                }
                for queue in self.queues.values()
            },
        }

    # ------------------------------------------------------------------ helpers
    def _attached(self, session: Session) -> TargetQueue:
        if session.attached is None:
            raise Refused(Status.NOTATTACHED, "attach to a queue first")
        return session.attached

    def _resolve(self, text: str) -> Address:
        try:
            address = self.bus.resolve(text, self.config.id)
        except (LookupError, ValueError) as error:
            raise Refused(Status.NOSUCHQUEUE, str(error).strip("'\"")) from None
        if address.group not in self.bus.groups:
            raise Refused(Status.NOSUCHQUEUE, f"no group {address.group} on this bus")
        return address


def _accepted(
    session: Session, request: wire.Put, answer_now: bool
) -> Callable[[int, Status | None], None]:
    """How a put is answered once what it owes is durable: accepted (if its mode
    answers at once), or refused whatever its mode."""

    def answer(seq: int, refused: Status | None) -> None:
        if refused is not None:
            message = "could not journal the MRS_ACK owed for this put"
            session.send(wire.Failure(request.request_id, refused, message))
        elif answer_now:
            accepted = (Status.SUCCESS, Status.SUCCESS, seq, Status.UMA_NA)
            session.send(wire.PutDone(request.request_id, *accepted))

    return answer


def _sort_unconfirmed(queue: TargetQueue) -> None:
    ordered = sorted(queue.unconfirmed.items())
    queue.unconfirmed.clear()
    queue.unconfirmed.update(ordered)


def _copy_nonrecoverable(entry: Entry, target: Address) -> Entry:
    return Entry(
        seq=entry.seq,
        body=entry.body,
        source=entry.source,
        target=target,
        delivery=entry.delivery,
        uma=entry.uma,
        msg_class=entry.msg_class,
        msg_type=entry.msg_type,
        priority=entry.priority,
        correlation_id=entry.correlation_id,
        put_time_ns=entry.put_time_ns,
        headers=entry.headers,
    )


def delivery_event(request_id: int, entry: Entry, status: int) -> wire.Delivery:
    return wire.Delivery(
        request_id,
        entry.seq,
        entry.body,
        str(entry.source),
        str(entry.target),
        entry.msg_class,
        entry.msg_type,
        entry.priority,
        int(entry.delivery),
        int(status),
        entry.correlation_id,
        entry.put_time_ns,
        entry.dead_letter_header,
        entry.headers,
    )
