"""One seed's world: the workload's shape, the bus, the groups and what the nemesis armed.

`Workload` says how big a seed is (CI, the long runs and the broken-build test
each pick one); `Simulation` is the run object the workload (`sim.workload`), the
nemesis (`sim.nemesis`) and the swarm's phases (`sim.swarm`) share.
"""

from __future__ import annotations

import random
import textwrap
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path

import trio

from clients import connect
from mrs.config.bus import BusConfig, parse_config
from mrs.server.instance_dial import InstancesNetwork
from sim import workload
from sim.checker import History
from sim.membus import SimGroup
from sim.memnet import MemoryNetwork
from sim.replicated import (
    COORDINATOR_TOML,
    REPLICATION_ACTIONS,
    ReplicatedSimGroup,
    replicated_toml,
)

START_ATTEMPTS_MAX = 20
"""Starts in a row one group may fail before the seed gives up on it. The nemesis
arms at most a few failing commits per start ("start-fails", disk faults), and a
failed start retries after START_RETRY_S, so a healthy build starts well within it."""
START_RETRY_S = 0.5
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
    opening_actions: tuple[str, ...] = ()
    """Faults the nemesis acts first, each once, in an order drawn from the seed (a
    replication fault waits until its group has an active and all instances up);
    then it draws from `actions`."""
    walk_away_probability: float = workload.WALK_AWAY_PROBABILITY
    fails_at_commit_armed: int = 0
    """Commits of waited-for messages each group fails from the start (as if the
    first action were a "fail-at-commit")."""
    replicated: tuple[int, ...] = ()
    """Groups served by three instances (sim.replicated), with the nemesis's
    replication faults added to `actions`."""


DEFAULT_WORKLOAD = Workload()
QUICK_WORKLOAD = Workload(
    safety_phase_s=5.0,
    messages_per_producer_max=20,
    backlog_seed_fraction=0,
    actions=NEMESIS_ACTIONS + ("fail-at-commit",) * 10,
    walk_away_probability=0.1,
    fails_at_commit_armed=FAILS_AT_COMMIT,
)
"""Small seeds for proving the checker (`tests/sim/test_sim.py`): the same workload and
faults, shorter, with consumers walking away more often and more faults aimed at
commits, so each broken build shows within seconds."""
MAP_FULL_WORKLOAD = Workload(backlog_seed_fraction=0.5)
"""The default workload with a backlog in half the seeds: the map fills more often."""
REPLICATION_PROOF_WORKLOAD = Workload(
    safety_phase_s=24.0,
    messages_per_producer_max=250,
    put_pause_s_max=0.15,
    backlog_seed_fraction=0,
    actions=REPLICATION_ACTIONS
    + ("isolate-then-failover", "lag-then-failover", "lease-expire") * 2
    + ("delay", "reset", "pause-consumers"),
    opening_actions=("isolate-then-failover", "lag-then-failover", "lease-expire"),
    replicated=(1,),
)
"""Seeds for proving the checker on the replicated group (`--workload
replication-proof`, tests/sim/test_sim_replicated.py): the replication faults and a
few network ones, long enough for several failovers; each of the three faults aimed
at a broken rule opens every seed once (drawn alone, one in three seeds had no
"lease-expire", and `accept-older-term` slipped through those)."""
WORKLOADS = {
    "default": DEFAULT_WORKLOAD,
    "quick": QUICK_WORKLOAD,
    "map-full": MAP_FULL_WORKLOAD,
    "replication-proof": REPLICATION_PROOF_WORKLOAD,
}


REPLICATED_SAFETY_PHASE_S_MIN = 16.0


def replicated(shape: Workload, group_id: int = 1) -> Workload:
    """`shape` with `group_id` served by three instances (unchanged if it has one
    already), the replication faults
    drawn twice as often as all the others together, and a safety phase of at least
    REPLICATED_SAFETY_PHASE_S_MIN (a failover takes seconds) (`--replicated`)."""
    if shape.replicated:
        return shape
    extra = REPLICATION_ACTIONS * max(1, 2 * len(shape.actions) // len(REPLICATION_ACTIONS))
    return replace(
        shape,
        replicated=(group_id,),
        actions=shape.actions + extra,
        safety_phase_s=max(shape.safety_phase_s, REPLICATED_SAFETY_PHASE_S_MIN),
        messages_per_producer_max=max(shape.messages_per_producer_max, 60),
    )


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
        + (replicated_toml(group_id) if group_id in shape.replicated else "")
        for group_id in shape.groups
    )
    if shape.replicated:
        text = COORDINATOR_TOML + text
    text += "".join(f"[[link]]\ngroups = [{a}, {b}]\n" for a, b in combinations(shape.groups, 2))
    for group_id in shape.groups:
        (directory / f"g{group_id}").mkdir(exist_ok=True)  # DISCL's event log lives there
        for name in "abc" if group_id in shape.replicated else "":
            (directory / f"g{group_id}{name}").mkdir(exist_ok=True)
    return parse_config(text, directory / "bus.toml")


@dataclass(eq=False)
class Simulation:
    seed: int
    rng: random.Random
    network: MemoryNetwork
    groups: dict[int, SimGroup | ReplicatedSimGroup]
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
        """A client of the group; of a replicated group, of whichever instance is
        active (each connect tries the instances' addresses in turn)."""
        group = self.groups[group_id]
        network = self.client_network()
        instances = group.bus.group(group_id).instances
        if instances:
            network = InstancesNetwork(network, instances)  # type: ignore[assignment]
        return connect(
            group.address,
            queue,
            program="sim",
            open_stream=network.connect,
            connect_timeout_s=5,
            reconnect=None,  # the workload reconnects itself: jitter would not be seeded
        )

    async def start(self, group_id: int, nursery: trio.Nursery) -> None:
        """Start a group; a start that fails (a journal fault during recovery) is
        retried, as a supervisor would, up to START_ATTEMPTS_MAX times in a row.

        Why the bound: a build whose group cannot start at all (a start-up bug, not a
        fault the nemesis armed) used to be restarted without end, tens of thousands
        of times per seed under the mock clock, and the seed never got a verdict. Now
        the seed stops with `never_started` in its history, which the checker counts
        as a failure."""
        error = ""
        for _attempt in range(START_ATTEMPTS_MAX):
            try:
                await self.groups[group_id].start(nursery)
                return
            except Exception as failed:  # noqa: BLE001 - a failed start is a result here
                error = self.without_scratch(group_id, str(failed))
                self.history.events.append({"start_failed": f"g{group_id}: {error}"})
                await trio.sleep(START_RETRY_S)
        why = f"g{group_id}: {START_ATTEMPTS_MAX} starts in a row failed, the last: {error}"
        self.history.never_started.append(why)
        raise GroupNeverStarted(why)

    def without_scratch(self, group_id: int, text: str) -> str:
        """`text` with the seed's scratch directory (a fresh temporary name each run)
        written SCRATCH: a failed start's words name its journal's path, and with the
        path in the history two runs of one seed differed (8 of the first 25 seeds),
        so `--history` files of a replay could not be compared byte for byte."""
        scratch = str(self.groups[group_id].bus.path.parent)
        return text.replace(scratch, "SCRATCH")


class GroupNeverStarted(Exception):
    """A group failed START_ATTEMPTS_MAX starts in a row: the seed ends here."""
