"""A plain TCP `trio.SocketStream`'s reads and writes, as `receive_some` and
`send_all` do them, in fewer layers (compiled).

Why: every read and write of every connection (the server's sessions, the client's
link) went through trio's stream methods: a conflict detector, the error
translation, the socket's method wrapper and trio's `_try_sync` async context
manager, all interpreted. A read with the data already there took about 10.6 µs of
CPU that way against 6.0 µs for the same steps written out (`os.read`, trio's two
checkpoints), and about 4% of the server's samples under peerbench's put and e2e
shapes went to reads alone (benchmarks/README.md).

The semantics are trio's:
- each call is a checkpoint whether or not the socket was ready (a cancelled caller
  sees Cancelled; a busy connection cannot starve the others);
- a read returns b"" at EOF; a write returns once every byte is handed to the
  socket (a cancelled write may have sent part of them: the stream is then broken,
  as with send_all);
- the socket's errors come out as `trio.ClosedResourceError` (closed here) or
  `trio.BrokenResourceError` (the connection broke); a socket closed while a call
  waits wakes it with ClosedResourceError (trio's `notify_closing`).

The descriptor is asked of the socket at each call, never kept: a closed socket
answers -1 (EBADF), so a call can never reach another connection that reused the
number. One task at a time reads and one writes a stream, as trio requires
(`FramedStream` has one receive loop, and `write` takes turns).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Any, Final, cast

import trio

_READ: Final = os.read
_WRITE: Final = os.write
_CHECKPOINT: Final = trio.lowlevel.checkpoint
_CHECKPOINT_IF_CANCELLED: Final = trio.lowlevel.checkpoint_if_cancelled
_CANCEL_SHIELDED_CHECKPOINT: Final = trio.lowlevel.cancel_shielded_checkpoint
_WAIT_READABLE: Final = trio.lowlevel.wait_readable
_WAIT_WRITABLE: Final = trio.lowlevel.wait_writable
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


async def send_all_plain(sock: Any, data: bytes | bytearray) -> None:
    """What `trio.SocketStream(sock).send_all(data)` does or raises."""
    if sock.did_shutdown_SHUT_WR:
        raise trio.ClosedResourceError("can't send data after sending EOF")
    view = memoryview(data)
    total = len(view)
    if not total:
        if sock.fileno() == -1:
            raise trio.ClosedResourceError("socket was already closed")
        await _CHECKPOINT()
        return
    await _CHECKPOINT_IF_CANCELLED()
    sent = 0
    waited = False
    try:
        while sent < total:
            try:
                sent += _write(sock, view[sent:])
            except BlockingIOError:
                await _WAIT_WRITABLE(sock)  # a checkpoint of its own
                waited = True
    finally:
        view.release()  # the caller's buffer may be resized again
    if not waited:
        await _CANCEL_SHIELDED_CHECKPOINT()


def _read(sock: Any, max_bytes: int) -> bytes:
    """One nonblocking read; BlockingIOError when nothing is there yet."""
    return cast(bytes, _on_descriptor(_READ, sock, max_bytes))


def _write(sock: Any, data: memoryview) -> int:
    """One nonblocking write; BlockingIOError when the socket's buffer is full."""
    return cast(int, _on_descriptor(_WRITE, sock, data))


def _on_descriptor(call: Callable[[int, Any], object], sock: Any, argument: Any) -> object:
    """`call(fd, argument)` on the socket's descriptor as it is now; BlockingIOError
    passes, any other OSError comes out as trio's stream error."""
    try:
        return call(sock.fileno(), argument)
    except BlockingIOError:
        raise
    except OSError as error:
        raise _stream_error(error) from error


def _stream_error(error: OSError) -> Exception:
    """The socket's error as trio's streams report it."""
    if error.errno in _CLOSED_ERRNOS:
        return trio.ClosedResourceError("this socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {error}")
