"""The async client: one TCP connection, many requests in flight, shared by many tasks.

Every request carries an id; a receive task matches answers to the waiting
callers, and a send task writes all queued requests in one `send_all`. So 32 tasks
putting through one `Client` pipeline instead of taking turns.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import trio

from clients.errors import ConnectionLost, MrsError, error_for
from mrs import protocol as wire
from mrs.model import (
    DEFAULT_PUT_TIMEOUT_S,
    Address,
    DeliveryMode,
    ForceJrn,
    Message,
    Psb,
    Status,
    Uma,
    status_of,
)

RECEIVE_BYTES_MAX = 256 * 1024
_RECOVERABLE_MODES = frozenset(mode for mode in DeliveryMode if mode.recoverable)
FRAME_BYTES_MAX = 64 * 1024 * 1024
_HEARTBEATS = (wire.Ping, wire.Pong)
REPLY_GRACE_S = 5.0
"""A WF put waits this much longer than its timeout for the server's own TIMEOUT."""


@dataclass(eq=False)
class _Pending:
    event: trio.Event
    result: object = None


class Client:
    """A connection attached to one queue: put anywhere, get and confirm from it."""

    def __init__(self, stream: trio.abc.Stream, program: str) -> None:
        self._stream = stream
        self._program = program
        self._connection = wire.Connection("client", frame_bytes_max=FRAME_BYTES_MAX)
        self._request_ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._outbox: list[bytes] = []
        self._ready = trio.Event()
        self._broken: MrsError | None = None
        self.group_id = 0
        self.group_name = ""
        self.message_bytes_max = 0
        """The server's body limit, from its Welcome (0 = unknown)."""
        self.queue: Address | None = None

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
    ) -> Psb:
        """Send a message; returns the PSB. Raises MrsError if the put itself failed.

        A returned PSB may still report that the message could not reach its interest
        point (`psb.delivery_status` < 0) and what the UMA did (`psb.uma_status`).
        timeout (seconds) bounds how long a WF put blocks; None or 0 = the 30 s
        default (0 means the default in MessageQ too, so ported code keeps working).
        uma None picks DISC for nonrecoverable modes and DLJ for recoverable ones, so
        a recoverable message that cannot be stored still lands somewhere durable.
        """
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
        request = wire.Put(
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
        wait_s = (timeout or DEFAULT_PUT_TIMEOUT_S) + REPLY_GRACE_S
        reply = await self._request(request, wait_s)
        psb = Psb(
            status_of(reply.status),
            status_of(reply.delivery_status),
            reply.seq,
            status_of(reply.uma_status),
        )
        return psb

    async def get(self, timeout: float | None = None) -> Message:
        """The next message of the attached queue. timeout None waits forever, 0 polls.

        Raises MrsTimeout (TIMEOUT) or NoMoreMessages (NOMOREMSG) when none came.
        """
        timeout_ms = -1 if timeout is None else round(timeout * 1000)
        wait_s = None if timeout is None else timeout + REPLY_GRACE_S
        reply = await self._request(wire.Get(self._next_id(), timeout_ms), wait_s)
        return self._message(reply)

    async def confirm(
        self, seq: int, confirm_value: int = 0, force_j: ForceJrn = ForceJrn.DEFAULT_JRN
    ) -> None:
        """Confirm a CONFIRMREQ/POSSDUPL message: the MRS forgets it (and journals it
        to the PCJ if asked)."""
        await self._request(wire.Confirm(self._next_id(), seq, confirm_value, int(force_j)), None)

    async def status(self) -> dict:
        """The group's status: queues, DQF depth, writer statistics."""
        reply = await self._request(wire.StatusRequest(self._next_id()), None)
        return reply.info

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[Message]:
        while True:
            yield await self.get()

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

    async def _request(self, request: object, wait_s: float | None) -> object:
        if self._broken is not None:
            raise self._broken
        pending = _Pending(trio.Event())
        self._pending[request.request_id] = pending
        self._outbox.append(self._connection.send(request))
        self._ready.set()
        try:
            with trio.fail_after(wait_s if wait_s is not None else float("inf")):
                await pending.event.wait()
        except trio.TooSlowError:
            raise error_for(Status.TIMEOUT, "no answer from the server in time") from None
        finally:
            self._pending.pop(request.request_id, None)
        result = pending.result
        if isinstance(result, MrsError):
            raise result
        if isinstance(result, wire.Failure):
            raise error_for(result.status, result.message)
        return result

    def _heartbeat(self, event: wire.Ping | wire.Pong) -> None:
        """The server pings a quiet connection; a Pong tells it we are alive."""
        if type(event) is wire.Ping:
            self._outbox.append(self._connection.send(wire.Pong(event.nonce)))
            self._ready.set()

    def _fail_all(self, error: MrsError) -> None:
        self._broken = error
        for pending in self._pending.values():
            pending.result = error
            pending.event.set()

    async def _handshake(self, queue: str | Address | None) -> None:
        await self._stream.send_all(
            self._connection.send(wire.Hello(wire.PROTOCOL_VERSION, self._program))
        )
        welcome = await self._next_event()
        if isinstance(welcome, wire.Fatal):
            raise error_for(welcome.status, welcome.message)
        self.group_id, self.group_name = welcome.group_id, welcome.group_name
        self.message_bytes_max = welcome.message_bytes_max
        if queue is None:
            return
        request_id = self._next_id()
        await self._stream.send_all(self._connection.send(wire.Attach(request_id, str(queue))))
        attached = await self._next_event()
        if isinstance(attached, wire.Failure | wire.Fatal):
            raise error_for(attached.status, attached.message)
        self.queue = Address(attached.group, attached.queue)

    async def _next_event(self) -> object:
        while True:
            event = self._connection.next_event()
            if event is wire.CLOSED:
                raise ConnectionLost(Status.LINK_DOWN, "server closed the connection")
            if event is not wire.NEED_DATA:
                return event
            self._connection.receive_data(await self._stream.receive_some(RECEIVE_BYTES_MAX))

    async def _receive_loop(self) -> None:
        try:
            while True:
                data = await self._stream.receive_some(RECEIVE_BYTES_MAX)
                self._connection.receive_data(data)
                for event in self._connection.events():
                    if event is wire.CLOSED:
                        raise ConnectionLost(Status.LINK_DOWN, "server closed the connection")
                    if isinstance(event, wire.Fatal):
                        raise error_for(
                            event.status, f"server closed the connection: {event.message}"
                        )
                    if type(event) in _HEARTBEATS:
                        self._heartbeat(event)
                        continue
                    pending = self._pending.get(event.request_id)
                    if pending is not None:
                        pending.result = event
                        pending.event.set()
                if not data:
                    raise ConnectionLost(Status.LINK_DOWN, "server closed the connection")
        except MrsError as error:
            self._fail_all(error)
        except wire.ProtocolError as error:
            self._fail_all(error_for(Status.PROTOCOL_ERROR, str(error)))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._fail_all(ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))

    async def _send_loop(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready = trio.Event()
                if self._outbox:
                    data = b"".join(self._outbox)
                    self._outbox.clear()
                    await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._fail_all(ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))


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
) -> AsyncIterator[Client]:
    """Connect to a group server and attach to `queue` (e.g. "1.10" or "ORDERS").

    queue=None connects without attaching (enough for `status()`)."""
    host, port = _split_address(address)
    try:
        with trio.fail_after(connect_timeout_s):
            stream = await (open_stream or trio.open_tcp_stream)(host, port)
    except (OSError, trio.TooSlowError) as error:
        raise ConnectionLost(Status.LINK_DOWN, f"cannot connect to {address}: {error}") from None
    async with stream:
        client = Client(stream, program)
        try:
            with trio.fail_after(connect_timeout_s):
                await client._handshake(queue)
        except (trio.BrokenResourceError, OSError, trio.TooSlowError) as error:
            raise ConnectionLost(
                Status.LINK_DOWN, f"handshake with {address} failed: {error}"
            ) from None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client._receive_loop)
                nursery.start_soon(client._send_loop)
                try:
                    yield client
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _single(group) from None


def _single(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested groups, so callers can `except MrsError`; the
    group itself when there really were several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return group
