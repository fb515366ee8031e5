"""The client library's CPU per request, in peerbench's shapes, against a real `mrs serve`.

Why: on a put-only load the producer's process, not the server, is the limit (issue 17),
and on a machine shared with other work wall-clock rates are noise. CPU time spent by
this process per request is the figure that survives the load. The shapes are
peerbench's (../shared/peerbench/bench_mrs.py): one connection, `--window` tasks each
doing `await client.put(...)` in a loop (1 KiB bodies, WF_DQF, UMA DLJ); then one
consumer connection, `--gets` tasks each doing `get()` then `confirm(seq)`; then the AK
producer's shape (`--window` lanes each doing an AK_DQF put, then `get()` of one MRS_ACK
from its own queue, as docs/client-library.md writes an AK producer).

Every round puts `--messages` and takes them all back; it prints the client's CPU
microseconds per put and per get+confirm (process_time, all threads), and the wall rate.
`--batch N` puts with `put_many` calls of N items instead (`--window` puts still in
flight). Run it with two interpreters (two checkouts) one round after the other to compare:

    .venv/bin/python benchmarks/client_cpu.py --rounds 3
    ../base/.venv/bin/python benchmarks/client_cpu.py --rounds 3     # the "before"
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from clients import DeliveryMode, MrsTimeout, NoMoreMessages, Psb, PutItem, Uma, connect
from mrs.model import MRS_ACK_TYPE, MRS_CLASS
from mrs.offline.stop_signals import run_stoppable, stop_signals_as_ctrl_c
from mrs.tools.cli_support import OneLineParser, non_negative_int, positive_int
from sim.processes import GroupProcess, write_single_group_config

TARGET = "1.10"
SENDER = "1.100"
QUEUES_TOML = """
[[group.queue]]
id = 10
name = "TARGET"
confirm = "explicit-out-of-order"
unconfirmed_max = 100000
[[group.queue]]
id = 100
name = "SENDER"
"""
SERVER_STOP_S = 30.0
LIMITS = f"dqf_messages_max = 10000000\njournal_bytes_max = {8 << 30}\n"


async def put_phase(address: str, messages: int, window: int, batch: int) -> tuple[float, float]:
    """`messages` puts by `window` tasks on one connection: (CPU s, wall s). With
    `batch`, `window` puts in flight still, as put_many calls of `batch` items."""
    body = b"x" * 1024
    left = [messages]
    async with connect(address, queue=SENDER, program="client_cpu producer") as client:

        async def lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                psb = await client.put(body, TARGET, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
                assert psb.seq > 0, psb

        async def batch_lane() -> None:
            while left[0] > 0:
                count = min(batch, left[0])
                left[0] -= count
                item = PutItem(body, TARGET, delivery=DeliveryMode.WF_DQF, uma=Uma.DLJ)
                for psb in await client.put_many([item] * count):
                    assert isinstance(psb, Psb) and psb.seq > 0, psb

        if batch:
            lane, window = batch_lane, max(1, window // batch)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(window):
                nursery.start_soon(lane)
        return time.process_time() - cpu0, time.perf_counter() - wall0


async def get_phase(address: str, messages: int, gets: int) -> tuple[float, float]:
    """Take `messages` back by `gets` tasks doing get -> confirm: (CPU s, wall s)."""
    done = [0]
    async with connect(address, queue=TARGET, program="client_cpu consumer") as client:

        async def lane(all_done: trio.CancelScope) -> None:
            while True:
                try:
                    message = await client.get(timeout=1.0)
                except (MrsTimeout, NoMoreMessages):
                    continue
                await client.confirm(message.seq)
                done[0] += 1
                if done[0] >= messages:
                    all_done.cancel()

        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(gets):
                nursery.start_soon(lane, nursery.cancel_scope)
        return time.process_time() - cpu0, time.perf_counter() - wall0


async def ak_phase(address: str, messages: int, window: int) -> tuple[float, float]:
    """`messages` AK_DQF puts by `window` lanes, each lane taking one MRS_ACK (any put's)
    after each put: (CPU s, wall s). The AK messages are then taken back (not timed)."""
    body = b"x" * 1024
    left = [messages]
    async with connect(address, queue=SENDER, program="client_cpu ak producer") as client:

        async def lane() -> None:
            while left[0] > 0:
                left[0] -= 1
                await client.put(body, TARGET, delivery=DeliveryMode.AK_DQF, uma=Uma.DLJ)
                ack = await client.get(timeout=60.0)
                assert ack.msg_class == MRS_CLASS and ack.msg_type == MRS_ACK_TYPE, ack

        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(window):
                nursery.start_soon(lane)
        return time.process_time() - cpu0, time.perf_counter() - wall0


def _parser() -> argparse.ArgumentParser:
    """Counts of at least 1: `--messages 0` (or below) waited forever for messages
    that were never put, `--window 0` or `--gets 0` likewise, and `--rounds 0`
    ended in a StatisticsError traceback."""
    parser = OneLineParser(prog="client_cpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=positive_int, default=30000, help="per round")
    parser.add_argument("--window", type=positive_int, default=1000, help="put tasks")
    parser.add_argument("--gets", type=positive_int, default=1000, help="get -> confirm tasks")
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument(
        "--batch",
        type=non_negative_int,
        default=0,
        help="put with put_many calls of this many items",
    )
    parser.add_argument("--label", default="", help="a name for this run's JSON line")
    parser.add_argument(
        "--gc-tuned", action="store_true", help="opt in: gc_tuning.tune_gc_for_throughput()"
    )
    parser.add_argument(
        "--as-replicated",
        action="store_true",
        help="give connect the address twice, as a replicated group's client: its "
        "recoverable puts then carry idempotency keys (clients.resend)",
    )
    return parser


def _rounds(args: argparse.Namespace, address: str) -> dict[str, list[float]]:
    """Every round's CPU per request and wall rates, by figure."""
    figures: dict[str, list[float]] = {
        key: [] for key in ("put_us", "get_us", "put_rate", "get_rate", "ak_us", "ak_rate")
    }
    for _ in range(args.rounds):
        cpu_s, wall_s = run_stoppable(put_phase, address, args.messages, args.window, args.batch)
        figures["put_us"].append(cpu_s / args.messages * 1e6)
        figures["put_rate"].append(args.messages / wall_s)
        cpu_s, wall_s = run_stoppable(get_phase, address, args.messages, args.gets)
        figures["get_us"].append(cpu_s / args.messages * 1e6)
        figures["get_rate"].append(args.messages / wall_s)
        cpu_s, wall_s = run_stoppable(ak_phase, address, args.messages, args.window)
        figures["ak_us"].append(cpu_s / args.messages * 1e6)
        figures["ak_rate"].append(args.messages / wall_s)
        run_stoppable(get_phase, address, args.messages, args.gets)  # empty the queue again
    return figures


def main() -> int:
    """The server and its temporary directory go whatever happens: the directory (about
    50 MB) was left in /tmp by every run, and a SIGTERM (`timeout`, a CI job cancelled)
    also left the `mrs serve` running. Ctrl-C, SIGTERM and SIGHUP stop the run in one
    line, exit 128 + the signal."""
    args = _parser().parse_args()
    directory = Path(tempfile.mkdtemp(prefix="mrs-client-cpu-"))
    server = GroupProcess(
        write_single_group_config(directory, queues=QUEUES_TOML, limits=LIMITS), 1
    )
    with stop_signals_as_ctrl_c() as caught:
        try:
            address = server.start()
            if args.as_replicated:
                address = f"{address},{address}"
            if args.gc_tuned:
                from mrs.server.gc_tuning import tune_gc_for_throughput

                tune_gc_for_throughput()
            figures = _rounds(args, address)
        except KeyboardInterrupt:
            signum = caught[0] if caught else signal.SIGINT
            print(f"client_cpu: interrupted by {signum.name}; server stopped", file=sys.stderr)
            return 128 + int(signum)
        finally:
            try:
                server.terminate(SERVER_STOP_S)
            except subprocess.TimeoutExpired:
                server.kill()
            shutil.rmtree(directory, ignore_errors=True)
    _print(args.label, figures)
    return 0


def _print(label: str, figures: dict[str, list[float]]) -> None:
    print(
        json.dumps(
            {
                "label": label,
                "put_cpu_us_median": round(statistics.median(figures["put_us"]), 1),
                "get_confirm_cpu_us_median": round(statistics.median(figures["get_us"]), 1),
                "ak_put_with_mrs_ack_cpu_us_median": round(statistics.median(figures["ak_us"]), 1),
                "put_cpu_us": [round(v, 1) for v in figures["put_us"]],
                "get_confirm_cpu_us": [round(v, 1) for v in figures["get_us"]],
                "puts_per_s": [round(v) for v in figures["put_rate"]],
                "get_confirms_per_s": [round(v) for v in figures["get_rate"]],
                "ak_puts_per_s": [round(v) for v in figures["ak_rate"]],
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
