"""An in-memory network for the deterministic simulation, with faults from a seed.

Connections are trio in-memory stream pairs: bytes arrive in order, exactly as TCP
promises, but every send may be delayed (by the simulation's clock), a connection
may be reset, two nodes may be partitioned (connects refused, open connections
between them closed), and a pair may go half-open (a blackhole: sends between them
vanish without an error, as when a peer loses power; healing resets those
connections, since a stream with bytes missing cannot go on). Every decision comes
from the simulation's `random.Random`, so one seed gives one history.
"""

from __future__ import annotations

import errno
import random
from dataclasses import dataclass, field

import trio
import trio.testing

from mrs.transport.network import Handler


@dataclass(eq=False)
class FaultyStream(trio.abc.Stream):
    """One end of a connection; sends may be delayed, the whole connection reset."""

    inner: trio.abc.Stream
    network: MemoryNetwork
    nodes: frozenset[str]
    node: str = ""
    """The node holding this end."""
    closed: bool = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        delay_s = self.network.send_delay_s()
        if delay_s:
            await trio.sleep(delay_s)
        await self.network.thawed(self.nodes)
        if self.closed:
            raise trio.BrokenResourceError("connection reset")
        if self.nodes in self.network.blackholes:
            await trio.lowlevel.checkpoint()
            return  # the bytes vanish; the sender cannot tell
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.closed:
            raise trio.ClosedResourceError("connection reset")
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        self.closed = True
        await self.inner.aclose()


@dataclass(eq=False)
class MemoryNetwork:
    rng: random.Random
    delay_probability: float = 0.0
    delay_s_max: float = 0.05
    listeners: dict[tuple[str, int], tuple[Handler, trio.Nursery]] = field(default_factory=dict)
    partitions: set[frozenset[str]] = field(default_factory=set)
    blackholes: set[frozenset[str]] = field(default_factory=set)
    connections: list[tuple[FaultyStream, FaultyStream]] = field(default_factory=list)
    owners: dict[tuple[str, int], str] = field(default_factory=dict)
    frozen: dict[frozenset[str], trio.Event] = field(default_factory=dict)
    """Pairs whose sends and connects wait (a paused process): they go, in order,
    once thawed."""

    def node(self, name: str) -> NodeNetwork:
        return NodeNetwork(self, name)

    def send_delay_s(self) -> float:
        if self.delay_probability and self.rng.random() < self.delay_probability:
            return self.rng.uniform(0, self.delay_s_max)
        return 0.0

    # ----- faults
    async def partition(self, node_a: str, node_b: str) -> None:
        pair = frozenset((node_a, node_b))
        self.partitions.add(pair)
        for ends in list(self.connections):
            if ends[0].nodes == pair:
                await self._reset(ends)

    def blackhole(self, node_a: str, node_b: str) -> None:
        """Half-open: open connections between the two stay up, their bytes vanish."""
        self.blackholes.add(frozenset((node_a, node_b)))

    async def heal(self) -> None:
        for pair in list(self.frozen):
            self.thaw(*pair)
        self.partitions.clear()
        if self.blackholes:
            for ends in list(self.connections):
                if ends[0].nodes in self.blackholes:
                    await self._reset(ends)
            self.blackholes.clear()

    def freeze(self, node_a: str, node_b: str) -> None:
        """Sends and connects between the two wait until `thaw` (nothing is lost)."""
        self.frozen.setdefault(frozenset((node_a, node_b)), trio.Event())

    def thaw(self, node_a: str, node_b: str) -> None:
        event = self.frozen.pop(frozenset((node_a, node_b)), None)
        if event is not None:
            event.set()

    async def thawed(self, nodes: frozenset[str]) -> None:
        while (event := self.frozen.get(nodes)) is not None:
            await event.wait()

    async def reset_one(self) -> bool:
        """Reset one open connection chosen by the seed (False if none is open)."""
        open_ends = [ends for ends in self.connections if not ends[0].closed]
        if not open_ends:
            return False
        await self._reset(self.rng.choice(open_ends))
        return True

    async def _close_side(self, ends: tuple[FaultyStream, FaultyStream], node: str) -> None:
        """The node is gone (stopped or killed): as its kernel would, close its end
        so the peer still reads what was sent before, then end-of-stream."""
        for end in ends:
            if end.node == node:
                end.closed = True
                await end.inner.aclose()
        if ends in self.connections:
            self.connections.remove(ends)

    async def _reset(self, ends: tuple[FaultyStream, FaultyStream]) -> None:
        for end in ends:
            end.closed = True
            await end.inner.aclose()
        if ends in self.connections:
            self.connections.remove(ends)

    # ----- plumbing
    async def _serve(
        self, owner: str, handler: Handler, host: str, port: int, task_status: trio.TaskStatus
    ) -> None:
        async with trio.open_nursery() as nursery:
            self.listeners[(host, port)] = (handler, nursery)
            self.owners[(host, port)] = owner
            try:
                task_status.started((host, port))
                await trio.sleep_forever()
            finally:
                self.listeners.pop((host, port), None)
                for ends in list(self.connections):
                    if owner in ends[0].nodes:
                        await self._close_side(ends, owner)

    async def _connect(self, origin: str, host: str, port: int) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        owner = self.owners.get((host, port), "?")
        pair = frozenset((origin, owner))
        await self.thawed(pair)
        entry = self.listeners.get((host, port))
        if entry is None or pair in self.partitions or pair in self.blackholes:
            raise OSError(errno.ECONNREFUSED, f"connection to {host}:{port} refused")
        handler, nursery = entry
        client_side, server_side = trio.testing.memory_stream_pair()
        nodes = frozenset((origin, owner))
        ends = (
            FaultyStream(client_side, self, nodes, origin),
            FaultyStream(server_side, self, nodes, owner),
        )
        self.connections.append(ends)
        nursery.start_soon(handler, ends[1])
        return ends[0]


@dataclass(eq=False)
class NodeNetwork:
    """The network as one node (a group or the clients) sees it."""

    network: MemoryNetwork
    name: str

    async def serve(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.network._serve(self.name, handler, host, port, task_status)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        return await self.network._connect(self.name, host, port)
