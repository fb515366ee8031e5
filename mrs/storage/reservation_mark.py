"""The last seq reservation an unreplicated group's server made, kept in a small file
of its data directory beside (not in) its journals: `data_dir/seq_reserved`.

Why: a start on an older copy of the journals must count above every seq the original
issued since the copy (mrs.core.seqspace `SeqAllocator._above_the_original`). The
journal file's inode and birth time tell most copies, but not a backup copied over
the journal file in place (`cp -a backup/journals/. g1/journals/`, `rsync
--inplace`): the file keeps the original's identity, and the copy's reservation is
the one it had at the backup. This file is not part of the journals, so such a
restore leaves it as the original last wrote it; a restore of the whole data
directory brings back the backup's mark too, and only the lineage check is left.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mrs.storage.atomic_file import replace_file

log = logging.getLogger("mrs.storage")

MARK_FILE_NAME = "seq_reserved"


class ReservationMark:
    """`data_dir/seq_reserved`: the counter the last reservation wrote (decimal text)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / MARK_FILE_NAME
        self._failed = False

    def read(self) -> int | None:
        """The counter last written; None when there is no mark (a data directory of an
        earlier release, or a new one) or it cannot be read."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None

    def write(self, reserved: int) -> None:
        """Record `reserved` (committed to the journal just before). A failure is
        logged once and otherwise ignored: the journal holds the reservation, and
        only the check of a copy restored over the journal file is weaker for it."""
        try:
            replace_file(self.path, b"%d\n" % reserved, 0o600)
        except OSError as error:
            if not self._failed:
                log.warning("cannot write %s (checked at start for a copy): %s", self.path, error)
            self._failed = True
        else:
            self._failed = False
