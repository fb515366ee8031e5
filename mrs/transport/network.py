"""Where bytes travel: real TCP, or (in the deterministic simulation) memory.

The server, its links and the client library reach the network only through this
small interface, so `sim` can run a whole bus inside one trio run with an in-memory
network that drops, delays, resets and partitions from a seed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from mrs.config.addresses import host_port
from mrs.limits import ACCEPT_BATCH_MAX, ACCEPTS_PER_S_MAX
from mrs.transport.open_files import OutOfFilesLog

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


class Gate(Protocol):
    """Asked about each new connection before any task exists for it: how a flood of
    junk connections is kept cheap."""

    def admits(self, host: str) -> bool:
        """False closes the connection from `host` at once (with RST)."""
        ...

    def gone(self) -> None:
        """A connection its peer reset before the server took it was closed: no task,
        no session. Counted so an operator sees a flood of them."""
        ...


log = logging.getLogger("mrs.network")
_LINGER_RST = struct.pack("ii", 1, 0)
CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
"""accept() failures that mean "out of resources for now": wait, then go on (as
trio.serve_listeners does; the HTTP endpoint's accept too, mrs.ops.http_endpoint)."""
CAPACITY_SLEEP_S = 0.1
_GONE_ERRNOS = frozenset({errno.ECONNABORTED, errno.EPROTO})
"""accept() failures that mean "this one connection went away first": take the next."""


class Network(Protocol):
    async def serve(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept connections on host:port forever; report (host, port) when listening."""
        ...

    async def connect(self, host: str, port: int) -> trio.abc.Stream: ...


class TcpNetwork:
    """The real network: trio TCP listeners and streams."""

    async def serve(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED,
        gate: Gate | None = None,
    ) -> None:
        listeners = await self.listen(host, port)
        await self.serve_listeners(handler, host, listeners, task_status=task_status, gate=gate)

    async def listen(self, host: str, port: int) -> list[trio.SocketListener]:
        """Bind host:port now (raises OSError), to serve later with serve_listeners."""
        return await trio.open_tcp_listeners(port, host=host)

    async def serve_listeners(
        self,
        handler: Handler,
        host: str,
        listeners: list[trio.SocketListener],
        *,
        task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED,
        gate: Gate | None = None,
    ) -> None:
        """Serve already bound listeners. gate: see `Gate` (None: accept everything)."""
        bound_port = listeners[0].socket.getsockname()[1]
        task_status.started((host, bound_port))
        if gate is None:
            await trio.serve_listeners(handler, listeners)
            return
        async with trio.open_nursery() as nursery:
            for listener in listeners:
                nursery.start_soon(_accept_loop, listener, handler, gate, nursery)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)


TCP = TcpNetwork()


async def _accept_loop(
    listener: trio.SocketListener, handler: Handler, gate: Gate, nursery: trio.Nursery
) -> None:
    """Accept forever, up to ACCEPT_BATCH_MAX connections per wake-up; a connection the
    gate refuses is closed before it costs a task.

    Why not trio's accept: it goes round the scheduler once per connection and wraps
    each socket in a trio socket, which a junk connection refused at once does not
    need. Here a plain socket on the same listening file takes every connection
    waiting, and only an admitted one becomes a trio stream."""
    listening = socket.socket(fileno=os.dup(listener.socket.fileno()))
    listening.setblocking(False)
    batch_interval_s = ACCEPT_BATCH_MAX / ACCEPTS_PER_S_MAX
    out_of_files = OutOfFilesLog(log, f"listen {_name_of(listening)}")
    try:
        while True:
            await trio.lowlevel.wait_readable(listening)
            started_s = trio.current_time()
            if await _accept_waiting(listening, handler, gate, nursery, out_of_files):
                # a full batch: more are waiting. Take the next one no sooner than
                # the rate allows (ACCEPTS_PER_S_MAX): the rest wait in the backlog.
                await trio.sleep_until(started_s + batch_interval_s)
    finally:
        trio.lowlevel.notify_closing(listening)
        listening.close()


def _name_of(listening: socket.socket) -> str:
    host, port = listening.getsockname()[:2]
    return host_port(host, port)


async def _accept_waiting(
    listening: socket.socket,
    handler: Handler,
    gate: Gate,
    nursery: trio.Nursery,
    out_of_files: OutOfFilesLog,
) -> bool:
    """Take the connections waiting on `listening`, at most ACCEPT_BATCH_MAX; True if
    it took a whole batch (more may be waiting)."""
    for _ in range(ACCEPT_BATCH_MAX):
        try:
            sock, address = listening.accept()
        except BlockingIOError:
            return False
        except OSError as error:
            if error.errno in _GONE_ERRNOS:
                continue
            if error.errno not in CAPACITY_ERRNOS:
                raise
            out_of_files.failed(error)
            await trio.sleep(CAPACITY_SLEEP_S)
            return False
        out_of_files.accepted()
        if not gate.admits(address[0]):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
            sock.close()
            continue
        try:
            sock.getpeername()
        except OSError:  # reset by the peer before it was accepted: gone, no task for it
            sock.close()
            gate.gone()
            continue
        nursery.start_soon(handler, trio.SocketStream(trio.socket.from_stdlib_socket(sock)))
    return True
