"""Journal fault injection for the harness: the server honours it only when given a
fault file (`GroupServer(fault_file=...)`; `mrs serve` takes it from MRS_FAULT_FILE at
the CLI edge, see mrs.server.harness; tests and `mrs sim` do that, nothing else should).

The file holds one word, read at every commit: empty = no fault, EIO or ENOSPC =
the commit fails as a device error, MAPFULL = the journal is full, `SLOW <seconds>` =
the commit succeeds that much later (a slow disk: its flush waits, where the writer
runs it, the event loop with the default inline writer). A tester flips faults on and
off by rewriting the file while the server runs.

Each fails where LMDB's own would: a full map while the transaction's writes are
made (the "commit" phase, before them), a device error at the flush (the "flush"
phase, after them: a replicated active has sent the commit to its replicas by then,
mrs.replication.stream `RecordingStore`).
"""

from __future__ import annotations

import errno
import time
from pathlib import Path

import lmdb

from journals.store import FaultHook


def file_fault_hook(path: Path) -> FaultHook:
    def hook(phase: str) -> None:
        try:
            word = path.read_text().strip().upper()
        except FileNotFoundError:
            return
        if word in ("EIO", "ENOSPC") and phase == "flush":
            code = getattr(errno, word)
            raise OSError(code, f"injected {word} on {phase}")
        if word == "MAPFULL" and phase == "commit":
            raise lmdb.MapFullError(f"injected map full on {phase}")
        if word.startswith("SLOW ") and phase == "flush":
            time.sleep(_seconds(word[5:]))

    return hook


def _seconds(text: str) -> float:
    """The delay of a SLOW fault: a bad one is no delay (a fault file is the tester's)."""
    try:
        seconds = float(text)
    except ValueError:
        return 0.0
    return seconds if 0 < seconds < 3600 else 0.0
