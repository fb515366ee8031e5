"""One journal commit's latency, alone: a 1 KiB DQF put (and the delete of the
tenth message before it, as a confirm does) per commit, on this disk.

    python benchmarks/commit_latency.py                 # 3,000 commits
    python benchmarks/commit_latency.py --commits 10000 --scratch /data

It is the floor of a paced put's answer: what `JournalStore.commit_now` costs with
the commit log's one flush (journals.commit_log), checkpoints included (the max).
Run it from two checkouts (cwd and PYTHONPATH each tree) to compare two builds.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from journals import Journal, JournalStore, WriteBatch

BODY = b"x" * 1024


def commit_times_s(directory: Path, commits: int) -> list[float]:
    store = JournalStore(directory, 1 << 30)
    times_s: list[float] = []
    try:
        for index in range(commits):
            batch = WriteBatch.empty().put_raw(Journal.DQF, index.to_bytes(12, "big"), BODY)
            if index >= 10:
                batch.delete(Journal.DQF, (index - 10).to_bytes(12, "big"))
            started_s = time.perf_counter()
            store.commit_now(batch)
            times_s.append(time.perf_counter() - started_s)
    finally:
        store.close()
    return sorted(times_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--scratch", type=Path, default=Path("."), help="directory on the disk")
    arguments = parser.parse_args()
    directory = Path(tempfile.mkdtemp(dir=arguments.scratch, prefix="commit-latency-"))
    try:
        times_s = commit_times_s(directory / "journals", arguments.commits)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    def ms(fraction: float) -> str:
        return f"{times_s[min(len(times_s) - 1, int(len(times_s) * fraction))] * 1e3:.3f}"

    mean_ms = sum(times_s) / len(times_s) * 1e3
    print(
        f"{len(times_s)} commits: p50 {ms(0.5)} p90 {ms(0.9)} p99 {ms(0.99)} "
        f"max {times_s[-1] * 1e3:.3f} mean {mean_ms:.3f} ms"
    )


if __name__ == "__main__":
    main()
