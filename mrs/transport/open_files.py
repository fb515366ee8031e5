"""The process's open-file limit, which bounds how many connections a server may hold.

Why: every connection is a descriptor, and so is every journal file, log, listener
and web request. With the common soft limit of 1,024 and `connections_per_peer_max`
of 1,000, one peer's idle connections took every descriptor: the accept loop then
failed with EMFILE ten times a second, no other client could connect, and nothing
else the server opens (an event log rolled, a web request, the PCJ archive's pipes)
could be opened. So a server raises its soft limit to the hard one at start, as Go's
runtime and most servers do, and admission (mrs.transport.admission) keeps
OPEN_FILES_KEPT_MIN descriptors for the server's own files and lets one peer address
hold at most half of the rest.
"""

from __future__ import annotations

import logging
import math
import resource
import time

from mrs.limits import OPEN_FILES_KEPT_MIN

log = logging.getLogger("mrs.network")

OPEN_FILES_UNLIMITED = 1 << 20
"""What an unlimited soft limit counts as (the kernel's default nr_open)."""


def open_files_max() -> int:
    """The soft limit on open descriptors now (read each time: an operator may change
    it with `prlimit` while the server runs)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return OPEN_FILES_UNLIMITED if soft == resource.RLIM_INFINITY else soft


def connections_max() -> int:
    """Connections of all peers the server may hold: its descriptors, less its own."""
    return max(1, open_files_max() - OPEN_FILES_KEPT_MIN)


def raise_open_files_limit() -> int:
    """Raise the soft limit to the hard limit; return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_UNLIMITED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as error:  # a container may forbid it: keep the soft one
            log.warning(
                "open files: could not raise the limit from %d to %d: %s", soft, wanted, error
            )
    return open_files_max()


OUT_OF_FILES_REMINDER_S = 60.0
"""While accepts keep failing for want of descriptors, a reminder this often."""


class OutOfFilesLog:
    """The log of one accept loop whose accepts fail for want of descriptors (EMFILE).

    Why: the loop retries every CAPACITY_SLEEP_S and logged each failure: ten ERROR
    lines a second per listener (the client port and each HTTP endpoint) for as long
    as the descriptors stay taken, which fills a disk in a day and buries the one line
    that says what to do. Now one line when it starts (what is wrong, what the server
    does, what to do), a reminder each OUT_OF_FILES_REMINDER_S, and one line when
    accepts succeed again."""

    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self._since_s: float | None = None
        self._reminded_s = -math.inf
        self._failures = 0

    def failed(self, error: OSError) -> None:
        now_s = time.monotonic()
        self._failures += 1
        if self._since_s is None:
            self._since_s = self._reminded_s = now_s
            self._log.error(
                "%s: cannot accept connections: %s (ulimit -n %d): new connections "
                "wait in the listen backlog, open ones are served; close some or raise "
                "the limit (prlimit --nofile, systemd LimitNOFILE=)",
                self._what, error.strerror or error, open_files_max(),
            )  # fmt: skip
        elif now_s - self._reminded_s >= OUT_OF_FILES_REMINDER_S:
            self._reminded_s = now_s
            self._log.error(
                "%s: still cannot accept connections (%s) after %.0f s, %d tries",
                self._what, error.strerror or error, now_s - self._since_s, self._failures,
            )  # fmt: skip

    def accepted(self) -> None:
        """Called after each accept that succeeded: cheap unless it ends a shortage."""
        if self._since_s is not None:
            self._log.warning(
                "%s: accepting connections again after %.1f s without descriptors",
                self._what, time.monotonic() - self._since_s,
            )  # fmt: skip
            self._since_s = None
            self._failures = 0
