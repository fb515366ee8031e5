"""Deterministic simulation: the real server code, two groups and their clients in one
trio run under `MockClock(autojump_threshold=0)`, an in-memory network and in-memory
journals, every fault drawn from one seed. Same seed, same history, byte for byte.

One seed is a safety phase (producers, consumers and a nemesis that crashes groups,
partitions the link, resets connections and fails journal commits) followed by a
heal-and-drain liveness phase, then the checker. TigerBeetle's VOPR is the model.
"""

from __future__ import annotations

import random
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import trio
import trio.testing

from clients import DeliveryMode, MrsError, NoMoreMessages, connect
from journals import Journal
from mrs.config import BusConfig, parse_config
from mrs.model import Status, Uma
from mrs.server import GroupServer
from sim.checker import History, Sent, Verdict, check
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore

GROUPS = (1, 2)
PRODUCERS_PER_GROUP = 2
SAFETY_PHASE_S = 20.0
DRAIN_PHASE_S_MAX = 120.0
MESSAGES_PER_PRODUCER_MAX = 30
PLANS = (
    (DeliveryMode.WF_DQF, Uma.SAF),
    (DeliveryMode.WF_DQF, Uma.DLJ),
    (DeliveryMode.WF_DQF, Uma.DISC),
    (DeliveryMode.WF_SAF, Uma.DISC),
    (DeliveryMode.WF_CONF, Uma.SAF),
    (DeliveryMode.WF_MEM, Uma.DISC),
)


