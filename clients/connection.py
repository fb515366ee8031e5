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
"""

from __future__ import annotations

import itertools
import logging
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from clients.auth import ClientCredentials, authenticating_opener, default_credentials
from clients.errors import (
    ConnectionLost,
    FieldRefused,
    MrsError,
    PutOutcomeUnknown,
    QuotaExceeded,
    ReplyTimeout,
    error_for,
)
from clients.reconnect import Reconnect
from clients.saf_journal import (
    ClientJournal,
    JournalFull,
    idempotency_key_for,
)
from clients.tls import default_tls, tls_opener, tls_refusal
from journals import Record
from mrs import protocol as wire
from mrs.framed import FramedStream, StreamClosed
from mrs.limits import (
    CLIENT_DRAIN_BYTES_MAX,
    CLIENT_DRAIN_REFILL_MESSAGES,
    CLIENT_DRAIN_WINDOW_MESSAGES,
    CLIENT_FRAME_BYTES_MAX,
    CLIENT_REQUESTS_IN_FLIGHT_MAX,
    CLIENT_SAF_BYTES_MAX_DEFAULT,
    CLIENT_SAF_MESSAGES_MAX_DEFAULT,
    HEARTBEAT_S_DEFAULT,
    HEARTBEATS_SILENT_MAX,
    HELD_MESSAGES_MAX,
    PUT_TIMEOUT_S_DEFAULT,
    REPLY_GRACE_S,
)

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
    status_of,
)

log = logging.getLogger("clients")

_RECOVERABLE_MODES = frozenset(mode for mode in DeliveryMode if mode.recoverable)
RECONNECT_DEFAULT = Reconnect()
IDEMPOTENCY_HEADER = "idempotency_key"
"""The server's dedupe header (mrs.records.IDEMPOTENCY_HEADER; a test pins them equal)."""
CLIENT_SAF_SEQ_HEADER = "client_saf_seq"
"""Carried by a drained message: its seq in the sender's client journal (the seq the
journaled put's PSB gave), so the receiver can map it."""
_TRANSIENT = frozenset(
    {
        Status.TIMEOUT,
        Status.SHUTTING_DOWN,
        Status.SERVER_ERROR,
        Status.JOURNAL_FAIL,
        Status.QUEUE_BUSY,
        Status.LINK_DOWN,
    }
)
"""A drained record refused with one of these stays in the journal and is re-sent."""


@dataclass(eq=False, slots=True)
class _Pending:
    """One request awaiting its answer. The waiting task parks itself directly
    (trio.lowlevel) instead of on a trio.Event: one request, one waiter, so the
    Event's parking lot is pure cost on the per-request path (issue 17)."""

    kind: str
    """"put", "get", "drain" or "other": decides what a lost connection answers."""
    callback: Callable[[object], None] | None = None
    result: object = None
    answered: bool = False
    waiter: trio.lowlevel.Task | None = None

    def answer(self, result: object) -> None:
        self.result = result
        self.answered = True
        waiter, self.waiter = self.waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)
        if self.callback is not None:
            self.callback(result)

    async def wait(self) -> None:
        """Until answered; a checkpoint even when the answer is already here."""
        if self.answered:
            await trio.lowlevel.checkpoint()
            return
        self.waiter = trio.lowlevel.current_task()

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            self.waiter = None  # a late answer must not wake a task that has moved on
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


@dataclass(eq=False)
class _Window:
    """Drained records in flight: key -> body bytes, and their total."""

    keys: dict[bytes, int] = field(default_factory=dict)
    bytes: int = 0

    def add(self, key: bytes, size: int) -> None:
        self.keys[key] = size
        self.bytes += size

    def remove(self, key: bytes) -> None:
        self.bytes -= self.keys.pop(key, 0)


