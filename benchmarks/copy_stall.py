"""How long a full copy keeps the active's event loop from running: one pass against slices.

    python benchmarks/copy_stall.py --mib 100      # 100 MiB of 16 KiB DQF records

A replica that rejoins with nothing gets a full copy of the active's journals
(mrs.replication.active `_full_copy`). The active commits inline on its event loop,
so whatever the copy reads with no await in between is a time when no put, get or
confirm is answered and the lease is not renewed. This fills a real LMDB store and
times, in this process, (1) the copy read in one pass and framed with no await (how
it was read before the slices) and (2) the longest slice of the copy as it is read now
(one slice per frame sent: the loop runs between two). `--rounds` times each.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from journals import JournalStore, WriteBatch
from journals.keys import Journal
from mrs.config.instance_types import InstanceConfig
from mrs.limits import REPLICATION_COPY_SLICE_BYTES
from mrs.replication.active import Active
from mrs.replication.coordinator import MemoryCoordinator, MemoryElection
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import frame

BODY_BYTES = 16 << 10
ONE_PASS_SLICE_BYTES = 4 << 20
"""The slice of the copy as it was read in one pass (frames of 4 MiB, built together)."""


def filled_store(directory: Path, mib: int) -> JournalStore:
    """A store holding `mib` MiB of DQF records of BODY_BYTES each."""
    store = JournalStore(directory, max(1 << 30, mib << 21))
    count = (mib << 20) // BODY_BYTES
    body = b"x" * BODY_BYTES
    for start in range(0, count, 1000):
        batch = WriteBatch.empty()
        for i in range(start, min(count, start + 1000)):
            batch.put_raw(Journal.DQF, b"q%08d" % i, body)
        store.commit_now(batch)
    return store


def one_pass(store: JournalStore) -> list[bytes]:
    """The copy read and framed with no await (the active's `_full_copy` before slices)."""
    frames: list[bytes] = []
    items: list[list[object]] = []
    size = 0
    for journal in Journal:
        for key, value in store.raw_items(journal):
            items.append([str(journal), key, value])
            size += len(key) + len(value)
            if size >= ONE_PASS_SLICE_BYTES:
                frames.append(frame({"t": "copy", "items": items, "last": False}))
                items, size = [], 0
    frames.append(frame({"t": "copy", "items": items, "last": True}))
    return frames


def longest_slice_s(frames: Iterator[bytes]) -> float:
    """The longest time one frame of the sliced copy took to read and build."""
    longest_s = 0.0
    while True:
        started_s = time.perf_counter()
        try:
            next(frames)
        except StopIteration:
            return longest_s
        longest_s = max(longest_s, time.perf_counter() - started_s)


def active_over(store: JournalStore, directory: Path) -> Active:
    """An Active of term 1 over `store`, only to read copies (nothing is dialed)."""
    me = InstanceConfig("a", "127.0.0.1", 1, "127.0.0.1", 2, directory)
    stream = CommitStream(term=1, replicas=("b",), deliver=lambda dones: None, clock_s=float)
    return Active(
        group_id=1,
        me=me,
        replicas=(),
        coordinator=MemoryCoordinator(MemoryElection(), "a"),
        term=1,
        lease_ttl_s=3,
        store=RecordingStore(store, stream),
        stream=stream,
        on_step_down=lambda reason: None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=100, help="MiB of journals to copy")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mrs-copy-stall-") as scratch:
        store = filled_store(Path(scratch), args.mib)
        active = active_over(store, Path(scratch))
        try:
            for _ in range(args.rounds):
                started_s = time.perf_counter()
                one_pass(store)
                whole_s = time.perf_counter() - started_s
                sliced_s = longest_slice_s(active._full_copy())
                print(
                    f"{args.mib} MiB: one pass {whole_s * 1000:.0f} ms with no await; "
                    f"slices of {REPLICATION_COPY_SLICE_BYTES >> 20} MiB: the longest "
                    f"{sliced_s * 1000:.1f} ms"
                )
        finally:
            store.close()


if __name__ == "__main__":
    main()
