"""One live client connection and the tasks that serve it: the receive loop (answers
to the waiting callers), the send loop (every queued request in one `send_all`) and the
heartbeat watch (a silent server counts as lost).

`_LinkLoops` is the part of `Client` (clients.connection) that runs them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import trio

from clients.errors import ConnectionLost, MrsError, error_for
from mrs import protocol as wire
from mrs.limits import HEARTBEATS_SILENT_MAX
from mrs.model import Status
from mrs.transport.framed import FramedStream, StreamClosed


@dataclass(eq=False)
class _Link(FramedStream):
    """One live connection: its framed stream, plus what the client tracks of it."""

    unsent: set[int] = field(default_factory=set)
    """Requests queued but not yet handed to the stream: safe to retry if it is lost."""
    lost: MrsError | None = None
    heard_s: float = field(default_factory=trio.current_time)
    """trio.current_time() when the server last sent a byte."""


class _LinkLoops:
    """Client's connection serving: install a link, run its loops, watch its silence."""

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
                nursery.start_soon(self._deadlines.run)
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
                await link.wait_ready()
                self._gets.ask(link)  # the gets that joined since the last write
                data = link.take()
                if data:
                    link.unsent.clear()
                    await link.write(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as error:
            self._lose(link, ConnectionLost(Status.LINK_DOWN, f"connection lost: {error}"))
        scope.cancel()


async def _next_event(link: _Link) -> object:
    try:
        return await link.next_event()
    except StreamClosed:
        raise ConnectionLost(Status.LINK_DOWN, "server closed the connection") from None
