"""Restart time and memory of a server holding a large unconfirmed DQF backlog,
against an empty server, and after the backlog drains.

Why: a DQF of a million messages must not keep a million Python objects in the
server (issue 14), and a server restarting with one must serve within 2 s and stay
as small as an empty one (issue 17). This starts a real `mrs serve` on an empty
data directory and reads its memory, fills the DQF with N unconfirmed messages of
B bytes (written straight into the journal, as a long outage of the receivers
would leave it), starts the server again `--restarts` times (time from spawn to
its READY line) and reads its memory, gets and confirms three messages to show
they are all there, then (unless --no-drain) gets and confirms all the others
with 32 concurrent gets on one connection, sampling memory every second, and
reads its memory once they are gone.

    .venv/bin/python benchmarks/dqf_memory.py                     # 1,000,000 x 1 KiB
    .venv/bin/python benchmarks/dqf_memory.py --messages 200000   # quicker
    .venv/bin/python benchmarks/dqf_memory.py --code /path/to/old/tree   # compare

Figures from /proc/PID/status: VmRSS (everything resident), RssAnon (the
process's own memory: Python objects) and RssFile (pages of the LMDB file mapped
in: the kernel's page cache, shared and reclaimable, counted for the server while
its map holds them). The servers run with compiled bytecode cached (in the scratch
directory: PYTHONPYCACHEPREFIX), as an installed server has; the first, empty
start fills that cache. Not a test: it takes minutes and 1.5 GB of disk per
million messages.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from clients import NoMoreMessages, connect  # noqa: E402
from journals import Journal, JournalStore, Record, WriteBatch, queue_key  # noqa: E402
from mrs.model import DeliveryMode  # noqa: E402

QUEUE_ID = 10
BATCH_MESSAGES = 20_000
READY_TIMEOUT_S = 1800.0
DRAIN_GETS = 32
"""Gets in flight at once while draining (one connection; out-of-order confirms)."""
FIGURES = ("VmRSS", "RssAnon", "RssFile")


def write_config(directory: Path, messages: int, body_bytes: int) -> Path:
    journal_bytes = messages * (body_bytes + 2048) + (256 << 20)
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
        [[group]]
        id = 1
        name = "MEM"
        listen = "127.0.0.1:0"
        data_dir = "g1"
        [group.limits]
        dqf_messages_max = {messages + 1000}
        journal_bytes_max = {journal_bytes}
        [[group.queue]]
        id = {QUEUE_ID}
        name = "IN"
        confirm = "explicit-out-of-order"
        """)
    )
    return path


def start(config: Path, code: Path | None) -> tuple[subprocess.Popen, str, float, float]:
    """Start `mrs serve`; return it, its address, how long it took to be ready and the
    CPU seconds it (and its journal check child) spent until then."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(config.parent / "pycache")
    started_s = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "mrs", "serve", "--config", str(config), "--group", "1"],
        stdout=subprocess.PIPE,
        stderr=open(config.parent / "server.log", "ab"),  # noqa: SIM115 - the child's
        env=env,
        cwd=code or ROOT,
    )
    readable, _, _ = select.select([process.stdout], [], [], READY_TIMEOUT_S)
    line = process.stdout.readline().decode().strip() if readable else ""
    if not line.startswith("READY "):
        process.kill()
        raise SystemExit(f"server did not start: {line!r}; see {config.parent / 'server.log'}")
    return process, line.split(" ", 1)[1], time.monotonic() - started_s, cpu_s(process.pid)


def cpu_s(pid: int) -> float:
    """User + system CPU of a process and of its children it has waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=600)


def memory_kib(pid: int) -> dict[str, int]:
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in FIGURES:
            figures[name] = int(value.split()[0])
    return figures


def settled_memory(pid: int) -> dict[str, int]:
    """Memory once the server is idle (a second after ready: start-up work done)."""
    time.sleep(1.0)
    return memory_kib(pid)


def fill(data_dir: Path, messages: int, body_bytes: int, journal_bytes: int) -> None:
    """Write N unconfirmed WF_DQF messages for queue IN, as puts would have."""
    store = JournalStore(data_dir / "journals", journal_bytes)
    body = b"x" * body_bytes
    now_ns = time.time_ns()
    first_seq = 1 << 40  # far from the seqs the server itself hands out
    for start_index in range(0, messages, BATCH_MESSAGES):
        batch = WriteBatch.empty()
        for index in range(start_index, min(start_index + BATCH_MESSAGES, messages)):
            seq = first_seq + index
            record = Record(
                seq=seq,
                target_group=1,
                target_queue=QUEUE_ID,
                source_group=1,
                source_queue=QUEUE_ID,
                body=body,
                delivery=int(DeliveryMode.WF_DQF),
                put_time_ns=now_ns,
                written_time_ns=now_ns,
            )
            batch.put_record(Journal.DQF, queue_key(QUEUE_ID, seq), record)
        store.commit_now(batch)
    store.close()


