"""One way to replace a whole file: a temporary file beside it, written and synced,
renamed over it, then the directory synced. A crash leaves the old file or the new
one, never half of one, and a reader (a server starting meanwhile) sees either.

Why one module: the bus file's run-time changes, the credentials file and a data
directory's `group.json` each had their own copy of these steps, and they differed
(a temporary left by a crash, a mode lost, a symbolic link replaced by a file).
A symbolic link is followed: its target is replaced and the link stays (a config
linked from /etc keeps pointing where it did, and the target gets the change).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def replace_file(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Replace the file at `path` (following a link) by `data`. `mode`: the new file's
    permission bits (set whatever the umask, e.g. 0o600 for a secret); None keeps the
    existing file's, or 0o644 for a new one. OSError as the system gave it; no
    temporary file is left behind."""
    path = Path(path).resolve()
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
