"""Paced WF_DQF puts against a real `mrs serve`: where a put's latency goes.

Why: at 1,000 puts/s from one producer MRS answered in 2.6 ms (p50) against
RabbitMQ quorum's 0.98 ms. This puts at a fixed rate, one put at a time on each of
`--producers` connections, and prints the put latency (p50/p99) beside the server's
own account of its commits: how long the oldest write of a commit waited for the
commit to start (`commit_wait_ms_mean`) and how long the synced commit took
(`commit_time_ms_mean`: LMDB's fdatasync of the data pages plus the synchronous
write of its meta page). Latency minus those two is the network and the code.

    .venv/bin/python benchmarks/paced_latency.py                      # inline commits
    .venv/bin/python benchmarks/paced_latency.py --writer thread      # the writer thread
    .venv/bin/python benchmarks/paced_latency.py --rate 200 --seconds 10
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import trio

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


async def paced_puts(address: str, rate_per_s: float, seconds: float) -> list[float]:
    """One connection, one put at a time, started every 1/rate s (or as soon as the
    previous one is answered, if it took longer), `rate x seconds` puts; returns each
    put's latency in s."""
    latencies: list[float] = []
    async with connect(address, queue="1.100", program="paced latency") as client:
        for _ in range(50):  # warm up: connection, journal pages, code paths
            await client.put(BODY, "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
        interval_s = 1.0 / rate_per_s
        next_s = time.perf_counter()
        for _ in range(int(rate_per_s * seconds)):
            await trio.sleep(max(0.0, next_s - time.perf_counter()))
            put_s = time.perf_counter()
            await client.put(BODY, "1.10", delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
            latencies.append(time.perf_counter() - put_s)
            next_s += interval_s
    return latencies


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
    parser.add_argument("--writer", choices=("inline", "thread"), default="inline")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="mrs-paced-", dir=Path.cwd()))
    config = write_single_group_config(
        directory, queues=QUEUES_TOML, limits="dqf_messages_max = 10000000"
    )
    server = GroupProcess(config, 1, env={"MRS_WRITER": args.writer})
    address = server.start()
    try:
        started_s = time.perf_counter()
        latencies = trio.run(paced_puts, address, args.rate, args.seconds)
        achieved_per_s = len(latencies) / (time.perf_counter() - started_s)
        stats = trio.run(writer_stats, address)
    finally:
        server.terminate()
        shutil.rmtree(directory, ignore_errors=True)
    print(
        f"writer {args.writer}, {len(latencies)} puts paced at {args.rate:g}/s "
        f"({achieved_per_s:.0f}/s reached): "
        f"p50 {percentile_ms(latencies, 0.5):.2f} ms, p99 {percentile_ms(latencies, 0.99):.2f} ms; "
        f"server: commit_wait_ms_mean {stats['commit_wait_ms_mean']}, "
        f"commit_time_ms_mean {stats['commit_time_ms_mean']}, "
        f"batches_per_commit {stats['batches_per_commit']}"
    )


if __name__ == "__main__":
    main()
