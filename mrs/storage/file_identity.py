"""A file's identity (device, inode, link count) read without asking for its times.

Why: the server checks before every commit that its journal file is still the one it
opened (mrs.storage.datadir). Since Linux 6.13, ext4, XFS, btrfs and tmpfs keep "multigrain"
timestamps: a `stat` that reports a file's ctime or mtime marks them as seen, and the
next write to the file then takes a fine-grained time, dirtying its inode; the next
fdatasync must write that inode as well, a second synchronous device write. A plain
`os.stat`/`os.fstat` always reports the times, so checking data.mdb before each
commit made every commit's fdatasync ~35 µs slower (95 -> 129 µs on this project's
ext4 disk, `benchmarks/README.md`). `statx` with a mask of only the inode
and link count reports no times and marks nothing; this module calls it through
glibc, and falls back to `os.stat` where there is no statx (other systems, or an
old kernel or C library), where the times are not marked anyway.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from typing import NamedTuple

_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_STATX_NLINK = 0x4
_STATX_INO = 0x100
_STATX_BTIME = 0x800
_STATX_BUFFER_BYTES = 256
"""sizeof(struct statx) in <linux/stat.h>."""
_NLINK = struct.Struct("=I")
_INO = struct.Struct("=Q")
_DEV = struct.Struct("=II")
_MASK = struct.Struct("=I")
_BTIME = struct.Struct("=qI")
_MASK_AT, _NLINK_AT, _INO_AT, _BTIME_AT, _DEV_AT = 0, 16, 32, 80, 136
"""Offsets of stx_mask, stx_nlink, stx_ino, stx_btime and stx_dev_major/minor in struct statx."""


class Identity(NamedTuple):
    device: int
    inode: int
    links: int


def _libc_statx():  # -> the C function, or None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own C library
        function = libc.statx
    except (OSError, AttributeError):
        return None
    int_, path, mask, buffer = ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p
    function.argtypes = [int_, path, int_, mask, buffer]
    function.restype = ctypes.c_int
    return function


class _Statx:
    """statx(2) with the narrow mask, or None once it proved unavailable."""

    def __init__(self) -> None:
        self.function = _libc_statx()

    def identity(self, dir_fd: int, path: bytes, flags: int) -> Identity | None:
        buffer = self.read(dir_fd, path, flags, _STATX_NLINK | _STATX_INO)
        if buffer is None:
            return None
        major, minor = _DEV.unpack_from(buffer, _DEV_AT)
        return Identity(
            os.makedev(major, minor),
            _INO.unpack_from(buffer, _INO_AT)[0],
            _NLINK.unpack_from(buffer, _NLINK_AT)[0],
        )


    def read(self, dir_fd: int, path: bytes, flags: int, mask: int) -> ctypes.Array | None:
        """The filled struct statx, or None where there is no statx."""
        function = self.function
        if function is None:
            return None
        buffer = ctypes.create_string_buffer(_STATX_BUFFER_BYTES)  # per call: any thread
        if function(dir_fd, path, flags, mask, buffer) != 0:
            code = ctypes.get_errno()
            if code in (errno.ENOSYS, errno.EPERM):  # no statx here (kernel, seccomp)
                self.function = None
                return None
            raise OSError(code, os.strerror(code), path.decode(errors="replace") or None)
        return buffer


_STATX = _Statx()


def narrow() -> bool:
    """True when identities are read with statx (no timestamps asked for)."""
    return _STATX.function is not None


def of_path(path: str) -> Identity:
    """The identity of the file at `path` (symlinks followed, as `os.stat`)."""
    found = _STATX.identity(_AT_FDCWD, os.fsencode(path), 0)
    if found is not None:
        return found
    stat = os.stat(path)
    return Identity(stat.st_dev, stat.st_ino, stat.st_nlink)


def of_fd(fd: int) -> Identity:
    """The identity of the open file `fd` (0 links once it was deleted)."""
    found = _STATX.identity(fd, b"", _AT_EMPTY_PATH)
    if found is not None:
        return found
    stat = os.fstat(fd)
    return Identity(stat.st_dev, stat.st_ino, stat.st_nlink)


def lineage_of(path: str) -> bytes:
    """The inode and birth time of the file at `path`, as bytes to keep and compare:
    the same for as long as this file exists, different for a copy of it (a backup
    restored, a directory moved to another disk), which gets a new inode or at least
    a new birth time. Read once per start (mrs.core.seqspace keeps it in the journal);
    where the filesystem keeps no birth time, the inode alone (a copy that happens to
    take the freed inode of the original then goes unnoticed)."""
    buffer = _STATX.read(_AT_FDCWD, os.fsencode(path), 0, _STATX_INO | _STATX_BTIME)
    if buffer is None:
        return _INO.pack(os.stat(path).st_ino)
    inode = _INO.pack(_INO.unpack_from(buffer, _INO_AT)[0])
    if not _MASK.unpack_from(buffer, _MASK_AT)[0] & _STATX_BTIME:
        return inode
    return inode + _BTIME.pack(*_BTIME.unpack_from(buffer, _BTIME_AT))
