"""get + confirm vs `get_many` + confirm: CPU per consumed message, server and client.

    python benchmarks/get_batch.py                 # 10,000 messages each way, 2 rounds
    python benchmarks/get_batch.py --tasks 1000    # a consumer with 1,000 get lanes

Starts one `mrs serve` (real LMDB, fsync), fills its queue with N durable messages
(put_many), then consumes them two ways, interleaved `--rounds` times: 50 tasks each
doing get then confirm (gets that wait together share GetBatch requests:
clients.get_pool), and `get_many(500)` batches whose messages 50 tasks confirm.
Confirms are one request per message either way; only the get side changes. It
prints the rate and the CPU microseconds per message of the server (/proc) and of
this client process: on a loaded machine rates are noise, CPU per message is not.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from procstat import process_cpu_s  # noqa: E402 - a sibling module
from put_batch import write_config  # noqa: E402 - the sibling benchmark

from clients import DeliveryMode, PutItem, Uma, connect  # noqa: E402
from sim.processes import GroupProcess  # noqa: E402

TASKS = 50


async def fill(sender, count: int) -> None:
    items = [PutItem(b"b" * 256, "TARGET", delivery=DeliveryMode.WF_DQF, uma=Uma.DISC)] * count
    for start in range(0, count, 1000):
        await sender.put_many(items[start : start + 1000])


async def one_by_one(receiver, count: int, tasks: int) -> None:
    left = count

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            message = await receiver.get(timeout=30)
            await receiver.confirm(message.seq)

    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(worker)


async def batched(receiver, count: int, batch: int) -> None:
    async def confirm_all(seqs: list[int]) -> None:
        for seq in seqs:
            await receiver.confirm(seq)

    got = 0
    while got < count:
        messages = await receiver.get_many(batch, timeout=30)
        got += len(messages)
        async with trio.open_nursery() as nursery:
            for task in range(TASKS):
                nursery.start_soon(confirm_all, [m.seq for m in messages[task::TASKS]])


async def measure(args, address: str, pid: int) -> None:
    async with connect(address, queue="SENDER") as sender, connect(address, "TARGET") as receiver:
        for round_number in range(1, args.rounds + 1):
            for way in ("get", "get_many"):
                await fill(sender, args.messages)
                server_s, client_s = process_cpu_s(pid), time.process_time()
                started = time.perf_counter()
                if way == "get":
                    await one_by_one(receiver, args.messages, args.tasks)
                else:
                    await batched(receiver, args.messages, args.batch)
                elapsed = time.perf_counter() - started
                server_us = (process_cpu_s(pid) - server_s) / args.messages * 1e6
                client_us = (time.process_time() - client_s) / args.messages * 1e6
                print(
                    f"round {round_number} {way:8} + confirm: "
                    f"{args.messages / elapsed:7,.0f} msgs/s, CPU per message: "
                    f"server {server_us:5.1f} us, client {client_us:5.1f} us"
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500, help="get_many count_max")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=TASKS, help="get -> confirm lanes")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="get-batch-"))
    server = GroupProcess(write_config(directory, args.messages * args.rounds * 2), 1)
    try:
        address = server.start()
        trio.run(measure, args, address, server.process.pid)
    finally:
        server.terminate()
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
