"""What TLS and authentication cost a producer: durable puts/s and connect time, as
a ratio of everything off, measured in one run.

    python benchmarks/security_cost.py [--messages 4000] [--rounds 3] [--connections 4]

Four one-group buses run side by side with the same config: security off; TLS
(`[group.tls]` made by `mrs certs`, client certificates required); `[auth]` (SCRAM,
a principal granted its queues); and auth with TLS. Each round puts the same
durable WF_DQF load into each (interleaved, so machine noise hits all alike):
`--connections` clients, each with 32 tasks sharing its connection; and times 20
connect+attach+close cycles (a TLS handshake and/or a SCRAM exchange, whose PBKDF2
the client pays, each). Prints the medians and ratios.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from clients import ClientCredentials, DeliveryMode, connect, tls_context
from sim.processes import GroupProcess, write_single_group_config

TASKS_PER_CONNECTION = 32
CONNECTS = 20
KINDS = ("off", "tls", "auth", "auth+tls")
PASSWORD = "bench-password-0123456789"
PRODUCERS_MAX = 64
QUEUES = '[[group.queue]]\nid = 10\nname = "SINK"\n' + "".join(
    f'[[group.queue]]\nid = {100 + i}\nname = "P{i}"\n' for i in range(PRODUCERS_MAX)
)
"""SINK takes the puts; each producer connection attaches to its own P<i>."""


def start_group(directory: Path, kind: str) -> tuple[GroupProcess, dict]:
    config = write_single_group_config(
        directory, queues=QUEUES, limits="dqf_messages_max = 10000000"
    )
    options: dict = {}
    if "auth" in kind:
        config.write_text(
            '[auth]\ncredentials = "creds.toml"\nlink_secrets = "secrets"\n' + config.read_text()
        )
        (directory / "bench.pw").write_text(PASSWORD)
        subprocess.run(
            [sys.executable, "-m", "mrs", "creds", "add", "bench", "--config", str(config)]
            + ["--password-file", str(directory / "bench.pw"), "--attach", "1.*", "--put", "1.*"],
            check=True,
            capture_output=True,
        )
        options["credentials"] = ClientCredentials("bench", PASSWORD)
    if "tls" in kind:
        certs = directory / "certs"
        subprocess.run(
            [sys.executable, "-m", "mrs", "certs", "--config", str(config), "--out", str(certs)]
            + ["--apply"],
            check=True,
            capture_output=True,
        )
        options["tls"] = tls_context(certs / "ca.pem", certs / "client.pem", certs / "client.key")
    group = GroupProcess(config, 1)
    group.start()
    return group, options


async def put_rate(address: str, options: dict, messages: int, connections: int) -> float:
    per_task = messages // (connections * TASKS_PER_CONNECTION)
    body = b"x" * 1024

    async def producer(index: int) -> None:
        queue = f"1.{100 + index}"
        async with connect(address, queue, **options) as client, trio.open_nursery() as nursery:
            for _ in range(TASKS_PER_CONNECTION):
                nursery.start_soon(worker, client)

    async def worker(client) -> None:
        for _ in range(per_task):
            await client.put(body, "1.10", delivery=DeliveryMode.WF_DQF)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(connections):
            nursery.start_soon(producer, index)
    return per_task * TASKS_PER_CONNECTION * connections / (time.perf_counter() - started)


async def connect_ms(address: str, options: dict) -> float:
    started = time.perf_counter()
    for _ in range(CONNECTS):
        async with connect(address, "1.100", **options):
            pass
    return (time.perf_counter() - started) / CONNECTS * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    if not 1 <= args.connections <= PRODUCERS_MAX:
        parser.error(f"--connections must be 1..{PRODUCERS_MAX}")
    with tempfile.TemporaryDirectory() as scratch:
        groups = {kind: start_group(Path(scratch) / kind.replace("+", "-"), kind) for kind in KINDS}
        rates: dict[str, list[float]] = {kind: [] for kind in groups}
        connects: dict[str, list[float]] = {kind: [] for kind in groups}
        try:
            for _ in range(args.rounds):
                for kind, (group, options) in groups.items():
                    rate = trio.run(
                        put_rate, group.address, options, args.messages, args.connections
                    )
                    rates[kind].append(rate)
                    connects[kind].append(trio.run(connect_ms, group.address, options))
        finally:
            for group, _ in groups.values():
                group.terminate()
    base_rate = statistics.median(rates["off"])
    base_connect = statistics.median(connects["off"])
    for kind in groups:
        rate, ms = statistics.median(rates[kind]), statistics.median(connects[kind])
        print(
            f"{kind:8}  {rate:7.0f} durable puts/s ({rate / base_rate:.2f} of off)   "
            f"connect+attach {ms:6.2f} ms ({ms / base_connect:.2f}x)"
        )


if __name__ == "__main__":
    main()
