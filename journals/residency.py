"""Drop a file's pages from this process's memory maps; the kernel's page cache keeps them.

Why: LMDB reads through a shared read-only map of its data file, and every page a
read touches stays mapped, counted in the process's resident size (RssFile) until
it is unmapped. A server that reads its million-message DQF back once would look
2 GB large for the rest of its life although it holds nothing. `madvise(DONTNEED)`
on a shared file mapping only drops this process's page-table entries: the data
stays in the page cache (nothing is written or lost: LMDB's map is read-only
unless MDB_WRITEMAP, which the journals never use) and the next read faults the
page back in. Linux only; elsewhere `release` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

MADV_DONTNEED = 4
_MAPS = Path("/proc/self/maps")
_libc = None
if sys.platform == "linux":
    _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _libc.madvise.restype = ctypes.c_int


def mapped_ranges(file_path: Path) -> list[tuple[int, int]]:
    """(start, end) of every map of `file_path` in this process (Linux), else []."""
    if _libc is None:
        return []
    wanted = os.fsencode(os.path.realpath(file_path))
    ranges = []
    with open(_MAPS, "rb") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].rstrip(b"\n") == wanted:
                start, _, end = fields[0].partition(b"-")
                ranges.append((int(start, 16), int(end, 16)))
    return ranges


def release(file_path: Path) -> int:
    """Unmap the resident pages of every map of `file_path`; the bytes of map covered.
    Safe at any moment: a reader touching a page again simply faults it back in."""
    covered = 0
    for start, end in mapped_ranges(file_path):
        if _libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            covered += end - start
    return covered