@dataclass(frozen=True, slots=True)
class JournalEvent:
    """What a SAF-journal listener hears.

    kind "status": `status` is now JOURNAL_ON or LINK_UP. kind "drained": the record
    with client seq `local_seq` was stored by the server; `psb` is the server's PSB
    (its seq is the one the receiver sees). kind "rejected": the server refused the
    record for good (`status`, `message`); it left the journal.
    """

    kind: str
    status: Status | int
    local_seq: int = 0
    psb: Psb | None = None
    message: str = ""


@dataclass(eq=False)
class _Link(FramedStream):
    """One live connection: its framed stream, plus what the client tracks of it."""

    unsent: set[int] = field(default_factory=set)
    """Requests queued but not yet handed to the stream: safe to retry if it is lost."""
    lost: MrsError | None = None
    heard_s: float = field(default_factory=trio.current_time)
    """trio.current_time() when the server last sent a byte."""


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
        self._link: _Link | None = None
        self._broken: MrsError | None = None
        self._cancelled_gets: set[int] = set()
        self._held: deque[Message] = deque()
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
        (server unreachable, or the backlog still draining); LINK_UP once drained."""
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
        """Return once journal_status is `status` (e.g. LINK_UP after a drain)."""
        while self.journal_status != status:
            self._raise_if_broken()
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
        request = _built(
            wire.Put,
            self._next_id(),
            str(target),
            bytes(body),
            int(delivery),
            int(uma or 0),
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
        self._require_link(Status.LINK_DOWN, "put")
        wait_s = (timeout or PUT_TIMEOUT_S_DEFAULT) + REPLY_GRACE_S
        reply = await self._request(request, wait_s, "put")
        return _psb(reply)

    async def get(self, timeout: float | None = None) -> Message:
        """The next message of the attached queue. timeout None waits forever, 0 polls.

        Raises MrsTimeout (TIMEOUT) or NoMoreMessages (NOMOREMSG) when none came.
        Cancelling a get (a cancel scope, KeyboardInterrupt in the sync client) takes
        it back on the server; a message already on its way goes to the next get.
        """
        if self._held:
            return await self._checked(self._held.popleft())
        self._require_link(Status.NOTACTIVE, "get")
        timeout_ms = -1 if timeout is None else round(timeout * 1000)
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        request = _built(wire.Get, self._next_id(), timeout_ms)
        reply = await self._request(request, wait_s, "get")
        return await self._checked(self._message(reply))

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
        self._require_link(Status.NOTACTIVE, "confirm")
        request = _built(wire.Confirm, self._next_id(), seq, confirm_value, int(force_j))
        await self._request(request, None, "other")

    async def status(self) -> dict:
        """The group's status: queues, DQF depth, writer statistics."""
        self._require_link(Status.NOTACTIVE, "status")
        reply = await self._request(wire.StatusRequest(self._next_id()), None, "other")
        return reply.info

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Message]:
        while True:
            yield await self.get()

    # ------------------------------------------------------------------ journal
    async def _put_journaled(self, request: wire.Put) -> Psb:
        """Journal a checked put locally (JOURNAL_ON); the drain sends it later."""
        target = request.target
        uma = request.uma
        target_group, target_queue = _numeric(str(target))
        now_ns = time.time_ns()
        record = Record(
            seq=0,
            target_group=target_group,
            target_queue=target_queue,
            source_group=self.queue.group if self.queue else 0,
            source_queue=self.queue.queue if self.queue else 0,
            body=request.body,
            msg_class=request.msg_class,
            msg_type=request.msg_type,
            priority=request.priority,
            delivery=request.delivery,
            uma=uma,
            correlation_id=request.correlation_id,
            put_time_ns=now_ns,
            written_time_ns=now_ns,
            extra={
                "target": target,
                "resp_q": request.resp_q,
                "timeout_ms": request.timeout_ms,
                "headers": request.headers,
                "attach": self._queue_text or "",
            },
        )
        try:
            local_seq = await self._journal.append(record)
        except JournalFull as full:
            if uma in (Uma.DISC, Uma.DISCL):
                if uma == Uma.DISCL:
                    log.warning("client SAF journal full; message to %s discarded", target)
                done = Status.DISC_SUCCESS if uma == Uma.DISC else Status.DISCL_SUCCESS
                return Psb(Status.JOURNAL_ON, Status.JOURNAL_FULL, 0, done)
            raise full
        self._drain_wake.set()
        return Psb(Status.JOURNAL_ON, Status.STORED, local_seq, Status.NO_UMA)

    async def _drain(self, link: _Link) -> None:
        """Send every journal record, oldest first, CLIENT_DRAIN_WINDOW_MESSAGES in
        flight; a record is deleted when the server answers it stored. LINK_UP when
        nothing is left."""
        journal = self._journal
        journal.on_change = self._drain_wake.set
        after_key: bytes | None = None
        window = _Window()
        while self._link is link:
            self._drain_wake = trio.Event()
            journal.on_change = self._drain_wake.set
            room = CLIENT_DRAIN_WINDOW_MESSAGES - len(window.keys)
            # Refill in chunks (one read transaction for many records), and stay well
            # inside the server's per-connection byte quota.
            full = window.bytes >= CLIENT_DRAIN_BYTES_MAX
            if window.keys and (room < CLIENT_DRAIN_REFILL_MESSAGES or full):
                room = 0
            items = journal.read_after(after_key, room) if room > 0 else []
            for key, record in items:
                window.add(key, len(record.body))
                self._send_drained(link, key, record, window)
                after_key = key
            if items:
                await trio.lowlevel.checkpoint()
                continue
            if link.lost is not None:
                return
            if not window.keys and journal.idle and journal.count <= len(journal.corrupt):
                self._set_journal_status(Status.LINK_UP)
                return
            await self._drain_wake.wait()

    def _send_drained(self, link: _Link, key: bytes, record: Record, window: _Window) -> None:
        extra = record.extra
        headers = dict(extra.get("headers") or {})
        headers.setdefault(
            IDEMPOTENCY_HEADER, idempotency_key_for(self._journal.journal_id, record.seq)
        )
        headers[wire.REPLY_WHEN_STORED_HEADER] = True
        headers[CLIENT_SAF_SEQ_HEADER] = record.seq
        headers[wire.CLIENT_SAF_BACKLOG_HEADER] = self._journal.count
        request = wire.Put(
            self._next_id(),
            extra.get("target", f"{record.target_group}.{record.target_queue}"),
            record.body,
            record.delivery,
            record.uma,
            record.msg_class,
            record.msg_type,
            record.priority,
            extra.get("timeout_ms", 0),
            record.correlation_id,
            extra.get("resp_q", ""),
            headers,
        )

        def answered(result: object) -> None:
            window.remove(key)
            self._drain_answered(link, key, record.seq, result)
            self._drain_wake.set()

        self._pending[request.request_id] = _Pending("drain", callback=answered)
        self._send(link, request)

    def _drain_answered(self, link: _Link, key: bytes, local_seq: int, result: object) -> None:
        if isinstance(result, wire.PutDone):
            self._journal.remove([key])
            self._notify(JournalEvent("drained", Status.SUCCESS, local_seq, _psb(result)))
        elif isinstance(result, wire.Failure) and result.status not in _TRANSIENT:
            log.warning(
                "client SAF record %d refused by the server (%s): %s; removed",
                local_seq,
                _name(result.status),
                result.message,
            )
            self._journal.remove([key])
            self._notify(
                JournalEvent("rejected", status_of(result.status), local_seq, None, result.message)
            )
        elif isinstance(result, wire.Failure) and self._link is link:
            # Left in the journal; drop the connection so the drain restarts from the
            # oldest record (the server dedupes what it already stored).
            self._lose(link, ConnectionLost(Status.LINK_DOWN, f"drain refused: {result.message}"))

    # ------------------------------------------------------------------ plumbing
    def _message(self, reply: wire.Delivery) -> Message:
        return Message(
            body=reply.body,
            seq=reply.seq,
            source=Address.parse(reply.source),
            target=Address.parse(reply.target),
            msg_class=reply.msg_class,
            msg_type=reply.msg_type,
            priority=reply.priority,
            delivery=DeliveryMode(reply.delivery),
            delivery_status=status_of(reply.delivery_status),
            correlation_id=reply.correlation_id,
            put_time_ns=reply.put_time_ns,
            dead_letter_header=reply.dead_letter_header,
            headers=reply.headers,
            _confirm=self.confirm,
        )

    def _next_id(self) -> int:
        return next(self._request_ids)

    def _require_link(self, status: Status, what: str) -> None:
        self._raise_if_broken()
        if self._link is None:
            raise ConnectionLost(
                status, f"{what}: not connected to {self.address} (reconnecting in the background)"
            )

    def _send(self, link: _Link, request: object) -> None:
        self._send_frame(link, request)
        link.unsent.add(request.request_id)

    def _send_frame(self, link: _Link, event: object) -> None:
        link.send(event)

    async def _request(self, request: object, wait_s: float | None, kind: str = "other") -> object:
        if len(self._pending) >= CLIENT_REQUESTS_IN_FLIGHT_MAX:
            raise QuotaExceeded(
                Status.EXCEEDQUOTA,
                f"{len(self._pending)} requests already await an answer on this connection "
                f"(at most {CLIENT_REQUESTS_IN_FLIGHT_MAX})",
            )
        link = self._link
        pending = _Pending(kind)
        request_id = request.request_id
        self._send(link, request)
        self._pending[request_id] = pending
        try:
            if wait_s is None:  # no cancel scope per request when there is no deadline
                await pending.wait()
            else:
                with trio.fail_after(wait_s):
                    await pending.wait()
        except trio.TooSlowError:
            self._abandon(link, request_id, pending)
            raise ReplyTimeout(Status.TIMEOUT, "no answer from the server in time") from None
        except BaseException:
            self._abandon(link, request_id, pending)
            raise
        finally:
            self._pending.pop(request_id, None)
        result = pending.result
        if isinstance(result, MrsError):
            raise result
        if isinstance(result, wire.Failure):
            raise error_for(result.status, result.message)
        return result

    def _abandon(self, link: _Link, request_id: int, pending: _Pending) -> None:
        """The caller stopped waiting (cancelled, timed out, interrupted)."""
        if pending.kind != "get":
            return
        if isinstance(pending.result, wire.Delivery):
            self._hold(pending.result)  # it arrived as the caller gave up
        elif pending.result is None and self._link is link and link.lost is None:
            self._cancelled_gets.add(request_id)
            self._send(link, wire.CancelGet(request_id))

    def _hold(self, delivery: wire.Delivery) -> None:
        if len(self._held) >= HELD_MESSAGES_MAX:
            log.error("more than %d messages held for later gets", HELD_MESSAGES_MAX)
        self._held.append(self._message(delivery))

    def _dispatch(self, link: _Link, event: object) -> None:
        if type(event) is wire.Ping:  # the server pings a quiet connection: we are alive
            self._send_frame(link, wire.Pong(event.nonce))
            return
        request_id = getattr(event, "request_id", None)
        pending = self._pending.pop(request_id, None)
        if pending is not None:
            pending.answer(event)
        elif request_id in self._cancelled_gets:
            self._cancelled_gets.discard(request_id)
            if isinstance(event, wire.Delivery):
                self._hold(event)

    def _lose(self, link: _Link, error: MrsError, closing: bool = False) -> None:
        """The connection is gone: answer everything in flight honestly."""
        if link.lost is not None:
            return
        link.lost = error
        if self._link is link:
            self._link = None
        link.wake()
        pending, self._pending = self._pending, {}
        for request_id, waiter in pending.items():
            if request_id in link.unsent:
                waiter.answer(
                    ConnectionLost(Status.LINK_DOWN, f"{error.message}; the request was not sent")
                )
            elif waiter.kind == "put":
                waiter.answer(
                    PutOutcomeUnknown(
                        Status.LINK_DOWN,
                        f"{error.message} before the put was answered: the message may or "
                        "may not be stored",
                    )
                )
            else:
                waiter.answer(ConnectionLost(Status.LINK_DOWN, f"{error.message}"))
        self._cancelled_gets.clear()
        # Held messages that need a confirm come back from the server (POSSDUPL).
        self._held = deque(message for message in self._held if not message.needs_confirm)
        if not closing:
            self._set_journal_status(Status.JOURNAL_ON)
        self._wake()

    async def _open(self) -> _Link:
        """Dial, handshake and attach. ConnectionLost if unreachable; MrsError if refused."""
        try:
            with trio.fail_after(self._connect_timeout_s):
                stream = await self._open_stream(self._host, self._port)
        except (OSError, trio.TooSlowError) as error:
            raise ConnectionLost(
                Status.LINK_DOWN, f"cannot connect to {self.address}: {error}"
            ) from None
        link = _Link(stream, wire.Connection("client", frame_bytes_max=CLIENT_FRAME_BYTES_MAX))
        try:
            with trio.fail_after(self._connect_timeout_s):
                await self._handshake(link)
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            OSError,
            trio.TooSlowError,
        ) as error:
            await trio.aclose_forcefully(stream)
            if (refused := tls_refusal(error, self.address)) is not None:
                raise refused from None
            raise ConnectionLost(
                Status.LINK_DOWN, f"handshake with {self.address} failed: {error}"
            ) from None
        except BaseException:
            await trio.aclose_forcefully(stream)
            raise
        return link

    async def _handshake(self, link: _Link) -> None:
        hello = wire.Hello(wire.PROTOCOL_VERSION, self._program)
        await link.send_now(hello)
        welcome = await _next_event(link)
        if isinstance(welcome, wire.Fatal):
            raise error_for(welcome.status, welcome.message)
        self.group_id, self.group_name = welcome.group_id, welcome.group_name
        self.message_bytes_max = welcome.message_bytes_max
        if self._queue_text is None:
            return
        attach = wire.Attach(self._next_id(), self._queue_text)
        await link.send_now(attach)
        attached = await _next_event(link)
        if isinstance(attached, wire.Failure | wire.Fatal):
            raise error_for(attached.status, attached.message)
        self.queue = Address(attached.group, attached.queue)

    async def _run(self, link: _Link | None) -> None:
        """Serve the connection; when it drops, reconnect with backoff (if enabled)."""
        while True:
            if link is not None:
                await self._serve(link)
            if self._reconnect is None:
                self._broken = ConnectionLost(
                    Status.LINK_DOWN, f"connection to {self.address} lost (reconnect is off)"
                )
                self._wake()
                return
            link = await self._reconnect_once()
            if link is None:
                return

    async def _reconnect_once(self) -> _Link | None:
        attempts = 0
        for delay_s in self._reconnect.delays():
            await trio.sleep(delay_s)
            attempts += 1
            try:
                link = await self._open()
            except ConnectionLost:
                continue
            except MrsError as refused:
                if refused.status == Status.QUEUE_BUSY:
                    continue  # the server has not yet noticed our old connection closed
                self._broken = refused
                self._wake()
                return None
            self.reconnects += 1
            return link
        self._broken = ConnectionLost(
            Status.LINK_DOWN, f"gave up reconnecting to {self.address} after {attempts} attempts"
        )
        self._wake()
        return None

    def _install(self, link: _Link) -> None:
        self._link = link
        if self._journal is not None and self._journal.count == 0 and self._journal.idle:
            self._set_journal_status(Status.LINK_UP)
        self._wake()

    async def _serve(self, link: _Link) -> None:
        self._install(link)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._receive_loop, link, nursery.cancel_scope)
                if self._heartbeat_s is not None:
                    nursery.start_soon(self._watch, link)
                nursery.start_soon(self._send_loop, link, nursery.cancel_scope)
                if self._journal is not None and self.journal_status != Status.LINK_UP:
                    nursery.start_soon(self._drain, link)
        finally:
            if link.lost is None:  # cancelled: the client is closing
                self._lose(link, ConnectionLost(Status.LINK_DOWN, "client closed"), closing=True)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await trio.aclose_forcefully(link.stream)

    async def _watch(self, link: _Link) -> None:
        """Ping a quiet server; a server silent for HEARTBEATS_SILENT_MAX intervals (host
        gone, process stopped, cable cut without FIN or RST) counts as lost, so the
        client reconnects (and journals) instead of waiting forever."""
        interval_s = self._heartbeat_s
        nonces = itertools.count(1)
        while link.lost is None:
            await trio.sleep(interval_s)
            silent_s = trio.current_time() - link.heard_s
            if silent_s >= interval_s * HEARTBEATS_SILENT_MAX:
                error = ConnectionLost(
                    Status.LINK_DOWN, f"server {self.address} silent for {silent_s:.1f} s"
                )
                self._lose(link, error)
                await trio.aclose_forcefully(link.stream)  # wakes the receive loop
                return
            if silent_s >= interval_s:
                self._send_frame(link, wire.Ping(next(nonces)))

    async def _receive_loop(self, link: _Link, scope: trio.CancelScope) -> None:
        try:
            while True:
                events, still_open = await link.receive_events()
                link.heard_s = trio.current_time()
                for event in events:
                    if isinstance(event, wire.Fatal):
                        raise error_for(
                            event.status, f"server closed the connection: {event.message}"
                        )
                    self._dispatch(link, event)
                if not still_open or link.connection.closed:
                    raise ConnectionLost(Status.LINK_DOWN, "server closed the connection")
        except wire.ProtocolError as error:  # an MrsError too: caught first, on purpose
            self._lose(link, error_for(Status.PROTOCOL_ERROR, str(error)))
        except MrsError as error:
            self._lose(link, error)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._lose(link, ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))
        scope.cancel()

    async def _send_loop(self, link: _Link, scope: trio.CancelScope) -> None:
        try:
            while link.lost is None:
                data = await link.next_batch()
                if data:
                    link.unsent.clear()
                    await link.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._lose(link, ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))
        scope.cancel()


