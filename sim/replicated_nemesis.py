"""The replicated group's nemesis, with real processes (`mrs sim replicated`).

A real etcd and three `mrs serve --instance` processes; a fault proxy in front of
every replication address (one per dialer, so the active can be cut off from the
replicas alone) and one in front of etcd per instance (so one instance can lose etcd
while the others keep it). Producers put WF messages with unique ids under
idempotency keys (`clients.put_once`), a consumer gets and confirms, and on a seeded
schedule the nemesis SIGKILLs the active, partitions it from the replicas and etcd,
pauses it (SIGSTOP: its sockets stay open and it answers nothing, then SIGCONT),
deletes a data directory (of a replica, or of the killed active) and restarts the
instance, or restarts etcd, on its data or wiped (its data lost: the instances then
agree by census, mrs.replication.census); between faults it heals and restarts what
it broke and waits until every instance is in sync again.

At the end everything is healed and drained, and the independent checker
(`sim.delivery_check.check_delivered`) judges what the clients saw: nothing answered
lost, no unmarked duplicate, each producer's order kept. Failover time is measured
from the clients' side: the last answer of the old active to the first answer of the
new one (which instance answered is known from the port each client dialed).
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import trio

from clients import (
    Client,
    MrsError,
    MrsTimeout,
    NoMoreMessages,
    connect,
    instance_addresses,
    put_once,
)
from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.model import DeliveryMode, Status
from sim.commands import (
    claim_scratch,
    interrupted_code,
    refuse_negative_seed,
    refuse_unwritable,
    run_processes,
)
from sim.delivery_check import DeliveryCheck, check_delivered
from sim.etcd import EtcdServer, InstanceProcess
from sim.ports import free_port
from sim.processes import ServerStartError
from sim.proxy import FaultProxy

NAMES = ("a", "b", "c")
LEASE_TTL_S = 3
PRODUCERS = 3
PUT_PAUSE_S = 0.02
"""Between one producer's puts: keeps the load modest on a shared machine."""
PUT_WITHIN_S = 60.0
HEALTHY_WITHIN_S = 90.0
FAULT_KINDS = (
    "kill-active",
    "partition-active",
    "pause-active",
    "wipe-replica",
    "wipe-killed-active",
    "restart-etcd",
    "wipe-etcd",
)
REPLICATED_MADE = ("etcd-data", *NAMES)
"""What `mrs sim replicated` makes in its --scratch directory: etcd's data and each
instance's data directory."""
QUEUES = """
[[group.queue]]
id = 10
name = "ORDERS"
confirm = "explicit-in-order"
""" + "".join(
    f'[[group.queue]]\nid = {21 + producer}\nname = "P{producer}"\n'
    f'confirm = "explicit-out-of-order"\n'
    for producer in range(PRODUCERS)
)


@dataclass
class Observed:
    """What the clients saw, for the checker, plus the faults acted out."""

    sent: set[str] = field(default_factory=set)
    acknowledged: set[str] = field(default_factory=set)
    deliveries: list[tuple[str, int]] = field(default_factory=list)
    answers: list[tuple[float, str]] = field(default_factory=list)
    """(trio time, instance name) of every answer a client got."""
    faults: Counter[str] = field(default_factory=Counter)
    windows: list[tuple[str, float, float]] = field(default_factory=list)
    """(kind, start, healed) of each fault, in trio time."""
    errors: Counter[str] = field(default_factory=Counter)
    """Errors the clients were answered (expected around faults), by request and kind."""
    unhealthy: list[str] = field(default_factory=list)
    """Faults after which the group was not back in sync within HEALTHY_WITHIN_S."""


@dataclass
class Report:
    seconds: float
    seed: int
    check: DeliveryCheck
    faults: dict[str, int]
    failovers_s: list[float]
    unhealthy: list[str]
    errors: dict[str, int]
    outages_s: dict[str, list[float]]

    @property
    def ok(self) -> bool:
        return self.check.ok and not self.unhealthy

    def figures(self) -> dict:
        ordered = sorted(self.failovers_s)
        return {
            "seconds": self.seconds,
            "seed": self.seed,
            "faults": self.faults,
            "acknowledged": self.check.acknowledged,
            "delivered": self.check.delivered,
            "lost": len(self.check.lost),
            "unmarked_duplicates": len(self.check.unmarked_duplicates),
            "order_violations": len(self.check.order_violations),
            "unexpected": len(self.check.unexpected),
            "marked_redeliveries": self.check.marked_redeliveries,
            "failovers": len(ordered),
            "failover_s_p50": _quantile(ordered, 0.5),
            "failover_s_p99": _quantile(ordered, 0.99),
            "failover_s_max": ordered[-1] if ordered else None,
            "unhealthy": self.unhealthy,
            "client_errors": dict(self.errors),
            "longest_answer_gap_s_by_fault": {
                kind: {"median": round(statistics.median(gaps), 2), "max": round(max(gaps), 2)}
                for kind, gaps in sorted(self.outages_s.items())
            },
        }


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q * 100) - 1]


