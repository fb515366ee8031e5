"""Journal fault injection for the harness: the server honours it only when given a
fault file (`GroupServer(fault_file=...)`; `mrs serve` takes it from MRS_FAULT_FILE at
the CLI edge, see mrs.server.harness; tests and `mrs sim` do that, nothing else should).

The file holds one word, read at every commit: empty = no fault, EIO or ENOSPC =
the commit fails as a device error, MAPFULL = the journal is full, `SLOW <seconds>` =
the commit succeeds that much later (a slow disk: its flush waits, where the writer
runs it, the event loop with the default inline writer). A tester flips faults on and
off by rewriting the file while the server runs (a SLOW flush under way ends when the
file no longer says SLOW). Anything else (docs/sim.md) is no
fault and one WARNING until the file changes.

Each fails where LMDB's own would: a full map while the transaction's writes are
made (the "commit" phase, before them), a device error at the flush (the "flush"
phase, after them: a replicated active has sent the commit to its replicas by then,
mrs.replication.stream `RecordingStore`).
"""

from __future__ import annotations

import errno
import logging
import time
from pathlib import Path

import lmdb

from journals.store import FaultHook

log = logging.getLogger("mrs.journal")
SLOW_S_MAX = 3600
"""The longest delay a SLOW fault makes (seconds, excluded)."""
WORDS = "the words are EIO, ENOSPC, MAPFULL, SLOW <seconds>, or nothing"


def file_fault_hook(path: Path) -> FaultHook:
    """The hook that reads `path` at each phase of every commit. A file the tester
    got wrong (an unknown word, a bad delay, bytes that are not text, a directory)
    injects no fault and is one WARNING naming it, once per change: a typo injected
    nothing without a word, and a UTF-16 file (PowerShell's `echo EIO > fault`) took
    the server down with "unexpected error: UnicodeDecodeError"."""
    warned: list[str] = [""]

    def hook(phase: str) -> None:
        word, problem = _read_word(path)
        if problem != warned[0]:
            warned[0] = problem
            if problem:
                log.warning("fault file %s: %s; no fault injected", path, problem)
        if word in ("EIO", "ENOSPC") and phase == "flush":
            code = getattr(errno, word)
            raise OSError(code, f"injected {word} on {phase}")
        if word == "MAPFULL" and phase == "commit":
            raise lmdb.MapFullError(f"injected map full on {phase}")
        if word.startswith("SLOW ") and phase == "flush":
            _slow_flush(path, float(word[5:]))

    return hook


SLOW_POLL_S = 0.05
"""How often a SLOW flush looks whether the fault was turned off."""


def _slow_flush(path: Path, seconds: float) -> None:
    """Wait `seconds`, or until the file no longer says SLOW: turning the fault off
    ends the flush under way too. Why: a tester who made the disk slow to look at a
    group recovering, then cleared the file, waited out the whole delay (a minute, if
    that is what it took to see the state) before the group came up."""
    deadline_s = time.monotonic() + seconds
    while (left_s := deadline_s - time.monotonic()) > 0:
        time.sleep(min(left_s, SLOW_POLL_S))
        if not _read_word(path)[0].startswith("SLOW "):
            return


def _read_word(path: Path) -> tuple[str, str]:
    """The fault the file names ("" for none, also when it is missing) and what is
    wrong with it ("" when nothing is)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "", ""
    except OSError as error:
        return "", f"cannot be read ({error.strerror or error})"
    try:
        word = " ".join(data.decode("ascii").split()).upper()
    except UnicodeDecodeError:
        return "", f"holds bytes that are not ASCII text ({data[:16]!r}); {WORDS}"
    if word in ("", "EIO", "ENOSPC", "MAPFULL"):
        return word, ""
    if word.startswith("SLOW "):
        seconds = _seconds(word[5:])
        if seconds is not None:
            return f"SLOW {seconds}", ""
        return "", f"{word!r}: the delay must be seconds above 0 and below {SLOW_S_MAX}"
    return "", f"{word[:40]!r} is not a fault; {WORDS}"


def _seconds(text: str) -> float | None:
    """The delay of a SLOW fault, or None for one that is not a number of seconds in
    (0, SLOW_S_MAX)."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    return seconds if 0 < seconds < SLOW_S_MAX else None
