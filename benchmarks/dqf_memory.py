"""Memory of a server holding a large unconfirmed DQF backlog, against an empty server.

Why: a DQF of a million messages must not keep a million Python objects in the
server (issue 14). This starts a real `mrs serve` on an empty data directory and
reads its memory, fills the DQF with N unconfirmed messages of B bytes (written
straight into the journal, as a long outage of the receivers would leave it),
starts the server again — it recovers every one — and reads its memory again. It
then gets and confirms a few messages to show they are all still there.

    .venv/bin/python benchmarks/dqf_memory.py                     # 1,000,000 x 1 KiB
    .venv/bin/python benchmarks/dqf_memory.py --messages 200000   # quicker
    .venv/bin/python benchmarks/dqf_memory.py --code /path/to/old/tree   # compare

Figures from /proc/PID/status: VmRSS (everything resident), RssAnon (the
process's own memory: Python objects) and RssFile (pages of the LMDB file mapped
in; the kernel's page cache, shared and reclaimable, which recovery touches when
it reads every record once). Not a test: it takes a minute or more and 1.5 GB of
disk per million messages.
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

from clients import connect  # noqa: E402
from journals import Journal, JournalStore, Record, WriteBatch, queue_key  # noqa: E402
from mrs.model import DeliveryMode  # noqa: E402

QUEUE_ID = 10
BATCH_MESSAGES = 20_000
READY_TIMEOUT_S = 1800.0


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
        """)
    )
    return path


def start(config: Path, code: Path | None) -> tuple[subprocess.Popen, str, float]:
    """Start `mrs serve`; return it, its address and how long it took to be ready."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
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
    return process, line.split(" ", 1)[1], time.monotonic() - started_s


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=600)


def memory_kib(pid: int) -> dict[str, int]:
    figures = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body-bytes", type=int, default=1024)
    parser.add_argument("--code", type=Path, default=None, help="run the server from this tree")
    parser.add_argument("--scratch", type=Path, default=None, help="work here (default: /tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.scratch, prefix="dqf-memory-") as scratch:
        directory = Path(scratch)
        config = write_config(directory, args.messages, args.body_bytes)
        journal_bytes = args.messages * (args.body_bytes + 2048) + (256 << 20)
        process, _, empty_ready_s = start(config, args.code)
        empty = settled_memory(process.pid)
        stop(process)
        filled_s = time.monotonic()
        fill(directory / "g1", args.messages, args.body_bytes, journal_bytes)
        filled_s = time.monotonic() - filled_s
        process, address, full_ready_s = start(config, args.code)
        try:
            full = settled_memory(process.pid)
            pending = trio.run(check_backlog, address, args.messages)
        finally:
            stop(process)
    print(f"DQF memory: {args.messages:,} unconfirmed messages of {args.body_bytes} bytes")
    print(f"  journal written directly in {filled_s:.1f} s; server ready in {full_ready_s:.1f} s")
    print(f"  (empty server ready in {empty_ready_s:.1f} s); after 3 get+confirm: {pending:,}")
    print(f"  {'KiB':<8}{'empty':>12}{'holding':>12}{'ratio':>8}")
    for name in ("VmRSS", "RssAnon", "RssFile"):
        ratio = full[name] / empty[name] if empty[name] else float("nan")
        print(f"  {name:<8}{empty[name]:>12,}{full[name]:>12,}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
