"""Small real filesystems for the tests of full disks: a tmpfs of a given size, so a
full disk is a real ENOSPC and free space is really measured."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def mounted_tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (mount's form: "2m", "110m") at `directory` (made here), for
    the test's life. Mounting needs root: without it the test is skipped on a
    developer's machine, and fails under CI, which runs as root (a full-disk test
    skipped there would be a gap counted as a pass)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        why = "cannot mount a tmpfs here (needs root): " + mounted.stderr.decode().strip()
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
