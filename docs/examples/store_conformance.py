"""Run the journal store conformance suite against a store: here the LMDB one.

Run it: python docs/examples/store_conformance.py
A new store (another disk format, a store with encryption ...) passes the same
checks by giving a `StoreHarness`: open a fresh store, reopen one after a restart,
and make its commits fail.
"""

import errno
import tempfile
from pathlib import Path

from journals import JournalStore
from journals.conformance import CHECKS, StoreHarness, run_check

failing = {"on": False}


def fault(phase: str) -> None:
    if failing["on"]:
        raise OSError(errno.EIO, f"injected on {phase}")


with tempfile.TemporaryDirectory() as scratch:
    paths = (Path(scratch) / f"env{n}" for n in range(len(CHECKS) + 1))
    harness = StoreHarness(
        open=lambda: JournalStore(next(paths), 1 << 22, fault_hook=fault),
        reopen=lambda store: (store.close(), JournalStore(store.path, 1 << 22))[1],
        fail_commits=lambda store, on: failing.update(on=on),
    )
    for name in CHECKS:
        run_check(name, harness)
        print(f"ok  {name}")
print(f"LMDB store passed all {len(CHECKS)} checks")
