"""Deterministic simulation: the real server code, three groups and their clients in one
trio run under `MockClock(autojump_threshold=0)`, an in-memory network and in-memory
journals, every fault drawn from one seed. Same seed, same history, byte for byte.

One seed is a safety phase (producers putting every mode with every UMA, consumers
with one or several gets in flight, and a nemesis that crashes groups — also during
start-up and recovery —, partitions and half-opens links, resets connections, fails
journal commits, fills a journal's map, pauses consumers so backlogs build and sends
malformed frames) followed by a heal-and-drain liveness phase, then the checker.
TigerBeetle's VOPR is the model. `Workload` says how big a seed is.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
import textwrap
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

import trio
import trio.testing

from clients import MrsError, connect
from journals import Journal, WriteBatch
from journals.record import decode_record
from mrs.config import BusConfig, parse_config
from mrs.model import DeliveryMode, InterestPoint, Notification
from sim import workload
from sim.checker import History, Verdict, check
from sim.hostile import malformed
from sim.membus import SimGroup
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore

GROUPS = (1, 2)
"""The real-process scenarios' bus (the simulation's is `Workload.groups`)."""
PRODUCERS_PER_GROUP = 2
NEMESIS_ACTIONS = (
    "crash",
    "crash-at-commit",
    "crash-at-commit",
    "fail-at-commit",
    "fail-at-commit",
    "crash-in-recovery",
    "start-fails",
    "partition",
    "half-open",
    "reset",
    "disk",
    "delay",
    "pause-consumers",
    "malformed-peer",
)


FAILS_AT_COMMIT = 2
"""Commits of waited-for messages each "fail-at-commit" fails, per group."""


@dataclass(frozen=True)
class Workload:
    """How big one seed is; CI, the long runs and the broken-build test pick one."""

    groups: tuple[int, ...] = (1, 2, 3)
    producers_per_group: int = PRODUCERS_PER_GROUP
    safety_phase_s: float = 12.0
    drain_phase_s_max: float = 120.0
    messages_per_producer_max: int = 45
    put_pause_s_max: float = 0.4
    backlog_seed_fraction: float = 0.1
    """Seeds that also burst a backlog into one group while its consumers hold off:
    into the first group, past the server's in-memory window; into the second, until
    its journal map is full; into the last, until its DQF is full."""
    backlog_messages: int = 1100
    map_bytes_max: int | None = 60_000
    """The second group's journal map (None: unbounded): a backlog fills it
    (MRS_RES_EXH), and the group must still record deliveries and confirms."""
    dqf_messages_max: int = 300
    """The last group's DQF limit: a backlog reaches it (DQF_FULL)."""
    actions: tuple[str, ...] = NEMESIS_ACTIONS
    walk_away_probability: float = workload.WALK_AWAY_PROBABILITY
    fails_at_commit_armed: int = 0
    """Commits of waited-for messages each group fails from the start (as if the
    first action were a "fail-at-commit")."""


DEFAULT_WORKLOAD = Workload()
QUICK_WORKLOAD = Workload(
    safety_phase_s=5.0,
    messages_per_producer_max=20,
    backlog_seed_fraction=0,
    actions=NEMESIS_ACTIONS + ("fail-at-commit",) * 10,
    walk_away_probability=0.1,
    fails_at_commit_armed=FAILS_AT_COMMIT,
)
"""Small seeds for proving the checker (`tests/test_sim.py`): the same workload and
faults, shorter, with consumers walking away more often and more faults aimed at
commits, so each broken build shows within seconds."""
MAP_FULL_WORKLOAD = Workload(backlog_seed_fraction=0.5)
"""The default workload with a backlog in half the seeds: the map fills more often."""
WORKLOADS = {"default": DEFAULT_WORKLOAD, "quick": QUICK_WORKLOAD, "map-full": MAP_FULL_WORKLOAD}


