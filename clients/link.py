"""One live client connection and the tasks that serve it: the receive loop (answers
to the waiting callers), the send loop (every queued request in one `send_all`) and the
heartbeat watch (a silent server counts as lost).

`LinkLoops` is the part of `Client` (clients.connection) that runs them. It is
given its collaborators, each by the narrow shape it uses: the request table
(`Session`: answers in, lost connections, the get pool's asks), the journal status,
and the SAF drain to start on each new connection while the journal has a backlog.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import trio

from clients.errors import ConnectionLost, MrsError, error_for
from mrs import protocol as wire
from mrs.limits import CLIENT_CLOSE_WAIT_S, HEARTBEATS_SILENT_MAX
from mrs.model import Status
from mrs.transport.framed import FramedStream, StreamClosed

if TYPE_CHECKING:
    from clients.deadlines import ReplyDeadlines
    from clients.journal_status import JournalStatus
    from clients.saf_journal import ClientJournal


@dataclass(eq=False)
class _Link(FramedStream):
    """One live connection: its framed stream, plus what the client tracks of it."""

    unsent: set[int] = field(default_factory=set)
    """Requests queued but not yet handed to the stream: safe to retry if it is lost."""
    lost: MrsError | None = None
    heard_s: float = field(default_factory=trio.current_time)
    """trio.current_time() when the server last sent a byte."""
    went_silent: bool = False
    """Lost because the server stopped answering (`_watch`), not closed by it."""
    writable: trio.lowlevel.ParkingLot = field(default_factory=trio.lowlevel.ParkingLot)
    """Requests waiting for the unwritten bytes to fall under OUTBOX_BYTES_HIGH
    (clients.pending.Requests.outbox_room); woken after each write and when lost."""


class Asker(Protocol):
    """What the send loop uses of the get pool (clients.get_pool.GetPool)."""

    def ask(self, link: _Link) -> None: ...


class Session(Protocol):
    """What the loops use of the client's request table (clients.pending.Requests)."""

    link: _Link | None

    @property
    def deadlines(self) -> ReplyDeadlines: ...
    @property
    def gets(self) -> Asker: ...

    def dispatch(self, link: _Link, event: object) -> None: ...
    def send_frame(self, link: _Link, event: object) -> None: ...
    def lose(self, link: _Link, error: MrsError, closing: bool = False) -> None: ...


class Drain(Protocol):
    """The SAF journal's drain over one connection (clients.saf_drain.SafDrain)."""

    async def drain(self, link: _Link) -> None: ...


class LinkLoops:
    """A client's connection serving: install a link, run its loops, watch its silence."""

    def __init__(
        self,
        address: str,
        heartbeat_s: float | None,
        session: Session,
        status: JournalStatus,
        journal: ClientJournal | None,
        drain: Drain | None,
    ) -> None:
        self.address = address
        self.heartbeat_s = heartbeat_s
        self._session = session
        self._status = status
        self._journal = journal
        self._drain = drain

    def install(self, link: _Link) -> None:
        """`link` is the client's connection now: requests may use it."""
        self._session.link = link
        journal = self._journal
        if journal is not None and journal.count == 0 and journal.idle:
            self._status.set(Status.LINK_UP)
        self._status.wake()

    async def serve(self, link: _Link) -> None:
        """Install `link` and run its loops until it is lost (or the client closes)."""
        self.install(link)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._receive_loop, link, nursery.cancel_scope)
                if self.heartbeat_s is not None:
                    nursery.start_soon(self._watch, link, self.heartbeat_s)
                nursery.start_soon(self._send_loop, link, nursery.cancel_scope)
                nursery.start_soon(self._session.deadlines.run)
                if self._drain is not None:  # the backlog, then records sent again (redriven)
                    nursery.start_soon(self._drain.drain, link)
        finally:
            closing = link.lost is None  # cancelled: the client is closing
            if closing:
                closed = ConnectionLost(Status.LINK_DOWN, "client closed")
                self._session.lose(link, closed, closing=True)
            with trio.CancelScope(shield=True), trio.move_on_after(CLIENT_CLOSE_WAIT_S):
                if closing:
                    await _released(link.stream)
                await trio.aclose_forcefully(link.stream)

    async def _watch(self, link: _Link, interval_s: float) -> None:
        """Ping a quiet server; a server silent for HEARTBEATS_SILENT_MAX intervals (host
        gone, process stopped, cable cut without FIN or RST) counts as lost, so the
        client reconnects (and journals) instead of waiting forever."""
        nonces = itertools.count(1)
        pinged_s = -math.inf
        while link.lost is None:
            now_s = trio.current_time()
            lost_at_s = link.heard_s + interval_s * HEARTBEATS_SILENT_MAX
            if now_s >= lost_at_s:  # judged when the silence reaches the bound
                error = ConnectionLost(
                    Status.LINK_DOWN,
                    f"server {self.address} silent for {now_s - link.heard_s:.1f} s",
                )
                link.went_silent = True
                self._session.lose(link, error)
                await trio.aclose_forcefully(link.stream)  # wakes the receive loop
                return
            ping_at_s = max(link.heard_s, pinged_s) + interval_s
            if now_s >= ping_at_s:
                self._session.send_frame(link, wire.Ping(next(nonces)))
                pinged_s, ping_at_s = now_s, now_s + interval_s
            # absolute times, compared as computed: a relative sleep of what is left
            # could round to nothing and wake at once, again and again
            await trio.sleep_until(min(ping_at_s, lost_at_s))

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
                    self._session.dispatch(link, event)
                if not still_open or link.connection.closed:
                    raise ConnectionLost(Status.LINK_DOWN, "server closed the connection")
        except wire.ProtocolError as error:  # an MrsError too: caught first, on purpose
            self._session.lose(link, error_for(Status.PROTOCOL_ERROR, str(error)))
        except MrsError as error:
            self._session.lose(link, error)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._session.lose(link, ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))
        scope.cancel()

    async def _send_loop(self, link: _Link, scope: trio.CancelScope) -> None:
        gets = self._session.gets
        try:
            while link.lost is None:
                await link.wait_ready()
                gets.ask(link)  # the gets that joined since the last write
                data = link.take()
                if data:
                    link.unsent.clear()
                    await link.write(data)
                if link.writable:  # requests waiting for the outbox to drain
                    link.writable.unpark_all()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._session.lose(link, ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))
        scope.cancel()


async def _next_event(link: _Link) -> object:
    """The server's next event of the handshake; ConnectionLost, `closed_unanswered`,
    if the server closes the stream instead of answering."""
    try:
        return await link.next_event()
    except StreamClosed:
        closed = ConnectionLost(Status.LINK_DOWN, "server closed the connection")
        closed.closed_unanswered = True
        raise closed from None


async def _released(stream: trio.abc.Stream) -> None:
    """Half-close, then read until the server closes too. The server gives the
    attached queue back (detach) before it closes, so a program that attaches to the
    same queue right after this one's close does not meet QUEUE_BUSY. A stream that
    cannot half-close (TLS) is closed at once, as before; the caller bounds the wait."""
    send_eof = getattr(stream, "send_eof", None)
    if send_eof is None:
        return
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        await send_eof()
        while await stream.receive_some(_CLOSE_READ_BYTES):
            pass  # answers to requests the close already failed: nobody waits for them


_CLOSE_READ_BYTES = 65536
"""What one read takes of the answers still arriving as the client closes."""