def outages_s(
    answers: list[tuple[float, str]], windows: list[tuple[str, float, float]]
) -> dict[str, list[float]]:
    """Per fault kind, for each fault: the longest time without any answer from its
    start until the first answer after it was healed (an etcd restart or a wiped
    replica may stop answers without a change of active)."""
    times = sorted(at_s for at_s, _ in answers)
    found: dict[str, list[float]] = {}
    for kind, started, healed in windows:
        before = [at_s for at_s in times if at_s < started][-1:]
        inside = [at_s for at_s in times if started <= at_s <= healed]
        after = [at_s for at_s in times if at_s > healed][:1]
        points = before + inside + after
        gaps = [later - earlier for earlier, later in zip(points, points[1:], strict=False)]
        found.setdefault(kind, []).append(max(gaps, default=0.0))
    return found


def failover_times_s(answers: list[tuple[float, str]]) -> list[float]:
    """Each change of the answering instance: its first answer minus the previous
    instance's last one."""
    gaps = []
    previous: tuple[float, str] | None = None
    for at_s, instance in sorted(answers):
        if previous is not None and instance != previous[1]:
            gaps.append(at_s - previous[0])
        previous = (at_s, instance)
    return gaps


class ReplicatedBus:
    """etcd, the three instances and the proxies between them, in `directory`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.etcd = EtcdServer(directory)
        self.listen = {name: free_port() for name in NAMES}
        self.replication = {name: free_port() for name in NAMES}
        self.replication_proxies = {
            (dialer, target): FaultProxy(free_port(), self.replication[target])
            for dialer in NAMES
            for target in NAMES
            if dialer != target
        }
        self.etcd_proxies = {name: FaultProxy(free_port(), self.etcd.client_port) for name in NAMES}
        self.instances = {name: InstanceProcess(self._config(name), name) for name in NAMES}
        self.port_names = {str(port): name for name, port in self.listen.items()}

    def _config(self, own: str) -> Path:
        """Instance `own`'s view: its own replication port, the others' through proxies."""
        lines = [
            "[coordinator]",
            f'etcd = ["http://127.0.0.1:{self.etcd_proxies[own].listen_port}"]',
            f"lease_ttl_s = {LEASE_TTL_S}",
            f'prefix = "/mrs/{self.directory.name}"',
            "",
            "[[group]]",
            "id = 1",
            'name = "NYC"',
        ]
        for name in NAMES:
            port = self.replication[name]
            if name != own:
                port = self.replication_proxies[(own, name)].listen_port
            lines += [
                "[[group.instance]]",
                f'name = "{name}"',
                f'listen = "127.0.0.1:{self.listen[name]}"',
                f'replication = "127.0.0.1:{port}"',
                f'data_dir = "{name}"',
            ]
        path = self.directory / f"bus-{own}.toml"
        path.write_text("\n".join(lines) + "\n" + QUEUES)
        return path

    @property
    def addresses(self) -> list[str]:
        return instance_addresses(self.instances["a"].config_path, "NYC")

    async def run_proxies(self, nursery: trio.Nursery) -> None:
        for proxy in [*self.replication_proxies.values(), *self.etcd_proxies.values()]:
            await nursery.start(proxy.run)

    def partition(self, name: str) -> None:
        """Cut `name` off from the other instances and from etcd (clients still reach it)."""
        for (dialer, target), proxy in self.replication_proxies.items():
            if name in (dialer, target):
                proxy.cut()
        self.etcd_proxies[name].cut()

    def heal(self) -> None:
        for proxy in [*self.replication_proxies.values(), *self.etcd_proxies.values()]:
            proxy.heal()

    def start_missing(self) -> None:
        for process in self.instances.values():
            if process.process is None or process.process.poll() is not None:
                process.start()

    def stop(self) -> None:
        for process in self.instances.values():
            process.terminate()
        self.etcd.stop()


class Workload:
    """Producers and a consumer recording what they were answered, and by whom."""

    def __init__(self, bus: ReplicatedBus, observed: Observed) -> None:
        self.bus = bus
        self.observed = observed
        self.putting = True

    def opener(self, dialed: dict[str, str]):
        """A client's `open_stream` that remembers the instance it dialed last."""

        async def open_stream(host: str, port: int) -> trio.abc.Stream:
            stream = await trio.open_tcp_stream(host, port)
            dialed["name"] = self.bus.port_names.get(str(port), "?")
            return stream

        return open_stream

    def answered(self, dialed: dict[str, str]) -> None:
        self.observed.answers.append((trio.current_time(), dialed.get("name", "?")))

    async def produce(self, producer: int) -> None:
        dialed: dict[str, str] = {}
        async with connect(
            self.bus.addresses, f"P{producer}", open_stream=self.opener(dialed)
        ) as client:
            counter = 0
            while self.putting:
                message_id = f"p{producer}:{counter}"
                counter += 1
                self.observed.sent.add(message_id)
                try:
                    psb = await put_once(
                        client,
                        message_id.encode(),
                        "ORDERS",
                        message_id,
                        within_s=PUT_WITHIN_S,
                        delivery=DeliveryMode.WF_DQF,
                    )
                except (MrsError, trio.TooSlowError) as error:
                    self.observed.errors[f"put: {type(error).__name__}"] += 1
                    continue  # not acknowledged: the checker does not count it
                self.answered(dialed)
                if psb.delivery_status == Status.STORED or psb.status == Status.SUCCESS:
                    self.observed.acknowledged.add(message_id)
                await trio.sleep(PUT_PAUSE_S)

    async def consume(self, *, until_empty: bool = False) -> None:
        """Get and confirm; `until_empty`: stop at the first NOMOREMSG (the drain)."""
        dialed: dict[str, str] = {}
        async with connect(self.bus.addresses, "ORDERS", open_stream=self.opener(dialed)) as client:
            while True:
                try:
                    message = await client.get(timeout=5 if until_empty else 1)
                except (NoMoreMessages, MrsTimeout):
                    if until_empty:
                        return
                    continue
                except MrsError as error:
                    self.observed.errors[f"get: {type(error).__name__}"] += 1
                    if until_empty:
                        print(f"drain: {error!r}", flush=True)
                    await self._reconnected(client)
                    continue
                self.answered(dialed)
                self.observed.deliveries.append(
                    (message.body.decode(), int(message.delivery_status))
                )
                try:
                    await client.confirm(message.seq)
                    self.answered(dialed)
                except MrsError as error:
                    self.observed.errors[f"confirm: {type(error).__name__}"] += 1
                    await self._reconnected(client)  # it comes back POSSDUPL

    @staticmethod
    async def _reconnected(client: Client) -> None:
        with trio.move_on_after(PUT_WITHIN_S):
            await client.wait_connected()


