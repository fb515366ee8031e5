"""MRS in the shapes peerbench gives Redis: pipelines of puts, batch reads, pipelined confirms.

Why: peerbench's Redis rows are not one request per task. Its producer keeps 4
pipelines of 250 XADDs in flight (8 producers: 1 pipeline of 125 each), and its
consumer reads with `XREADGROUP COUNT 500` and sends a batch's XACKs pipelined
together; the MRS rows (`bench_mrs.py`) run 1,000 tasks that each await one put,
and 1,000 get -> confirm loops. This runs MRS the way the Redis rows run Redis,
with the client calls that are MRS's pipelines:

- a producer "pipeline" is one task looping `put_many(250 WF_DQF puts)` (each answered
  after its fsync'd commit, as `appendfsync always` answers after its fsync);
- the consumer is one task looping `get_many(500, timeout=0.1)` then `confirm_many`
  (each confirm a synced delete, as XACK is).

Every process is separate, as in peerbench (server, each producer, the consumer), 1 KiB
bodies, one fresh `mrs serve` per run; the rate counts puts stored (`puts`) or
messages confirmed (`e2e`) during the measured seconds (an e2e row also shows the puts
stored meanwhile: producers that outrun the consumer make the server's CPU per
confirmed message larger than its cost per message).

    .venv/bin/python benchmarks/pipelined_shapes.py                 # every shape, once
    .venv/bin/python benchmarks/pipelined_shapes.py --shapes e2e --rounds 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from procstat import process_cpu_s  # the sibling module (benchmarks/ is on sys.path)

from clients import MrsTimeout, Psb, PutItem, connect
from mrs.model import DeliveryMode, Uma
from sim.processes import GroupProcess, write_single_group_config

TARGET = "1.10"
BODY = b"x" * 1024
SHAPES = {  # name: (producers, pipelines per producer, puts per pipeline, consumer?)
    "puts": (1, 4, 250, False),
    "puts8": (8, 1, 125, False),
    "e2e": (1, 4, 250, True),
    "e2e8": (8, 1, 125, True),
}
CONSUMER_COUNT = 500
CONSUMER_BLOCK_S = 0.1
START_DELAY_S = 1.5
"""Every process connects, then waits for the same start time."""


def queues_toml(producers: int) -> str:
    text = (
        '[[group.queue]]\nid = 10\nname = "TARGET"\nconfirm = "explicit-out-of-order"\n'
        "unconfirmed_max = 100000\n"
    )
    for index in range(producers):
        text += f'[[group.queue]]\nid = {100 + index}\nname = "SENDER{index}"\n'
    return text


async def sleep_until_wall(start: float) -> None:
    """Until the wall-clock time every process of the run starts at."""
    await trio.sleep(max(0.0, start - time.time()))


async def producer(address: str, index: int, pipelines: int, depth: int, start: float,
                   seconds: float) -> dict:  # fmt: skip
    stored = [0]
    items = [PutItem(BODY, TARGET, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)] * depth
    async with connect(address, queue=f"1.{100 + index}", program="pipelined producer") as client:

        async def pipeline() -> None:
            while time.time() < start + seconds:
                results = await client.put_many(items)
                if time.time() >= start:
                    stored[0] += sum(isinstance(r, Psb) and r.stored for r in results)

        await sleep_until_wall(start)
        cpu_s = time.process_time()
        async with trio.open_nursery() as nursery:
            for _ in range(pipelines):
                nursery.start_soon(pipeline)
        cpu_s = time.process_time() - cpu_s
    return {"stored": stored[0], "cpu_s": cpu_s}


async def consumer(address: str, start: float, seconds: float) -> dict:
    confirmed = 0
    async with connect(address, queue=TARGET, program="pipelined consumer") as client:
        await sleep_until_wall(start)
        cpu_s = time.process_time()
        while time.time() < start + seconds:
            try:
                messages = await client.get_many(CONSUMER_COUNT, timeout=CONSUMER_BLOCK_S)
            except MrsTimeout:  # nothing came within the block
                continue
            results = await client.confirm_many([message.seq for message in messages])
            confirmed += results.count(None)
        cpu_s = time.process_time() - cpu_s
    return {"confirmed": confirmed, "cpu_s": cpu_s}


def run_shape(shape: str, seconds: float) -> dict:
    producers, pipelines, depth, consumes = SHAPES[shape]
    directory = Path(tempfile.mkdtemp(prefix="mrs-pipelined-", dir=Path.cwd()))
    limits = f"dqf_messages_max = 10000000\njournal_bytes_max = {8 << 30}\n"
    try:
        config = write_single_group_config(directory, queues=queues_toml(producers), limits=limits)
        server = GroupProcess(config, 1)
        address = server.start()
        try:
            start = time.time() + START_DELAY_S
            roles = [["producer", str(i), str(pipelines), str(depth)] for i in range(producers)]
            if consumes:
                roles.append(["consumer"])
            children = [
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--role",
                        *role,
                        "--address",
                        address,
                        "--start",
                        repr(start),
                        "--seconds",
                        repr(seconds),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
                for role in roles
            ]
            time.sleep(max(0.0, start - time.time()))
            cpu_before = process_cpu_s(server.process.pid)
            outputs = [json.loads(child.communicate()[0]) for child in children]
            server_cpu_s = process_cpu_s(server.process.pid) - cpu_before
        finally:
            server.terminate()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    stored = sum(output.get("stored", 0) for output in outputs)
    count = sum(output.get("confirmed", 0) for output in outputs) if consumes else stored
    return {
        "shape": shape,
        "msgs_per_s": round(count / seconds),
        "stored_per_s": round(stored / seconds),
        "server_cpu_us_per_msg": round(server_cpu_s / max(count, 1) * 1e6, 1),
        "clients_cpu_us_per_msg": round(
            sum(output["cpu_s"] for output in outputs) / max(count, 1) * 1e6, 1
        ),
    }


def child_main(args: argparse.Namespace) -> None:
    role = args.role
    if role[0] == "producer":
        index, pipelines, depth = map(int, role[1:])
        result = trio.run(producer, args.address, index, pipelines, depth, args.start, args.seconds)
    else:
        result = trio.run(consumer, args.address, args.start, args.seconds)
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        child_main(args)
        return
    for round_number in range(1, args.rounds + 1):
        for shape in args.shapes:
            figures = run_shape(shape, args.seconds)
            print(
                f"round {round_number} {shape:5}: {figures['msgs_per_s']:>7,} msgs/s "
                f"(puts stored {figures['stored_per_s']:>7,}/s), CPU per message: server "
                f"{figures['server_cpu_us_per_msg']:5.1f} us, clients "
                f"{figures['clients_cpu_us_per_msg']:5.1f} us",
                flush=True,
            )


if __name__ == "__main__":
    main()
