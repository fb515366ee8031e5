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
import resource

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
