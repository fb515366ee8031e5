"""Deterministic simulation of the client-side SAF journal: a journaled client, its
group server and a consumer in one trio run under `MockClock`, an in-memory network,
every fault drawn from one seed.

Safety phase: the client puts recoverable messages (WF/AK/NN_DQF) as fast as it is
answered, while a nemesis crashes the server (SIGKILL-like: what was not committed
is lost), kills the client (its journal reopened by a new client), partitions and
half-opens the client's connection and resets connections. Liveness phase: faults
stop, the server runs, the client must reach LINK_UP and the consumer drain.

The checker: every put answered (JOURNAL_ON or a stored PSB) is delivered; no body
is delivered twice unless the copy is marked POSSDUPL; the journaled messages are
first delivered in client-journal order (FIFO); LINK_UP is reached.

    python -m sim.client_saf_sim 1 2 3        # seeds; prints one verdict line each
"""

from __future__ import annotations

import random
import signal
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import trio
import trio.testing

from clients import DeliveryMode, MrsError, Reconnect, Status, connect
from mrs.config.bus import parse_config
from mrs.offline.stop_signals import run_stoppable, stop_signals_as_ctrl_c
from sim.membus import SimGroup
from sim.memnet import MemoryNetwork
from sim.memstore import MemoryJournalStore

