"""Benchmark (not a test): Spark scanning a 1M-record PCJ through the mrs-pcj source.

    .venv/bin/python benchmarks/audit_scan.py [--records 1000000] [--master local[2]]
                                              [--scratch DIR] [--keep]

Measures, in one run on one disk:
- the reader alone (no Spark, one core): records/s decoded into Arrow batches;
- Spark full scan (every column materialised, `noop` sink) with Arrow batches and
  with row tuples: rows/s, time to first result, peak memory of the process tree;
- a selective query (10% of seqs, one queue) with and without filter pushdown;
- the same full scan and query over the Parquet export of the same journal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from journals import Journal, JournalStore, Record, WriteBatch, seq_key  # noqa: E402

BATCH_RECORDS = 20_000


def make_journal(path: Path, records: int) -> float:
    """A PCJ of `records` confirmed messages (~200 bytes each); seconds it took."""
    started = time.perf_counter()
    store = JournalStore(path, map_size_bytes=8 << 30)
    base_ns = 1_790_000_000_000_000_000
    for start in range(0, records, BATCH_RECORDS):
        batch = WriteBatch.empty()
        for index in range(start, min(records, start + BATCH_RECORDS)):
            seq = (1 << 40) + index
            put_ns = base_ns + index * 3_000_000
            batch.put_record(Journal.PCJ, seq_key(seq), Record(
                seq=seq, target_group=1, target_queue=10 + index % 8, source_group=1 + index % 3,
                source_queue=20 + index % 5, body=b"x" * (64 + index % 128),
                msg_class=index % 4, msg_type=index % 7, priority=index % 10, delivery=26, uma=2,
                correlation_id=b"c%d" % index, put_time_ns=put_ns,
                written_time_ns=put_ns + 2_000_000, confirm_time_ns=put_ns + 2_000_000,
                confirm_value=index % 100, extra={"deliveries": 1 + (index % 50 == 0)},
            ))  # fmt: skip
        store.commit_now(batch)
    store.close()
    return time.perf_counter() - started


class TreeMeter:
    """Peak resident memory and CPU time of this process and all its descendants
    (the JVM, Spark's Python workers), sampled from /proc every 50 ms. CPU time
    matters on a shared machine: rows per CPU-second do not depend on the load."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self.cpu_first: dict[int, int] = {}
        self.cpu_last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._baseline = False

    def __enter__(self) -> TreeMeter:
        self._baseline = True
        self._sample()
        self._baseline = False
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def cpu_s(self) -> float:
        ticks = sum(last - self.cpu_first.get(pid, 0) for pid, last in self.cpu_last.items())
        return ticks / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def _sample(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        parents: dict[int, int] = {}
        stats: dict[int, tuple[int, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry)] = int(fields[1])
                stats[int(entry)] = (int(fields[21]) * page, int(fields[11]) + int(fields[12]))
            except (OSError, IndexError, ValueError):
                continue
        tree = {os.getpid()}
        changed = True
        while changed:
            changed = False
            for pid, parent in parents.items():
                if parent in tree and pid not in tree:
                    tree.add(pid)
                    changed = True
        rss = 0
        for pid in tree:
            if pid not in stats:
                continue
            size, cpu = stats[pid]
            rss += size
            # Running before the measurement: count from now; started during it: from 0.
            self.cpu_first.setdefault(pid, cpu if self._baseline else 0)
            self.cpu_last[pid] = cpu
        self.peak_bytes = max(self.peak_bytes, rss)


def timed(label: str, frame_factory, results: list, scanned: int | None = None) -> None:
    """Full materialisation via the noop sink; first result via limit(1). rows/s is
    over the rows the query scans (`scanned`, default the rows it returns)."""
    started = time.perf_counter()
    frame_factory().limit(1).collect()
    first_s = time.perf_counter() - started
    frame = frame_factory()
    with TreeMeter() as memory:
        started = time.perf_counter()
        frame.write.format("noop").mode("overwrite").save()
        total_s = time.perf_counter() - started
    rows = frame_factory().count()
    rate = (scanned or rows) / total_s
    per_cpu = (scanned or rows) / memory.cpu_s if memory.cpu_s else 0.0
    results.append((label, rows, total_s, rate, per_cpu, first_s, memory.peak_bytes))
    print(f"{label}: {rows:,} rows in {total_s:.1f} s = {rate:,.0f} rows/s scanned "
          f"({per_cpu:,.0f} per CPU-second); first result {first_s:.1f} s; "
          f"peak memory {memory.peak_bytes / 2**20:,.0f} MiB", flush=True)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="mrs-audit-bench-"))
    journal = scratch / "g1" / "journals"
    try:
        if not (journal / "data.mdb").exists():
            print(f"writing {args.records:,} PCJ records ...", flush=True)
            print(f"  {make_journal(journal, args.records):.1f} s", flush=True)
        from mrs.audit import scan

        started = time.perf_counter()
        parts = scan.plan([(str(journal), 1)], "pcj", settle_s=0)
        plan_s = time.perf_counter() - started
        started, cpu_started = time.perf_counter(), time.process_time()
        rows = sum(b.num_rows for p in parts for b in scan.scan_batches(p))
        direct_s = time.perf_counter() - started
        direct_cpu_s = time.process_time() - cpu_started
        print(f"reader alone (1 core, no Spark): planning {plan_s:.2f} s ({len(parts)} parts); "
              f"{rows:,} rows in {direct_s:.1f} s = {rows / direct_s:,.0f} rows/s "
              f"({rows / direct_cpu_s:,.0f} per CPU-second)", flush=True)

        from mrs.audit.report import export
        from mrs.audit.session import build_session

        spark = build_session(args.master, app_name="mrs audit bench")
        results: list = []
        load = {"path": str(journal)}
        low = (1 << 40) + args.records // 2
        high = low + args.records // 10

        def source(**options):
            return lambda: spark.read.format("mrs-pcj").options(**load, **options).load()

        def query(factory):
            return lambda: factory().where(f"seq >= {low} AND seq < {high} AND target_queue = 11")

        source(arrow="true")().limit(1).collect()  # warm up: the first job starts executors
        timed("spark scan, Arrow batches", source(arrow="true"), results)
        timed("spark scan, row tuples", source(arrow="false"), results)
        everything = args.records
        timed("query 10% seq + queue, pushdown on", query(source(pushdown="true")), results,
              everything)  # fmt: skip
        timed("query 10% seq + queue, pushdown off", query(source(pushdown="false")), results,
              everything)  # fmt: skip
        parquet = scratch / "parquet"
        if parquet.exists():
            shutil.rmtree(parquet)
        started = time.perf_counter()
        export(spark, {"path": str(journal)}, str(parquet), mode="overwrite")
        print(f"export to Parquet: {time.perf_counter() - started:.1f} s", flush=True)
        timed("spark scan, Parquet export", lambda: spark.read.parquet(str(parquet / "pcj")),
              results)  # fmt: skip
        timed("query 10% seq + queue, Parquet",
              query(lambda: spark.read.parquet(str(parquet / "pcj"))), results,
              everything)  # fmt: skip
        spark.stop()
        print("\n| measurement | rows out | seconds | rows/s scanned | rows per CPU-s "
              "| first result s | peak MiB |")  # fmt: skip
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
        for label, count, total_s, rate, per_cpu, first_s, peak in results:
            print(f"| {label} | {count:,} | {total_s:.1f} | {rate:,.0f} | {per_cpu:,.0f} | "
                  f"{first_s:.1f} | {peak / 2**20:,.0f} |")
    finally:
        if not args.keep and args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
