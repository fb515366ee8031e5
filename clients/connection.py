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

The parts, one job each: request tracking (clients.pending), gets that wait together
(clients.get_pool), the connection's loops (clients.link), dialing and reconnecting
(clients.dialing), the SAF journal path (clients.saf_drain), and `connect`
(clients.connecting). `Client` here is the public facade over them and holds the
state they share.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import trio

from clients.batch import PutItem, put_one_by_one, send_batches
from clients.confirm_batch import confirm_many
from clients.deadlines import ReplyDeadlines
from clients.dialing import _Dialer, _split_address
from clients.errors import ConnectionLost, JournalFailed, MrsError, error_for
from clients.get_pool import GetPool
from clients.link import _Link, _LinkLoops
from clients.lookup import locate, pending
from clients.pending import _Pending, _Requests
from clients.reconnect import Reconnect
from clients.requests import built, confirm_request, get_request, put_reply_wait_s, put_request
from clients.saf_drain import CLIENT_SAF_SEQ_HEADER as CLIENT_SAF_SEQ_HEADER  # old path
from clients.saf_drain import IDEMPOTENCY_HEADER as IDEMPOTENCY_HEADER  # old path
from clients.saf_drain import JournalEvent, _psb, _SafDrain
from clients.saf_journal import ClientJournal
from mrs import protocol as wire
from mrs.limits import HEARTBEAT_S_DEFAULT, REPLY_GRACE_S

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

log = logging.getLogger("clients")

_RECOVERABLE_MODES = frozenset(mode for mode in DeliveryMode if mode.recoverable)
_LINK_DOWN, _NOTACTIVE = Status.LINK_DOWN, Status.NOTACTIVE
"""Looked up once: an enum member read through its class costs ~50 ns, and a put, a
get and a confirm each name one (benchmarks/README.md)."""


