"""Dialing for the client: open a stream, handshake and attach, and reconnect with
backoff after a drop (or give up, and leave the client broken).

`_Dialer` is the part of `Client` (clients.connection) that does this.
"""

from __future__ import annotations

import trio

from clients.errors import ConnectionLost, MrsError, error_for
from clients.link import _Link, _next_event
from clients.tls import tls_refusal
from mrs import protocol as wire
from mrs.limits import CLIENT_FRAME_BYTES_MAX
from mrs.model import Address, Status


class _Dialer:
    """Client's dial, handshake, attach and reconnect loop."""

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
        # answer_batches: this client reads AnswerBatch frames (clients.pending._dispatch)
        hello = wire.Hello(wire.PROTOCOL_VERSION, self._program, "app", 0, True)
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
            if self._broken is not None:  # ended by the server NOTAUTHORIZED (`_lose`)
                self._wake()
                return
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


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"server address must be HOST:PORT, got {address!r}")
    return host.strip("[]"), int(port)
