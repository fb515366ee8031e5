"""Puts one by one vs `put_many` batches: CPU per message of the server and the client.

    python benchmarks/put_batch.py                    # 30,000 puts each way, 256-byte bodies
    python benchmarks/put_batch.py --puts 60000 --headers   # with jplay-like headers + keys

Starts one `mrs serve` (real LMDB, fsync) and, in this process, one client that puts
the same N durable WF_DQF puts twice: first as `--tasks` tasks each awaiting one
`put` at a time (1,000 in flight), then as 2 tasks each sending `put_many` batches of
`--batch` (the same 1,000 in flight), interleaved `--rounds` times. It prints the
rate and the CPU microseconds per message of the server process (/proc) and of this
client process: on a loaded machine rates are noise, CPU per message is not.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio
from procstat import process_cpu_s  # the sibling module (benchmarks/ is on sys.path)

from clients import DeliveryMode, Psb, PutItem, Uma, connect
from sim.processes import GroupProcess


def write_config(directory: Path, puts: int) -> Path:
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [[group]]
            id = 1
            name = "BENCH"
            listen = "127.0.0.1:0"
            data_dir = "g1"
            [group.limits]
            dqf_messages_max = {puts * 4}
            journal_bytes_max = {8 << 30}
            [[group.queue]]
            id = 10
            name = "SENDER"
            [[group.queue]]
            id = 11
            name = "TARGET"
            messages_max = {puts * 4}
            confirm = "explicit-out-of-order"
            """)
    )
    return path


def items(count: int, start: int, headers: bool) -> list[PutItem]:
    body = b"b" * 256
    out = []
    for index in range(start, start + count):
        extra = None
        if headers:  # what a jplay replay carries
            extra = {
                "replay": {"journal": "pcj", "group": 1, "seq": index, "generation": 1,
                           "source": "1.11", "target": "1.10", "put_time_ns": index,
                           "confirm_value": 0, "confirm_time_ns": index},
                "idempotency_key": f"replay:{index:032x}",
            }  # fmt: skip
        out.append(PutItem(body, "TARGET", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC,
                           headers=extra))  # fmt: skip
    return out


async def one_by_one(client, work: list[PutItem], tasks: int) -> None:
    queue = iter(work)

    async def worker() -> None:
        for item in queue:
            psb = await client.put(item.body, item.target, delivery=item.delivery,
                                   uma=item.uma, headers=item.headers)  # fmt: skip
            assert psb.stored, psb

    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(worker)


async def batched(client, work: list[PutItem], batch: int) -> None:
    chunks = [work[start : start + batch] for start in range(0, len(work), batch)]
    chunks.reverse()

    async def worker() -> None:
        while chunks:
            results = await client.put_many(chunks.pop())
            assert all(isinstance(r, Psb) and r.stored for r in results), results[:3]

    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(worker)


async def measure(args, address: str, pid: int) -> None:
    start = 0
    async with connect(address, queue="SENDER") as client:
        for round_number in range(1, args.rounds + 1):
            for way in ("put", "put_many"):
                work = items(args.puts, start, args.headers)
                start += args.puts
                server_s, client_s = process_cpu_s(pid), time.process_time()
                started = time.perf_counter()
                if way == "put":
                    await one_by_one(client, work, args.tasks)
                else:
                    await batched(client, work, args.batch)
                elapsed = time.perf_counter() - started
                server_us = (process_cpu_s(pid) - server_s) / args.puts * 1e6
                client_us = (time.process_time() - client_s) / args.puts * 1e6
                print(
                    f"round {round_number} {way:8}: {args.puts / elapsed:8,.0f} msgs/s, "
                    f"CPU per message: server {server_us:5.1f} us, client {client_us:5.1f} us"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--puts", type=int, default=30_000)
    parser.add_argument("--tasks", type=int, default=1000, help="one-by-one: puts in flight")
    parser.add_argument("--batch", type=int, default=500, help="put_many: puts per call")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--headers", action="store_true", help="jplay-like headers and keys")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="put-batch-"))
    server = GroupProcess(write_config(directory, args.puts * args.rounds * 2), 1)
    try:
        address = server.start()
        trio.run(measure, args, address, server.process.pid)
    finally:
        server.terminate()
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
