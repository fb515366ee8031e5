"""Owner-only files and directories (0600 / 0700), whatever the process umask.

A umask can only take bits away, so creating with 0600/0700 is owner-only under any
umask; files that already exist with wider modes are narrowed explicitly.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from mrs.storage.atomic_file import replace_file

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """mkdir -p, then make the last directory 0700."""
    path = Path(path)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)
    return path


def narrow(path: Path) -> None:
    """Take group/other bits off an existing file (0600 for a file, 0700 for a dir)."""
    with contextlib.suppress(FileNotFoundError):
        mode = DIR_MODE if Path(path).is_dir() else FILE_MODE
        os.chmod(path, mode)


def owner_only(path: Path, what: str, log: logging.Logger, advice: str) -> None:
    """Narrow a file others may read to 0600 and say so in one WARNING (`advice`:
    what to do if someone else may have read it). Why: a file the group loads and
    that proves who it is (the credentials file, its link secret, its TLS private
    key) copied to another host with `cp` under umask 022 was 0644, readable by
    every local user, and nothing said so."""
    try:
        mode = os.stat(path).st_mode & 0o777
        if not mode & 0o077:
            return
        narrow(path)
    except OSError as error:
        log.warning(
            "%s %s: others may read it and it cannot be made owner-only (%s): "
            "chmod 600 %s as its owner",
            what,
            path,
            error.strerror or error,
            path,
        )
        return
    log.warning(
        "%s %s was readable by others (%04o): narrowed to 0600; if someone else may have "
        "read it, %s",
        what,
        path,
        mode,
        advice,
    )


def write_private(path: Path, data: bytes) -> None:
    """Write a whole file atomically (mrs.storage.atomic_file), owner-only (0600)."""
    replace_file(path, data, FILE_MODE)