SAFETY_PHASE_S = 20.0
LIVENESS_PHASE_S_MAX = 120.0
MESSAGES_MAX = 400
CLIENT_NODE = "journaled-client"
MODES = (DeliveryMode.WF_DQF, DeliveryMode.AK_DQF, DeliveryMode.NN_DQF)
ACTIONS = (
    "crash-server",
    "kill-client",
    "partition",
    "half-open",
    "reset",
    "kill-client-mid-drain",
    "crash-server-mid-drain",
)
QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-in-order"
unconfirmed_max = 10000
[[group.queue]]
id = 11
name = "SENDER"
confirm = "explicit-out-of-order"
"""


@dataclass
class Ledger:
    """What happened, for the checker."""

    acknowledged: dict[bytes, int] = field(default_factory=dict)
    """Body -> client journal seq (0 when the put went straight to the server)."""
    deliveries: list[tuple[bytes, int]] = field(default_factory=list)
    """(body, delivery status) in delivery order."""
    faults: list[str] = field(default_factory=list)
    link_up: bool = False


@dataclass(frozen=True)
class Verdict:
    seed: int
    problems: tuple[str, ...]
    acknowledged: int
    delivered: int
    faults: int

    @property
    def ok(self) -> bool:
        return not self.problems

    def line(self) -> str:
        state = "OK" if self.ok else "FAIL"
        text = (
            f"seed {self.seed}: {state}: {self.acknowledged} acknowledged, "
            f"{self.delivered} deliveries, {self.faults} faults"
        )
        return text + "".join(f"\n  {problem}" for problem in self.problems[:10])


def check(seed: int, ledger: Ledger) -> Verdict:
    problems: list[str] = []
    seen: set[bytes] = set()
    first_order: list[int] = []
    for body, status in ledger.deliveries:
        if body in seen:
            if status != Status.POSSDUPL:
                problems.append(f"{body!r} delivered twice, the copy marked {status}")
            continue
        seen.add(body)
        local_seq = ledger.acknowledged.get(body, 0)
        if local_seq:
            first_order.append(local_seq)
    for body in ledger.acknowledged:
        if body not in seen:
            problems.append(f"{body!r} acknowledged but never delivered (lost)")
    for earlier, later in zip(first_order, first_order[1:], strict=False):
        if later < earlier:
            problems.append(f"journaled seq {later} delivered after {earlier} (FIFO broken)")
            break
    if not ledger.link_up:
        problems.append("the client never reached LINK_UP in the liveness phase")
    return Verdict(
        seed,
        tuple(problems),
        len(ledger.acknowledged),
        len(ledger.deliveries),
        len(ledger.faults),
    )


@dataclass(eq=False)
class ClientSim:
    seed: int
    rng: random.Random
    network: MemoryNetwork
    group: SimGroup
    journal: Path
    ledger: Ledger = field(default_factory=Ledger)
    client_scope: trio.CancelScope | None = None
    counter: int = 0
    stopping: bool = False
    client: object = None
    trigger: list | None = None
    """[action, drained records left] while a mid-drain fault is armed."""
    """The journaled client now running (None while it is dead)."""

    def connect_client(self):
        return connect(
            self.group.address,
            "SENDER",
            program="sim-journaled",
            open_stream=self.network.node(CLIENT_NODE).connect,
            connect_timeout_s=2,
            reconnect=Reconnect(delay_s_initial=0.05, delay_s_max=1.0, seed=self.rng.random()),
            saf_journal=self.journal,
            heartbeat_s=1.0,
        )

    async def producer(self) -> None:
        """A client process: put until told to stop; killed and restarted by the
        nemesis (a new client on the same journal)."""
        rng = random.Random(self.rng.random())
        while True:
            with trio.CancelScope() as scope:
                self.client_scope = scope
                try:
                    async with self.connect_client() as client:
                        self.client = client
                        client.add_journal_listener(self._on_journal_event)
                        while self.counter < MESSAGES_MAX and not self.stopping:
                            await self._put(client, rng)
                        await trio.sleep_forever()
                except MrsError:
                    await trio.sleep(0.2)
                finally:
                    self.client = None
            await trio.sleep(rng.uniform(0.05, 1.0))  # the supervisor restarts it

    async def _put(self, client, rng: random.Random) -> None:
        body = b"c%d" % self.counter
        self.counter += 1
        try:
            psb = await client.put(body, target="1.10", delivery=rng.choice(MODES), timeout=5)
        except MrsError:
            await trio.sleep(rng.uniform(0.01, 0.2))  # not acknowledged: may or may not arrive
            return
        if psb.status == Status.JOURNAL_ON and psb.delivery_status == Status.STORED:
            self.ledger.acknowledged[body] = psb.seq
        elif psb.status == Status.SUCCESS and psb.delivery_status in (
            Status.STORED,
            Status.SUCCESS,
        ):
            self.ledger.acknowledged[body] = 0
        await trio.sleep(rng.uniform(0.0, 0.05))

    async def consumer(self) -> None:
        while True:
            try:
                async with connect(
                    self.group.address,
                    "IN",
                    program="sim-consumer",
                    open_stream=self.network.node("clients").connect,
                    connect_timeout_s=2,
                    reconnect=None,
                ) as receiver:
                    while True:
                        message = await receiver.get(timeout=1.0)
                        self.ledger.deliveries.append((message.body, message.delivery_status))
                        await receiver.confirm(message.seq)
            except MrsError:
                await trio.sleep(0.2)

    async def nemesis(self, nursery: trio.Nursery) -> None:
        rng = random.Random(self.rng.random())
        deadline = trio.current_time() + SAFETY_PHASE_S
        while trio.current_time() < deadline:
            await trio.sleep(rng.uniform(0.2, 2.0))
            action = rng.choice(ACTIONS)
            self.ledger.faults.append(f"{action} at {trio.current_time():.3f}")
            if action == "crash-server" and self.group.up:
                self.group.crash()
                await trio.sleep(rng.uniform(0.05, 3.0))
                await self.group.start(nursery)
            elif action == "kill-client" and self.client_scope is not None:
                if self.client is not None:
                    self.client._journal.crash()
                self.client_scope.cancel()
            elif action == "partition":
                await self.network.partition(CLIENT_NODE, "g1")
                await trio.sleep(rng.uniform(0.1, 3.0))
                await self.network.heal()
            elif action == "half-open":
                self.network.blackhole(CLIENT_NODE, "g1")
                await trio.sleep(rng.uniform(0.1, 5.0))
                await self.network.heal()
            elif action == "reset":
                await self.network.reset_one()
            elif action.endswith("-mid-drain"):
                await self._mid_drain(action, rng, nursery)

    async def _mid_drain(self, action: str, rng: random.Random, nursery: trio.Nursery) -> None:
        """Build a backlog (cut the client off a while), then kill the client or the
        server after the k-th record the drain got answered: records stored but not
        yet deleted from the journal, or sent but not answered, are sent again."""
        self.trigger = [action, rng.randint(1, 40)]
        await self.network.partition(CLIENT_NODE, "g1")
        await trio.sleep(rng.uniform(0.5, 2.0))
        await self.network.heal()
        await trio.sleep(rng.uniform(1.0, 3.0))
        self.trigger = None
        if not self.group.up:
            await self.group.start(nursery)

    def _on_journal_event(self, event) -> None:
        if event.kind != "drained" or self.trigger is None:
            return
        self.trigger[1] -= 1
        if self.trigger[1] > 0:
            return
        action, self.trigger = self.trigger[0], None
        self.ledger.faults.append(f"{action} fired at {trio.current_time():.3f}")
        if action.startswith("kill-client") and self.client_scope is not None:
            self.client._journal.crash()  # SIGKILL: uncommitted deletes are lost
            self.client_scope.cancel()
        elif self.group.up:
            self.group.crash()

    async def liveness(self) -> None:
        """Faults are over: the client must reach LINK_UP and the consumer drain."""
        self.stopping = True
        with trio.move_on_after(LIVENESS_PHASE_S_MAX):
            while True:
                client = self.client
                if (
                    client is not None
                    and client.journal_status == Status.LINK_UP
                    and self._all_delivered()
                ):
                    self.ledger.link_up = True
                    return
                await trio.sleep(0.5)

    def _all_delivered(self) -> bool:
        delivered = {body for body, _ in self.ledger.deliveries}
        return all(body in delivered for body in self.ledger.acknowledged)


def _bus(directory: Path):
    text = textwrap.dedent("""\
        [[group]]
        id = 1
        name = "G1"
        listen = "sim:7001"
        data_dir = "g1"
        pcj_default = true
        """) + textwrap.dedent(QUEUES)
    (directory / "g1").mkdir(exist_ok=True)
    return parse_config(text, directory / "bus.toml")


async def _run(seed: int, directory: Path) -> Ledger:
    rng = random.Random(seed)
    trio._core._run._r.seed(seed)  # trio's own scheduling choices, from the same seed
    network = MemoryNetwork(rng)
    group = SimGroup(_bus(directory), 1, network, MemoryJournalStore())
    sim = ClientSim(seed, rng, network, group, directory / "client.saf")
    async with trio.open_nursery() as nursery:
        if rng.random() < 0.5:  # half the seeds start with the server down
            nursery.start_soon(_start_later, sim, nursery, rng.uniform(0.5, 3.0))
        else:
            await group.start(nursery)
        nursery.start_soon(sim.producer)
        nursery.start_soon(sim.consumer)
        await sim.nemesis(nursery)
        if not group.up:
            await group.start(nursery)
        await sim.liveness()
        nursery.cancel_scope.cancel()
    return sim.ledger


async def _start_later(sim: ClientSim, nursery: trio.Nursery, delay_s: float) -> None:
    await trio.sleep(delay_s)
    if not sim.group.up:
        await sim.group.start(nursery)


def simulate(seed: int) -> Ledger:
    """One seed's history. The client journal is real LMDB (on tmpfs when there is
    one, so fsyncs do not slow the run); everything else is in memory."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(
        prefix="mrs-client-saf-sim-", dir=shm if shm.is_dir() else None
    ) as scratch:
        return run_stoppable(
            _run, seed, Path(scratch), clock=trio.testing.MockClock(autojump_threshold=0)
        )


