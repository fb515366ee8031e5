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


class PeakMemory:
    """Peak resident memory of this process and all its descendants (JVM, Python
    workers), sampled from /proc every 50 ms."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.wait(0.05):
            parents: dict[int, int] = {}
            rss: dict[int, int] = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    stat = Path(f"/proc/{entry}/stat").read_text()
                    fields = stat.rsplit(")", 1)[1].split()
                    parents[int(entry)] = int(fields[1])
                    rss[int(entry)] = int(fields[21]) * page
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
            self.peak_bytes = max(self.peak_bytes, sum(rss.get(pid, 0) for pid in tree))


def timed(label: str, frame_factory, results: list, scanned: int | None = None) -> None:
    """Full materialisation via the noop sink; first result via limit(1). rows/s is
    over the rows the query scans (`scanned`, default the rows it returns)."""
    started = time.perf_counter()
    frame_factory().limit(1).collect()
    first_s = time.perf_counter() - started
    with PeakMemory() as memory:
        started = time.perf_counter()
        frame = frame_factory()
        frame.write.format("noop").mode("overwrite").save()
        total_s = time.perf_counter() - started
    rows = frame_factory().count()
    rate = (scanned or rows) / total_s
    results.append((label, rows, total_s, rate, first_s, memory.peak_bytes))
    print(f"{label}: {rows:,} rows in {total_s:.1f} s = {rate:,.0f} rows/s scanned; "
          f"first result {first_s:.1f} s; peak memory {memory.peak_bytes / 2**20:,.0f} MiB",
          flush=True)  # fmt: skip


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
        started = time.perf_counter()
        rows = sum(b.num_rows for p in parts for b in scan.scan_batches(p))
        direct_s = time.perf_counter() - started
        print(f"reader alone (1 core, no Spark): planning {plan_s:.2f} s ({len(parts)} parts); "
              f"{rows:,} rows in {direct_s:.1f} s = {rows / direct_s:,.0f} rows/s", flush=True)

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
        print("\n| measurement | rows out | seconds | rows/s scanned | first result s | peak MiB |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, count, total_s, rate, first_s, peak in results:
            print(f"| {label} | {count:,} | {total_s:.1f} | {rate:,.0f} | "
                  f"{first_s:.1f} | {peak / 2**20:,.0f} |")
    finally:
        if not args.keep and args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