def bus_config(directory: Path) -> BusConfig:
    queues = '[[group.queue]]\nid = 10\nname = "IN"\nconfirm = "explicit-in-order"\n' + "".join(
        f'[[group.queue]]\nid = {20 + index}\nname = "P{index}"\n'
        for index in range(PRODUCERS_PER_GROUP)
    )
    text = (
        "".join(
            textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "G{group_id}"
            listen = "sim:{7000 + group_id}"
            data_dir = "g{group_id}"
            """)
            + queues
            for group_id in GROUPS
        )
        + "[[link]]\ngroups = [1, 2]\n"
    )
    return parse_config(text, directory / "bus.toml")


@dataclass(eq=False)
class SimGroup:
    bus: BusConfig
    group_id: int
    network: MemoryNetwork
    store: MemoryJournalStore
    unsafe: frozenset[str] = frozenset()
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
            clock_ns=lambda: int(trio.current_time() * 1e9),
            unsafe=self.unsafe,
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
class Simulation:
    seed: int
    rng: random.Random
    network: MemoryNetwork
    groups: dict[int, SimGroup]
    history: History
    stores_failing: dict[int, bool] = field(default_factory=dict)
    stopping: bool = False

    def client_network(self):
        return self.network.node("clients")

    async def connect(self, group_id: int, queue: str | None):
        return connect(
            self.groups[group_id].address,
            queue,
            program="sim",
            open_stream=self.client_network().connect,
            connect_timeout_s=5,
        )


async def _producer(sim: Simulation, group_id: int, index: int) -> None:
    name = f"{group_id}.{20 + index}"
    rng = random.Random(sim.rng.random())
    counter = 0
    messages_max = getattr(sim, "messages_max", MESSAGES_PER_PRODUCER_MAX)
    while counter < messages_max and not sim.stopping:
        try:
            async with await sim.connect(group_id, f"P{index}") as client:
                while counter < messages_max and not sim.stopping:
                    mode, uma = PLANS[rng.randrange(len(PLANS))]
                    target_group = rng.choice(GROUPS)
                    message_id = f"{name}:{counter}"
                    counter += 1
                    sim.history.record_send(
                        Sent(
                            message_id,
                            name,
                            f"{target_group}.10",
                            int(mode),
                            int(uma),
                            in_order=True,
                        )
                    )
                    psb = await client.put(
                        message_id.encode(),
                        target=f"{target_group}.10",
                        delivery=mode,
                        uma=uma,
                        timeout=10,
                    )
                    sim.history.record_outcome(
                        message_id, int(psb.delivery_status), int(psb.uma_status), psb.seq
                    )
                    await trio.sleep(rng.uniform(0.01, 0.5))
        except MrsError:
            await trio.sleep(0.2)


async def _consumer(sim: Simulation, group_id: int, drain: bool = False) -> None:
    queue = f"{group_id}.10"
    while True:
        try:
            async with await sim.connect(group_id, "IN") as client:
                while True:
                    try:
                        message = await client.get(timeout=0 if drain else 1.0)
                    except NoMoreMessages:
                        return
                    except MrsError as error:
                        if error.status == Status.TIMEOUT:
                            continue
                        raise
                    sim.history.record_delivery(
                        message.body.decode(), queue, message.delivery_status
                    )
                    if message.needs_confirm:
                        await client.confirm(message.seq)
        except MrsError:
            if drain:
                return
            await trio.sleep(0.2)


async def _nemesis(sim: Simulation, nursery: trio.Nursery) -> None:
    rng = random.Random(sim.rng.random())
    deadline = trio.current_time() + SAFETY_PHASE_S
    while trio.current_time() < deadline:
        await trio.sleep(rng.uniform(0.2, 2.0))
        action = rng.choice(("crash", "partition", "reset", "disk", "delay"))
        victim = rng.choice(GROUPS)
        sim.history.record_fault(action, f"g{victim} at {trio.current_time():.3f}")
        if action == "crash" and sim.groups[victim].up:
            sim.groups[victim].crash()
            sim.history.crashed_groups.add(victim)
            await trio.sleep(rng.uniform(0.05, 2.0))
            await sim.groups[victim].start(nursery)
        elif action == "partition":
            await sim.network.partition("g1", "g2")
            await trio.sleep(rng.uniform(0.1, 3.0))
            sim.network.heal()
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


async def _settled(sim: Simulation) -> bool:
    """True when every link is up with no SAF backlog and nothing in flight."""
    for group_id, group in sim.groups.items():
        try:
            async with await sim.connect(group_id, None) as client:
                status = await client.status()
        except MrsError:
            return False
        for link in status["links"].values():
            if link["state"] != "up" or link["saf_backlog"] or link.get("in_flight"):
                return False
            if link.get("notices_pending"):
                return False
        del group
    return True


async def _run(seed: int, directory: Path, unsafe: frozenset[str]) -> History:
    rng = random.Random(seed)
    trio._core._run._r.seed(seed)  # trio's own scheduling choices, from the same seed
    network = MemoryNetwork(rng)
    history = History(seed=seed)
    bus = bus_config(directory)
    groups: dict[int, SimGroup] = {}
    sim = Simulation(seed, rng, network, groups, history)
    for group_id in GROUPS:
        sim.stores_failing[group_id] = False
        fault_rng = random.Random(rng.random())

        def fault(group_id: int = group_id, fault_rng: random.Random = fault_rng) -> str | None:
            if sim.stores_failing[group_id] and fault_rng.random() < 0.5:
                return fault_rng.choice(("EIO", "ENOSPC", "MAPFULL"))
            return None

        groups[group_id] = SimGroup(
            bus, group_id, network, MemoryJournalStore(fault=fault), unsafe=unsafe
        )
    async with trio.open_nursery() as nursery:
        for group in groups.values():
            await group.start(nursery)
        async with trio.open_nursery() as workload:
            for group_id in GROUPS:
                workload.start_soon(_consumer, sim, group_id)
                for index in range(PRODUCERS_PER_GROUP):
                    workload.start_soon(_producer, sim, group_id, index)
            await _nemesis(sim, nursery)
            sim.stopping = True
            # heal and drain: no more faults; every group up; let the links settle
            network.heal()
            network.delay_probability = 0.0
            for group_id, group in groups.items():
                sim.stores_failing[group_id] = False
                if not group.up:
                    await group.start(nursery)
            with trio.move_on_after(DRAIN_PHASE_S_MAX):
                while not await _settled(sim):
                    await trio.sleep(0.5)
            workload.cancel_scope.cancel()
        for group_id in GROUPS:
            await _consumer(sim, group_id, drain=True)
        for group_id, group in groups.items():
            for _, record in group.store.scan(Journal.DLJ):
                history.dead_letter_journal.add(record.body.decode())
            del group_id
        nursery.cancel_scope.cancel()
    return history


def run_seed(seed: int, unsafe: frozenset[str] = frozenset()) -> tuple[History, Verdict]:
    """Simulate one seed; the history and the checker's verdict."""
    with tempfile.TemporaryDirectory(prefix="mrs-sim-") as scratch:
        history = trio.run(
            _run,
            seed,
            Path(scratch),
            unsafe,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )
    return history, check(history)