class Client(_Requests, _LinkLoops, _Dialer, _SafDrain):
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
    ) -> None:
        self.address = address
        self.protection = protection
        """Seals puts to / checks gets from protected queues (clients.protection)."""
        self._heartbeat_s = heartbeat_s
        self._host, self._port = _split_address(address)
        self._queue_text = None if queue is None else str(queue)
        self._program = program
        self._reconnect = reconnect
        self._connect_timeout_s = connect_timeout_s
        self._open_stream = open_stream or trio.open_tcp_stream
        self._journal = journal
        self._request_ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._confirm_message = self.confirm
        """Bound once: every Message delivered holds it (a bound method made per
        message is one more object per message for the collector)."""
        self._deadlines = ReplyDeadlines()
        self._link: _Link | None = None
        self._broken: MrsError | None = None
        self._cancelled_gets: set[int] = set()
        self._held: deque[Message] = deque()
        self._get_rooms: dict[int, int] = {}
        """Request id of a get waiting or given up -> messages it may bring (held if
        its caller gave up): see `_reserve_get`."""
        self._get_room_reserved = 0
        self._gets = GetPool(self)
        """Gets that wait share GetBatch requests (clients.get_pool)."""
        self._listeners: list[Callable[[JournalEvent], None]] = []
        self._changed = trio.Event()
        self._drain_wake = trio.Event()
        self.group_id = 0
        self.group_name = ""
        self.message_bytes_max = 0
        """The server's body limit, from its Welcome (0 = unknown)."""
        self.queue: Address | None = None
        self.attach_status: Status = Status.SUCCESS
        """SUCCESS, or JOURNAL_ON when the server was unreachable at attach."""
        self.journal_status: Status | None = None
        """None without a SAF journal; JOURNAL_ON while recoverable puts are journaled
        (server unreachable, or the backlog still draining); LINK_UP once drained;
        JOURNAL_FAIL when records left in the journal cannot be read (not sent)."""
        self._journal_failure = ""
        """Why journal_status is JOURNAL_FAIL."""
        self.reconnects = 0

    # ------------------------------------------------------------------ state
    @property
    def connected(self) -> bool:
        return self._link is not None

    @property
    def journal_backlog(self) -> int:
        """Records in the client SAF journal not yet stored by the server."""
        return 0 if self._journal is None else self._journal.count

    def add_journal_listener(self, listener: Callable[[JournalEvent], None]) -> None:
        """Call `listener(JournalEvent)` on every journal status change and drain."""
        self._listeners.append(listener)

    async def wait_journal_status(self, status: Status) -> None:
        """Return once journal_status is `status` (e.g. LINK_UP after a drain).
        Raises JournalFailed if the journal failed (JOURNAL_FAIL) meanwhile."""
        while self.journal_status != status:
            self._raise_if_broken()
            if self.journal_status == Status.JOURNAL_FAIL:
                raise JournalFailed(Status.JOURNAL_FAIL, self._journal_failure)
            await self._changed.wait()

    async def wait_connected(self) -> None:
        """Return once a connection is attached (raises if the client gave up)."""
        while self._link is None:
            self._raise_if_broken()
            await self._changed.wait()

    def _raise_if_broken(self) -> None:
        if self._broken is not None:
            raise self._broken

    def _notify(self, event: JournalEvent) -> None:
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the client
                log.exception("journal listener failed")

    def _set_journal_status(self, status: Status) -> None:
        if self._journal is None or self.journal_status == status:
            return
        self.journal_status = status
        self._wake()
        self._notify(JournalEvent("status", status))

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

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
        """
        if self.protection is not None and protect:
            body = self.protection.seal_for(target, body, self.group_id)
        if self.message_bytes_max and len(body) > self.message_bytes_max:
            raise error_for(
                Status.MSGTOOBIG,
                f"body of {len(body)} bytes exceeds the group's message_bytes_max "
                f"{self.message_bytes_max}",
            )
        if uma is None and delivery in _RECOVERABLE_MODES:
            uma = Uma.DLJ
        if timeout is not None and timeout < 0:
            raise error_for(Status.BADPARAM, f"put timeout must be >= 0 s, got {timeout:g}")
        # 0 on the wire is "the default" (MessageQ's meaning); a tiny positive timeout
        # stays positive.
        timeout_ms = 0 if not timeout else max(1, round(timeout * 1000))
        # Built (and so checked: types and ranges) once, whether it is sent now or
        # journaled and sent at drain time.
        request = put_request(
            self._next_id(),
            str(target),
            bytes(body),
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
        if (
            self._journal is not None
            and delivery in _RECOVERABLE_MODES
            and self.journal_status == Status.JOURNAL_ON
        ):
            return await self._put_journaled(request)
        if self._link is None or self._broken is not None:  # else no call: per request
            self._require_link(_LINK_DOWN, "put")
        reply = await self._request(request, put_reply_wait_s(timeout), "put")
        return _psb(reply)

    async def put_many(self, items: Sequence[PutItem]) -> list[Psb | MrsError]:
        """Send many messages in few frames (clients.batch); one result per item, in
        order: its Psb, or the MrsError that put alone would have raised (returned in
        its place, not raised: one refused put never fails the others)."""
        if self._journal is not None:
            return await put_one_by_one(self, items)
        return await send_batches(self, items)

    async def get(self, timeout: float | None = None) -> Message:
        """The next message of the attached queue. timeout None waits forever, 0 polls.

        Raises MrsTimeout (TIMEOUT) or NoMoreMessages (NOMOREMSG) when none came.
        Cancelling a get (a cancel scope, KeyboardInterrupt in the sync client) takes
        it back on the server; a message already on its way goes to the next get.
        Gets that wait at the same time share GetBatch requests (clients.get_pool);
        a poll (timeout 0) is one Get.
        """
        if self._held:  # read ahead (MRS_ACKs): no coroutine of `_checked` without protection
            held = self._held.popleft()
            return held if self.protection is None else await self._checked(held)
        if self._link is None or self._broken is not None:  # else no call: per request
            self._require_link(_NOTACTIVE, "get")
        if (timeout is None or timeout > 0) and not self._gets.refused:  # else: checked below
            pooled = await self._gets.get(timeout)
            if pooled is not None:
                if self.protection is None:
                    return pooled
                return await self.protection.deliver(self, pooled)
        timeout_ms = -1 if timeout is None else round(timeout * 1000)
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        request_id = self._next_id()
        self._reserve_get(request_id, 1)
        request = get_request(request_id, timeout_ms)
        try:
            message = self._message(await self._request(request, wait_s, "get"))
        finally:
            if request_id not in self._cancelled_gets:
                self._release_get(request_id)
        if self.protection is None:  # no second await on the common path
            return message
        return await self.protection.deliver(self, message)

    async def get_many(self, count_max: int, timeout: float | None = None) -> list[Message]:
        """Up to count_max messages of the attached queue in one request (a prefetch:
        mrs.group.batch_get): those ready now, or the first to arrive within timeout
        with whatever else is ready then. Each is delivered as by `get` (confirm it
        the same way; unconfirmed when the connection drops, it comes again marked
        POSSDUPL). Raises as `get` does when none came. With `protection`, one message
        per call (each is verified on its own); on a queue that confirms implicitly the
        server refuses it (BadParameter): use `get`."""
        if self._held:
            held = [self._held.popleft() for _ in range(min(count_max, len(self._held)))]
            if self.protection is None:
                return held
            self._held.extendleft(reversed(held[1:]))
            return [await self._checked(held[0])]
        if self.protection is not None:
            return [await self.get(timeout)]
        self._require_link(Status.NOTACTIVE, "get_many")
        timeout_ms = -1 if timeout is None else round(timeout * 1000)
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        request_id = self._next_id()
        request = built(wire.GetBatch, request_id, count_max, timeout_ms)  # refuses a bad count
        count = self._reserve_get(request_id, count_max)
        try:
            if count < count_max:  # the room for held messages is short: ask for fewer
                request = built(wire.GetBatch, request_id, count, timeout_ms)
            reply = await self._request(request, wait_s, "get")
        finally:
            if request_id not in self._cancelled_gets:
                self._release_get(request_id)
        return [self._message(delivery) for delivery in reply.deliveries]

    async def _checked(self, message: Message) -> Message:
        """With `protection`: verified/decrypted, or refused (ProtectionRefused)."""
        if self.protection is None:
            return message
        return await self.protection.deliver(self, message)

    async def confirm(
        self, seq: int, confirm_value: int = 0, force_j: ForceJrn = ForceJrn.DEFAULT_JRN
    ) -> None:
        """Confirm a CONFIRMREQ/POSSDUPL message: the MRS forgets it (and journals it
        to the PCJ if asked)."""
        if self._link is None or self._broken is not None:  # else no call: per request
            self._require_link(_NOTACTIVE, "confirm")
        request = confirm_request(self._next_id(), seq, confirm_value, force_j)
        await self._request(request, None, "other")

    async def confirm_many(
        self, seqs: Sequence[int], force_j: ForceJrn = ForceJrn.DEFAULT_JRN
    ) -> list[MrsError | None]:
        """Confirm many messages with one wait (clients.confirm_batch): every Confirm
        is sent at once and the server commits them together. One result per seq, in
        order: None if confirmed, else the MrsError `confirm` would have raised."""
        return await confirm_many(self, seqs, force_j)

    async def status(self) -> dict:
        """The group's status: queues, DQF depth, writer statistics."""
        self._require_link(Status.NOTACTIVE, "status")
        reply = await self._request(wire.StatusRequest(self._next_id()), None, "other")
        return reply.info

    async def locate(self, name: str | Address) -> Address:
        """The address of the queue `name` names (MessageQ's pams_locate_q): `G.Q`,
        `GROUP.NAME`, or a bare name (the group's own queues first, then the bus).
        Raises NoSuchQueue, or BadParameter for a name several other groups use."""
        return await locate(self, name)

    async def pending(self, queues: Sequence[str | Address]) -> list[int]:
        """Messages waiting to be got on each queue, in order (putil_show_pending);
        another group's are asked over the link (MrsError LINK_DOWN or TIMEOUT when
        it cannot answer). Raises NoSuchQueue, or BadParameter for a bad list."""
        return await pending(self, queues)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Message]:
        while True:
            yield await self.get()

    # ------------------------------------------------------------------ plumbing
    def _require_link(self, status: Status, what: str) -> None:
        self._raise_if_broken()
        if self._link is None:
            raise ConnectionLost(
                status, f"{what}: not connected to {self.address} (reconnecting in the background)"
            )


def __getattr__(name: str) -> object:
    """`clients.connection.connect`, the old import path of `connect`: it moved to
    clients.connecting, which imports this module, so it is looked up on first use."""
    if name == "connect":
        from clients.connecting import connect

        return connect
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
