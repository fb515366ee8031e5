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
from collections.abc import Callable
from pathlib import Path


def replace_file(path: Path | str, data: bytes, mode: int | None = None) -> None:
    """Replace the file at `path` (following a link) by `data`. `mode`: the new file's
    permission bits (set whatever the umask, e.g. 0o600 for a secret); None keeps the
    existing file's, or 0o644 for a new one. OSError as the system gave it; no
    temporary file is left behind."""
    path = Path(path).resolve()
    if mode is None:
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    _place(path, data, mode, os.replace)


def create_file(path: Path | str, data: bytes, mode: int = 0o600) -> bool:
    """Create the file at `path` with `data`, whole and durable, unless one is there
    already: True if this call made it, False if another (process) had. Two callers
    that race each find the one file that won, never half of one (a link fails where
    a name exists, where a rename would replace it)."""
    try:
        _place(Path(path), data, mode, os.link)
    except FileExistsError:
        return False
    return True


def _place(path: Path, data: bytes, mode: int, put: Callable[[str, Path], None]) -> None:
    """`data` written and synced in a temporary file beside `path`, put at `path` by
    `put` (a rename, or a link), then the directory synced; no temporary is left."""
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(handle, mode)
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        put(temporary, path)
    finally:
        Path(temporary).unlink(missing_ok=True)  # a link leaves it; a rename took it
    fsync_path(path.parent)


def fsync_path(path: Path) -> None:
    """fsync by path: a file's data, or a directory's entries (a file created, renamed
    or removed in it: the file's own fsync does not cover them)."""
    descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