def run_seed(seed: int) -> Verdict:
    return check(seed, simulate(seed))


EXIT_USAGE = 2
"""The exit status of a seed given wrong (as `mrs sim swarm` exits for one)."""


def seeds_in(argv: list[str]) -> list[int] | str:
    """The seeds the arguments name ([1] for none), or the one line that refuses them.
    A word that is no number ended in a ValueError traceback, and a negative seed
    replayed its twin (`random.Random(-7)` seeds as 7), as `mrs sim swarm` refuses."""
    seeds = []
    for text in argv:
        if not text.isascii() or not text.isdigit():
            return (
                f"python -m sim.client_saf_sim: {text!r} is not a seed: seeds are whole "
                "numbers >= 0 (seed -N would replay seed N)"
            )
        seeds.append(int(text))
    return seeds or [1]


def main(argv: list[str]) -> int:
    """Run the seeds, one verdict line each. Ctrl-C, SIGTERM or SIGHUP stops it as a
    swarm stops: the seed under way unwinds (its scratch directory, on /dev/shm where
    there is one, is removed: SIGTERM left it there, holding memory until reboot), a
    line says how far it got, and the exit status is 128 + the signal (Ctrl-C was a
    KeyboardInterrupt traceback, exit 1)."""
    seeds = seeds_in(argv)
    if isinstance(seeds, str):
        print(seeds, file=sys.stderr)
        return EXIT_USAGE
    failed = done = 0
    interrupted: signal.Signals | None = None
    with stop_signals_as_ctrl_c() as stopped_by:
        try:
            for seed in seeds:
                verdict = run_seed(seed)
                print(verdict.line(), flush=True)
                done += 1
                failed += not verdict.ok
        except* KeyboardInterrupt:  # also inside the group a trio nursery raises
            interrupted = stopped_by[0] if stopped_by else signal.SIGINT
    if interrupted is not None:
        print(
            f"interrupted by {interrupted.name}: {done} of {len(seeds)} seeds run, "
            f"{failed} failed",
            flush=True,
        )
        return 128 + int(interrupted)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