async def active_status(bus: ReplicatedBus) -> dict | None:
    """The replication status of the instance answering as active, or None (none
    answers: between a loss and the next term, or while an instance restarts)."""
    with trio.move_on_after(10):
        try:
            async with connect(bus.addresses, None, reconnect=None, connect_timeout_s=3) as client:
                status = (await client.status()).get("replication") or {}
        except (MrsError, OSError):
            return None
        if status.get("role") == "active":
            return status
    return None


async def wait_healthy(bus: ReplicatedBus, within_s: float = HEALTHY_WITHIN_S) -> str | None:
    """The active's name once every replica is connected and in sync (None: not in time)."""
    with trio.move_on_after(within_s):
        while True:
            status = await active_status(bus)
            if status is not None and all(
                replica["in_sync"] and replica["connected"]
                for replica in status["replicas"].values()
            ):
                return status["instance"]
            await trio.sleep(0.5)
    return None


class Nemesis:
    """One fault at a time from the seed; heals and restarts it before the next."""

    def __init__(self, bus: ReplicatedBus, observed: Observed, seed: int) -> None:
        self.bus = bus
        self.observed = observed
        self.rng = random.Random(seed)

    async def run(self, seconds: float) -> None:
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline:
            await trio.sleep(self.rng.uniform(2.0, 6.0))
            active = await wait_healthy(self.bus)
            if active is None:
                self.observed.unhealthy.append(f"before a fault at {trio.current_time():.1f}")
                self.bus.heal()
                self.bus.start_missing()
                continue
            kind = self.rng.choice(FAULT_KINDS)
            self.observed.faults[kind] += 1
            print(f"{time.strftime('%H:%M:%S')} fault {kind} (active {active})", flush=True)
            started = trio.current_time()
            await self.act(kind, active)
            self.bus.heal()
            self.bus.start_missing()
            self.observed.windows.append((kind, started, trio.current_time()))

    async def act(self, kind: str, active: str) -> None:
        instances = self.bus.instances
        if kind == "kill-active":
            instances[active].kill()
            await trio.sleep(self.rng.uniform(0.5, 5.0))
        elif kind == "partition-active":
            self.bus.partition(active)
            await trio.sleep(self.rng.uniform(LEASE_TTL_S + 1.0, 10.0))
        elif kind == "pause-active":  # SIGSTOP: its sockets stay open and answer nothing
            instances[active].pause()
            try:
                await trio.sleep(self.rng.uniform(1.0, 10.0))
            finally:
                instances[active].resume()
        elif kind in ("wipe-replica", "wipe-killed-active"):
            victim = active
            if kind == "wipe-replica":
                victim = self.rng.choice([name for name in NAMES if name != active])
            instances[victim].kill()
            shutil.rmtree(self.bus.directory / victim, ignore_errors=True)
            await trio.sleep(self.rng.uniform(0.5, 3.0))
        elif kind in ("restart-etcd", "wipe-etcd"):
            (self.bus.etcd.stop if kind == "restart-etcd" else self.bus.etcd.wipe)()
            await trio.sleep(self.rng.uniform(0.5, 4.0))
            await trio.to_thread.run_sync(self.bus.etcd.start)


