"""Connection churn against a real `mrs serve`: does its anonymous RSS keep growing?

Why: `mrs serve` freezes its start-up heap and raises the collector's thresholds
(mrs/server/gc_tuning.py), so full collections become rare; reference cycles that die old
(a session, a cancelled scope) would then wait long to be freed. This opens and
closes connections, each with a put and a get, and prints the server's RssAnon after
every round, so a setting can be compared with CPython's own (`off`).

    .venv/bin/python benchmarks/gc_churn.py            # the tuned default
    .venv/bin/python benchmarks/gc_churn.py off        # CPython's settings
    .venv/bin/python benchmarks/gc_churn.py 10000,10,10 --rounds 8 --connections 500
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import trio

from clients import connect
from sim.processes import GroupProcess, write_single_group_config

QUEUES_TOML = '\n[[group.queue]]\nid = 1\nname = "Q"\n'


def rss_anon_kb(pid: int) -> int:
    """The process's anonymous resident memory (Linux /proc), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise RuntimeError(f"no RssAnon for pid {pid}")


async def churn(address: str, connections: int) -> None:
    """`connections` connections in turn, each attaching, putting and getting once."""
    for _ in range(connections):
        async with connect(address, queue="1.1", program="gc churn") as client:
            await client.put(b"x" * 100, "1.1")
            await client.get(timeout=5)  # left unconfirmed: the next attach redelivers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("thresholds", nargs="?", default="", help="MRS_GC_THRESHOLDS value")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=300, help="per round")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="mrs-gc-churn-"))
    config = write_single_group_config(directory, queues=QUEUES_TOML)
    env = {"MRS_GC_THRESHOLDS": args.thresholds} if args.thresholds else {}
    server = GroupProcess(config, 1, env=env)
    address = server.start()
    try:
        marks = []
        for _ in range(args.rounds):
            trio.run(churn, address, args.connections)
            marks.append(rss_anon_kb(server.process.pid))
        label = args.thresholds or "default"
        print(f"{label}: server RssAnon KiB after each {args.connections} connections: {marks}")
    finally:
        server.terminate()


if __name__ == "__main__":
    main()
