"""One in-process bus: the real group servers in this trio run, over memory, no processes.

Why: a test of a delivery rule (a mode, a UMA, a confirm style) needs the real server
code, not a real process. Spawning `mrs serve` costs ~0.3 s per test and its timeouts
cost wall time; here every group is a `GroupServer` on the in-memory network
(sim/memnet.py) with the in-memory journals (sim/memstore.py), so under
`trio.testing.MockClock(autojump_threshold=0)` a 10 s timeout takes no time at all.
The swarm (sim/swarm.py) runs its groups as `SimGroup`s too. Real processes stay for
what only they can show: SIGKILL, signals, the CLI, the demo.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import trio

from clients import connect
from mrs.config.bus import BusConfig, load_config
from mrs.group import KEPT, Guarantees
from mrs.server.group_server import GroupServer
from sim.bus import MemoryBusShape, bus_config_text
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore

MEMORY_PORT_BASE = 17000
"""Group N listens on 127.0.0.1:(17000 + N) of the memory network (no real port)."""
CLIENT_NODE = "clients"
"""The memory network's node every test client connects from."""


@dataclass(eq=False)
class SimGroup:
    """One group's real server on the memory network; its store outlives a crash."""

    bus: BusConfig
    group_id: int
    network: MemoryNetwork
    store: MemoryJournalStore
    guarantees: Guarantees = KEPT
    """The rules the group keeps: KEPT, or a broken build (mrs.testing.broken_builds)."""
    clock_ns: Callable[[], int] | None = None
    """The group's wall clock; None: trio's clock (the swarm: one seed, one history)."""
    server: GroupServer | None = None
    scope: trio.CancelScope | None = None
    up: bool = False

    @property
    def address(self) -> str:
        config = self.bus.group(self.group_id)
        return f"{config.listen_host}:{config.listen_port}"

    async def start(self, nursery: trio.Nursery) -> None:
        self.server = GroupServer(
            self.bus,
            self.bus.group(self.group_id),
            network=self.network.node(f"g{self.group_id}"),
            open_store=lambda: self.store,
            clock_ns=self.clock_ns or (lambda: int(trio.current_time() * 1e9)),
            guarantees=self.guarantees,
        )
        await nursery.start(self._run)
        self.up = True

    async def _run(self, *, task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            self.scope = scope
            await self.server.run(task_status=task_status)

    def crash(self) -> None:
        """Like SIGKILL: nothing uncommitted survives, no shutdown code runs."""
        self.server.crashed = True
        self.scope.cancel()
        self.up = False


@dataclass(eq=False)
class MemoryBus:
    """Every group of a bus config, started in one nursery; crash and restart any."""

    bus: BusConfig
    nursery: trio.Nursery
    network: MemoryNetwork = field(default_factory=lambda: MemoryNetwork(random.Random(0)))
    groups: dict[int, SimGroup] = field(default_factory=dict)
    faults: dict[int, str | None] = field(default_factory=dict)
    started_s: float = field(default_factory=trio.current_time)
    """Per group: None, or "EIO", "ENOSPC" or "MAPFULL" to fail every commit from now
    on (what MRS_FAULT_FILE does to a real process)."""

    def __post_init__(self) -> None:
        for group_id in self.bus.groups:
            Path(self.bus.group(group_id).data_dir).mkdir(parents=True, exist_ok=True)
            store = MemoryJournalStore(
                f"memory-g{group_id}", fault=lambda _batches, g=group_id: self.faults.get(g)
            )
            self.groups[group_id] = SimGroup(
                self.bus, group_id, self.network, store, clock_ns=self.clock_ns
            )

    def clock_ns(self) -> int:
        """Wall time plus the time MockClock skipped: put times read like real ones, and
        a window of N seconds has passed after `await trio.sleep(N)`."""
        return time.time_ns() + int((trio.current_time() - self.started_s) * 1e9)

    async def start(self, group_id: int) -> None:
        await self.groups[group_id].start(self.nursery)

    async def restart(self, group_id: int) -> None:
        """Crash the group (as SIGKILL would) and start it again on the same journals."""
        group = self.groups[group_id]
        if group.up:
            group.crash()
            await trio.lowlevel.checkpoint()
        await self.start(group_id)

    def address(self, group_id: int) -> str:
        return self.groups[group_id].address

    def connect(self, group_id: int, queue: Any = None, **options: Any):
        """`clients.connect` to a group over the memory network (same options)."""
        options.setdefault("open_stream", self.network.node(CLIENT_NODE).connect)
        return connect(self.address(group_id), queue, **options)


@asynccontextmanager
async def memory_bus(config_path: Path, start: bool = True) -> AsyncIterator[MemoryBus]:
    """The bus of `config_path` in this trio run; every group started unless start=False."""
    async with trio.open_nursery() as nursery:
        bus = MemoryBus(load_config(config_path), nursery)
        if start:
            for group_id in bus.bus.groups:
                await bus.start(group_id)
        yield bus
        nursery.cancel_scope.cancel()


@dataclass(eq=False)
class MemoryGroup:
    """One group of a `MemoryBus`, shaped like tests/conftest.py's `Bus` (a process):
    `address`, `restart()`, plus `connect(queue)` since the address is not TCP."""

    memory: MemoryBus
    group_id: int
    config_path: Path

    @property
    def address(self) -> str:
        return self.memory.address(self.group_id)

    @property
    def server(self) -> GroupServer:
        return self.memory.groups[self.group_id].server

    @property
    def store(self) -> MemoryJournalStore:
        return self.memory.groups[self.group_id].store

    def connect(self, queue: Any = None, **options: Any):
        return self.memory.connect(self.group_id, queue, **options)

    @property
    def open_stream(self):
        """What `clients.connect(..., open_stream=)` needs to reach this group."""
        return self.memory.network.node(CLIENT_NODE).connect

    def fail_commits(self, word: str | None) -> None:
        """Fail every commit from now on ("EIO", "ENOSPC", "MAPFULL"); None heals."""
        self.memory.faults[self.group_id] = word or None

    async def restart(self) -> None:
        await self.memory.restart(self.group_id)


@dataclass(eq=False)
class MemoryLink:
    """The link between two in-process groups, cut and healed like a `FaultProxy`."""

    memory: MemoryBus
    nodes: frozenset[str]
    cuts: int = 0

    def cut(self) -> None:
        """Drop the link's connections now and refuse new ones until heal()."""
        network = self.memory.network
        network.partitions.add(self.nodes)
        self.cuts += 1
        for ends in list(network.connections):
            if ends[0].nodes == self.nodes:
                for end in ends:
                    end.closed = True
                self.memory.nursery.start_soon(network._reset, ends)

    def blackhole(self) -> None:
        """Half-open both ways, as a peer that lost power: open connections stay up and
        their bytes vanish (no FIN, no RST); new ones are refused until heal()."""
        self.memory.network.blackhole(*self.nodes)

    def heal(self) -> None:
        """Let connections through again; one still open across a blackhole is reset,
        since a stream with bytes missing cannot go on."""
        network = self.memory.network
        network.partitions.discard(self.nodes)
        if self.nodes in network.blackholes:
            network.blackholes.discard(self.nodes)
            for ends in list(network.connections):
                if ends[0].nodes == self.nodes:
                    for end in ends:
                        end.closed = True
                    self.memory.nursery.start_soon(network._reset, ends)

    @property
    def is_cut(self) -> bool:
        return self.nodes in self.memory.network.partitions


def write_linked_config(directory: Path, shape: MemoryBusShape) -> Path:
    """A bus of `shape` for the memory network: each link dials the higher group itself
    (a `MemoryLink` cuts it; there is no proxy in between)."""
    directory.mkdir(parents=True, exist_ok=True)
    listen = {group_id: f"127.0.0.1:{MEMORY_PORT_BASE + group_id}" for group_id in shape.group_ids}
    links = {(low, high): listen[high] for low, high in combinations(sorted(shape.group_ids), 2)}
    path = directory / "bus.toml"
    path.write_text(bus_config_text(shape, listen, links))
    return path


@dataclass(eq=False)
class MemoryLinkedBus:
    """`sim.bus.LinkedBus`'s shape (address, proxy(a, b).cut/heal, kill, stop) for
    groups in this trio run: tests of link rules run on it under MockClock."""

    memory: MemoryBus
    directory: Path

    @classmethod
    async def start(
        cls,
        directory: Path,
        nursery: trio.Nursery,
        started: tuple[int, ...] | None = None,
        **options: Any,
    ):
        """Write the bus of `options` (LinkedBus's) and start the groups in `started`
        (None: all; the others are configured and linked, but down)."""
        path = write_linked_config(directory, MemoryBusShape(**options))
        bus = cls(MemoryBus(load_config(path), nursery), directory)
        for group_id in bus.memory.bus.groups if started is None else started:
            await bus.memory.start(group_id)
        return bus

    def address(self, group_id: int) -> str:
        return self.memory.address(group_id)

    def connect(self, group_id: int, queue: Any = None, **options: Any):
        return self.memory.connect(group_id, queue, **options)

    def proxy(self, group_a: int, group_b: int) -> MemoryLink:
        return MemoryLink(self.memory, frozenset((f"g{group_a}", f"g{group_b}")))

    def server(self, group_id: int) -> GroupServer:
        return self.memory.groups[group_id].server

    def store(self, group_id: int) -> MemoryJournalStore:
        return self.memory.groups[group_id].store

    def data_dir(self, group_id: int) -> Path:
        return self.directory / f"g{group_id}"

    def clock_ns(self) -> int:
        """The groups' wall clock (wall time plus what MockClock skipped)."""
        return self.memory.clock_ns()

    def kill(self, group_id: int) -> None:
        """As SIGKILL: the group stops, its committed journals stay."""
        self.memory.groups[group_id].crash()

    async def restart(self, group_id: int) -> None:
        await self.memory.restart(group_id)

    def stop(self) -> None:
        for group in self.memory.groups.values():
            if group.up:
                group.scope.cancel()
                group.up = False
