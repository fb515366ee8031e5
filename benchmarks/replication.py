"""Replicated WF puts as a ratio of unreplicated ones, on this machine.

    python benchmarks/replication.py                  # 3 s per shape, 32 tasks
    python benchmarks/replication.py --seconds 10 --tasks 8 64

Starts etcd (single member, free ports), then for each task count measures durable
WF_DQF puts per second and their latency (p50/p99), then messages per second taken
through put -> get -> confirm, against:

- one unreplicated `mrs serve` (real LMDB, fsync), and
- a replicated group: three `mrs serve --instance` processes on this machine (each
  with its own data directory, all on the same disk), answered once the commit is
  durable on the active and on every in-sync replica.

Each shape is one client connection with `--tasks` tasks each awaiting one put at a
time. All processes share this machine's cores and one disk, so the replicated run
pays three fsyncs per commit on one device and three processes' CPU on the same cores:
a pessimistic figure beside three machines. The load average is printed with the
figures; on a loaded machine read the ratio, not the rates.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

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
    """)


async def put_for(
    address: str | list[str], seconds: float, tasks: int
) -> tuple[float, list[float]]:
    """(puts per second, each put's latency in seconds) over `seconds`."""
    latencies: list[float] = []
    async with connect(address, "ORDERS") as client:
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


async def through_for(address: str | list[str], seconds: float, tasks: int) -> float:
    """Messages per second taken all the way: WF_DQF put, get, confirm, on queue FLOW
    (empty: the put shape's backlog is on ORDERS): one putter and one consumer that
    confirms each message, on one connection (`tasks` is not used: more putters only
    build a backlog the one consumer cannot take)."""
    confirmed = 0
    async with connect(address, "FLOW") as client:
        body = b"x" * 256

        async def putter() -> None:
            while True:
                await client.put(body, "FLOW", delivery=DeliveryMode.WF_DQF)

        async def consumer() -> None:
            nonlocal confirmed
            while True:
                message = await client.get()
                await client.confirm(message.seq)
                confirmed += 1

        started_s = time.perf_counter()
        with trio.move_on_after(seconds):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer)
                nursery.start_soon(putter)
        return confirmed / (time.perf_counter() - started_s)


async def both_shapes(
    address: str | list[str], seconds: float, tasks: int
) -> tuple[float, list[float], float]:
    rate, latencies = await put_for(address, seconds, tasks)
    return rate, latencies, await through_for(address, seconds, tasks)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def unreplicated(directory: Path, seconds: float, tasks: int) -> tuple[float, list[float], float]:
    directory.mkdir(parents=True)
    (directory / "bus.toml").write_text(
        '[[group]]\nid = 1\nname = "NYC"\nlisten = "127.0.0.1:0"\ndata_dir = "g1"\n' + QUEUES
    )
    server = GroupProcess(directory / "bus.toml", 1)
    address = server.start()
    try:
        return trio.run(both_shapes, address, seconds, tasks)
    finally:
        server.terminate()


def replicated(
    directory: Path, endpoint: str, seconds: float, tasks: int
) -> tuple[float, list[float], float]:
    config = write_replicated_config(directory, endpoint, QUEUES)
    config = config.rename(config.with_name(f"bench_{directory.name}.toml"))
    processes = {name: InstanceProcess(config, name) for name in ("a", "b", "c")}
    try:
        for process in processes.values():
            process.start()
        active = wait_active(processes, 30)

        async def measured() -> tuple[float, list[float], float]:
            async with connect(processes[active].address, None) as client:
                with trio.fail_after(30):  # both replicas in sync first
                    while not all(
                        r["in_sync"]
                        for r in (await client.status())["replication"]["replicas"].values()
                    ):
                        await trio.sleep(0.1)
            return await both_shapes(processes[active].address, seconds, tasks)

        return trio.run(measured)
    finally:
        for process in processes.values():
            process.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--tasks", type=int, nargs="+", default=[32])
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="mrs-repl-bench-", dir=".")).absolute()
    etcd = EtcdServer(scratch)
    etcd.start()
    try:
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        for tasks in args.tasks:
            rate_one, lat_one, through_one = unreplicated(
                scratch / f"u{tasks}", args.seconds, tasks
            )
            rate_three, lat_three, through_three = replicated(
                scratch / f"r{tasks}", etcd.endpoint, args.seconds, tasks
            )
            for label, rate, lat in (
                ("unreplicated", rate_one, lat_one),
                ("replicated x3", rate_three, lat_three),
            ):
                print(
                    f"{tasks:3d} tasks  {label:14s} {rate:8.0f} puts/s  "
                    f"p50 {1000 * percentile(lat, 0.5):6.2f} ms  "
                    f"p99 {1000 * percentile(lat, 0.99):6.2f} ms"
                )
            print(f"{tasks:3d} tasks  ratio replicated/unreplicated: {rate_three / rate_one:.2f}")
            print(
                f"  put->get->confirm (1 putter, 1 consumer): unreplicated {through_one:.0f}/s, "
                f"replicated {through_three:.0f}/s, ratio {through_three / through_one:.2f}"
            )
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        etcd.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
