"""Room: a client's attach, detach and put — check it, number it, send it on its way.

The path of a recoverable put: validate -> allocate seq -> the DQF room journals it
-> when durable, it is offered to its queue and the interest point is reported (or
the confirm awaited, for CONF modes). A put for another group goes to the outbound
room; a nonrecoverable one is queued in memory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import cast

from msgspec.structs import astuple

from mrs import protocol as wire
from mrs.core.deadletter import own_header_problem
from mrs.core.delivery import AK as _AK
from mrs.core.delivery import CONF_POINT as _CONF
from mrs.core.delivery import STORED as _STORED_STATUS
from mrs.core.delivery import SUCCESS_INT as _SUCCESS
from mrs.core.delivery import UMA_NA_INT as _UMA_NA
from mrs.core.delivery import WF as _WF
from mrs.core.delivery import Refused, check_mode_and_uma, reached_status
from mrs.group.context import GroupContext, Session, attached_queue
from mrs.group.dlq_leases import CONTEXT_HEADER, DlqReaders, passed_source
from mrs.group.dqf import Dqf
from mrs.group.guarantees import KEPT, Guarantees
from mrs.group.idempotency import scoped_key
from mrs.group.memory_quota import memory_quota_problem
from mrs.group.outbound import Outbound
from mrs.group.put_deadlines import PutDeadlines
from mrs.group.reply import PutReply, SendAck
from mrs.group.sequence import Sequence
from mrs.group.shapes import (
    DEAD_LETTER_HEADER,
    Entry,
    PutFields,
    entry_from_put,
    headers_problem,
    idempotency_key,
    with_reply_queue,
)
from mrs.group.umas import Umas
from mrs.limits import ACKS_OWED_PER_PEER_MAX, DEDUPE_WAITERS_MAX
from mrs.model import DEFAULT_PUT_TIMEOUT_S, Address, Psb, Status
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import PUT_DONE

log = logging.getLogger("mrs.group")


@dataclass(eq=False)
class Intake:
    ctx: GroupContext
    sequence: Sequence
    dqf: Dqf
    umas: Umas
    outbound: Outbound
    dlq_readers: DlqReaders
    guarantees: Guarantees = KEPT
    """The rules of when a put is answered and what a detach gives back (mrs.group.guarantees)."""
    deadlines: PutDeadlines = field(init=False)
    _send_mrs_ack: SendAck = field(init=False)
    """`umas.send_mrs_ack`, bound once: every put's PutReply holds it, and reading it
    per put made a bound method each time (benchmarks/README.md)."""

    def __post_init__(self) -> None:
        self.deadlines = PutDeadlines(self.ctx.timers)
        self._send_mrs_ack = self.umas.send_mrs_ack

    # ------------------------------------------------------------------ attach
    def attach(self, session: Session, request: wire.Attach) -> None:
        ctx = self.ctx
        if session.attached is not None:
            raise Refused(Status.BADPARAM, f"already attached to {session.attached.address}")
        address = ctx.resolve(request.queue)
        if address.group != ctx.group_id:
            raise Refused(
                Status.NOSUCHQUEUE,
                f"{request.queue} is in group {address.group}: attach to a queue of group "
                f"{ctx.group_id} (this server)",
            )
        queue = ctx.queues.get(address.queue)
        if queue is None:
            raise Refused(Status.NOSUCHQUEUE, f"group {ctx.group_id} has no queue {address.queue}")
        if queue.shared:  # several DLQ readers at once (mrs.group.dlq_leases)
            self.dlq_readers.attach(
                queue, session.id, getattr(session, "program", ""), getattr(session, "peer", "?")
            )
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
        if queue.shared:
            returned = self.dlq_readers.detach(queue, session.id, self.ctx.writer)
        else:
            returned = self.guarantees.detach(queue)
        if returned:
            log.info(
                "queue %s detached with %d unconfirmed messages; they will be redelivered",
                queue.address,
                len(returned),
            )

    # ------------------------------------------------------------------ put
    def put(self, session: Session, request: wire.Put) -> None:
        """Check a put, number it, answer NN puts at once, and send it on its way.

        Every put of every client runs this: it makes one Entry and one PutReply and
        nothing else per put (no closures, no timer: WF timeouts share buckets). The
        Put's fields are read in one call (`astuple`): each attribute of a msgspec
        struct read from compiled code is a generic lookup, 359 ns for the twelve
        against 81 ns so (benchmarks/README.md).

        Long because those twelve fields are unpacked here, once, for the steps below
        rather than handed on to helpers one by one."""
        (
            request_id,
            target_text,
            body,
            delivery,
            uma,
            msg_class,
            msg_type,
            priority,
            timeout_ms,
            correlation_id,
            resp_q,
            request_headers,
        ) = cast(PutFields, astuple(request))
        ctx = self.ctx
        source = attached_queue(session).address
        mode, action = check_mode_and_uma(delivery, uma)
        target = ctx.resolve(target_text)
        response_queue = ctx.resolve(resp_q) if resp_q else source
        if resp_q and response_queue != source:  # the same queue: nothing to say
            request_headers = with_reply_queue(request_headers, response_queue)
        key, own_header = self._check_put(body, request_headers)
        notification = mode.notification
        if notification is _AK:
            self._check_ack_reachable(response_queue)
        put_time_ns = ctx.clock_ns()
        headers = request_headers
        passed: tuple[int | None] | None = None
        if headers is not None and CONTEXT_HEADER in headers:
            source, put_time_ns, passed = self._passed_context(session, headers, put_time_ns)
            headers = {key: value for key, value in headers.items() if key != CONTEXT_HEADER}
        if key is not None:
            key = self._scoped_key(source, target, key, mode.recoverable, body)
        seq = self.sequence.next()
        reply = PutReply(self._send_mrs_ack, session, request_id, mode, response_queue, seq)
        if request_headers:
            reply.stored_reply = bool(request_headers.get(wire.REPLY_WHEN_STORED_HEADER))
        entry = entry_from_put(
            seq,
            body,
            source,
            target,
            mode,
            action,
            msg_class,
            msg_type,
            priority,
            correlation_id,
            put_time_ns,
            own_header,
            headers,
            getattr(session, "account", None),
            own_header is None and headers is request_headers,  # trusted: see Entry.trusted
            getattr(session, "principal", None),  # who put it, with [auth] on
        )
        if passed is not None:
            # Counted only here, past every refusal (KEY_REUSED, QUEUE_BUSY, an unknown
            # sender): a refused put left no copy, and counted it brought its letter
            # back POSSDUPL (mrs.group.dlq_leases `counted_put`).
            self.dlq_readers.counted_put(session.id, passed[0])
            if passed[0] is not None:
                reply.on_report = partial(self.dlq_readers.put_answered, session.id, passed[0])
        if notification is _WF:
            timeout_s = timeout_ms / 1000 if timeout_ms else DEFAULT_PUT_TIMEOUT_S
            reply.deadline = self.deadlines.add(timeout_s, reply)
        elif notification is _AK and mode.interest_point is _CONF and target.group != ctx.group_id:
            # the MRS_ACK owed is journaled before the put is answered (mrs.group.acks)
            answer = _Accepted(session, request_id, answer_now=not reply.stored_reply)
            self.outbound.put_owing_ack(entry, reply, answer)
            return
        else:
            _Accepted(session, request_id, not reply.stored_reply)(
                self._answered_seq(key, body, seq, target), None
            )
        if target.group != ctx.group_id:
            self.outbound.put(entry, reply)
        elif mode.recoverable:
            self._put_recoverable(entry, reply, key)
        else:
            self._put_memory(entry, reply)

    def _scoped_key(
        self, source: Address, target: Address, key: str, recoverable: bool, body: bytes
    ) -> str:
        """A put's idempotency key in its sender's and target's scope; refused when a
        local recoverable put reuses it for another body, or while it is being stored."""
        key = scoped_key(source, target, key)
        if target.group == self.ctx.group_id and recoverable:
            if (conflict := self.dqf.app_keys.conflict(key, body)) is not None:
                raise Refused(Status.KEY_REUSED, conflict)
            if (busy := self.dqf.dedupe_busy(key)) is not None:
                raise Refused(Status.QUEUE_BUSY, busy)
        elif recoverable and self.outbound.saf_copy_busy(target.group, key, body):
            raise Refused(
                Status.QUEUE_BUSY,
                f"an earlier copy with this idempotency key is being stored in the SAF "
                f"for group {target.group}, and {DEDUPE_WAITERS_MAX} copies already wait "
                "for theirs: try again later",
            )
        return key

    def _answered_seq(self, key: str | None, body: bytes, seq: int, target: Address) -> int:
        """The seq an NN/AK put is answered with at once: its own, or, for a copy of a
        message this group stored under the same key and body, the first copy's (which
        its MRS_ACK names too). Why: a re-sent AK put was answered with a new seq that
        no message ever took, where docs/timeouts-and-duplicates.md promises the first
        copy's. (A copy for another group's queue, whose key that group holds, still
        gets its own: this group cannot know.)"""
        if key is None or target.group != self.ctx.group_id:
            return seq
        first = self.dqf.app_keys.stored_seq(key, body)
        return seq if first is None else first

    def _check_ack_reachable(self, response_queue: Address) -> None:
        """An AK put's MRS_ACK must be able to reach its response queue: a queue of this
        group that exists, is active (a temporary queue: attached) and has room
        (`messages_max`, as any put to it), or a queue of
        a linked group whose MRS_ACKs owed are under ACKS_OWED_PER_PEER_MAX. Why refuse
        now: an MRS_ACK for a queue that is not there is dropped, and the sender, told
        SUCCESS, waits for it for ever; one for a queue nobody reads would be held past
        its bound; one more for a group whose link has been down long is lost."""
        group_id = self.ctx.group_id
        if response_queue.group == group_id:
            queue = self.ctx.queues.get(response_queue.queue)
            if queue is None:
                raise Refused(
                    Status.NOSUCHQUEUE,
                    f"response queue {response_queue}: group {group_id} has no queue "
                    f"{response_queue.queue}, so no MRS_ACK could reach it",
                )
            if not queue.active:  # its MRS_ACK would be dropped (mrs.group.held_offers)
                raise Refused(
                    Status.NOTACTIVE,
                    f"response queue {response_queue} is temporary and not attached, so "
                    "no MRS_ACK could reach it",
                )
            if queue.memory_count >= queue.config.messages_max:
                # its MRS_ACKs are not being read: one more each put would grow it for ever
                raise Refused(
                    Status.EXCEEDQUOTA,
                    f"response queue {response_queue} holds messages_max="
                    f"{queue.config.messages_max}: get its MRS_ACKs first",
                )
        if response_queue.group != group_id and response_queue.group not in self.outbound.peers:
            raise Refused(
                Status.NOSUCHQUEUE,
                f"response queue {response_queue}: group {response_queue.group} is not "
                f"linked to group {group_id}, so no MRS_ACK could reach it",
            )
        if response_queue.group != group_id and (
            self.outbound.ack_outbox.owed.get(response_queue.group, 0) >= ACKS_OWED_PER_PEER_MAX
        ):  # its link is down, or its MRS_ACKs are not answered: this one would be lost
            raise Refused(
                Status.EXCEEDQUOTA,
                f"response queue {response_queue}: {ACKS_OWED_PER_PEER_MAX} MRS_ACKs already "
                f"wait for group {response_queue.group}: put again once its link is up",
            )

    def _check_put(self, body: bytes, headers: dict | None) -> tuple[str | None, dict | None]:
        """Refuse a put no mode could store; its idempotency key and own DLQ header."""
        limit = self.ctx.limits.message_bytes_max
        if len(body) > limit:
            raise Refused(
                Status.MSGTOOBIG,
                f"body of {len(body)} bytes exceeds message_bytes_max {limit}",
            )
        if not headers:
            return None, None
        key = idempotency_key(headers)  # refuse a malformed key before anything else
        own_header = headers.get(DEAD_LETTER_HEADER)
        if own_header is not None and (problem := own_header_problem(own_header)) is not None:
            raise Refused(Status.BADPARAM, problem)
        if (too_big := headers_problem(headers)) is not None:
            raise Refused(Status.MSGTOOBIG, too_big)
        return key, own_header

    def _passed_context(
        self, session: Session, headers: dict, put_time_ns: int
    ) -> tuple[Address, int, tuple[int | None]]:
        """A DLQ reader forwarding a dead letter keeps its original sender and time;
        the dead letter it names (`dlq_seq`), counted once the put is taken in."""
        if session.attached is None or not session.attached.shared:
            raise Refused(
                Status.BADPARAM, f"only a dead-letter queue reader may pass {CONTEXT_HEADER}"
            )
        source_text, original_ns, dlq_seq = passed_source(headers[CONTEXT_HEADER])
        return self.ctx.resolve(source_text), original_ns or put_time_ns, (dlq_seq,)

    def _put_recoverable(self, entry: Entry, reply: PutReply, key: str | None) -> None:
        confirmed_point = entry.delivery.interest_point is _CONF
        if confirmed_point:
            entry.on_confirm = reply.reporter(entry.seq)
            if entry.delivery.notification is _AK:
                # journaled with the message: the MRS_ACK is owed after a restart too
                entry.response_queue = reply.response_queue
        keys = [key] if key is not None else []
        outcome = _StoreOutcome(self.umas, self.dqf, entry, reply)
        self.guarantees.store(self.dqf, entry, keys, reply, outcome)

    def _put_memory(self, entry: Entry, reply: PutReply) -> None:
        point = entry.delivery.interest_point
        if point == "DEQ":
            entry.on_dequeue = reply.reporter(entry.seq)
        elif point == "ACK":
            entry.on_confirm = reply.reporter(entry.seq)
        status, reason = enqueue_in_memory(self.ctx, entry)
        if not status.ok:
            self.umas.undeliverable(entry, reply, status, reason)
        elif point == "MEM":
            reply.report(Psb(Status.SUCCESS, status, entry.seq, Status.NO_UMA))


def enqueue_in_memory(ctx: GroupContext, entry: Entry) -> tuple[Status, str]:
    """Queue a nonrecoverable entry; ENQUEUED/UNATTACHEDQ, or why it cannot be."""
    queue = ctx.queues.get(entry.target.queue)
    if queue is None:
        return Status.NOSUCHQUEUE, f"no queue {entry.target}"
    attached = queue.attached_session is not None
    if not queue.active:
        return Status.NOTACTIVE, f"queue {entry.target} is not attached"
    if queue.memory_count >= queue.config.messages_max:
        return (
            Status.EXCEEDQUOTA,
            f"queue {entry.target} holds messages_max={queue.config.messages_max}",
        )
    if (problem := memory_quota_problem(queue, entry, ctx.config.guards)) is not None:
        return Status.EXCEEDQUOTA, problem
    queue.offer(entry)
    return reached_status(entry.delivery, attached), ""


class _StoreOutcome:
    """The DQF's outcome(status, seq, reason) for one put: the answer once durable."""

    def __init__(self, umas: Umas, dqf: Dqf, entry: Entry, reply: PutReply) -> None:
        self.umas = umas
        self.dqf = dqf
        self.entry = entry
        self.reply = reply

    def __call__(self, status: Status, seq: int, reason: str) -> None:
        if status != _STORED_STATUS:
            self.umas.undeliverable(self.entry, self.reply, status, reason)
        elif seq != self.entry.seq:  # a copy: its dedupe key's first copy holds `seq`
            self._copy(seq)
        elif self.entry.delivery.interest_point is not _CONF:
            self.reply.report_stored(seq)
        else:
            self.reply.stored(Psb(Status.SUCCESS, Status.STORED, seq, Status.NO_UMA))

    def _copy(self, seq: int) -> None:
        """A copy is answered as its first copy was: a WF_CONF one at the first copy's
        confirm (`Dqf.await_confirm`) while the DQF holds it, any other now. A copy
        that asked to hear only when stored (a client SAF journal's drain) is answered
        now, whatever its mode: its message is stored. Why: a drain re-sending the
        WF_CONF records its killed predecessor had stored got no answer until the
        receiver confirmed them, so it never reached LINK_UP meanwhile (the client
        dropped the connection at each reply deadline and sent them again)."""
        mode = self.entry.delivery
        waits = mode.interest_point is _CONF and mode.notification is _WF
        if waits and not self.reply.stored_reply:
            reporter = self.reply.reporter(seq)
            if self.dqf.await_confirm(self.entry.target.queue, seq, reporter):
                return
        self.reply.report_copy(seq, self.umas.sequence.made_in_this_run(seq))


class _Accepted:
    """How an NN/AK put is answered once what it owes is durable: accepted (unless it
    asked to hear only when stored), or refused whatever its mode."""

    def __init__(self, session: Session, request_id: int, answer_now: bool) -> None:
        self.session = session
        self.request_id = request_id
        self.answer_now = answer_now

    def __call__(self, seq: int, refused: Status | None) -> None:
        if refused is not None:
            message = "could not journal the MRS_ACK owed for this put"
            self.session.send(wire.Failure(self.request_id, refused, message))
        elif self.answer_now:
            # plain ints: an IntEnum member fails the wire check's exact-int fast path
            self.session.answer(
                build_unchecked(PUT_DONE, self.request_id, _SUCCESS, _SUCCESS, seq, _UMA_NA)
            )
