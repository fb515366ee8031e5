"""The switches of `mrs serve` that tests, benchmarks and `mrs sim` set through the
environment, parsed from a mapping the CLI hands over.

Only the CLI edge (`mrs serve`) passes `os.environ` here; the server is given a
`ServeOptions` and reads no environment itself, so an in-process server (the
simulator, fast tests) is configured by arguments alone. A broken build
(`MRS_HARNESS_UNSAFE`) is resolved by the CLI from `mrs.testing.broken_builds`, a
layer above this one, and given here as `guarantees`.

- `MRS_WRITER` -> `writer_kind`: `inline` (default) or `thread`, where the group
  commit runs;
- `MRS_FAULT_FILE` -> `fault_file`: a file whose word (EIO, ENOSPC, MAPFULL) fails
  the next commits, or (`SLOW <seconds>`) makes them that much slower;
- `MRS_GC_THRESHOLDS` -> `gc_thresholds`: the collector's settings once recovered
  (mrs.server.gc_tuning): unset for the measured default, `off`, or `gen0,gen1,gen2`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.group import KEPT, Guarantees
from mrs.ops.pcj_archiver import PcjArchiver
from mrs.server.gc_tuning import SERVER_GC_THRESHOLDS, thresholds_from

WRITER_ENV = "MRS_WRITER"
FAULT_FILE_ENV = "MRS_FAULT_FILE"
WRITER_KINDS = ("inline", "thread")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How a group server runs beyond its config: harness switches, all off by default."""

    writer_kind: str = "inline"
    """Where the group commit runs: inline (in the event loop) or a writer thread."""
    fault_file: Path | None = None
    """Journal fault injection (mrs.storage.fault_file): None in production."""
    guarantees: Guarantees = KEPT
    """The rules the group keeps: KEPT, or a build broken on purpose to prove the
    checker (mrs.testing.broken_builds, MRS_HARNESS_UNSAFE)."""
    gc_thresholds: tuple[int, int, int] | None = SERVER_GC_THRESHOLDS
    """Collector thresholds set (after a gc.freeze) once recovered; None leaves
    CPython's defaults (mrs.server.gc_tuning, MRS_GC_THRESHOLDS)."""
    pcj_archiver: PcjArchiver | None = None
    """The PCJ archive's steps, for a replicated group's active to run itself
    (mrs.ops.pcj_retention): given by `mrs serve` from the layer above."""


def serve_options_from(environ: Mapping[str, str], guarantees: Guarantees = KEPT) -> ServeOptions:
    """The options the environment asks for, with the `guarantees` the CLI resolved;
    a bad value is one line, not a traceback."""
    writer_kind = environ.get(WRITER_ENV, "inline") or "inline"
    if writer_kind not in WRITER_KINDS:
        choices = ", ".join(WRITER_KINDS)
        raise CommandError(f"{WRITER_ENV}: {writer_kind!r} is not one of {choices}", EXIT_USAGE)
    fault_text = environ.get(FAULT_FILE_ENV)
    return ServeOptions(
        writer_kind=writer_kind,
        fault_file=Path(fault_text) if fault_text else None,
        guarantees=guarantees,
        gc_thresholds=thresholds_from(environ),
    )


def say(line: str) -> None:
    """Print one line the harness waits for (READY, REPLICA, STEPPED DOWN) in one
    write: `print` writes the text and its newline apart, and on an unbuffered stdout
    shared by two servers (a shell's `&`) two READY lines once came out as one
    (tests/process/test_docs_pasted.py)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
