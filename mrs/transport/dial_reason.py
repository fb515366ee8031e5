"""Why a connection could not be made, in an operator's words: the operating system's
reason found under the wrappers trio and the dialers put around it.

Why one module: trio reports a failed dial as "all attempts to connect to H:P failed",
the reason (refused, unreachable, an unknown host) in the exception group under it.
The client library, `mrs status`, the dead-letter handler and a replicated instance's
dialer each dug it out with a walk of their own, and worded the same errno
differently ("connection refused" in one, "connection refused: nothing listens there"
in another)."""

from __future__ import annotations

import errno
import os
import socket

NOTHING_LISTENS = "connection refused: nothing listens there"
_ERRNO_WORDS = {
    errno.ECONNREFUSED: NOTHING_LISTENS,
    errno.EHOSTUNREACH: "host unreachable",
    errno.ENETUNREACH: "network unreachable",
    errno.ETIMEDOUT: "connection timed out",
    errno.ECONNRESET: "connection reset",
}
_CHAIN_MAX = 64
"""Errors looked at at most: a chain of causes and groups is walked, bounded."""


def dial_reason(error: BaseException) -> str | None:
    """The operating system's reason under `error` (its exception groups, causes and
    contexts, outermost first), in words; None when there is none (a timeout, a
    protocol refusal: the caller words those)."""
    stack, seen = [error], 0
    while stack and seen < _CHAIN_MAX:
        current, seen = stack.pop(0), seen + 1
        if isinstance(current, socket.gaierror):
            return f"cannot resolve the host name ({current.strerror or current})"
        if isinstance(current, OSError) and current.errno is not None:
            return _ERRNO_WORDS.get(current.errno) or os.strerror(current.errno).lower()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None
