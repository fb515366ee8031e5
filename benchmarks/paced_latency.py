"""Paced puts against a real `mrs serve`: where a put's latency and its CPU go.

Why: at 1,000 puts/s from one producer MRS answered in 2.6 ms (p50) against
RabbitMQ quorum's 0.98 ms. This puts at a fixed rate, one put at a time on one
connection, and prints for each round the put latency (p50/p99) beside:

- the server's own account of its commits: how long the oldest write of a commit
  waited for the commit to start (`commit_wait_ms_mean`) and how long the commit
  took (`commit_time_ms_mean`: the commit log's write and fdatasync, then LMDB's
  page writes, journals.store);
- what one put cost: the server's CPU (user and system, from /proc), this client's
  CPU, and the bytes the server sent to the disk (`write_bytes` of /proc/PID/io,
  LMDB's pages and the log's as the page cache hands them over).

`--delivery WF_MEM` puts the same bodies with nothing to journal: its latency is the
round trip of a request through the client library and the server, so WF_DQF minus
WF_MEM is what making the put durable costs.

    .venv/bin/python benchmarks/paced_latency.py                      # inline commits
    .venv/bin/python benchmarks/paced_latency.py --rounds 3 --delivery WF_MEM
    .venv/bin/python benchmarks/paced_latency.py --writer thread      # the writer thread
    .venv/bin/python benchmarks/paced_latency.py --rate 200 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import trio
from procstat import process_cpu_s, process_written_bytes  # the sibling module

from clients import DeliveryMode, Uma, connect
from sim.processes import GroupProcess, write_single_group_config

QUEUES_TOML = """
[[group.queue]]
id = 10
name = "TARGET"
[[group.queue]]
id = 100
name = "SENDER"
"""
BODY = b"x" * 1024


async def paced_puts(
    address: str, rate_per_s: float, seconds: float, delivery: DeliveryMode = DeliveryMode.WF_DQF
) -> list[float]:
    """One connection, one put at a time, started every 1/rate s (or as soon as the
    previous one is answered, if it took longer), `rate x seconds` puts; returns each
    put's latency in s."""
    latencies: list[float] = []
    uma = Uma.DLJ if delivery.recoverable else Uma.DISC
    async with connect(address, queue="1.100", program="paced latency") as client:
        for _ in range(50):  # warm up: connection, journal pages, code paths
            await client.put(BODY, "1.10", delivery=delivery, uma=uma)
        interval_s = 1.0 / rate_per_s
        next_s = time.perf_counter()
        for _ in range(int(rate_per_s * seconds)):
            await trio.sleep(max(0.0, next_s - time.perf_counter()))
            put_s = time.perf_counter()
            await client.put(BODY, "1.10", delivery=delivery, uma=uma)
            latencies.append(time.perf_counter() - put_s)
            next_s += interval_s
    return latencies


@dataclass
class Cost:
    """What the puts of one round cost, per put."""

    server_cpu_us: float
    client_cpu_us: float
    disk_kib: float


def measured_round(
    server_pid: int, address: str, rate_per_s: float, seconds: float, delivery: DeliveryMode
) -> tuple[list[float], Cost]:
    """One round of paced puts, with the server's and this process's CPU and the
    server's disk bytes read around it (the connection's set-up and its 50 warm-up
    puts count in: a small share beside thousands of puts)."""
    server_cpu_s, written_bytes = process_cpu_s(server_pid), process_written_bytes(server_pid)
    client_cpu_s = sum(os.times()[:2])
    latencies = trio.run(paced_puts, address, rate_per_s, seconds, delivery)
    puts = len(latencies)
    cost = Cost(
        1e6 * (process_cpu_s(server_pid) - server_cpu_s) / puts,
        1e6 * (sum(os.times()[:2]) - client_cpu_s) / puts,
        (process_written_bytes(server_pid) - written_bytes) / puts / 1024,
    )
    return latencies, cost


async def writer_stats(address: str) -> dict:
    async with connect(address, queue=None, program="paced latency status") as client:
        return (await client.status())["writer"]


def percentile_ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="puts per second")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=1, help="rounds on the same server")
    parser.add_argument("--writer", choices=("inline", "thread"), default="inline")
    parser.add_argument("--delivery", choices=("WF_DQF", "WF_MEM"), default="WF_DQF")
    args = parser.parse_args()
    delivery = DeliveryMode[args.delivery]
    directory = Path(tempfile.mkdtemp(prefix="mrs-paced-", dir=Path.cwd()))
    config = write_single_group_config(
        directory, queues=QUEUES_TOML, limits="dqf_messages_max = 10000000"
    )
    server = GroupProcess(config, 1, env={"MRS_WRITER": args.writer})
    address = server.start()
    assert server.process is not None
    try:
        for _ in range(args.rounds):
            started_s = time.perf_counter()
            latencies, cost = measured_round(
                server.process.pid, address, args.rate, args.seconds, delivery
            )
            achieved_per_s = len(latencies) / (time.perf_counter() - started_s)
            stats = trio.run(writer_stats, address)
            print(
                f"writer {args.writer}, {len(latencies)} {args.delivery} puts paced at "
                f"{args.rate:g}/s ({achieved_per_s:.0f}/s reached): "
                f"p50 {percentile_ms(latencies, 0.5):.2f} ms, "
                f"p99 {percentile_ms(latencies, 0.99):.2f} ms; "
                f"server: commit_wait_ms_mean {stats['commit_wait_ms_mean']}, "
                f"commit_time_ms_mean {stats['commit_time_ms_mean']}, "
                f"batches_per_commit {stats['batches_per_commit']}; per put: server CPU "
                f"{cost.server_cpu_us:.0f} µs, client CPU {cost.client_cpu_us:.0f} µs, "
                f"server disk writes {cost.disk_kib:.1f} KiB"
            )
    finally:
        server.terminate()
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
