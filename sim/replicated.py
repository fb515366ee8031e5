"""A replicated group in the simulation: three real instances, one in-memory coordinator.

Why: issue 51's promise (nothing acknowledged is lost when the active's machine is)
must hold under the same seeded faults as the rest of the bus. Each instance is the
real `mrs.server.instance.InstanceRunner` (replica until it wins a term, then the
real `GroupServer` with the replicated writer, `mrs.replication.active` and
`replica`), on the memory network (node `g<id><name>`) and its own memory journals;
leadership is `mrs.replication.coordinator.MemoryCoordinator` over one shared
`MemoryElection`, with etcd's lease modelled here: a leader that has not renewed for
the TTL is expired (`_lease_watchdog`). `ReplicatedSimGroup` has `SimGroup`'s shape
(`up`, `start`, `crash`, `store`, `server`), so the swarm, the nemesis and the final
drain treat it as one group; clients and other groups' links try the instances'
addresses in turn (`mrs.server.instance_dial.InstancesNetwork`) and so follow the
active.

The faults of its own (`REPLICATION_ACTIONS`, acted out by `act`): a failover (the
active killed as SIGKILL would: its journals keep what was committed), a replica
lagging behind (its link blackholed) and then a failover, the active cut off from
both replicas and then killed, a replica restarted with empty journals (a lost disk),
the active's lease expiring under it (a process paused past its lease), the
active cut off from the coordinator (it must step down before the lease expires), and
the coordinator losing its data (the instances then agree by census,
mrs.replication.census).
Replication messages are lost with their link (blackholes, resets) and delayed by
the network's seeded delays, so records of an old and a new term arrive at a replica
in either order.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from journals import Journal, WriteBatch
from mrs.config.bus import BusConfig
from mrs.config.instance_types import InstanceConfig
from mrs.group import KEPT, Guarantees
from mrs.replication.coordinator import (
    NO_CO_HOLDERS,
    CoHolders,
    MemoryCoordinator,
    MemoryElection,
)
from mrs.replication.replica import POSITION_KEY
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from mrs.server.group_server import GroupServer
from mrs.server.harness import ServeOptions
from mrs.server.instance import InstanceRunner
from sim.history import STORED_STATUSES
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore


class Simulation(Protocol):
    """What the replication faults use of a seed's run (sim.simulation.Simulation)."""

    network: MemoryNetwork
    history: Any
    groups: dict[int, Any]
    shape: Any
    paused_consumers: set[int]

    @property
    def group_ids(self) -> tuple[int, ...]: ...


log = logging.getLogger("sim.replicated")

LEASE_TTL_S = 2
"""The simulated coordinator's lease (the config's minimum): failovers within seconds."""
_WATCHDOG_S = 0.05
FAILOVER_WAIT_S_MAX = 8.0
"""How long a killed active stays down waiting for a replica to take over."""
REPLICATION_ACTIONS = (
    "failover",
    "failover",
    "lag-then-failover",
    "isolate-then-failover",
    "restart-empty",
    "lease-expire",
    "coordinator-cut",
    "coordinator-wipe",
)
"""The nemesis's faults aimed at the replicated group (see the module docstring)."""

Fault = Callable[[list[WriteBatch]], str | None]


class SimCoordinator(MemoryCoordinator):
    """The in-memory coordinator, noting each renewal so the lease can expire."""

    def __init__(self, group: ReplicatedSimGroup, name: str) -> None:
        super().__init__(group.election, name)
        self.group = group

    async def campaign(
        self, term_at_least: int = 0, co_holders: CoHolders = NO_CO_HOLDERS
    ) -> int | None:
        term = await super().campaign(term_at_least, co_holders)
        if term is not None:
            self.group.renewed_s[self.name] = trio.current_time()
            self.group.terms.append((term, self.name))
            if self.group.on_term is not None:
                self.group.on_term(term, self.name)
        return term

    async def renew(self) -> bool:
        if self.group.slow_clock == self.name:
            return True  # its clock runs slow: its lease still holds, it believes
        renewed = await super().renew()
        if renewed:
            self.group.renewed_s[self.name] = trio.current_time()
        return renewed