async def check_backlog(address: str, expected: int) -> int:
    """Get and confirm three messages; return the queue's pending count after."""
    async with connect(address, "IN") as client:
        for _ in range(3):
            message = await client.get(timeout=10)
            await client.confirm(message.seq)
        status = await client.status()
    pending = status["queues"][f"1.{QUEUE_ID}"]["pending"]
    if pending != expected - 3:
        raise SystemExit(f"expected {expected - 3} messages pending, found {pending}")
    return pending


async def drain(address: str, expected: int, pid: int) -> tuple[int, float, dict[str, int]]:
    """Get and confirm every message left; (how many, seconds, peak memory on the way)."""
    peak = memory_kib(pid)
    drained = 0
    started_s = time.monotonic()

    async def getter(client) -> None:
        nonlocal drained
        while True:
            try:
                message = await client.get(timeout=0)
            except NoMoreMessages:
                return
            await client.confirm(message.seq)
            drained += 1

    async def sample() -> None:
        while True:
            await trio.sleep(1.0)
            for name, value in memory_kib(pid).items():
                peak[name] = max(peak[name], value)

    async with connect(address, "IN") as client:
        async with trio.open_nursery() as outer:
            outer.start_soon(sample)
            async with trio.open_nursery() as nursery:
                for _ in range(DRAIN_GETS):
                    nursery.start_soon(getter, client)
            outer.cancel_scope.cancel()
        status = await client.status()
    pending = status["queues"][f"1.{QUEUE_ID}"]["pending"]
    if drained != expected or pending != 0:
        raise SystemExit(f"drained {drained:,} of {expected:,}; {pending:,} still pending")
    return drained, time.monotonic() - started_s, peak


def run(args: argparse.Namespace, directory: Path) -> dict:
    """Every phase against one scratch directory; the figures."""
    config = write_config(directory, args.messages, args.body_bytes)
    journal_bytes = args.messages * (args.body_bytes + 2048) + (256 << 20)
    figures: dict = {}
    for _ in range(2):  # the first start fills the bytecode cache
        process, _, figures["empty_ready_s"], figures["empty_cpu_s"] = start(config, args.code)
        figures["empty"] = settled_memory(process.pid)
        stop(process)
    filled_s = time.monotonic()
    fill(directory / "g1", args.messages, args.body_bytes, journal_bytes)
    figures["fill_s"] = time.monotonic() - filled_s
    figures["ready_s"], figures["cpu_s"] = [], []
    for restart in range(args.restarts):
        process, address, ready_s, ready_cpu_s = start(config, args.code)
        figures["ready_s"].append(ready_s)
        figures["cpu_s"].append(ready_cpu_s)
        if restart < args.restarts - 1:
            stop(process)
    try:
        figures["holding"] = settled_memory(process.pid)
        figures["pending"] = trio.run(check_backlog, address, args.messages)
        if args.drain:
            drained, drain_s, figures["peak"] = trio.run(
                drain, address, figures["pending"], process.pid
            )
            figures["drain"] = (drained, drain_s)
            figures["drained"] = settled_memory(process.pid)
    finally:
        stop(process)
    return figures


def report(args: argparse.Namespace, figures: dict) -> None:
    ready = ", ".join(f"{seconds:.2f}" for seconds in figures["ready_s"])
    cpu = ", ".join(f"{seconds:.2f}" for seconds in figures["cpu_s"])
    print(f"DQF memory: {args.messages:,} unconfirmed messages of {args.body_bytes} bytes")
    print(f"  journal written directly in {figures['fill_s']:.1f} s")
    print(f"  server ready in {ready} s, CPU {cpu} s")
    print(
        f"  (empty server: ready in {figures['empty_ready_s']:.2f} s, "
        f"CPU {figures['empty_cpu_s']:.2f} s)"
    )
    print(f"  after 3 get+confirm: {figures['pending']:,} pending")
    columns = [("empty", "empty"), ("holding", "holding")]
    if "drain" in figures:
        drained, drain_s = figures["drain"]
        print(f"  drained {drained:,} by get+confirm in {drain_s:.1f} s")
        columns += [("peak", "drain peak"), ("drained", "drained")]
    print(f"  {'KiB':<8}" + "".join(f"{title:>12}" for _, title in columns) + "  ratios to empty")
    empty = figures["empty"]
    for name in FIGURES:
        values = [figures[key][name] for key, _ in columns]
        ratios = [value / empty[name] if empty[name] else float("nan") for value in values[1:]]
        print(
            f"  {name:<8}"
            + "".join(f"{value:>12,}" for value in values)
            + "  "
            + " ".join(f"{ratio:.2f}" for ratio in ratios)
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--restarts", type=int, default=3, help="starts timed with the backlog")
    parser.add_argument("--no-drain", dest="drain", action="store_false")
    parser.add_argument("--code", type=Path, default=None, help="run the server from this tree")
    parser.add_argument("--scratch", type=Path, default=None, help="work here (default: /tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.scratch, prefix="dqf-memory-") as scratch:
        figures = run(args, Path(scratch))
    report(args, figures)


if __name__ == "__main__":
    main()
