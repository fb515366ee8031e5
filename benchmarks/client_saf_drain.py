"""Drain rate of a client-side SAF journal: journal N messages while the server is
down, start the server, time the drain to LINK_UP.

    python benchmarks/client_saf_drain.py                 # 100,000 messages, 100 bytes
    python benchmarks/client_saf_drain.py --messages 20000 --body-bytes 1024

Prints the journaling rate (puts answered JOURNAL_ON per second, group-committed
with fsync) and the drain rate (records stored by the server and deleted from the
client journal per second, from the server's READY to LINK_UP). The scratch
directory (default ./.bench-client-saf, on the disk to measure) is removed afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients import DeliveryMode, Reconnect, Status, connect  # noqa: E402
from sim.ports import free_port  # noqa: E402
from sim.processes import GroupProcess, write_single_group_config  # noqa: E402

QUEUES = """
[[group.queue]]
id = 10
name = "IN"
confirm = "explicit-out-of-order"
[[group.queue]]
id = 11
name = "SENDER"
"""
PUTS_IN_FLIGHT = 512


async def journal_messages(client, count: int, body: bytes) -> float:
    """Put `count` messages PUTS_IN_FLIGHT at a time; returns seconds taken."""
    started_s = time.perf_counter()
    sent = 0
    while sent < count:
        batch = min(PUTS_IN_FLIGHT, count - sent)
        async with trio.open_nursery() as nursery:
            for _ in range(batch):
                nursery.start_soon(_put, client, body)
        sent += batch
    return time.perf_counter() - started_s


async def _put(client, body: bytes) -> None:
    psb = await client.put(body, "1.10", delivery=DeliveryMode.NN_DQF)
    assert psb.status == Status.JOURNAL_ON, psb


async def run(args: argparse.Namespace, scratch: Path) -> None:
    port = free_port()
    config = write_single_group_config(
        scratch / "bus",
        queues=QUEUES,
        limits=f"dqf_messages_max = {args.messages + 1000}\njournal_bytes_max = 8589934592",
    )
    config.write_text(config.read_text().replace("127.0.0.1:0", f"127.0.0.1:{port}"))
    server = GroupProcess(config, 1)
    address = f"127.0.0.1:{port}"
    body = b"x" * args.body_bytes
    fast = Reconnect(delay_s_initial=0.01, delay_s_max=0.05)
    try:
        async with connect(
            address,
            "SENDER",
            saf_journal=scratch / "client.saf",
            saf_bytes_max=8 << 30,
            reconnect=fast,
            connect_timeout_s=1,
        ) as client:
            journal_s = await journal_messages(client, args.messages, body)
            print(
                f"journaled {args.messages} messages of {args.body_bytes} bytes in "
                f"{journal_s:.2f} s: {args.messages / journal_s:,.0f} puts/s (JOURNAL_ON)"
            )
            await trio.to_thread.run_sync(server.start)
            started_s = time.perf_counter()
            await client.wait_journal_status(Status.LINK_UP)
            drain_s = time.perf_counter() - started_s
            assert client.journal_backlog == 0
        print(
            f"drained {args.messages} messages in {drain_s:.2f} s: "
            f"{args.messages / drain_s:,.0f} messages/s (server READY -> LINK_UP)"
        )
    finally:
        server.terminate()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--scratch", type=Path, default=Path(".bench-client-saf"))
    args = parser.parse_args()
    scratch = args.scratch / f"run-{time.time_ns()}"
    scratch.mkdir(parents=True)
    try:
        trio.run(run, args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