@dataclass(eq=False)
class SimInstance:
    """One instance: its config, its journals (they outlive a crash) and its runner."""

    config: InstanceConfig
    store: MemoryJournalStore
    runner: InstanceRunner | None = None
    scope: trio.CancelScope | None = None
    up: bool = False

    @property
    def server(self) -> GroupServer | None:
        """The group server while this instance is active."""
        return self.runner.server if self.runner is not None else None


@dataclass(eq=False)
class ReplicatedSimGroup:
    """A replicated group with `SimGroup`'s shape: the swarm sees one group."""

    bus: BusConfig
    group_id: int
    network: MemoryNetwork
    fault: Fault | None = None
    """The group's commit faults (sim.faulty_groups), applied to the active's journals."""
    guarantees: Guarantees = KEPT
    rules: ReplicationRules = KEPT_REPLICATION
    clock_ns: Callable[[], int] | None = None
    on_term: Callable[[int, str], None] | None = None
    """Told of each term won and by whom (the history records it, and a term after
    the first as a crash of the group: its new active recovers from its journals)."""
    on_step_down: Callable[[str], None] | None = None
    """Told when an active steps down (by name): its memory queues are gone, also when
    no term is won at that moment (an old active that learns of a newer term late)."""
    election: MemoryElection = field(default_factory=MemoryElection)
    instances: dict[str, SimInstance] = field(default_factory=dict)
    renewed_s: dict[str, float] = field(default_factory=dict)
    terms: list[tuple[int, str]] = field(default_factory=list)
    """Every term won, and by whom."""
    watchdog: bool = False
    slow_clock: str | None = None
    """An instance whose clock runs slow ("lease-expire"): it believes its renewals
    work while the coordinator has expired its lease."""
    stale_trap: bool = False
    """Armed by "lease-expire": kill the active the moment a replica applies a record
    of an older term than the last granted (a correct replica never does)."""

    def __post_init__(self) -> None:
        for config in self.bus.group(self.group_id).instances:
            self.instances[config.name] = SimInstance(config, self._new_store(config.name))

    def _new_store(self, name: str) -> MemoryJournalStore:
        def fault(batches: list[WriteBatch]) -> str | None:
            instance = self.instances[name]
            if not instance.up:
                return "EIO"  # what a killed process still tries never reaches the disk
            if instance.server is not None and self.fault is not None:
                return self.fault(batches)
            if (
                self.stale_trap
                and _stale_position(batches, self.election.term)
                and self._leader_answered()
            ):
                self.stale_trap = False  # the worst moment: a replica holds an old term's
                leader = self.election.leader  # copy; lose the active that answered
                if leader is not None and leader != name:
                    self.kill(self.instances[leader])
            return None

        return MemoryJournalStore(f"memory-g{self.group_id}{name}", fault=fault)

    def _leader_answered(self) -> bool:
        """Whether the leader has answered a commit of its own (beyond its first)."""
        return _answered(self, 2)

    def node(self, name: str) -> str:
        return f"g{self.group_id}{name}"

    # ----------------------------------------------------------- SimGroup's shape
    @property
    def address(self) -> str:
        first = next(iter(self.instances.values())).config
        return first.listen

    @property
    def up(self) -> bool:
        return all(instance.up for instance in self.instances.values())

    @property
    def active(self) -> SimInstance | None:
        return next((i for i in self.instances.values() if i.up and i.server is not None), None)

    @property
    def server(self) -> GroupServer | None:
        active = self.active
        return active.server if active is not None else None

    @property
    def store(self) -> MemoryJournalStore:
        """The active's journals (the final drain reads what is left there)."""
        active = self.active
        if active is not None:
            return active.store
        return next(iter(self.instances.values())).store

    async def start(self, nursery: trio.Nursery) -> None:
        """Start every instance that is down (each begins as a replica)."""
        if not self.watchdog:
            self.watchdog = True
            nursery.start_soon(self._lease_watchdog)
        for instance in self.instances.values():
            if not instance.up:
                await self.start_one(nursery, instance)

    async def start_one(self, nursery: trio.Nursery, instance: SimInstance) -> None:
        """Start one instance that is down (as a replica), leaving the others as they are."""
        await nursery.start(self._run, instance)

    def crash(self) -> None:
        """Kill the active as SIGKILL would (or, with none, the first instance up)."""
        victim = self.active or next((i for i in self.instances.values() if i.up), None)
        if victim is not None:
            self.kill(victim)

    # ------------------------------------------------------------- instances
    def kill(self, instance: SimInstance) -> None:
        """SIGKILL: its journals keep what was committed; its lease is not given up."""
        if instance.server is not None:
            instance.server.crashed = True
        instance.up = False
        if instance.scope is not None:
            instance.scope.cancel()

    def wipe(self, instance: SimInstance) -> None:
        """A lost disk: the instance's journals are replaced by empty ones."""
        instance.store = self._new_store(instance.config.name)

    def make_runner(self, instance: SimInstance) -> InstanceRunner:
        name = instance.config.name
        runner = InstanceRunner(
            self.bus,
            self.bus.group(self.group_id),
            instance.config,
            SimCoordinator(self, name),
            ServeOptions(guarantees=self.guarantees, gc_thresholds=None),  # not the sim's process
            network=self.network.node(self.node(name)),
            open_store=lambda: self.instances[name].store,
            clock_ns=self.clock_ns or (lambda: int(trio.current_time() * 1e9)),
            rules=self.rules,
        )
        if self.on_step_down is not None:
            told = self.on_step_down
            runner.on_step_down = lambda: told(name)
        return runner

    async def _run(
        self, instance: SimInstance, *, task_status: trio.TaskStatus = trio.TASK_STATUS_IGNORED
    ) -> None:
        """One instance until killed; a role that fails (a start whose commit failed)
        is begun again as a replica, as a supervisor would restart the process."""
        with trio.CancelScope() as scope:
            instance.scope = scope
            instance.up = True
            task_status.started()
            while True:
                instance.runner = self.make_runner(instance)
                try:
                    await instance.runner.run()
                except Exception as error:  # noqa: BLE001 - a failed start is a result here
                    log.info("instance %s failed: %s", instance.config.name, error)
                    if instance.server is not None:
                        instance.server.crashed = True
                await trio.sleep(0.5)

    async def _lease_watchdog(self) -> None:
        """etcd's TTL: a leader that has not renewed for LEASE_TTL_S loses the lease."""
        while True:
            await trio.sleep(_WATCHDOG_S)
            leader = self.election.leader
            if leader is not None:
                renewed = self.renewed_s.get(leader, trio.current_time())
                if trio.current_time() - renewed >= LEASE_TTL_S:
                    self.election.expire(leader)

    def heal(self) -> None:
        self.election.reachable.clear()

    def settled(self) -> bool:
        """Every instance up, an active, and every replica in sync with every record:
        no answer held (a message held is not delivered yet, so the final drain must
        wait for it)."""
        active = self.active
        if not self.up or active is None or active.runner is None:
            return False
        replication = active.runner.active
        if replication is None or replication.stepped_down is not None:
            return False
        group = getattr(active.server, "group", None)
        if group is not None and group.ctx.writer.pending:
            return False  # a batch not yet committed (a confirm's delete) is not held yet
        stream = replication.stream
        return not stream.waiting and all(
            stream.acked.get(name, 0) >= stream.number and name in stream.in_sync
            for name in self.instances
            if name != active.config.name
        )


