"""A replicated group's WF puts and paced answer latency with and without [group.tls],
interleaved, on this machine.

    python benchmarks/replication_tls.py                 # 2 rounds, 5 s per shape
    python benchmarks/replication_tls.py --rounds 4 --seconds 3

Each round starts a replicated group (etcd, three `mrs serve --instance` processes;
benchmarks/replication.py) once without TLS and once with `[group.tls]` (certificates
from `mrs certs`): then the clients' connections and the replication links are TLS.
It measures durable WF_DQF puts per second with 32 tasks on one connection and the
answer latency of one producer putting 1,000 a second (benchmarks/replication.py
`put_for` and `paced_for`). Read the ratio TLS / plain of the same round: the rates
move with the machine's load between rounds.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import trio
from replication import QUEUES, paced_for, percentile, put_for

from clients import connect, tls_context
from mrs.config.bus import load_config
from mrs.tools.certs import make_certs
from sim.etcd import EtcdServer, InstanceProcess, wait_active, write_replicated_config

TLS_TABLE = (
    '[group.tls]\nca = "certs/ca.pem"\ncert = "certs/group-1.pem"\nkey = "certs/group-1.key"\n'
)
TASKS = 32
RATE_PER_S = 1000.0


def with_tls(config: Path) -> dict:
    """Give the group `[group.tls]` (certificates next to the bus file); connect's options."""
    make_certs(load_config(config), config.parent / "certs")
    text = config.read_text()
    at = text.index("[[group.instance]]")
    config.write_text(text[:at] + TLS_TABLE + "\n" + text[at:])
    return {"tls": tls_context(config.parent / "certs" / "ca.pem")}


def measure(directory: Path, etcd: EtcdServer, tls: bool, seconds: float) -> str:
    config = write_replicated_config(directory, etcd.endpoint, QUEUES)
    options = with_tls(config) if tls else {}
    processes = {name: InstanceProcess(config, name) for name in "abc"}
    try:
        for process in processes.values():
            process.start()
        address = processes[wait_active(processes, 30)].address

        async def shapes() -> tuple[float, list[float]]:
            async with connect(address, None, **options) as client:
                while not all(
                    replica["in_sync"]
                    for replica in (await client.status())["replication"]["replicas"].values()
                ):
                    await trio.sleep(0.1)
            rate, _ = await put_for(address, seconds, TASKS, **options)
            _, latencies = await paced_for(address, seconds, RATE_PER_S, **options)
            return rate, latencies

        rate, latencies = trio.run(shapes)
    finally:
        for process in processes.values():
            process.terminate()
    p50, p99 = (1000 * percentile(latencies, q) for q in (0.5, 0.99))
    name = "tls  " if tls else "plain"
    return f"{name} {rate:8,.0f} puts/s   paced p50 {p50:.2f} p99 {p99:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0, help="per shape")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "etcd").mkdir()
        etcd = EtcdServer(root / "etcd")
        etcd.start()
        try:
            for round_number in range(1, args.rounds + 1):
                for tls in (False, True):
                    line = measure(root / f"r{round_number}{tls}", etcd, tls, args.seconds)
                    print(f"round {round_number}  {line}", flush=True)
        finally:
            etcd.stop()


if __name__ == "__main__":
    main()