def bus_config(directory: Path, shape: Workload = DEFAULT_WORKLOAD) -> BusConfig:
    queues = workload.queues_toml(shape.producers_per_group)
    last = shape.groups[-1]
    text = "".join(
        textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "G{group_id}"
            listen = "sim:{7000 + group_id}"
            data_dir = "g{group_id}"
            """)
        + (f"[group.limits]\ndqf_messages_max = {shape.dqf_messages_max}\n" * (group_id == last))
        + queues
        for group_id in shape.groups
    )
    text += "".join(f"[[link]]\ngroups = [{a}, {b}]\n" for a, b in combinations(shape.groups, 2))
    for group_id in shape.groups:
        (directory / f"g{group_id}").mkdir(exist_ok=True)  # DISCL's event log lives there
    return parse_config(text, directory / "bus.toml")


@dataclass(eq=False)
class Simulation:
    seed: int
    rng: random.Random
    network: MemoryNetwork
    groups: dict[int, SimGroup]
    history: History
    shape: Workload = DEFAULT_WORKLOAD
    stores_failing: dict[int, bool] = field(default_factory=dict)
    start_faults: dict[int, int] = field(default_factory=dict)
    """Commits left to fail at a group's next start (a crash during start-up)."""
    crash_at_commit: dict[int, bool] = field(default_factory=dict)
    fails_at_commit: dict[int, int] = field(default_factory=dict)
    """Kill the group, or fail (a disk error) its next few commits, that store a
    message a sender waits for: where an early acknowledgement is a lie."""
    paused_consumers: set[int] = field(default_factory=set)
    stopping: bool = False

    @property
    def group_ids(self) -> tuple[int, ...]:
        return self.shape.groups

    @property
    def walk_away_probability(self) -> float:
        return self.shape.walk_away_probability

    def client_network(self):
        return self.network.node("clients")

    async def connect(self, group_id: int, queue: str | None):
        return connect(
            self.groups[group_id].address,
            queue,
            program="sim",
            open_stream=self.client_network().connect,
            connect_timeout_s=5,
            reconnect=None,  # the workload reconnects itself: jitter would not be seeded
        )

    async def start(self, group_id: int, nursery: trio.Nursery) -> None:
        """Start a group; a start that fails (a journal fault during recovery) is
        retried, as a supervisor would."""
        while True:
            try:
                await self.groups[group_id].start(nursery)
                return
            except Exception as error:  # noqa: BLE001 - a failed start is a result here
                self.history.events.append({"start_failed": f"g{group_id}: {error}"})
                await trio.sleep(0.5)


async def _nemesis(sim: Simulation, nursery: trio.Nursery) -> None:
    rng = random.Random(sim.rng.random())
    deadline = trio.current_time() + sim.shape.safety_phase_s
    while trio.current_time() < deadline:
        await trio.sleep(rng.uniform(0.2, 2.0))
        action = rng.choice(sim.shape.actions)
        victim = rng.choice(sim.group_ids)
        sim.history.record_fault(action, f"g{victim} at {trio.current_time():.3f}")
        await _act(sim, nursery, rng, action, victim)


async def _act(
    sim: Simulation, nursery: trio.Nursery, rng: random.Random, action: str, victim: int
) -> None:
    group = sim.groups[victim]
    other = rng.choice([group_id for group_id in sim.group_ids if group_id != victim])
    if action in ("crash", "crash-in-recovery", "start-fails") and group.up:
        group.crash()
        sim.history.record_crash(victim)
        await trio.sleep(rng.uniform(0.05, 2.0))
        if action == "start-fails":
            sim.start_faults[victim] = 1
        await sim.start(victim, nursery)
        if action == "crash-in-recovery":
            await trio.sleep(rng.uniform(0.0, 0.3))  # SAF drains, redeliveries under way
            group.crash()
            sim.history.record_crash(victim)
            await trio.sleep(rng.uniform(0.01, 0.5))
            await sim.start(victim, nursery)
    elif action == "fail-at-commit":
        for group_id in sim.group_ids:  # disk hiccups on every group, each armed
            sim.fails_at_commit[group_id] += FAILS_AT_COMMIT  # until it hits (or the heal)
    elif action == "crash-at-commit" and group.up:
        sim.crash_at_commit[victim] = True
        with trio.move_on_after(rng.uniform(1.0, 5.0)):
            while group.up and sim.crash_at_commit[victim]:
                await trio.sleep(0.01)
        sim.crash_at_commit[victim] = False
        if not group.up:
            sim.history.record_crash(victim)
            await trio.sleep(rng.uniform(0.05, 1.0))
            await sim.start(victim, nursery)
    elif action == "partition":
        await sim.network.partition(f"g{victim}", f"g{other}")
        await trio.sleep(rng.uniform(0.1, 3.0))
        await sim.network.heal()
    elif action == "half-open":
        sim.network.blackhole(f"g{victim}", rng.choice((f"g{other}", "clients")))
        await trio.sleep(rng.uniform(0.1, 3.0))
        await sim.network.heal()
    elif action == "reset":
        await sim.network.reset_one()
    elif action == "disk":
        sim.stores_failing[victim] = True
        await trio.sleep(rng.uniform(0.05, 1.0))
        sim.stores_failing[victim] = False
    elif action == "delay":
        sim.network.delay_probability = 0.3
        await trio.sleep(rng.uniform(0.5, 3.0))
        sim.network.delay_probability = 0.0
    elif action == "pause-consumers":
        sim.paused_consumers.add(victim)
        await trio.sleep(rng.uniform(0.5, 4.0))
        sim.paused_consumers.discard(victim)
    elif action == "malformed-peer":
        await _malformed_peer(sim, rng, victim)


async def _malformed_peer(sim: Simulation, rng: random.Random, victim: int) -> None:
    name, data = malformed(rng)
    sim.history.events.append({"malformed": f"g{victim} {name}"})
    host, port = sim.groups[victim].address.rsplit(":", 1)
    try:
        stream = await sim.network.node("evil").connect(host, int(port))
    except OSError:
        return
    try:
        await stream.send_all(data)
        with trio.move_on_after(0.5):
            while await stream.receive_some(65536):
                pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


async def _settled(sim: Simulation) -> bool:
    """True when every link is up with no SAF backlog and nothing in flight."""
    for group_id in sim.group_ids:
        try:
            async with await sim.connect(group_id, None) as client:
                status = await client.status()
        except MrsError:
            return False
        for link in status["links"].values():
            if link["state"] != "up" or link["saf_backlog"] or link.get("in_flight"):
                return False
            if link.get("notices_pending") or link.get("mrs_acks_owed"):
                return False
            if link.get("receipts_pending"):
                return False
    return True


async def _backlog(sim: Simulation) -> None:
    """One group's consumers hold off while a burst builds a long backlog there (see
    `Workload.backlog_seed_fraction`)."""
    victim = sim.rng.choice(sim.group_ids)
    sim.paused_consumers.add(victim)
    sim.history.record_fault("backlog", f"g{victim}")
    try:
        await workload.burst(sim, victim, sim.shape.backlog_messages)
    except MrsError:
        pass
    finally:
        sim.paused_consumers.discard(victim)


def _make_groups(sim: Simulation, bus: BusConfig, unsafe: frozenset[str]) -> None:
    doomed: dict[int, WriteBatch | None] = {}
    for group_id in sim.group_ids:
        sim.stores_failing[group_id] = False
        sim.start_faults[group_id] = 0
        sim.crash_at_commit[group_id] = False
        sim.fails_at_commit[group_id] = sim.shape.fails_at_commit_armed
        doomed[group_id] = None
        fault_rng = random.Random(sim.rng.random())

        def fault(
            batches: list[WriteBatch],
            group_id: int = group_id,
            fault_rng: random.Random = fault_rng,
        ) -> str | None:
            group = sim.groups[group_id]
            if group.server is not None and group.server.crashed:
                return "EIO"  # what a killed process still tries never reaches the disk
            if any(batch is doomed[group_id] for batch in batches):
                return "EIO"  # the writer retrying the failed batch alone: it fails again
            crash = sim.crash_at_commit[group_id]
            armed = crash or sim.fails_at_commit[group_id] > 0
            waited = _waited_message_batch(batches, group_id) if armed and group.up else None
            if waited is not None:
                doomed[group_id] = waited
                if crash:
                    sim.crash_at_commit[group_id] = False
                    group.crash()
                else:
                    sim.fails_at_commit[group_id] -= 1
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            if sim.start_faults[group_id] > 0:
                sim.start_faults[group_id] -= 1
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            if sim.stores_failing[group_id] and fault_rng.random() < 0.5:
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            return None

        map_bytes_max = sim.shape.map_bytes_max if group_id == sim.group_ids[1] else None
        sim.groups[group_id] = SimGroup(
            bus,
            group_id,
            sim.network,
            MemoryJournalStore(
                fault=fault,
                bytes_max=map_bytes_max,
                on_full=lambda group_id=group_id: sim.history.record_fault(
                    "map-full", f"g{group_id} at {trio.current_time():.3f}"
                ),
            ),
            unsafe=unsafe,
        )


def _waited_message_batch(batches: list[WriteBatch], group_id: int) -> WriteBatch | None:
    """The batch storing, in this group's DQF, a message put by a client of this group
    that waits (WF) for it to be stored, if any: where a STORED sent before the commit
    is a lie."""
    for batch in batches:
        for journal, key, value in batch.puts:
            if journal is Journal.DQF:
                record = decode_record(value, journal.value, key)
                mode = DeliveryMode(record.delivery)
                waited = (
                    mode.notification is Notification.WF
                    and mode.interest_point is not InterestPoint.CONF
                )
                if waited and record.source_group == group_id:
                    return batch
    return None


def _start_workload(sim: Simulation, nursery: trio.Nursery) -> None:
    shape = sim.shape
    for group_id in sim.group_ids:
        nursery.start_soon(workload.consumer, sim, group_id, workload.IN_ORDER_QUEUE, 1)
        nursery.start_soon(
            workload.consumer, sim, group_id, workload.PARALLEL_QUEUE, workload.PARALLEL_GETS
        )
        for index in range(shape.producers_per_group):
            nursery.start_soon(
                workload.producer,
                sim,
                group_id,
                index,
                shape.messages_per_producer_max,
                shape.put_pause_s_max,
            )
    if sim.rng.random() < shape.backlog_seed_fraction:
        nursery.start_soon(_backlog, sim)


async def _heal_and_settle(sim: Simulation, nursery: trio.Nursery) -> None:
    await sim.network.heal()
    sim.network.delay_probability = 0.0
    sim.paused_consumers.clear()
    for group_id, group in sim.groups.items():
        sim.stores_failing[group_id] = False
        sim.start_faults[group_id] = 0
        sim.crash_at_commit[group_id] = False
        sim.fails_at_commit[group_id] = 0
        if not group.up:
            await sim.start(group_id, nursery)
    with trio.move_on_after(sim.shape.drain_phase_s_max):
        while not await _settled(sim):
            await trio.sleep(0.5)


async def _final_drain(sim: Simulation) -> None:
    """Drain every target queue, let the notices the confirms made travel (an AK_CONF
    put's MRS_ACK is sent by its sender's group when the confirm notice arrives), then
    collect the response queues and the DLQs. (Collecting group 1's MRS_ACKs before
    group 2's queues were drained missed the acknowledgement of a message confirmed in
    that drain: seed 2's "missing" AK_CONF MRS_ACK.)"""
    for group_id in sim.group_ids:
        for queue_id in (workload.IN_ORDER_QUEUE, workload.PARALLEL_QUEUE):
            await workload.drain(sim, group_id, queue_id)
    with trio.move_on_after(sim.shape.drain_phase_s_max):
        while not await _settled(sim):
            await trio.sleep(0.5)
    for group_id in sim.group_ids:
        await workload.drain_side_queues(sim, group_id, sim.shape.producers_per_group)
    for group_id, group in sim.groups.items():
        for _, record in group.store.scan(Journal.DLJ):
            sim.history.dead_letter_journal.add(record.body.decode())
        for journal in (Journal.DQF, Journal.SAF):
            left = [record.body.decode() for _, record in group.store.scan(journal)]
            if left:
                sim.history.leftovers[f"g{group_id} {journal.name}"] = left


async def _run(seed: int, directory: Path, unsafe: frozenset[str], shape: Workload) -> History:
    rng = random.Random(seed)
    trio._core._run._r.seed(seed)  # trio's own scheduling choices, from the same seed
    network = MemoryNetwork(rng)
    sim = Simulation(seed, rng, network, {}, History(seed=seed), shape)
    sim.history.in_order_queues = {f"{g}.{workload.IN_ORDER_QUEUE}" for g in shape.groups}
    _make_groups(sim, bus_config(directory, shape), unsafe)
    async with trio.open_nursery() as nursery:
        for group_id in sim.group_ids:
            await sim.start(group_id, nursery)
        async with trio.open_nursery() as load:
            _start_workload(sim, load)
            await _nemesis(sim, nursery)
            sim.stopping = True
            await _heal_and_settle(sim, nursery)
            sim.history.events.append({"settled_at_s": round(trio.current_time(), 3)})
            load.cancel_scope.cancel()
        await _final_drain(sim)
        nursery.cancel_scope.cancel()
    return sim.history


def run_seed(
    seed: int, unsafe: frozenset[str] = frozenset(), shape: Workload = DEFAULT_WORKLOAD
) -> tuple[History, Verdict]:
    """Simulate one seed; the history and the checker's verdict."""
    with tempfile.TemporaryDirectory(prefix="mrs-sim-") as scratch, _seeded_scheduling():
        history = trio.run(
            _run,
            seed,
            Path(scratch),
            unsafe,
            shape,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    return history, check(history)


@contextlib.contextmanager
def _seeded_scheduling():
    """Trio's seeded scheduler (ready tasks sorted, then shuffled from the seed) in the
    shell as in the tests. Trio switches it on only when Hypothesis is imported (its
    pytest plugin does); without it, the run order of tasks woken together (e.g. by a
    cancel) may follow memory addresses, so `mrs sim swarm --seed N` neither repeated
    itself byte for byte nor replayed what pytest ran (seed 2: 1,200 puts from the
    shell, 251 under pytest)."""
    run_module = trio._core._run
    saved = run_module._ALLOW_DETERMINISTIC_SCHEDULING
    run_module._ALLOW_DETERMINISTIC_SCHEDULING = True
    try:
        yield
    finally:
        run_module._ALLOW_DETERMINISTIC_SCHEDULING = saved