async def _next_event(link: _Link) -> object:
    try:
        return await link.next_event()
    except StreamClosed:
        raise ConnectionLost(Status.LINK_DOWN, "server closed the connection") from None


def _psb(reply: wire.PutDone) -> Psb:
    return Psb(
        status_of(reply.status),
        status_of(reply.delivery_status),
        reply.seq,
        status_of(reply.uma_status),
    )


def _numeric(target: str) -> tuple[int, int]:
    try:
        address = Address.parse(target)
    except ValueError:
        return 0, 0  # a queue name: the server resolves it at drain time
    return address.group, address.queue


def _name(status: int) -> str:
    value = status_of(status)
    return value.name if isinstance(value, Status) else str(value)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"server address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)


@asynccontextmanager
async def connect(
    address: str,
    queue: str | Address | None,
    *,
    program: str = "mrs-client",
    connect_timeout_s: float = 10.0,
    open_stream: Callable[[str, int], Awaitable[trio.abc.Stream]] | None = None,
    reconnect: Reconnect | None = RECONNECT_DEFAULT,
    saf_journal: str | Path | None = None,
    saf_messages_max: int = CLIENT_SAF_MESSAGES_MAX_DEFAULT,
    saf_bytes_max: int = CLIENT_SAF_BYTES_MAX_DEFAULT,
    heartbeat_s: float | None = HEARTBEAT_S_DEFAULT,
    protection: Protection | None = None,
    tls: ssl.SSLContext | None = None,
    tls_server_name: str | None = None,
    credentials: ClientCredentials | None = None,
) -> AsyncIterator[Client]:
    """Connect to a group server and attach to `queue` (e.g. "1.10" or "ORDERS").

    queue=None connects without attaching (enough for `status()`).
    reconnect: the backoff policy for reconnecting after a drop; None switches it off
    (the client then stays broken once its connection is lost).
    saf_journal: a directory for the client-side SAF journal (off by default). With
    it, attach succeeds while the server is unreachable (attach_status JOURNAL_ON)
    and recoverable puts are journaled there until the server is back; one process
    at a time may own a journal. saf_messages_max / saf_bytes_max cap it
    (JOURNAL_FULL, then the put's UMA: DISC/DISCL discard, others raise).
    heartbeat_s: ping a server quiet for this long; after 3 silent intervals the
    connection counts as lost (reconnect, JOURNAL_ON). None: never ping.
    protection: a clients.protection.Protection (identity + policies): puts to
    protected queues are signed/encrypted and gets verified/decrypted in this process.
    tls: a context from `clients.tls_context(ca, cert, key)` for a group with
    [group.tls]; the server is verified as tls_server_name (default: the host).
    Without it, the process default (set by the `mrs` command from MRS_TLS_*), if any.
    credentials: a name and password for a group with auth on (clients.auth); without
    them, the process default (set by the `mrs` command from MRS_AUTH_*), if any.
    """
    tls = tls if tls is not None else default_tls()
    if tls is not None and open_stream is None:
        open_stream = tls_opener(tls, tls_server_name)
    credentials = credentials or default_credentials()
    if credentials is not None:
        open_stream = authenticating_opener(credentials, open_stream)
    journal = (
        ClientJournal(saf_journal, messages_max=saf_messages_max, bytes_max=saf_bytes_max)
        if saf_journal is not None
        else None
    )
    try:
        client = Client(
            address,
            queue,
            program,
            reconnect=reconnect,
            connect_timeout_s=connect_timeout_s,
            open_stream=open_stream,
            journal=journal,
            heartbeat_s=heartbeat_s,
            protection=protection,
        )
        try:
            link = await client._open()
        except ConnectionLost:
            if journal is None:
                raise
            link = None
        except MrsError as refused:
            # QUEUE_BUSY: a killed predecessor's connection is not yet reaped; the
            # journal lets us attach now and retry in the background.
            if journal is None or refused.status != Status.QUEUE_BUSY:
                raise
            link = None
        if journal is not None:
            client.attach_status = Status.SUCCESS if link is not None else Status.JOURNAL_ON
            client.journal_status = Status.JOURNAL_ON
        try:
            async with trio.open_nursery() as nursery:
                if journal is not None:
                    nursery.start_soon(journal.run_writer)
                if link is not None:
                    client._install(link)  # usable as soon as connect returns
                nursery.start_soon(client._run, link)
                try:
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _single(group) from None
    finally:
        if journal is not None:
            journal.close()


def _built(build: Callable[..., Any], *fields: object) -> Any:
    """Build a request from the caller's arguments: a field out of its range is the
    caller's BADPARAM (`FieldRefused`, a `BadParameter`), not a protocol fault."""
    try:
        return build(*fields)
    except wire.LocalProtocolError as error:
        raise FieldRefused(Status.BADPARAM, error.message) from None


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested groups, so callers can `except MrsError`; the
    group itself when there really were several. Cancellations that rode along with
    a real error (a background task torn down as the error left) are dropped."""
    _, rest = group.split(trio.Cancelled)
    if rest is not None:
        group = rest
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group