def _stale_position(batches: list[WriteBatch], term: int) -> bool:
    """Whether these writes move a replica to a position of a term older than `term`."""
    for batch in batches:
        for journal, key, value in batch.puts:
            if journal is Journal.META and key == POSITION_KEY.encode():
                return int.from_bytes(value[:8], "big") < term
    return False


def replicated_toml(group_id: int) -> str:
    """The [[group.instance]] entries of a replicated group on the memory network."""
    return "".join(
        f'[[group.instance]]\nname = "{name}"\nlisten = "sim:{7100 + 10 * group_id + i}"\n'
        f'replication = "sim:{7200 + 10 * group_id + i}"\ndata_dir = "g{group_id}{name}"\n'
        for i, name in enumerate("abc")
    )


COORDINATOR_TOML = f'[coordinator]\netcd = ["http://sim"]\nlease_ttl_s = {LEASE_TTL_S}\n'


async def wait_ready(sim: Simulation) -> None:
    """Until every replicated group has an active and all its instances up (at most
    FAILOVER_WAIT_S_MAX): a replication fault drawn meanwhile would be skipped."""
    with trio.move_on_after(FAILOVER_WAIT_S_MAX):
        for group_id in sim.shape.replicated:
            group = sim.groups[group_id]
            while group.active is None or not group.up:
                await trio.sleep(_WATCHDOG_S)


