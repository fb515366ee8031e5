"""The PCJ archive's steps as the server sees them: a part handed down to it.

Why a Protocol: the steps (mrs.tools.journal.pcj_archive `archive_pcj`) write Parquet
with the audit's writer, two layers above the server; `mrs serve` hands them to a
replicated group's active (mrs.server.harness `ServeOptions.pcj_archiver`), which
runs them itself (mrs.ops.pcj_retention).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from journals import JournalStore


class ArchiveSummary(Protocol):
    archived: int

    def as_dict(self) -> dict: ...


class PcjArchiver(Protocol):
    """The archive's steps (mrs.tools.journal.pcj_archive `archive_pcj`, a layer
    above: `mrs serve` hands it to the server)."""

    def __call__(
        self,
        store: JournalStore,
        group_id: int,
        out_dir: Path,
        until_ns: int,
        *,
        closed_only: bool = False,
    ) -> ArchiveSummary: ...
