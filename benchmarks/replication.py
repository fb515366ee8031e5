"""Replicated WF puts as a ratio of unreplicated ones, on this machine.

    python benchmarks/replication.py                  # 3 s per shape, 32 tasks
    python benchmarks/replication.py --seconds 10 --tasks 8 64
    python benchmarks/replication.py --rabbitmq --seconds 10   # + RabbitMQ quorum x3
    python benchmarks/replication.py --rabbitmq --seconds 5 --rounds 3   # medians

Starts etcd (single member, free ports), then for each task count measures durable
WF_DQF puts per second and their latency (p50/p99), messages per second taken
through put -> get -> confirm (a consumer awaiting each get, then each confirm: two
commits a message, the delivery mark's and the confirm's), through put ->
get_many -> confirm_many (a prefetching consumer, as the quorum queue's consumer
takes them) and through put -> get on an implicitly confirmed queue (each get
confirms the message before: one commit a message), and the answer latency
(p50/p99) of one producer putting at a fixed `--rate` (1,000/s), against:

- one unreplicated `mrs serve` (real LMDB, fsync), and
- a replicated group: three `mrs serve --instance` processes on this machine (each
  with its own data directory, all on the same disk), answered once the commit is
  durable on the active and on a replica of the in-sync set (a majority).

Each shape is one client connection with `--tasks` tasks each awaiting one put at a
time. All processes share this machine's cores and one disk, so the replicated run
pays three fsyncs per commit on one device and three processes' CPU on the same cores:
a pessimistic figure beside three machines. The load average is printed with the
figures; on a loaded machine read the ratio, not the rates.

With `--rabbitmq` the same shapes then run against a quorum queue with a member on
each node of a three-node RabbitMQ cluster on this machine (benchmarks/rabbitmq_cluster.sh
starts it after the MRS runs and stops it at the end; the client is
benchmarks/rabbitmq_quorum.py, pika), and one table sets the three side by side with
the ratios replicated / unreplicated and replicated / quorum x3.

`--rounds N` runs every system's shapes N times (MRS's two groups in turn, each round
a fresh group) and reports each rate as the median of the rounds and each latency
percentile over the rounds' answers together, with the rounds' rates printed as
they come. Why: on a shared two-core machine one run's rates move by 2x between
runs of the same build, so one round is not a measure of the goals.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from clients import DeliveryMode, connect
from sim.etcd import EtcdServer, InstanceProcess, wait_active, write_replicated_config
from sim.processes import GroupProcess

QUEUES = textwrap.dedent("""\
    [group.limits]
    dqf_messages_max = 1000000
    [[group.queue]]
    id = 10
    name = "ORDERS"
    messages_max = 1000000
    confirm = "explicit-out-of-order"
    [[group.queue]]
    id = 11
    name = "FLOW"
    confirm = "explicit-in-order"
    [[group.queue]]
    id = 12
    name = "PREFETCH"
    confirm = "explicit-in-order"
    [[group.queue]]
    id = 13
    name = "IMPLICIT"
    confirm = "implicit"
    """)


async def put_for(
    address: str | list[str], seconds: float, tasks: int, **options: Any
) -> tuple[float, list[float]]:
    """(puts per second, each put's latency in seconds) over `seconds`; `options`
    for connect (TLS: benchmarks/replication_tls.py)."""
    latencies: list[float] = []
    async with connect(address, "ORDERS", **options) as client:
        body = b"x" * 256

        async def one_task() -> None:
            while True:
                started = time.perf_counter()
                await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
                latencies.append(time.perf_counter() - started)

        started_s = time.perf_counter()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                for _ in range(tasks):
                    nursery.start_soon(one_task)
        return len(latencies) / (time.perf_counter() - started_s), latencies


async def through_for(
    address: str | list[str], seconds: float, prefetch: bool = False, implicit: bool = False
) -> float:
    """Messages per second taken all the way: one putter awaiting each WF_DQF put and
    one consumer, on one connection (more putters only build a backlog the one
    consumer cannot take).

    Without `prefetch`, on queue FLOW, the consumer awaits each get, then each
    confirm: two commits a message (the delivery mark's and the confirm's), so this
    is bound by the consumer. With `prefetch`, on queue PREFETCH, it takes messages
    as the quorum queue's consumer does (benchmarks/rabbitmq_quorum.py `through`):
    `get_many` of up to 1,000, then `confirm_many` of what came; it keeps up, so
    this is bound by the putter's answer latency, as RabbitMQ's is by its
    publisher's confirms. With `implicit`, on queue IMPLICIT (`confirm = "implicit"`),
    the consumer awaits each get only: MessageQ's implicit confirmation, where each get
    confirms the message before it, so the confirm and the next delivery mark share one
    commit, and the consumer waits for one commit a message, not two. It is the
    nearest MessageQ shape to the quorum queue's consumer, whose AMQP ack is not
    answered; a get that finds the queue empty leaves the message before unconfirmed
    until the next get, as MessageQ's does. (Each queue is empty: the put shape's
    backlog is on ORDERS.)"""
    queue = "PREFETCH" if prefetch else "IMPLICIT" if implicit else "FLOW"
    confirmed = 0
    async with connect(address, queue) as client:
        body = b"x" * 256

        async def putter() -> None:
            while True:
                await client.put(body, queue, delivery=DeliveryMode.WF_DQF)

        async def consumer() -> None:
            nonlocal confirmed
            while True:
                if prefetch:
                    messages = await client.get_many(1000, timeout=None)
                    await client.confirm_many([message.seq for message in messages])
                elif implicit:
                    messages = [await client.get()]  # confirms the message before
                else:
                    messages = [await client.get()]
                    await client.confirm(messages[0].seq)
                confirmed += len(messages)

        started_s = time.perf_counter()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer)
                nursery.start_soon(putter)
        return confirmed / (time.perf_counter() - started_s)


async def paced_for(
    address: str | list[str], seconds: float, rate_per_s: float, **options: Any
) -> tuple[float, list[float]]:
    """(puts answered per second, each put's latency in s): one connection, one
    producer starting a put every 1/rate s on a fixed schedule (open loop: each put
    in a task of its own, so a slow answer does not delay the next put and the
    latency is not flattered), `rate x seconds` puts after 50 to warm up."""
    latencies: list[float] = []
    async with connect(address, "ORDERS", **options) as client:
        body = b"x" * 256
        for _ in range(50):
            await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)

        async def one_put() -> None:
            started = time.perf_counter()
            await client.put(body, "ORDERS", delivery=DeliveryMode.WF_DQF)
            latencies.append(time.perf_counter() - started)

        started_s = time.perf_counter()
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for index in range(int(rate_per_s * seconds)):
                await trio.sleep_until(start + index / rate_per_s)
                nursery.start_soon(one_put)
        return len(latencies) / (time.perf_counter() - started_s), latencies


@dataclass
class Shapes:
    """One system's figures for the shapes, in the order they run."""

    put_per_s: float
    put_latencies_s: list[float]
    through_per_s: float
    through_prefetch_per_s: float
    through_implicit_per_s: float
    paced_per_s: float
    paced_latencies_s: list[float]


def pooled(rounds: list[Shapes]) -> Shapes:
    """Several rounds of one system as one: the median of each rate, and every
    answer's latency together (the percentiles are over all of them)."""

    def median(rate: Callable[[Shapes], float]) -> float:
        return statistics.median(rate(shapes) for shapes in rounds)

    return Shapes(
        median(lambda shapes: shapes.put_per_s),
        [latency for shapes in rounds for latency in shapes.put_latencies_s],
        median(lambda shapes: shapes.through_per_s),
        median(lambda shapes: shapes.through_prefetch_per_s),
        median(lambda shapes: shapes.through_implicit_per_s),
        median(lambda shapes: shapes.paced_per_s),
        [latency for shapes in rounds for latency in shapes.paced_latencies_s],
    )


def print_round(label: str, shapes: Shapes) -> None:
    """One round's rates as they come (the spread the medians hide)."""
    print(
        f"  round {label}: puts {shapes.put_per_s:.0f}/s, "
        f"put->get->confirm {shapes.through_per_s:.0f}/s, "
        f"prefetch {shapes.through_prefetch_per_s:.0f}/s, "
        f"implicit {shapes.through_implicit_per_s:.0f}/s, "
        f"paced p50 {ms(shapes.paced_latencies_s, 0.5):.2f} ms",
        flush=True,
    )


async def all_shapes(
    address: str | list[str], seconds: float, tasks: int, rate_per_s: float
) -> Shapes:
    rate, latencies = await put_for(address, seconds, tasks)
    through = await through_for(address, seconds)
    prefetch = await through_for(address, seconds, prefetch=True)
    implicit = await through_for(address, seconds, implicit=True)
    paced_rate, paced_latencies = await paced_for(address, seconds, rate_per_s)
    return Shapes(rate, latencies, through, prefetch, implicit, paced_rate, paced_latencies)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def unreplicated(directory: Path, seconds: float, tasks: int, rate_per_s: float) -> Shapes:
    directory.mkdir(parents=True)
    (directory / "bus.toml").write_text(
        '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n' + QUEUES
    )
    server = GroupProcess(directory / "bus.toml", 1)
    address = server.start()
    try:
        return trio.run(all_shapes, address, seconds, tasks, rate_per_s)
    finally:
        server.terminate()


def replicated(
    directory: Path, endpoint: str, seconds: float, tasks: int, rate_per_s: float
) -> Shapes:
    config = write_replicated_config(directory, endpoint, QUEUES)
    config = config.rename(config.with_name(f"bench_{directory.name}.toml"))
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        active = wait_active(processes, 30)

        async def measured() -> Shapes:
            async with connect(processes[active].address, None) as client:
                with trio.fail_after(30):  # both replicas in sync first
                    while not all(
                        r["in_sync"]
                        for r in (await client.status())["replication"]["replicas"].values()
                    ):
                        await trio.sleep(0.1)
            return await all_shapes(processes[active].address, seconds, tasks, rate_per_s)

        return trio.run(measured)
    finally:
        for process in processes.values():
            process.terminate()


CLUSTER_SCRIPT = Path(__file__).with_name("rabbitmq_cluster.sh")
RABBITMQ_PORT = 5701  # node 1 of the cluster script


def ms(values: list[float], fraction: float) -> float:
    return 1000 * percentile(values, fraction)


def print_mrs(tasks: int, one: Shapes, three: Shapes, rate_per_s: float) -> None:
    """The MRS figures of one task count, as this benchmark has always printed them."""
    for label, shapes in (("unreplicated", one), ("replicated x3", three)):
        print(
            f"{tasks:3d} tasks  {label:14s} {shapes.put_per_s:8.0f} puts/s  "
            f"p50 {ms(shapes.put_latencies_s, 0.5):6.2f} ms  "
            f"p99 {ms(shapes.put_latencies_s, 0.99):6.2f} ms"
        )
    print(f"{tasks:3d} tasks  ratio replicated/unreplicated: {three.put_per_s / one.put_per_s:.2f}")
    print(
        f"  put->get->confirm (1 putter, 1 consumer): unreplicated {one.through_per_s:.0f}/s, "
        f"replicated {three.through_per_s:.0f}/s, "
        f"ratio {three.through_per_s / one.through_per_s:.2f}"
    )
    print(
        f"  put->get_many->confirm_many (1 putter, 1 prefetching consumer): unreplicated "
        f"{one.through_prefetch_per_s:.0f}/s, replicated {three.through_prefetch_per_s:.0f}/s, "
        f"ratio {three.through_prefetch_per_s / one.through_prefetch_per_s:.2f}"
    )
    print(
        f"  put->get (implicit confirm) (1 putter, 1 consumer): unreplicated "
        f"{one.through_implicit_per_s:.0f}/s, replicated {three.through_implicit_per_s:.0f}/s, "
        f"ratio {three.through_implicit_per_s / one.through_implicit_per_s:.2f}"
    )
    print(
        f"  paced {rate_per_s:g}/s (1 producer): "
        + ", ".join(
            f"{label} p50 {ms(shapes.paced_latencies_s, 0.5):.2f} ms "
            f"p99 {ms(shapes.paced_latencies_s, 0.99):.2f} ms ({shapes.paced_per_s:.0f}/s reached)"
            for label, shapes in (("unreplicated", one), ("replicated", three))
        )
    )


def quorum_shapes(
    seconds: float, tasks_list: list[int], rate_per_s: float, rounds: int = 1
) -> dict[int, Shapes]:
    """The shapes against a RabbitMQ quorum queue on three local nodes, started here
    (after the MRS runs, so its idle nodes take no CPU from them) and always stopped;
    `rounds` times each, pooled."""
    import rabbitmq_quorum  # benchmarks/ is on the path when this runs as a script

    subprocess.run([str(CLUSTER_SCRIPT), "start"], check=True)
    try:
        print(f"RabbitMQ {rabbitmq_quorum.server_version(RABBITMQ_PORT)}, 3 nodes")
        print(f"a quorum queue's members: {quorum_members(rabbitmq_quorum)}")
        shapes: dict[int, Shapes] = {}
        for tasks in tasks_list:
            each: list[Shapes] = []
            for number in range(rounds):
                result = rabbitmq_quorum.all_shapes(RABBITMQ_PORT, seconds, tasks, rate_per_s)
                rate, latencies, through, paced_rate, paced_latencies = result
                # its one consumer shape is the prefetching one: the three rows compare with it
                each.append(
                    Shapes(rate, latencies, through, through, through, paced_rate, paced_latencies)
                )
                print_round(f"{number + 1} quorum x3", each[-1])
            shapes[tasks] = pooled(each)
        return shapes
    finally:
        subprocess.run([str(CLUSTER_SCRIPT), "stop"], check=False)


def quorum_members(rabbitmq_quorum: Any) -> str:
    """The online members of a quorum queue declared as the shapes declare theirs, as
    rabbitmqctl lists them; refuses to go on with fewer than three."""
    rabbitmq_quorum.fresh_quorum_queue(RABBITMQ_PORT, "mrs-bench-members")
    try:
        listed = subprocess.run(
            [str(CLUSTER_SCRIPT), "ctl", "list_queues", "--no-table-headers", "name", "online"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        rabbitmq_quorum.delete_queue(RABBITMQ_PORT, "mrs-bench-members")
    line = next(line for line in listed.splitlines() if line.startswith("mrs-bench-members"))
    online = line.split(None, 1)[1].strip()
    if online.count("@") != 3:
        sys.exit(f"the quorum queue is not on three nodes: {online}")
    return online


def ratio(numerator: float, denominator: float) -> str:
    return f"{numerator / denominator:.2f}" if denominator else "-"


def print_table(tasks: int, rate_per_s: float, one: Shapes, three: Shapes, quorum: Shapes) -> None:
    """One table: unreplicated MRS, replicated MRS, the quorum queue, and the ratios
    (rates: higher is better for MRS replicated; latencies: lower is better)."""
    rows: list[tuple[str, Callable[[Shapes], float]]] = [
        (f"WF puts / confirms, {tasks} in flight, per s", lambda shapes: shapes.put_per_s),
        ("  ack p50 ms", lambda shapes: ms(shapes.put_latencies_s, 0.5)),
        ("  ack p99 ms", lambda shapes: ms(shapes.put_latencies_s, 0.99)),
        ("put->get->confirm, per s", lambda shapes: shapes.through_per_s),
        ("put->get_many->confirm_many, per s", lambda shapes: shapes.through_prefetch_per_s),
        ("put->get (implicit confirm), per s", lambda shapes: shapes.through_implicit_per_s),
        (f"paced {rate_per_s:g}/s, reached per s", lambda shapes: shapes.paced_per_s),
        ("  ack p50 ms", lambda shapes: ms(shapes.paced_latencies_s, 0.5)),
        ("  ack p99 ms", lambda shapes: ms(shapes.paced_latencies_s, 0.99)),
    ]
    print(
        f"{'shape':46s} {'MRS x1':>9s} {'MRS x3':>9s} {'quorum x3':>9s} "
        f"{'x3 / x1':>8s} {'x3 / quorum':>11s}"
    )
    for label, value in rows:
        mrs_one, mrs_three, rabbit = value(one), value(three), value(quorum)
        print(
            f"{label:46s} {mrs_one:9.2f} {mrs_three:9.2f} {rabbit:9.2f} "
            f"{ratio(mrs_three, mrs_one):>8s} {ratio(mrs_three, rabbit):>11s}"
        )
    print("(per s rows: a ratio above 1 is MRS x3 ahead; ms rows: below 1 is MRS x3 ahead)")


def mrs_rounds(
    scratch: Path, endpoint: str, args: argparse.Namespace, tasks: int
) -> tuple[Shapes, Shapes]:
    """`args.rounds` rounds of MRS unreplicated, then replicated, in turn (each round a
    fresh group and etcd prefix), pooled."""
    ones: list[Shapes] = []
    threes: list[Shapes] = []
    for number in range(args.rounds):
        ones.append(unreplicated(scratch / f"u{tasks}-{number}", args.seconds, tasks, args.rate))
        print_round(f"{number + 1} MRS x1", ones[-1])
        directory = scratch / f"r{tasks}-{number}"
        threes.append(replicated(directory, endpoint, args.seconds, tasks, args.rate))
        print_round(f"{number + 1} MRS x3", threes[-1])
    return pooled(ones), pooled(threes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per shape")
    parser.add_argument("--tasks", type=int, nargs="+", default=[32])
    parser.add_argument("--rate", type=float, default=1000.0, help="paced puts per second")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each system, pooled")
    parser.add_argument(
        "--rabbitmq", action="store_true", help="also a 3-node RabbitMQ quorum queue"
    )
    args = parser.parse_args()
    if args.rabbitmq:
        try:
            import pika  # noqa: F401 - checked before minutes of MRS runs, not after
        except ImportError:
            sys.exit("--rabbitmq needs pika in this interpreter: pip install -e '.[test]'")
    scratch = Path(tempfile.mkdtemp(prefix="mrs-repl-bench-", dir=".")).absolute()
    etcd = EtcdServer(scratch)
    etcd.start()
    mrs: dict[int, tuple[Shapes, Shapes]] = {}
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        for tasks in args.tasks:
            one, three = mrs_rounds(scratch, etcd.endpoint, args, tasks)
            mrs[tasks] = (one, three)
            print_mrs(tasks, one, three, args.rate)
    finally:
        etcd.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if args.rabbitmq:
        quorum = quorum_shapes(args.seconds, args.tasks, args.rate, args.rounds)
        for tasks, (one, three) in mrs.items():
            print()
            print_table(tasks, args.rate, one, three, quorum[tasks])
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
