"""Which lock.mdb the journals' owner has open: no other process opens another beside it.

Why: LMDB keeps the writers' mutex and the table of readers in `lock.mdb`, a file
each process maps when it opens the environment. A `lock.mdb` deleted while the
journals' owner (their server) runs is still mapped by the owner, but the next
process to open the journals makes a new, empty one and shares nothing with the
owner: a guest writer (`JournalStore(..., beside_owner=True)`) then commits at the
same moments as the owner, each over the other's pages (the owner died of
`Assertion 'pglast <= env->me_pglast' failed in mdb_freelist_save()`, acknowledged
messages at risk), and a reader is invisible to the owner, which reuses the pages
it reads. Deleting "stale" lock files is a common clean-up step.

So the owner writes into `writer.lock` (the file it holds an exclusive flock on, see
`journals.store._writer_lock`) its pid and the device and inode of the `lock.mdb` it
opened. A guest, and a reader while the owner lives, opens the journals only while
`lock.mdb` is that file; otherwise it is refused in one line (JournalError) naming
the way out: restart the owner, which opens a new `lock.mdb` and records it. A
`writer.lock` with no record (written by a version before this one) checks nothing.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from journals.batch import JournalError

LOCK_FILE_NAME = "lock.mdb"
WRITER_LOCK_NAME = "writer.lock"
READER_SLOT_BYTES = 64
LOCK_HEADER_BYTES = 4096
"""LMDB's lock.mdb: a header (192 bytes on 64-bit Linux) and one 64-byte slot per
reader. What `allocate_new` gives is at least that; LMDB takes a larger file as is."""


def allocate_new(directory: Path, max_readers: int) -> None:
    """Give a lock.mdb not made yet its disk blocks before LMDB maps it: raise OSError
    naming the file (ENOSPC) when the disk cannot, as any other file the caller makes.

    Why: LMDB makes a new lock.mdb with ftruncate (a file of holes) and writes its
    header and reader slots through a shared map. On a full disk the first store to a
    page with no block killed the process with SIGBUS, unsaid: the first `mrs jplay`
    of a group whose disk had filled, a new client SAF journal or a new group on a
    disk with a few KiB free. An existing lock.mdb is left alone: another process may
    have it mapped, and a larger file would change its count of reader slots."""
    path = directory / LOCK_FILE_NAME
    size = LOCK_HEADER_BYTES + max_readers * READER_SLOT_BYTES
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        os.close(fd)
        os.unlink(path)  # left empty, LMDB would make it again with holes
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):  # no such call here: as before
            return
        raise OSError(error.errno, os.strerror(error.errno or errno.EIO), str(path)) from None
    os.close(fd)


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None if there is none."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def record_owner(writer_fd: int, journals: Path) -> None:
    """Called by the owner once LMDB opened the journals at `journals`: record its
    pid and the lock.mdb it has open in the writer lock it holds (`writer_fd`)."""
    identity = _identity(journals / LOCK_FILE_NAME)
    if identity is None:  # LMDB opened without a lock file: nothing to hold others to
        return
    text = f"{os.getpid()} {identity[0]} {identity[1]}\n".encode()
    os.ftruncate(writer_fd, 0)
    os.pwrite(writer_fd, text, 0)


def _recorded(journals: Path) -> tuple[int, tuple[int, int]] | None:
    """The owner's pid and lock.mdb identity as it recorded them; None if none is."""
    try:
        words = (journals / WRITER_LOCK_NAME).read_text().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(words) != 3 or not all(word.isdigit() for word in words):
        return None
    pid, device, inode = (int(word) for word in words)
    return pid, (device, inode)


def _owner_alive(journals: Path) -> bool:
    """Whether a process holds the owner's writer lock now (a shared lock, taken
    without waiting and let go at once, is refused while it does)."""
    try:
        fd = os.open(journals / WRITER_LOCK_NAME, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)  # closing lets go of a shared lock taken
    return False


def check_beside_owner(journals: Path, owner_alive: bool | None = None) -> None:
    """Raise JournalError if the journals at `journals` have a live owner whose
    lock.mdb is no longer the file at their path (deleted, or replaced by one another
    process made since). `owner_alive`: known already (a guest that found the writer
    lock held); None: find out, only when the files disagree."""
    recorded = _recorded(journals)
    if recorded is None:
        return
    pid, opened = recorded
    now = _identity(journals / LOCK_FILE_NAME)
    if now == opened:
        return
    if owner_alive is None:
        owner_alive = _owner_alive(journals)
    if not owner_alive:
        return  # the owner is gone: its lock.mdb went with it
    what = "was deleted" if now is None else "was replaced by another file"
    raise JournalError(
        f"{journals / LOCK_FILE_NAME} {what} while the process that owns these journals "
        f"(pid {pid}, their server) has them open: LMDB could not keep this process's "
        "reads and writes apart from its commits; nothing was opened. Restart that "
        "process (it makes a new lock.mdb), then run this again"
    )
