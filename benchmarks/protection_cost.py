"""What end-to-end message protection costs per message: seal and open time and size.

    python benchmarks/protection_cost.py [--body-bytes 1024] [--messages 2000]
    python benchmarks/protection_cost.py --end-to-end [--rounds 3]

Sealing and opening run in the applications (clients/protection.py), never in the
group, so this is CPU the putting and the getting process spend per message.
--end-to-end starts a real group (`mrs serve`) and puts --messages durable (WF_DQF)
messages from 32 tasks sharing one connection, unprotected / integrity / privacy in
interleaved rounds, and prints puts per second of each as a ratio of unprotected.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from mrs.protection.envelope import Quality, open_envelope, seal
from mrs.protection.keys import Identity, Keyring, load_identity, write_identity
from mrs.tools.cli_support import OneLineParser, positive_int

TASKS = 32
QUEUES = """
[[group.queue]]
id = 10
name = "PLAIN"
[[group.queue]]
id = 11
name = "SIGNED"
[[group.queue]]
id = 12
name = "SEALED"
[[group.queue]]
id = 13
name = "SENDER"
"""
POLICIES = """keys_dir = "keys"
[[policy]]
queue = "1.11"
protection = "integrity"
[[policy]]
queue = "1.12"
protection = "privacy"
recipients = ["BILLING"]
"""


async def _put_rate(address: str, protection, target: str, body: bytes, messages: int) -> float:
    import trio

    from clients import DeliveryMode, connect

    async with connect(address, "SENDER", protection=protection) as client:

        async def worker(count: int) -> None:
            for _ in range(count):
                await client.put(body, target=target, delivery=DeliveryMode.WF_DQF)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(TASKS):
                nursery.start_soon(worker, messages // TASKS)
        return (messages // TASKS * TASKS) / (time.perf_counter() - started)


def end_to_end(args: argparse.Namespace) -> None:
    import trio

    from clients import Protection
    from sim.processes import GroupProcess, write_single_group_config

    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for name in ("SHOP", "BILLING"):
            write_identity(Identity.generate(name), directory / "keys")
        (directory / "protection.toml").write_text(POLICIES)
        config = write_single_group_config(
            directory, queues=QUEUES, limits="dqf_messages_max = 10000000"
        )
        group = GroupProcess(config, 1)
        address = group.start()
        shop = Protection.load(directory / "protection.toml", directory / "keys" / "SHOP.key")
        body = b"x" * args.body_bytes
        rates: dict[str, list[float]] = {"unprotected": [], "integrity": [], "privacy": []}
        try:
            for _ in range(args.rounds):
                for kind, target in (
                    ("unprotected", "1.10"),
                    ("integrity", "1.11"),
                    ("privacy", "1.12"),
                ):
                    rate = trio.run(_put_rate, address, shop, target, body, args.messages)
                    rates[kind].append(rate)
        finally:
            group.terminate()
        base = sum(rates["unprotected"]) / len(rates["unprotected"])
        for kind, values in rates.items():
            mean = sum(values) / len(values)
            print(f"{kind:11}  {mean:7.0f} durable puts/s  ({mean / base:.2f} of unprotected)")


def main() -> None:
    parser = OneLineParser(prog="protection_cost.py", description=__doc__.splitlines()[0])
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--messages", type=positive_int, default=2000)
    parser.add_argument("--end-to-end", action="store_true", help="through a real group")
    parser.add_argument(
        "--rounds", type=positive_int, default=3, help="interleaved rounds (--end-to-end)"
    )
    args = parser.parse_args()
    if args.end_to_end:
        end_to_end(args)
        return
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for name in ("SHOP", "BILLING"):
            write_identity(Identity.generate(name), directory)
        shop, billing = (load_identity(directory / f"{n}.key") for n in ("SHOP", "BILLING"))
        keyring = Keyring(directory)
        body = b"x" * args.body_bytes
        for quality in (Quality.INTEGRITY, Quality.PRIVACY):
            started = time.perf_counter()
            for _ in range(args.messages):
                sealed = seal(shop, quality, body, [keyring.get("BILLING")])
            sealed_s = time.perf_counter() - started
            started = time.perf_counter()
            for _ in range(args.messages):
                open_envelope(sealed, keyring, billing)
            opened_s = time.perf_counter() - started
            print(
                f"{quality.value:9}  seal {sealed_s / args.messages * 1e6:5.0f} us  "
                f"open {opened_s / args.messages * 1e6:5.0f} us  "
                f"body {args.body_bytes} -> {len(sealed)} bytes"
            )


if __name__ == "__main__":
    main()
