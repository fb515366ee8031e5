"""What a stat between commits costs the next fdatasync, on this kernel and disk.

Why: the server checks before every commit that data.mdb is still the file it opened
(mrs.storage.datadir). On Linux 6.13 and later (multigrain timestamps), a stat that reports a
file's times marks them as seen; the next write then takes a fine-grained time and
dirties the inode, and the next fdatasync writes the inode too. mrs.storage.file_identity
reads the identity with statx and no timestamps instead. This runs a commit-shaped
loop (four 4 KiB pwrites at reused offsets, then fdatasync) with nothing, an
`os.stat`, or the narrow statx between the commits, interleaved, and prints the
fdatasync loop's latency for each.

    python benchmarks/stat_fdatasync.py --scratch /path/on/the/disk --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

from mrs.storage import file_identity

PAGE_BYTES = 4096
PAGES_PER_COMMIT = 4
PAGES_IN_FILE = 100


def _commits(fd: int, count: int, between: Callable[[], object]) -> list[float]:
    page = os.urandom(PAGE_BYTES)
    latencies_s = []
    for index in range(count):
        began = time.perf_counter()
        for k in range(PAGES_PER_COMMIT):
            offset = ((index * PAGES_PER_COMMIT + k) % PAGES_IN_FILE) * PAGE_BYTES
            os.pwrite(fd, page, offset)
        os.fdatasync(fd)
        latencies_s.append(time.perf_counter() - began)
        between()
    return sorted(latencies_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scratch", default=None, help="directory on the disk to measure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.scratch) as directory:
        path = os.path.join(directory, "data.mdb")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        os.pwrite(fd, bytes(PAGE_BYTES * PAGES_IN_FILE), 0)
        os.fsync(fd)
        checks: dict[str, Callable[[], object]] = {
            "nothing": lambda: None,
            "os.stat": lambda: os.stat(path),
            "statx, no times": lambda: file_identity.of_path(path),
        }
        print(f"statx without timestamps available: {file_identity.narrow()}")
        for round_index in range(1, args.rounds + 1):
            for name, check in checks.items():
                latencies_s = _commits(fd, args.commits, check)
                p50 = latencies_s[len(latencies_s) // 2] * 1e6
                p99 = latencies_s[int(len(latencies_s) * 0.99)] * 1e6
                mean = statistics.mean(latencies_s) * 1e6
                print(
                    f"round {round_index} between commits {name:16} "
                    f"mean {mean:6.1f}  p50 {p50:6.1f}  p99 {p99:6.1f} µs"
                )
        os.close(fd)


if __name__ == "__main__":
    main()
