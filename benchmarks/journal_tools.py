"""Throughput of the journal tools: `mrs dump --json` and `mrs jplay` on N records.

    python benchmarks/journal_tools.py                 # 100k records, 256-byte bodies
    python benchmarks/journal_tools.py --records 20000 --scratch /mnt/disk/.bench

Writes N PCJ records straight into a scratch group's journals (the server is not
running yet), times `mrs dump --json pcj > /dev/null` as a subprocess (wall clock,
so Python start-up is included), then starts the group's server and times an
unthrottled `mrs jplay pcj --to RESTORE` (its own figure: records acknowledged as
stored divided by the time from connect to the last answer; also the wall clock).
Every run works in a fresh directory, removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from procstat import process_cpu_s  # the sibling module (benchmarks/ is on sys.path)

from journals import Journal, JournalStore, Record, WriteBatch, seq_key
from sim.processes import GroupProcess

COMMIT_RECORDS = 10_000


def write_config(directory: Path, records: int) -> Path:
    path = directory / "bus.toml"
    path.write_text(
        textwrap.dedent(f"""\
            [[group]]
            id = 1
            name = "BENCH"
            listen = "127.0.0.1:0"
            data_dir = "g1"
            [group.limits]
            dqf_messages_max = {records * 4}
            journal_bytes_max = {8 << 30}
            [[group.queue]]
            id = 10
            name = "ORDERS"
            [[group.queue]]
            id = 12
            name = "REPLAY"
            [[group.queue]]
            id = 13
            name = "RESTORE"
            """)
    )
    return path


def fill_pcj(journals: Path, records: int, body_bytes: int) -> None:
    store = JournalStore(journals, 8 << 30)
    now = time.time_ns()
    body = (b"order-line " * (body_bytes // 11 + 1))[:body_bytes]
    batch = WriteBatch.empty()
    for index in range(1, records + 1):
        record = Record(
            seq=(1 << 40) | index,
            target_group=1,
            target_queue=10,
            source_group=1,
            source_queue=11,
            body=body,
            msg_class=5,
            msg_type=index % 7,
            priority=1,
            delivery=26,
            uma=2,
            correlation_id=f"c{index}".encode(),
            put_time_ns=now - 3_600_000_000_000 + index * 1000,
            written_time_ns=now - 3_000_000_000_000 + index * 1000,
            confirm_value=index,
            confirm_time_ns=now - 3_000_000_000_000 + index * 1000,
        )
        batch.put_record(Journal.PCJ, seq_key(record.seq), record)
        if len(batch) >= COMMIT_RECORDS:
            store.commit_now(batch)
            batch = WriteBatch.empty()
    if len(batch):
        store.commit_now(batch)
    store.close()


def mrs(*args: str, stdout=subprocess.PIPE) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "mrs", *args], stdout=stdout, stderr=subprocess.PIPE, text=True
    )
    return result, time.perf_counter() - started


def children_cpu_s() -> float:
    """CPU seconds (user + system) of the finished children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--body-bytes", type=int, default=256)
    parser.add_argument(
        "--window", type=int, default=0, help="jplay --window (default: jplay's own)"
    )
    parser.add_argument("--scratch", type=Path, default=None, help="directory on the disk to use")
    args = parser.parse_args()
    base = args.scratch or Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="journal-tools-", dir=base))
    try:
        config = write_config(directory, args.records)
        started = time.perf_counter()
        fill_pcj(directory / "g1" / "journals", args.records, args.body_bytes)
        print(f"wrote {args.records} PCJ records in {time.perf_counter() - started:.2f} s")
        common = ["--config", str(config), "--group", "1"]

        with open(os.devnull, "w") as devnull:
            result, elapsed = mrs("dump", *common, "pcj", "--json", stdout=devnull)
        assert result.returncode == 0, result.stderr
        dump_rate = args.records / elapsed
        print(f"dump --json pcj > /dev/null: {elapsed:.2f} s wall, {dump_rate:,.0f} records/s")

        server = GroupProcess(config, 1)
        address = server.start()
        try:
            server_cpu_s = process_cpu_s(server.process.pid)
            jplay_cpu_s = children_cpu_s()
            window = ["--window", str(args.window)] if args.window else []
            result, wall = mrs(
                "jplay", *common, "pcj", "--to", "RESTORE", "--address", address,
                *window, "--json",
            )  # fmt: skip
            jplay_cpu_s = children_cpu_s() - jplay_cpu_s
            server_cpu_s = process_cpu_s(server.process.pid) - server_cpu_s
        finally:
            server.terminate()
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["sent"] == args.records, summary
        print(
            f"jplay pcj --to RESTORE (unthrottled, window {args.window or 'default'}): "
            f"{summary['msgs_per_s']:,.0f} msgs/s ({summary['elapsed_s']:.2f} s replaying, "
            f"{wall:.2f} s wall incl. start-up and ledger)"
        )
        server_us = server_cpu_s / args.records * 1e6
        jplay_us = jplay_cpu_s / args.records * 1e6
        print(
            f"CPU per message: server {server_us:.1f} us, jplay {jplay_us:.1f} us "
            "(load-robust: compare these between builds on a busy machine)"
        )
        print(
            "JOURNAL_TOOLS_JSON "
            + json.dumps(
                {
                    "records": args.records,
                    "body_bytes": args.body_bytes,
                    "dump_records_per_s": round(dump_rate),
                    "dump_wall_s": round(elapsed, 3),
                    "jplay_msgs_per_s": summary["msgs_per_s"],
                    "jplay_elapsed_s": summary["elapsed_s"],
                    "jplay_wall_s": round(wall, 3),
                    "server_cpu_us_per_msg": round(server_us, 1),
                    "jplay_cpu_us_per_msg": round(jplay_us, 1),
                    "cpus": os.cpu_count(),
                }
            )
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
