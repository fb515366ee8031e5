"""The disk's own ceilings: raw fsync/s and LMDB synced commits/s.

Part of `mrs bench` (see mrs/tools/bench/__init__.py for what it measures and why).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from journals import Journal, JournalStore, WriteBatch, queue_key
from mrs.tools.bench.results import LMDB_VALUE_BYTES, TARGET_QUEUE, Result


def measure_fsync(directory: Path, seconds: float) -> Result:
    """Append one byte and fsync it, for `seconds`."""
    path = directory / "fsync.dat"
    latencies: list[float] = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        started = time.perf_counter()
        deadline = started + seconds
        now = started
        while now < deadline:
            os.write(fd, b"x")
            os.fsync(fd)
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
        elapsed = now - started
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    return Result("raw fsync (1-byte write + fsync)", "fsync", len(latencies), elapsed, latencies)


def measure_lmdb(directory: Path, seconds: float) -> Result:
    """One 1 KiB put per synced LMDB write transaction, for `seconds`."""
    path = directory / "lmdb"
    value = os.urandom(LMDB_VALUE_BYTES)
    latencies: list[float] = []
    store = JournalStore(path, map_size_bytes=1 << 30)
    try:
        started = time.perf_counter()
        deadline = started + seconds
        now = started
        seq = 0
        while now < deadline:
            seq += 1
            store.commit_now(
                WriteBatch.empty().put_raw(Journal.DQF, queue_key(TARGET_QUEUE, seq), value)
            )
            after = time.perf_counter()
            latencies.append(after - now)
            now = after
        elapsed = now - started
    finally:
        store.close()
        shutil.rmtree(path, ignore_errors=True)
    return Result(
        "LMDB synced commit, 1 put (1 KiB) per txn",
        "lmdb",
        len(latencies),
        elapsed,
        latencies,
        msgs_per_commit=1.0,
    )