async def act(sim: Simulation, nursery: trio.Nursery, rng: random.Random, action: str) -> None:
    """Act out one of REPLICATION_ACTIONS on a replicated group chosen by the seed."""
    group = sim.groups[rng.choice(sim.shape.replicated)]
    assert isinstance(group, ReplicatedSimGroup)
    active = group.active
    if active is None or not group.up:
        return  # a failover under way: this fault waits for the next draw
    replicas = [i for i in group.instances.values() if i is not active]
    network = sim.network
    if action == "failover":
        await _failover(sim, group, nursery, rng)
    elif action == "lag-then-failover":
        await _lag_then_failover(sim, group, nursery, rng, active, replicas)
    elif action == "isolate-then-failover":
        for replica in replicas:
            network.blackhole(group.node(active.config.name), group.node(replica.config.name))
        sim.paused_consumers.add(group.group_id)  # a backlog builds meanwhile
        await trio.sleep(rng.uniform(0.3, 2.5))
        await _failover(sim, group, nursery, rng, quick_restart=False)
        await network.heal()
        sim.paused_consumers.discard(group.group_id)
    elif action == "restart-empty":
        replica = rng.choice(replicas)
        group.kill(replica)
        await trio.sleep(rng.uniform(0.05, 1.0))
        group.wipe(replica)
        await group.start(nursery)
        if rng.random() < 0.5:  # the active is lost while the wiped one catches up
            await trio.sleep(rng.uniform(0.0, 0.5))
            await _failover(sim, group, nursery, rng)
    elif action == "lease-expire":
        await _zombie_active(sim, group, nursery, rng, active, replicas)
    elif action == "coordinator-cut":
        group.election.reachable = {i.config.name for i in replicas}
        await trio.sleep(rng.uniform(0.5, 3.0))
        group.heal()
    elif action == "coordinator-wipe":  # etcd lost its data: the active cannot renew
        group.election.wipe()  # and steps down; the instances agree by census
        sim.history.record_crash(group.group_id)
        with trio.move_on_after(FAILOVER_WAIT_S_MAX):
            while group.election.leader is None:
                await trio.sleep(_WATCHDOG_S)


async def _lag_then_failover(
    sim: Simulation,
    group: ReplicatedSimGroup,
    nursery: trio.Nursery,
    rng: random.Random,
    active: SimInstance,
    replicas: list[SimInstance],
) -> None:
    """One replica's link is blackholed long enough for the active to drop it from
    the in-sync set (a backlog builds meanwhile); then the active and the replica in
    sync are lost together. The laggard alone must not take over: the group waits
    until one of the others is back."""
    laggard = rng.choice(replicas)
    network = sim.network
    network.blackhole(group.node(active.config.name), group.node(laggard.config.name))
    sim.paused_consumers.add(group.group_id)
    await trio.sleep(rng.uniform(1.2, 2.5))
    for instance in (active, *(r for r in replicas if r is not laggard)):
        group.kill(instance)
    sim.history.record_crash(group.group_id)
    await network.heal()
    await trio.sleep(rng.uniform(2.5, 4.0))  # past the lease: only the laggard is up
    await group.start(nursery)
    sim.paused_consumers.discard(group.group_id)


