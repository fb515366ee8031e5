"""The async client: one TCP connection at a time, many requests in flight, shared by
many tasks; it reconnects and re-attaches by itself, and (with `saf_journal=PATH`)
journals recoverable puts on the client's disk while the server is unreachable.

Every request carries an id; a receive task matches answers to the waiting callers,
and a send task writes all queued requests in one `send_all`. So 32 tasks putting
through one `Client` pipeline instead of taking turns.

What a caller sees when the connection drops (see docs/client-saf.md):
- a put that was sent but not answered raises `PutOutcomeUnknown`: the message may
  or may not be stored (a request not yet written raises plain `ConnectionLost`);
- other requests in flight raise `ConnectionLost`; new calls fail at once (LINK_DOWN
  for puts, NOTACTIVE for gets and confirms) until the background reconnect, with
  capped jittered backoff, has re-attached -- except recoverable puts on a client
  with a SAF journal, which are journaled (JOURNAL_ON) and drained in FIFO order,
  before any new put, once the server is back (then LINK_UP).
- A cancelled get (timeout, cancel scope) is withdrawn on the server (CancelGet); a
  message that was already on its way is kept and handed to the next get.
- Given several addresses (a replicated group's instances), recoverable puts carry an
  idempotency key and one the drop left unanswered is re-sent to the new active
  (clients.resend): the caller gets its real answer, not PutOutcomeUnknown.

`Client` is one whole class that holds its parts, one job each, and gives each its
collaborators when it builds them: the request table and the connection state
(clients.pending.Requests, with the gets that wait together, clients.get_pool), the
journal status and its listeners (clients.journal_status), the connection's loops
(clients.link.LinkLoops), dialing and reconnecting (clients.dialing.Dialer), and the
SAF journal path (clients.saf_drain.SafDrain). `connect` (clients.connecting) opens
and runs a Client through its `lifetime` part (`Lifetime`: open, install, run,
give_back_held), so it names no private of Client.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import trio

from clients.answer_waits import CONFIRM_OUTCOME, QUERY_OUTCOME, answer_wait_s, not_answered
from clients.batch import (
    PutItem,
    items_of,
    put_one_by_one,
    send_batches,
    send_batches_resent,
)
from clients.confirm_batch import confirm_many, confirm_values_of, confirmed_problem, held_first
from clients.dialing import Attachment, Dialer, Dialing
from clients.errors import (
    BadParameter,
    BadSequence,
    ConnectionLost,
    JournalFailed,
    MrsError,
    PutOutcomeUnknown,
    ReplyTimeout,
    error_for,
)
from clients.get_pool import keep_asked
from clients.journal_remote import PcjState, RemoteJournalReader, open_remote, set_pcj
from clients.journal_status import JournalEvent, JournalStatus, RefusedRecord
from clients.link import LinkLoops, _Link
from clients.lookup import locate, pending, pending_texts, queue_text
from clients.pending import Requests
from clients.reconnect import Reconnect
from clients.requests import (
    body_bytes,
    built,
    confirm_request,
    get_request,
    get_timeout_ms,
    headers_problem,
    put_reply_wait_s,
    put_request,
    put_timeout_ms,
    refuse_bad_pair,
)
from clients.resend import Resender
from clients.saf_drain import CLIENT_SAF_SEQ_HEADER as CLIENT_SAF_SEQ_HEADER  # old path
from clients.saf_drain import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER  # old path
from clients.saf_drain import SafDrain, _psb
from clients.saf_journal import REFUSED_LISTED_DEFAULT, ClientJournal
from clients.selective import get_selected, get_wait_ms, time_left_s
from mrs import protocol as wire
from mrs.core.selection import Selection
from mrs.limits import (
    ADMIN_REQUEST_WAIT_S,
    CLIENT_REQUEST_WAIT_S_DEFAULT,
    CLIENT_RESEND_WAIT_S,
    HEARTBEAT_S_DEFAULT,
    READ_AHEAD_MAX,
    REPLY_GRACE_S,
)
from mrs.protocol.admin_events import admin_outcome

if TYPE_CHECKING:
    from clients.protection import Protection
from mrs.model import (
    Address,
    DeliveryMode,
    ForceJrn,
    Message,
    Psb,
    Status,
    Uma,
)
from mrs.protection.errors import ProtectionError

log = logging.getLogger("clients")
T = TypeVar("T")

_RECOVERABLE_MODES = frozenset(mode for mode in DeliveryMode if mode.recoverable)
_LINK_DOWN, _NOTACTIVE = Status.LINK_DOWN, Status.NOTACTIVE
"""Looked up once: an enum member read through its class costs ~50 ns, and a put, a
get and a confirm each name one (benchmarks/README.md)."""


class Client:
    """A connection attached to one queue: put anywhere, get and confirm from it."""

    def __init__(
        self,
        address: str,
        queue: str | Address | None,
        program: str,
        *,
        reconnect: Reconnect | None = None,
        connect_timeout_s: float = 10.0,
        open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
        journal: ClientJournal | None = None,
        heartbeat_s: float | None = HEARTBEAT_S_DEFAULT,
        protection: Protection | None = None,
        read_ahead_max: int = READ_AHEAD_MAX,
        request_timeout_s: float = CLIENT_REQUEST_WAIT_S_DEFAULT,
    ) -> None:
        self.address = address
        self.request_timeout_s = request_timeout_s
        """How long confirm, confirm_many, status, locate and pending wait for their
        answer without a `timeout=` of their own (clients.answer_waits)."""
        self.protection = protection
        self.refused_unconfirmed: list[int] = []
        """With protection: refused messages moved to the DLQ whose confirm an in-order
        queue held back; confirmed after the next confirms (clients.protection)."""
        self.refused_unmoved: dict[int, tuple[int, Message, ProtectionError]] = {}
        """With protection: refused messages the DLQ put failed for, moved again
        before the next get (clients.protection.Protection.retry_unmoved)."""
        """Seals puts to / checks gets from protected queues (clients.protection)."""
        queue_text = None if queue is None else str(queue)
        self._program = program
        self._journal = journal
        self._status = JournalStatus(journal is not None)
        self._attachment = Attachment()
        self._requests = Requests(address, self._status, self.confirm)
        self._requests.gets.read_ahead_max = read_ahead_max  # checked by `connect`
        self._drain = (
            None
            if journal is None
            else SafDrain(journal, self._requests, self._status, self._attachment, queue_text)
        )
        self._loops = LinkLoops(
            address, heartbeat_s, self._requests, self._status, journal, self._drain
        )
        dialing = Dialing(
            address,
            queue_text,
            program,
            connect_timeout_s,
            open_stream or trio.open_tcp_stream,
            reconnect,
            "" if journal is None else journal.journal_id,
            None if journal is None else journal.check_home,
        )
        self._dialer = Dialer(dialing, self._requests, self._status, self._attachment, self._loops)
        self._resender = Resender(self.wait_connected) if "," in address else None
        """A replicated group's instances (several addresses): recoverable puts get an
        idempotency key and are re-sent after a failover (clients.resend)."""
        self.attach_status: Status = Status.SUCCESS
        """SUCCESS, or JOURNAL_ON when the server was unreachable at attach."""
        self.lifetime = Lifetime(self._dialer, self._loops, self._status, self._requests)
        """What `connect` drives (package-internal; an application never calls it)."""

    # ------------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self._requests.link is not None

    @property
    def group_id(self) -> int:
        return self._attachment.group_id

    @property
    def group_name(self) -> str:
        return self._attachment.group_name

    @property
    def held(self) -> tuple[Message, ...]:
        """Messages the server delivered to this client that no get has taken yet
        (read-ahead, or a Delivery that came after its caller gave up). A closing
        client gives back what it can; what is left here comes back POSSDUPL."""
        return tuple(self._requests.held)

    def hold_again(self, messages: Sequence[Message], reconnects: int | None = None) -> None:
        """Messages a caller was handed and never saw (a blocking get interrupted as its
        answer came, clients.sync): held again, first in line, so every rule of held
        messages applies to them (taken first; passed over by a selective get on an
        implicit queue only by refusal; given back at close; counted by `pending`).
        Why: kept apart, a selective Get confirmed them unseen and a close lost the
        memory-only ones. Those that need a confirm are dropped while the connection
        is down, or once it is another than the one they came on (`reconnects`: its
        count then; a drop and a reconnect between the answer and the interrupt left
        a copy whose confirm failed BADSEQ, handed out before the group's POSSDUPL
        one): the group delivers them again, POSSDUPL. Not with `protection`: held
        messages are opened when taken, and these are open already."""
        requests = self._requests
        moved = reconnects is not None and reconnects != self.reconnects
        if moved or requests.link is None or requests.broken is not None:
            messages = [message for message in messages if not message.needs_confirm]
        requests.held.extendleft(reversed(messages))
        requests.gets.serve_held()  # a get already waiting (another thread's) takes it

    @property
    def message_bytes_max(self) -> int:
        """The server's body limit, from its Welcome (0 = unknown)."""
        return self._attachment.message_bytes_max

    @property
    def queue(self) -> Address | None:
        """The attached queue, once attached (None: not yet, or queue=None)."""
        return self._attachment.queue

    @property
    def reconnects(self) -> int:
        """Connections opened again after a drop."""
        return self._dialer.reconnects

    @property
    def resent_puts(self) -> int:
        """Puts re-sent after a lost connection under their idempotency keys (a client
        of a replicated group: clients.resend); 0 for a single server."""
        return 0 if self._resender is None else self._resender.resent

    @property
    def journal_status(self) -> Status | None:
        """None without a SAF journal; JOURNAL_ON while recoverable puts are journaled
        (server unreachable, or the backlog still draining); LINK_UP once drained;
        JOURNAL_FAIL when records left in the journal cannot be read (not sent)."""
        return self._status.status

    @property
    def journal_backlog(self) -> int:
        """Records in the client SAF journal not yet stored by the server."""
        return 0 if self._journal is None else self._journal.count

    def add_journal_listener(self, listener: Callable[[JournalEvent], None]) -> None:
        """Call `listener(JournalEvent)` on every journal status change and drain."""
        self._status.listeners.append(listener)

    @property
    def journal_refused(self) -> int:
        """Journaled puts the group refused for good at drain time, kept aside in the
        client SAF journal (docs/client-saf.md, "Refused records")."""
        return 0 if self._journal is None else self._journal.refused_count

    def refused_records(self, limit: int = REFUSED_LISTED_DEFAULT) -> list[RefusedRecord]:
        """The journaled puts kept aside as refused, oldest first (at most `limit`)."""
        return self._saf_journal("refused_records").refused_records(limit)

    async def redrive_refused(self, seqs: Collection[int] | None = None) -> dict[int, int]:
        """Send refused records (all, or those of `seqs`) again, behind the backlog,
        each under a new client seq: {old seq: new seq}."""
        moved = await self._saf_journal("redrive_refused").redrive(seqs)
        if moved and self._drain is not None:
            self._drain.redriven()
        return moved

    async def discard_refused(self, seqs: Collection[int]) -> int:
        """Drop the refused records of `seqs` for good (logged); how many."""
        return await self._saf_journal("discard_refused").discard(seqs)

    def _saf_journal(self, what: str) -> ClientJournal:
        if self._journal is None:
            raise BadParameter(
                Status.BADPARAM, f"{what}: this client has no SAF journal (saf_journal=PATH)"
            )
        return self._journal

    async def wait_journal_status(self, status: Status) -> None:
        """Return once journal_status is `status` (e.g. LINK_UP after a drain).
        Raises JournalFailed if the journal failed (JOURNAL_FAIL) meanwhile, and
        BadParameter at once for a status that can never come (no journal)."""
        self._status.check_wanted(status)
        while self._status.status != status:
            self._requests.raise_if_broken()
            if self._status.status == Status.JOURNAL_FAIL:
                raise JournalFailed(Status.JOURNAL_FAIL, self._status.failure)
            await self._status.changed.wait()

    def closed(self) -> None:
        """Its `connect` block ended: every later call, and any still waiting for a
        connection, raises ConnectionLost("client closed") at once (before, they
        waited for a reconnect that would never come, up to a minute each)."""
        self._requests.broken = ConnectionLost(Status.LINK_DOWN, "client closed")
        self._status.wake()

    async def wait_connected(self) -> None:
        """Return once a connection is attached (raises if the client gave up)."""
        while self._requests.link is None:
            self._requests.raise_if_broken()
            await self._status.changed.wait()

    async def _linked_within(self, wait_s: float, what: str) -> float:
        """`_linked` for a call bounded by `wait_s`: what is left of it."""
        left_s = await self._linked(wait_s, what)
        return wait_s if left_s is None else left_s

    async def _linked(self, timeout: float | None, what: str) -> float | None:
        """A call that found no connection: with several addresses (a replicated group,
        whose client reconnects to the new active by itself) it waits for the next
        connection within its own `timeout` (None: CLIENT_RESEND_WAIT_S, a put's bound),
        as a put does and as IBM MQ's reconnecting clients block their calls; what is
        left of `timeout`. On one address, or when none came, NOTACTIVE as before (and
        a client that gave up raises why, from `wait_connected` or `require_link`)."""
        requests = self._requests
        if requests.link is None and self._resender is not None and timeout != 0:
            started_s = trio.current_time()
            with trio.move_on_after(CLIENT_RESEND_WAIT_S if timeout is None else timeout):
                await self.wait_connected()
            timeout = time_left_s(timeout, started_s)
        await requests.linked(_NOTACTIVE, what)
        return timeout

    # ------------------------------------------------------------------ API
    async def put(
        self,
        body: bytes,
        target: str | Address,
        *,
        delivery: DeliveryMode = DeliveryMode.WF_DQF,
        uma: Uma | None = None,
        msg_class: int = 0,
        msg_type: int = 0,
        priority: int = 0,
        timeout: float | None = None,
        correlation_id: bytes = b"",
        resp_q: str | Address | None = None,
        headers: dict | None = None,
        protect: bool = True,
    ) -> Psb:
        """Send a message; returns the PSB. Raises MrsError if the put itself failed.

        A returned PSB may still report that the message could not reach its interest
        point (`psb.delivery_status` < 0) and what the UMA did (`psb.uma_status`).
        timeout (seconds) bounds how long a WF put blocks; None or 0 = the 30 s
        default (0 means the default in MessageQ too, so ported code keeps working).
        uma None picks DISC for nonrecoverable modes and DLJ for recoverable ones, so
        a recoverable message that cannot be stored still lands somewhere durable.
        With a SAF journal and journal_status JOURNAL_ON, a recoverable put is
        journaled: psb.status is JOURNAL_ON and psb.seq the client journal's seq.
        With `protection`, a put to a protected queue is signed/encrypted here first
        (protect=False sends the body as it is).
        With several addresses (a replicated group), a recoverable put carries an
        idempotency key and is re-sent after a failover (clients.resend).
        Long because the per-put path stays inline: a call more is a cost per put.
        """
        attachment = self._attachment
        if type(body) is not bytes:  # a bytearray or memoryview copied, else BADPARAM
            body = body_bytes(body)
        if type(target) is not str:  # an Address; else BADPARAM ("None" was a queue name)
            target = queue_text(target, "put")
        if resp_q is not None and type(resp_q) is not str:
            resp_q = queue_text(resp_q, "put resp_q")
        if self.protection is not None and protect:
            body = self.protection.seal_for(target, body, attachment.group_id)
        body_bytes_max = attachment.message_bytes_max
        if body_bytes_max and len(body) > body_bytes_max:
            raise _too_big(len(body), body_bytes_max)
        if headers is not None and (too_big := headers_problem(headers)) is not None:
            raise error_for(Status.MSGTOOBIG, too_big)  # its frame would end the connection
        if uma is None and delivery in _RECOVERABLE_MODES:
            uma = Uma.DLJ
        timeout_ms = put_timeout_ms(timeout)  # 0: the default; a tiny one stays positive
        resender = self._resender
        if resender is not None and delivery in _RECOVERABLE_MODES:
            headers = resender.keyed(headers)
        # Built (and so checked: types and ranges) once, whether it is sent now or
        # journaled and sent at drain time (or re-sent after a failover).
        requests = self._requests
        request = put_request(
            requests.next_id(),
            str(target),
            body,
            delivery,
            uma or 0,
            msg_class,
            msg_type,
            priority,
            timeout_ms,
            correlation_id,
            str(resp_q) if resp_q is not None else "",
            headers,
        )
        try:
            drain = self._drain  # there is one when there is a SAF journal
            if (
                drain is not None
                and delivery in _RECOVERABLE_MODES
                and self._status.status == Status.JOURNAL_ON
            ):
                return await drain.put_journaled(request)
            if requests.link is None or requests.broken is not None:  # else no call: per request
                refuse_bad_pair(request.delivery, request.uma)  # the mistake before the link
                await requests.linked(_LINK_DOWN, "put")  # a checkpoint before LINK_DOWN
            reply = await requests.request(request, put_reply_wait_s(timeout), "put")
        except ConnectionLost as lost:  # a `try` costs nothing until it catches
            if delivery not in _RECOVERABLE_MODES:
                raise
            if (
                self._drain is not None
                and not isinstance(lost, PutOutcomeUnknown)
                and self._status.status == Status.JOURNAL_ON
            ):  # lost before it was sent: journaled, as a put made a moment later is
                return await self._drain.put_journaled(request)
            if resender is None:
                raise
            return await resender.resend(lost, lambda: self._send_put(request, timeout), len(body))
        return _psb(reply)

    async def _send_put(self, request: wire.Put, timeout: float | None) -> Psb:
        """A re-send of a built recoverable put of a replicated group's client (what
        `put` does inline the first time: no coroutine more per put): journaled
        while the SAF journal is on, else over the connection; its PSB."""
        requests = self._requests
        drain = self._drain  # there is one when there is a SAF journal
        if drain is not None and self._status.status == Status.JOURNAL_ON:
            return await drain.put_journaled(request)
        if requests.link is None or requests.broken is not None:  # else no call: per request
            await requests.linked(_LINK_DOWN, "put")
        reply = await requests.request(request, put_reply_wait_s(timeout), "put")
        return _psb(reply)

    async def put_many(self, items: Sequence[PutItem]) -> list[Psb | MrsError]:
        """Send many messages in few frames (clients.batch); one result per item, in
        order: its Psb, or the MrsError that put alone would have raised (returned in
        its place, not raised: one refused put never fails the others).
        With several addresses (a replicated group), recoverable items carry
        idempotency keys and those a failover left unanswered are re-sent
        (clients.resend)."""
        items = items_of(items, "put_many")
        if self._journal is not None:
            return await put_one_by_one(self, items)
        if self._resender is not None:
            return await send_batches_resent(self, self._requests, self._resender, items)
        return await send_batches(self, self._requests, items)

    async def get(self, timeout: float | None = None, select: Selection | None = None) -> Message:
        """The next message of the attached queue. timeout None waits forever, 0 polls.
        select: the first message that matches it (mrs.core.selection; a selective
        get, clients.selective), highest priority first as always.

        Raises MrsTimeout (TIMEOUT) or NoMoreMessages (NOMOREMSG) when none came.
        Cancelling a get (a cancel scope, KeyboardInterrupt in the sync client) takes
        it back on the server; a message already on its way goes to the next get.
        Gets that wait at the same time share GetBatch requests (clients.get_pool);
        a poll (timeout 0) is one Get.
        """
        requests = self._requests
        timeout_ms = get_timeout_ms(timeout)  # a bad one refused before anything waits
        if self.protection is not None:
            self.protection.refuse_reading(self.queue)
            if self.refused_unmoved:  # refused again until the DLQ takes it
                await self.protection.retry_unmoved(self)
        if select is not None:
            linked = functools.partial(self._linked, what="get")
            selected = await get_selected(requests, select, timeout, None, self.queue, linked)
            return await self._checked(selected[0])
        if requests.held:  # read ahead (MRS_ACKs): no coroutine of `_checked` without protection
            held = requests.held.popleft()
            return held if self.protection is None else await self._checked(held)
        if requests.link is None or requests.broken is not None:  # else no call: per request
            timeout = await self._linked(timeout, "get")
        gets = requests.gets
        if (timeout is None or timeout > 0) and not gets.refused:  # else: checked below
            pooled = await gets.get(timeout)
            if pooled is not None:
                if self.protection is None:
                    return pooled
                return await self.protection.deliver(self, pooled)
        if requests.cancelled_gets_outstanding:
            timeout = await self._after_given_up_gets(timeout)
            if requests.held:  # a given-up get brought it: first, and no Get confirms it
                return await self._checked(requests.held.popleft())
        timeout_ms = get_wait_ms(timeout)  # what `_linked` and the wait left of it
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        request_id = requests.next_id()
        requests.reserve_get(request_id, 1)
        request = get_request(request_id, timeout_ms)
        try:
            message = requests.message(await requests.request(request, wait_s, "get"))
        finally:
            requests.get_answered(request_id)
        if requests.held:  # held while it waited: delivered before it (`older_first`)
            message = requests.older_first([message])[0]
        if self.protection is None:  # no second await on the common path
            return message
        return await self.protection.deliver(self, message)

    async def get_many(
        self, count_max: int, timeout: float | None = None, select: Selection | None = None
    ) -> list[Message]:
        """Up to count_max messages of the attached queue in one request (a prefetch:
        mrs.group.batch_get): those ready now, or the first to arrive within timeout
        with whatever else is ready then. Each is delivered as by `get` (confirm it
        the same way; unconfirmed when the connection drops, it comes again marked
        POSSDUPL). Raises as `get` does when none came. With `protection`, one message
        per call (each is verified on its own); on a queue that confirms implicitly the
        server refuses it (BadParameter): use `get`. select: only messages it matches."""
        requests = self._requests
        if select is not None and self.protection is None:
            linked = functools.partial(self._linked, what="get_many")
            return await get_selected(requests, select, timeout, count_max, None, linked)
        if select is not None:  # with protection: one message per call
            return [await self.get(timeout, select)]
        # A bad timeout refused whether messages are held or not, as `get` refuses it:
        # before, one was refused only once the held (read-ahead) messages ran out.
        get_timeout_ms(timeout)
        if not requests.held and requests.cancelled_gets_outstanding:
            built(wire.GetBatch, 1, count_max, 0)  # a bad count refused before any wait
            timeout = await self._after_given_up_gets(timeout)  # what they bring: held
        if requests.held:
            built(wire.GetBatch, 1, count_max, 0)  # a bad count refused, held messages or not
            held = [requests.held.popleft() for _ in range(min(count_max, len(requests.held)))]
            if self.protection is None:
                return held
            requests.held.extendleft(reversed(held[1:]))
            return [await self._checked(held[0])]
        if self.protection is not None:
            return [await self.get(timeout)]
        if requests.link is None or requests.broken is not None:
            timeout = await self._linked(timeout, "get_many")
        timeout_ms = get_wait_ms(timeout)
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        request_id = requests.next_id()
        request = built(wire.GetBatch, request_id, count_max, timeout_ms)  # refuses a bad count
        count = requests.reserve_get(request_id, count_max)
        try:
            if count < count_max:  # the room for held messages is short: ask for fewer
                request = built(wire.GetBatch, request_id, count, timeout_ms)
            reply = await requests.request(request, wait_s, "get")
        finally:
            requests.get_answered(request_id)
        messages = [requests.message(delivery) for delivery in reply.deliveries]
        if len(messages) <= count:
            return requests.older_first(messages)
        return _at_most(requests, messages, count)

    async def _after_given_up_gets(self, timeout: float | None) -> float | None:
        """Before a get sends a request: wait for the answers of the gets given up
        before (`Requests.cancelled_gets_answered`), within the get's own timeout; what
        is left of it. A message one brought is then held and taken first: no Get is
        sent to confirm it implicitly before the application saw it, and no get_many
        or poll is answered without it."""
        requests = self._requests
        started_s = trio.current_time()
        await requests.cancelled_gets_answered(None if timeout is None else timeout + REPLY_GRACE_S)
        return time_left_s(timeout, started_s)

    async def _checked(self, message: Message) -> Message:
        """With `protection`: verified/decrypted, or refused (ProtectionRefused)."""
        if self.protection is None:
            return message
        return await self.protection.deliver(self, message)

    async def confirm(
        self,
        seq: int,
        confirm_value: int = 0,
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        timeout: float | None = None,
    ) -> None:
        """Confirm a CONFIRMREQ/POSSDUPL message: the MRS forgets it (and journals it
        to the PCJ if asked). Waits at most `timeout` seconds (None: the connection's
        `request_timeout_s`, 60 s unless `connect` was given another), then raises
        ReplyTimeout: the confirm may still be recorded (clients.answer_waits)."""
        requests = self._requests
        wait_s = self.request_timeout_s
        if timeout is not None:
            wait_s = answer_wait_s(timeout, wait_s, "confirm")
        left_s = wait_s
        if requests.link is None or requests.broken is not None:  # else no call: per request
            left_s = await self._linked_within(wait_s, "confirm")
        request = confirm_request(requests.next_id(), seq, confirm_value, force_j)
        try:
            reply = await requests.request(request, left_s, "confirm")
        except ReplyTimeout:
            what = f"confirm of message {seq}"
            raise not_answered(what, self.address, wait_s, CONFIRM_OUTCOME) from None
        except BadSequence as refused:  # behind a message held unseen? (say so)
            raise held_first(refused, requests.held) from None
        if (problem := confirmed_problem(cast(wire.Confirmed, reply), seq)) is not None:
            raise problem
        if self.refused_unconfirmed:  # what an in-order queue held back (with protection)
            from clients.protection import confirm_refused

            await confirm_refused(self)

    async def confirm_many(
        self,
        seqs: Sequence[int],
        force_j: ForceJrn = ForceJrn.DEFAULT_JRN,
        *,
        confirm_values: Sequence[int] | None = None,
        timeout: float | None = None,
    ) -> list[MrsError | None]:
        """Confirm many messages with one wait (clients.confirm_batch): every Confirm
        is sent at once and the server commits them together. One result per seq, in
        order: None if confirmed, else the MrsError `confirm` would have raised.
        `confirm_values`: one per seq, as `confirm(confirm_value=)` takes (0 each).
        The whole batch waits at most `timeout` (as `confirm`'s): a confirm left
        unanswered then is a ReplyTimeout in its place (it may still be recorded)."""
        seqs = items_of(seqs, "confirm_many")
        wait_s = answer_wait_s(timeout, self.request_timeout_s, "confirm_many")
        if self._requests.link is None or self._requests.broken is not None:
            wait_s = await self._linked_within(wait_s, "confirm_many")
        if self.refused_unconfirmed:  # refused messages an in-order queue holds back
            values = confirm_values_of(seqs, confirm_values)
            return await self._confirm_in_turn(seqs, force_j, values, wait_s)
        return await confirm_many(self._requests, seqs, force_j, confirm_values, wait_s)

    async def _confirm_in_turn(
        self, seqs: Sequence[int], force_j: ForceJrn, values: Sequence[int], wait_s: float
    ) -> list[MrsError | None]:
        """`confirm_many` one `confirm` at a time, so each held refused message is
        confirmed as soon as the queue allows it (between the application's): sent
        together, the seqs after one were answered BADSEQ, as was every later confirm.
        Each waits at most `wait_s`."""
        results: list[MrsError | None] = []
        for seq, value in zip(seqs, values, strict=True):
            try:
                await self.confirm(seq, confirm_value=value, force_j=force_j, timeout=wait_s)
            except MrsError as error:
                results.append(error)
            else:
                results.append(None)
        return results

    async def status(self, *, timeout: float | None = None) -> dict:
        """The group's status: queues, DQF depth, writer statistics. Waits at most
        `timeout` (as `confirm`'s), then ReplyTimeout."""
        requests = self._requests
        wait_s = answer_wait_s(timeout, self.request_timeout_s, "status")

        async def ask(left_s: float) -> dict:
            reply = await requests.request(wire.StatusRequest(requests.next_id()), left_s)
            return cast(wire.StatusReply, reply).info

        try:
            return await self._query(ask, wait_s, "status")
        except ReplyTimeout:
            raise not_answered("status", self.address, wait_s, QUERY_OUTCOME) from None

    async def _query(self, ask: Callable[[float], Awaitable[T]], wait_s: float, what: str) -> T:
        """A query that changes nothing (`status`, `locate`, `pending`) asked within
        `wait_s` by `ask(left_s)`. With several addresses (a replicated group) one that
        finds no connection waits for the new active (`_linked`), and one whose
        connection is lost before its answer (in flight, or not yet sent) is asked again
        there, within what is left of `wait_s`: it changed nothing, so asking again is
        safe. Before, one made just as the active died raised ConnectionLost (LINK_DOWN)
        while one made a moment later waited, so a loop watching `pending` was handed
        an error at each failover. On one address it raises as before."""
        started_s = trio.current_time()
        left_s = wait_s
        while True:
            if self._requests.link is None or self._requests.broken is not None:
                left_s = await self._linked_within(left_s, what)
            try:
                return await ask(left_s)
            except ConnectionLost as lost:
                left_s = wait_s - (trio.current_time() - started_s)
                if self._resender is None or lost.status != Status.LINK_DOWN or left_s <= 0:
                    raise

    async def admin(self, action: str, /, **args: object) -> dict:
        """An operator's action on the group (`mrs admin`; docs/operations.md):
        browse(queue, limit), purge(queue, discard, reason), move(queue, to, limit),
        connections(), journal(limit). Returns what the group answered as plain
        data; raises NoSuchQueue, NotAuthorized (without its right), BadParameter;
        ReplyTimeout after ADMIN_REQUEST_WAIT_S, saying what the action may have done."""
        requests = self._requests
        await requests.linked(Status.NOTACTIVE, "admin")
        request = built(wire.AdminRequest, requests.next_id(), action, dict(args))
        try:
            reply = await requests.request(request, ADMIN_REQUEST_WAIT_S, "other")
        except ReplyTimeout:  # with what it may have done (mrs.protocol.admin_events)
            wait_s, outcome = ADMIN_REQUEST_WAIT_S, admin_outcome(action)
            raise not_answered(action, self.address, wait_s, outcome) from None
        return cast(wire.AdminReply, reply).result

    async def locate(self, name: str | Address, *, timeout: float | None = None) -> Address:
        """The address of the queue `name` names (MessageQ's pams_locate_q): `G.Q`,
        `GROUP.NAME`, or a bare name (the group's own queues first, then the bus).
        Raises NoSuchQueue, or BadParameter for a name several other groups use.
        With several addresses, one made while the client reconnects waits for the new
        active (`_linked`, as `status` does) instead of raising NOTACTIVE at once.
        Waits at most `timeout` (as `confirm`'s), then ReplyTimeout."""
        queue_text(name, "locate")  # a bad name refused at once, not after a wait
        wait_s = answer_wait_s(timeout, self.request_timeout_s, "locate")
        try:
            return await self._query(
                functools.partial(locate, self._requests, name), wait_s, "locate"
            )
        except ReplyTimeout:
            raise not_answered(f"locate {name}", self.address, wait_s, QUERY_OUTCOME) from None

    async def pending(
        self, queues: Sequence[str | Address], *, kept: int = 0, timeout: float | None = None
    ) -> list[int]:
        """Messages waiting to be got on each queue, in order (putil_show_pending);
        another group's are asked over the link (MrsError LINK_DOWN or TIMEOUT when
        it cannot answer). Raises NoSuchQueue, or BadParameter for a bad list. The
        attached queue's count includes the messages this client already holds, and
        `kept` more its caller holds for its next get (the blocking client's). With
        several addresses, one made while the client reconnects waits for the new
        active (`_linked`, as `status` does) instead of raising NOTACTIVE at once.
        Waits at most `timeout` (as `confirm`'s), then ReplyTimeout."""
        # Read once, here: a generator was read by this check and reached the request
        # empty ("give 1..100 queues, got 0" for a generator of two queues).
        queues = pending_texts(queues)  # a bad list refused at once, not after a wait
        if type(kept) is not int or kept < 0:  # (a count of the blocking client's)
            raise BadParameter(Status.BADPARAM, f"pending: kept is an int >= 0, got {kept!r}")
        wait_s = answer_wait_s(timeout, self.request_timeout_s, "pending")

        async def ask(left_s: float) -> list[int]:
            held = len(self._requests.held) + kept  # counted on the connection asked
            return await pending(self._requests, queues, self.queue, held, left_s)

        try:
            return await self._query(ask, wait_s, "pending")
        except ReplyTimeout:
            raise not_answered("pending", self.address, wait_s, QUERY_OUTCOME) from None

    async def set_pcj(self, default: bool | ForceJrn | None = None, roll: bool = False) -> PcjState:
        """MessageQ's MRS_SET_PCJ: the group's default journaling action of
        confirmations (True/FORCE_JRN: a DEFAULT_JRN confirm writes the PCJ,
        False/NO_JRN: it does not, None: unchanged), at once and kept across restarts;
        `roll` closes the current PCJ segment and opens the next. Needs the admin
        right 'pcj' (NotAuthorized otherwise)."""
        return await set_pcj(self._requests, default, roll)

    def open_journal(self, journal: str = "pcj", **selection: Any) -> RemoteJournalReader:
        """The group's PCJ or DLJ for reading over the wire (pams_open_jrn): the same
        selection and records as `clients.open_journal` (seq, since, until, target,
        source, msg_class, msg_type, segment, limit) and `page_records`; iterate with
        `async for`. Needs the admin right 'replay'."""
        return open_remote(self._requests, journal, **selection)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Message]:
        while True:
            yield await self.get()