async def run_replicated_nemesis(directory: Path, seconds: float, seed: int) -> Report:
    """Start the bus, run the workload under the nemesis for `seconds`, heal, drain,
    and judge what the clients saw."""
    bus = ReplicatedBus(directory)
    observed = Observed()
    await trio.to_thread.run_sync(bus.etcd.start)
    try:
        async with trio.open_nursery() as nursery:
            await bus.run_proxies(nursery)
            bus.start_missing()
            if await wait_healthy(bus) is None:
                raise ServerStartError(f"the replicated group did not start: see {directory}")
            await _faults_under_load(bus, observed, seed, seconds)
            nursery.cancel_scope.cancel()
    finally:
        bus.stop()
    verdict = check_delivered(observed.acknowledged, observed.deliveries, sent=observed.sent)
    return Report(
        seconds=seconds,
        seed=seed,
        check=verdict,
        faults=dict(observed.faults),
        failovers_s=failover_times_s(observed.answers),
        unhealthy=observed.unhealthy,
        errors=dict(observed.errors),
        outages_s=outages_s(observed.answers, observed.windows),
    )


async def _faults_under_load(
    bus: ReplicatedBus, observed: Observed, seed: int, seconds: float
) -> None:
    workload = Workload(bus, observed)
    async with trio.open_nursery() as clients:
        for producer in range(PRODUCERS):
            clients.start_soon(workload.produce, producer)
        consumer = trio.CancelScope()

        async def consume() -> None:
            with consumer:
                await workload.consume()

        clients.start_soon(consume)
        await Nemesis(bus, observed, seed).run(seconds)
        bus.heal()
        bus.start_missing()
        workload.putting = False  # the producers finish their put in flight and leave
        if await wait_healthy(bus) is None:
            observed.unhealthy.append("at the end")
        await trio.sleep(2.0)
        consumer.cancel()
        print(f"{time.strftime('%H:%M:%S')} healed; draining", flush=True)
    await workload.consume(until_empty=True)  # the drain: everything left, then NOMOREMSG


def run_replicated_command(
    seconds: float, seed: int, scratch: Path | None, figures: Path | None
) -> int:
    """`mrs sim replicated`: run, print the figures (JSON), 0 when every check held.
    With no `scratch`, the bus goes in a new temporary directory, made only once the
    arguments are known good (one made first was left behind, empty, by each refusal),
    and removed when every check held, as `mrs sim run` does (each run left its etcd
    and three instances' journals in the temp directory, and a failed one did not say
    where they were)."""
    if shutil.which("etcd") is None:
        raise CommandError(
            "etcd is not installed (Debian: apt-get install etcd-server)",
            EXIT_USAGE,
        )
    refuse_unwritable("--figures", figures)
    refuse_negative_seed("--seed", seed)
    made_here = scratch is None
    if scratch is None:
        scratch = Path(tempfile.mkdtemp(prefix="mrs-sim-replicated-"))
    claim_scratch(scratch, REPLICATED_MADE)  # two runs on one --scratch: the second refused
    started_s = time.monotonic()
    report, signum = run_processes(run_replicated_nemesis, scratch, scratch, seconds, seed)
    if report is None:
        assert signum is not None
        print(
            f"interrupted by {signum.name} after {time.monotonic() - started_s:.1f} s: etcd "
            f"and the instances are stopped; no verdict (the run did not drain); the bus "
            f"stays in {scratch}"
        )
        return interrupted_code(signum)
    shown = {**report.figures(), "elapsed_s": round(time.monotonic() - started_s, 1)}
    text = json.dumps(shown, indent=2)
    print(text)
    if figures is not None:
        figures.write_text(text + "\n")
    # a failure names its seed in the figures and how to run its schedule again
    print(f"reproduce the schedule: mrs sim replicated --seed {seed} --seconds {seconds:g}")
    if not report.ok:
        print(report.check.failures() or f"unhealthy: {report.unhealthy}")
        print(f"the bus (etcd, the instances' journals and logs) stays in {scratch}")
        return 1
    print("every check held: nothing answered lost, no unmarked duplicate, order kept")
    if made_here:
        shutil.rmtree(scratch, ignore_errors=True)
        print(f"removed {scratch} (pass --scratch DIR to keep the bus)")
    return 0
