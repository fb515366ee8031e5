"""Drop a file's pages from this process's memory maps; the kernel's page cache keeps them.

Why: LMDB reads through a shared read-only map of its data file, and every page a
read touches stays mapped, counted in the process's resident size (RssFile) until
it is unmapped. A server that reads its million-message DQF back once would look
2 GB large for the rest of its life although it holds nothing. `madvise(DONTNEED)`
on a shared file mapping only drops this process's page-table entries: the data
stays in the page cache (nothing is written or lost: LMDB's map is read-only
unless MDB_WRITEMAP, which the journals never use) and the next read faults the
page back in. Linux only; elsewhere `PageDropper.release` does nothing.

The other way a journal's pages move: `start_writeback` sends a file's dirty pages
on their way to the disk without waiting for them (the store, after each commit the
commit log made durable; journals.store).
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

MADV_DONTNEED = 4
SYNC_FILE_RANGE_WRITE = 2
_MAPS = Path("/proc/self/maps")
_libc = None
if sys.platform == "linux":
    # The process's own symbols, libc's among them; find_library("c") ran ldconfig in a
    # child process (~14 ms) in every `mrs` command.
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _libc.madvise.restype = ctypes.c_int
    _libc.sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    _libc.sync_file_range.restype = ctypes.c_int


def start_writeback(fd: int) -> None:
    """Start writing every dirty page of the file open at `fd` to the disk, and
    return at once (Linux's `sync_file_range(SYNC_FILE_RANGE_WRITE)`; nothing
    elsewhere, where the next flush writes them). Why, for LMDB's file after a logged
    commit: left to the next checkpoint's flush, the pages went in a burst, and a
    log flush that met it waited behind it (the paced p99, benchmarks/README.md,
    "The commit log")."""
    if _libc is not None:
        _libc.sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE)


def mapped_ranges(real_path: str) -> list[tuple[int, int]]:
    """(start, end) of every map in this process of the file at `real_path` (already
    resolved, as /proc names it), from /proc/self/maps."""
    wanted = os.fsencode(real_path)
    ranges = []
    with open(_MAPS, "rb") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].rstrip(b"\n") == wanted:
                start, _, end = fields[0].partition(b"-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


FULL_READ_EVERY_CALLS = 64
"""A PageDropper reads /proc/self/maps again at least this often, to find a map of
its file made since (another environment on the same file in this process)."""


class PageDropper:
    """Unmaps the resident pages of every map of one file, again and again: where its
    maps are is remembered, and checked before each use with one `readlink` of
    /proc/self/map_files/<start>-<end>, instead of reading /proc/self/maps.

    Why: a server reading a cold backlog back releases its pages after every MiB read,
    and parsing /proc/self/maps (hundreds of lines in a server) cost 0.4-1.3 ms a
    time: 2% of the server's samples in an end-to-end run whose queue had gone cold
    (benchmarks/README.md). A range is only used while the kernel still names the file for
    exactly that range, so a map LMDB moved (its map grown) or dropped is never
    advised: the maps are read again.
    """

    def __init__(self, file_path: Path) -> None:
        self.file_path = file_path
        self._ranges: list[tuple[int, int]] = []
        self._target = ""
        """The file's real path, as /proc names the target of each of its maps."""
        self._calls_until_full_read = 0

    def release(self) -> int:
        """Drop the file's pages from this process's maps; the bytes of map covered.
        Safe at any moment: a reader touching a page again simply faults it back in."""
        if _libc is None:
            return 0
        self._calls_until_full_read -= 1
        if self._calls_until_full_read < 0 or not self._still_mapped():
            self._target = os.path.realpath(self.file_path)
            self._ranges = mapped_ranges(self._target)
            self._calls_until_full_read = FULL_READ_EVERY_CALLS
        covered = 0
        for start, end in self._ranges:
            if _libc.madvise(start, end - start, MADV_DONTNEED) == 0:
                covered += end - start
        return covered

    def _still_mapped(self) -> bool:
        if not self._ranges:
            return False
        try:
            return all(
                os.readlink(f"/proc/self/map_files/{start:x}-{end:x}") == self._target
                for start, end in self._ranges
            )
        except OSError:  # gone, or map_files not readable here: read the maps
            return False
