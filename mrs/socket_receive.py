"""One read from a plain TCP `trio.SocketStream`, as `receive_some` does it, in fewer
layers (compiled).

Why: every read of every connection (the server's sessions, the client's link) went
through `SocketStream.receive_some`: its conflict detector, its error translation,
the socket's method wrapper and trio's `_try_sync` async context manager, all
interpreted. That was about 10.6 µs of CPU per read with the data already there,
against 6.0 µs for the same steps written out (`os.read`, trio's two checkpoints),
and about 4% of the server's samples under peerbench's put and e2e shapes went to it
(issue 17).

The semantics are receive_some's: a checkpoint whether or not data was there (a
cancelled caller sees Cancelled; a busy connection cannot starve the others), b""
at EOF, the socket's errors as `trio.ClosedResourceError` (closed here) or
`trio.BrokenResourceError` (the connection broke). A socket closed while the read
waits wakes it with ClosedResourceError (trio's `notify_closing`). The descriptor is
asked of the socket at each read, never kept: a closed socket answers -1 (EBADF), so
a read can never reach another connection that reused the number. Only one task may
read a stream at a time, as with receive_some (each owner has one receive loop).
"""

from __future__ import annotations

import errno
import os
from typing import Any, Final

import trio

_READ: Final = os.read
_CHECKPOINT_IF_CANCELLED: Final = trio.lowlevel.checkpoint_if_cancelled
_CANCEL_SHIELDED_CHECKPOINT: Final = trio.lowlevel.cancel_shielded_checkpoint
_WAIT_READABLE: Final = trio.lowlevel.wait_readable
_CLOSED_ERRNOS: Final = frozenset({errno.EBADF, errno.ENOTSOCK})


async def receive_plain(sock: Any, max_bytes: int) -> bytes:
    """What `trio.SocketStream(sock).receive_some(max_bytes)` returns or raises."""
    await _CHECKPOINT_IF_CANCELLED()
    try:
        data = _read(sock, max_bytes)
    except BlockingIOError:
        pass
    else:
        await _CANCEL_SHIELDED_CHECKPOINT()
        return data
    while True:
        await _WAIT_READABLE(sock)
        try:
            return _read(sock, max_bytes)
        except BlockingIOError:
            pass


def _read(sock: Any, max_bytes: int) -> bytes:
    """One nonblocking read; BlockingIOError when nothing is there yet."""
    try:
        return _READ(sock.fileno(), max_bytes)
    except BlockingIOError:
        raise
    except OSError as error:
        if error.errno in _CLOSED_ERRNOS:
            raise trio.ClosedResourceError("this socket was already closed") from None
        raise trio.BrokenResourceError(f"socket connection broken: {error}") from error
