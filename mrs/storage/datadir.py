"""Own a group's data directory: one server per directory, and notice if it vanishes.

Why: two servers on one data directory each deliver the same stored message as a
first delivery (an unmarked duplicate); a data directory deleted or replaced under a
running server turns every later "STORED" into a lie (the writes go to an unlinked
file). So the server takes an exclusive `flock` on `data_dir/mrs.lock` for its whole
life (the kernel drops it on SIGKILL, so a crash never leaves a stale lock), and
checks the directory's identity before every commit and on a timer: a deleted or
replaced directory fails the commit (nothing more is acknowledged) and stops the
server with a non-zero exit. Journal tools open read-only and need no lock.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mrs.errors import OperatorError
from mrs.storage import file_identity

LOCK_FILE_NAME = "mrs.lock"


class DataDirError(OperatorError):
    """The data directory cannot be used (in use, deleted, replaced): one line for the
    operator; the server exits with status 1."""


def lock_holder_pid(data_dir: Path) -> int | None:
    """The pid written in the lock file by the server holding it (None if unknown)."""
    try:
        text = (data_dir / LOCK_FILE_NAME).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def data_dir_in_use(data_dir: Path) -> DataDirError:
    """The refusal of a second server on `data_dir`, naming the one that holds it
    (one wording for the lock itself and for `mrs serve`'s check before it binds)."""
    pid = lock_holder_pid(data_dir)
    holder = f"pid {pid}" if pid is not None else "another process"
    return DataDirError(
        f"data_dir {data_dir} is in use by another mrs serve ({holder}); "
        "one server per data directory"
    )


@dataclass
class DataDirGuard:
    """The lock on one data directory and the identity it had when the server opened
    it. `check()` raises DataDirError once it is no longer the same directory."""

    data_dir: Path
    lock_fd: int
    journal_file: Path | None = None
    journal_fd: int | None = None
    lost: str | None = None
    _lock_path: str = field(init=False, repr=False, default="")
    _journal_path: str = field(init=False, repr=False, default="")
    """The paths `check` stats, as strings made once: it runs before every commit."""
    _opened: list[tuple[str, tuple[int, int] | None]] = field(
        init=False, repr=False, default_factory=list
    )
    """Each watched path and the (device, inode) of the file opened there (None if it
    could not be read: that path is always looked at closely)."""

    def __post_init__(self) -> None:
        self._lock_path = str(Path(self.data_dir) / LOCK_FILE_NAME)
        self._remember(self._lock_path, self.lock_fd)

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirGuard:
        """Take the exclusive lock or refuse with the pid of the server that holds it."""
        data_dir = Path(data_dir)
        try:
            data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(data_dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise DataDirError(
                f"data_dir {data_dir}: cannot create {LOCK_FILE_NAME}: {error.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise DataDirError(f"data_dir {data_dir}: cannot lock: {error.strerror}") from None
            raise data_dir_in_use(data_dir) from None
        try:  # a full disk: said naming the file ("mrs: No space left on device" named none)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            os.fsync(fd)
        except OSError as error:
            os.close(fd)
            raise DataDirError(
                f"data_dir {data_dir}: cannot write {LOCK_FILE_NAME}: {error.strerror}"
            ) from None
        return cls(data_dir, fd)

    def watch_journal(self, journal_file: Path) -> None:
        """Remember the journal file (data.mdb) as opened, to notice a replacement."""
        self.journal_file = Path(journal_file)
        self._journal_path = str(self.journal_file)
        with contextlib.suppress(OSError):
            self.journal_fd = os.open(self.journal_file, os.O_RDONLY | os.O_CLOEXEC)
        if self.journal_fd is not None:
            self._remember(self._journal_path, self.journal_fd)

    def _remember(self, path: str, fd: int) -> None:
        try:
            opened = file_identity.of_fd(fd)
        except OSError:
            self._opened.append((path, None))
            return
        self._opened.append((path, (opened.device, opened.inode)))

    def check(self) -> None:
        """Raise DataDirError if the directory was deleted or replaced since opened.
        Cheap (a statx per file, no timestamps): it runs before every commit."""
        if self.lost is not None:
            raise DataDirError(self.lost)
        problem = self._problem()
        if problem is not None:
            self.lost = f"data_dir {self.data_dir} {problem}: refusing to acknowledge anything more"
            raise DataDirError(self.lost)

    def _problem(self) -> str | None:
        """None while every watched path still names the file opened there: that file
        is then neither deleted nor replaced (the open descriptor keeps its inode
        from being reused), so one statx per path settles it. Otherwise the change,
        worded (`_what_changed`). By statx without timestamps (mrs.storage.file_identity): a
        stat that reads data.mdb's times before every commit cost each commit's
        fdatasync an inode write on kernels with multigrain timestamps."""
        try:
            for path, opened in self._opened:
                now = file_identity.of_path(path)
                if opened != (now.device, now.inode):
                    return self._what_changed()
        except OSError:
            return self._what_changed()
        return None

    def _what_changed(self) -> str | None:
        """What became of the directory, from the open files and their paths."""
        try:
            lock = file_identity.of_fd(self.lock_fd)
            if lock.links == 0:
                return f"was deleted ({LOCK_FILE_NAME} is gone)"
            now = file_identity.of_path(self._lock_path)
            if (now.device, now.inode) != (lock.device, lock.inode):
                return "was replaced (another lock file is in its place)"
            if self.journal_fd is not None:
                name = os.path.basename(self._journal_path)
                journal = file_identity.of_fd(self.journal_fd)
                if journal.links == 0:
                    return f"was deleted ({name} is gone)"
                now = file_identity.of_path(self._journal_path)
                if (now.device, now.inode) != (journal.device, journal.inode):
                    return f"was replaced (another {name} is in its place)"
        except FileNotFoundError:
            return "was deleted or moved"
        except OSError as error:
            return f"cannot be checked ({error.strerror})"
        return None

    def commit_hook(
        self, inner: Callable[[str], None] | None, on_lost: Callable[[str], None]
    ) -> Callable[[str], None]:
        """A journal fault hook (run before each commit) that fails the commit with an
        OSError once the directory is lost, after `inner` (the harness's hook, if any);
        the directory is checked once a commit, at its start ("commit")."""

        def hook(phase: str) -> None:
            if inner is not None:
                inner(phase)
            if phase != "commit":
                return
            already = self.lost is not None
            try:
                self.check()
            except DataDirError as error:
                if not already:
                    on_lost(str(error))
                raise OSError(errno.ENOENT, str(error)) from None

        return hook

    def release(self) -> None:
        if self.journal_fd is not None:
            os.close(self.journal_fd)
            self.journal_fd = None
        if self.lock_fd >= 0:
            os.close(self.lock_fd)  # closing drops the flock
            self.lock_fd = -1


def data_dir_error_in(error: BaseException) -> DataDirError | None:
    """The DataDirError in `error` (itself, or inside an exception group), if any: how
    the CLI finds the one line to print among trio's nursery exception groups."""
    if isinstance(error, DataDirError):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            if (found := data_dir_error_in(inner)) is not None:
                return found
    return None