async def _zombie_active(
    sim: Simulation,
    group: ReplicatedSimGroup,
    nursery: trio.Nursery,
    rng: random.Random,
    active: SimInstance,
    replicas: list[SimInstance],
) -> None:
    """The active outlives its lease: paused, with a clock that runs slow so that it
    still believes in its lease when it resumes (what fencing tokens are for), cut
    off from the coordinator, clients and links, which go to the new active. A
    replica takes over; once it has acknowledged messages of its own producers, the
    old one resumes and sends the replicas its hello and a full copy of its older
    term. Then the new active is lost, at the worst moment if there is one
    (`stale_trap`): a replica that took the old term's copy would be promoted and lose
    what the new one acknowledged. (With no pause, the old active redialled within
    0.05 s of the new one's hello, before it had acknowledged anything, and stepped
    down within a second; the `accept-older-term` build slipped through half the
    seeds.)"""
    term = group.election.term
    name = active.config.name
    sim.paused_consumers.add(group.group_id)  # what the new active answers stays queued
    group.slow_clock = name
    group.election.reachable = {i.config.name for i in replicas}
    group.election.expire(name)
    zombie = group.node(name)
    for replica in replicas:  # paused: what it sends the replicas waits
        sim.network.freeze(zombie, group.node(replica.config.name))
    for other in ("clients", *(f"g{g}" for g in sim.group_ids if g != group.group_id)):
        await sim.network.partition(zombie, other)  # it still reaches the replicas
    with trio.move_on_after(FAILOVER_WAIT_S_MAX):
        while group.election.term == term or group.election.leader is None:
            await trio.sleep(_WATCHDOG_S)
    group.stale_trap = True
    leader = group.election.leader
    await _resume_zombie(sim, group, zombie, replicas, trio.current_time() + _PAUSE_S_MAX)
    with trio.move_on_after(rng.uniform(0.5, 1.5)):  # while the old one may still stream
        while group.stale_trap:
            await trio.sleep(0.01)
    group.slow_clock = None  # its clock catches up: it steps down if nothing made it
    if not group.stale_trap:  # sprung: the new active's machine is lost; it comes
        sim.history.record_crash(group.group_id)  # back once a replica took over
        await _failover(sim, group, nursery, rng, quick_restart=False, killed=True)
    elif leader is not None and leader != name and rng.random() < 0.8:
        await _failover(sim, group, nursery, rng, victim=group.instances[leader])
    group.stale_trap = False
    await sim.network.heal()
    sim.paused_consumers.discard(group.group_id)
    group.heal()


_PAUSE_S_MAX = 3.0
"""The longest the old active stays paused after the new one won."""
_STORED_MIN = 2
"""Messages for its own queues the new active has acknowledged as stored (its
consumers are paused: they stay there) when the paused one may resume."""


async def _resume_zombie(
    sim: Simulation,
    group: ReplicatedSimGroup,
    zombie: str,
    replicas: list[SimInstance],
    latest_s: float,
) -> None:
    """Once the new active has acknowledged a few messages for its own queues (or at
    `latest_s`), the paused active's sends and dials to the replicas go on. (What
    the new active answers first is its own start: commits no client sees, so a
    replica rolled back past them loses nothing.)"""
    stored = _stored_from(sim, group.group_id) + _STORED_MIN
    while trio.current_time() < latest_s and _stored_from(sim, group.group_id) < stored:
        await trio.sleep(0.01)
    for replica in replicas:
        sim.network.thaw(zombie, group.node(replica.config.name))


def _stored_from(sim: Simulation, group_id: int) -> int:
    """How many messages for the group's queues were answered as stored (so far)."""
    prefix = f"{group_id}."
    return sum(
        1
        for sent in sim.history.sent.values()
        if sent.target.startswith(prefix) and sent.delivery_status in STORED_STATUSES
    )


def _answered(group: ReplicatedSimGroup, commits: int) -> bool:
    """Whether the leader has answered `commits` commits of its own."""
    leader = group.instances.get(group.election.leader or "")
    runner = leader.runner if leader is not None else None
    active = runner.active if runner is not None else None
    return active is not None and active.stream.durable_on_majority() >= commits


async def _failover(
    sim: Simulation,
    group: ReplicatedSimGroup,
    nursery: trio.Nursery,
    rng: random.Random,
    quick_restart: bool = True,
    victim: SimInstance | None = None,
    killed: bool = False,
) -> None:
    """Kill the active; bring it back (as a replica) once a replica took over (its
    machine was down for good while it mattered), or now and then at once (a quick
    restart that may win the term back: it holds every commit it made)."""
    term = group.election.term
    if victim is not None:
        group.kill(victim)
    elif not killed:
        group.crash()
    if not killed:
        sim.history.record_crash(group.group_id)
    if rng.random() < 0.75 or quick_restart is False:
        with trio.move_on_after(FAILOVER_WAIT_S_MAX):
            while group.election.term == term or group.election.leader is None:
                await trio.sleep(_WATCHDOG_S)
    await trio.sleep(rng.uniform(0.05, 1.0))
    await group.start(nursery)
