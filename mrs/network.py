"""Where bytes travel: real TCP, or (in the deterministic simulation) memory.

The server, its links and the client library reach the network only through this
small interface, so `sim` can run a whole bus inside one trio run with an in-memory
network that drops, delays, resets and partitions from a seed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


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
    ) -> None:
        listeners = await self.listen(host, port)
        await self.serve_listeners(handler, host, listeners, task_status=task_status)

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
    ) -> None:
        bound_port = listeners[0].socket.getsockname()[1]
        task_status.started((host, bound_port))
        await trio.serve_listeners(handler, listeners)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await trio.open_tcp_stream(host, port)


TCP = TcpNetwork()