def _at_most(requests: Requests, messages: list[Message], count: int) -> list[Message]:
    """A get_many's answer that brought more than the `count` it asked for (a broken
    server): the caller gets `count`, as the call promises; the rest are held for the
    next gets, in order, within the held messages' bound, and past it those that need
    no confirm are given back to the queue (`keep_asked`). Before, get_many(2)
    returned all of them, and then held all of them, as many as a frame carries."""
    kept = keep_asked(requests.link, messages, count, requests.held, hold_surplus=True)
    taken = requests.older_first(kept[:count])
    requests.held.extend(kept[count:])
    return taken


def _too_big(body_bytes: int, message_bytes_max: int) -> MrsError:
    """A put's refusal of a body over the group's limit (the same words put_many uses)."""
    return error_for(
        Status.MSGTOOBIG,
        f"body of {body_bytes} bytes exceeds the group's message_bytes_max {message_bytes_max}",
    )


def __getattr__(name: str) -> object:
    """`clients.connection.connect`, the old import path of `connect`: it moved to
    clients.connecting, which imports this module, so it is looked up on first use."""
    if name == "connect":
        from clients.connecting import connect

        return connect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Lifetime:
    """The part of a Client that `connect` (clients.connecting) drives: the first link,
    the connection loops and reconnects, and the held messages given back on close.

    Package-internal: an application opens a Client with `connect` and never calls
    these. A part of its own rather than methods of Client, so that Client's methods
    stay the API an application uses and `connect` names no private of Client."""

    def __init__(
        self, dialer: Dialer, loops: LinkLoops, status: JournalStatus, requests: Requests
    ) -> None:
        self._dialer = dialer
        self._loops = loops
        self._status = status
        self._requests = requests
        self._running = trio.CancelScope(shield=True)
        """Around `run`: only `stop` ends it, not a cancel scope around the connect
        block (`run`)."""

    async def open(self, *, wait_for_active: bool) -> _Link:
        """Dial, handshake and attach (`connect`'s first link). ConnectionLost if
        unreachable; MrsError if refused. `wait_for_active`: see `Dialer.open_first`."""
        return await self._dialer.open_first(wait_for_active=wait_for_active)

    def install(self, link: _Link | None, journal_status: Status | None = None) -> None:
        """The first link is usable as soon as connect returns (None: the server was
        unreachable); with a journal, start at `journal_status`."""
        if journal_status is not None:
            self._status.status = journal_status
        if link is not None:
            self._loops.install(link)

    async def run(self, link: _Link | None) -> None:
        """Serve the connection and reconnect after drops, until the client closes
        (`stop`). Shielded: a scope cancelled around the whole connect block (a
        `move_on_after`, a nursery torn down, Ctrl-C) cancels the application's code,
        and the close that follows still has the connection's loops to write its
        CancelGets and GiveBack and read their answers. Before, they were cancelled
        with it: the close waited GIVE_BACK_WAIT_S for a write no loop made, and
        every message the client held that needs no confirm (read-ahead MRS_ACKs, a
        memory message that crossed a get given up) was lost."""
        with self._running:
            await self._dialer.run(link)

    async def give_back_held(self) -> None:
        """Closing: read-ahead messages no get took go back to the queue (shielded,
        bounded: clients.pending.Requests.give_back_held)."""
        await self._requests.give_back_held()

    def stop(self) -> None:
        """Closing, once the held messages are given back: end `run` (its loops close
        the connection, shielded and bounded: clients.link.LinkLoops.serve)."""
        self._running.cancel()
