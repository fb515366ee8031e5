"""The replication link's frames: a 4-byte big-endian length, then one msgpack map.

Why not `mrs.transport.framed`: that stream is bound to the client protocol's event
tables (`mrs.protocol`); the replication link has five messages of its own, between
instances of one group, so it reuses the framing idea (length prefix, one bounded
frame, msgpack) with no event table:

    active -> replica  {"t": "hello", "group": id, "term": T, "from": name}
    replica -> active  {"t": "hello", "name": name, "pos": [term, number]}
    active -> replica  {"t": "commit", "term": T, "n": n, "batches": [[puts, deletes], ...]}
    active -> replica  {"t": "copy", "term": T, "n": n, "items": [...], "last": bool}
    replica -> active  {"t": "ack", "n": n}  or  {"t": "refuse", "why": text}
    active -> replica  {"t": "ping"}  (an idle link, to a replica whose hello has
                       "pings": true)  ->  {"t": "pong"}

A commit is the active's journal writes of one commit, in order: each batch's puts
as [journal, key, value] and deletes as [journal, key] (journals.batch
`encode_batches`, the form a commit log record holds too).
"""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import trio

from mrs.limits import REPLICATION_FRAME_BYTES_MAX

_LENGTH = struct.Struct(">I")
HELLO_BYTES_MAX = 4096
"""The hello frame at most (it names a group, a term and an instance: tens of bytes).
Why a bound of its own: before its hello a connection is anyone's, and a stranger's
hello announced at REPLICATION_FRAME_BYTES_MAX held 30 MB of a replica's memory per
connection it sent that much on (mrs.replication.replica `_read_hello`)."""
ANSWER_BYTES_MAX = 64 << 10
"""A replica's frames at most, as the active reads them (its answer to the hello, an
acknowledgement, a refusal or a failure, whose reasons it clips to
PEER_TEXT_CHARS_MAX): tens of bytes. Why a bound of its own: the active read them at
REPLICATION_FRAME_BYTES_MAX, so whatever answered at a replica's address (a lying
peer, another program on a reused port) could announce a 256 MiB frame and hold that
much of the active's memory per link while it trickled it."""


class LinkBroken(Exception):
    """The other end closed, sent a frame too long or one that is not a map."""


class LinkClosed(LinkBroken):
    """The other end closed the link (a link lost, not a fault of what it sent)."""


class CannotStore(LinkBroken):
    """A replica's journals refused a write (a full or failing disk): it tells the active
    why ("fail") and acknowledges nothing until they take writes again."""


class LinkRefused(LinkBroken):
    """The other end refused the link or a record ("refuse"), saying why."""


class WrongInstance(LinkBroken):
    """The replica that answered at an instance's replication address names another
    instance (a wrong address in a machine's bus file, a port forwarded to the wrong
    place): its acknowledgements would be counted under a name that is not its own."""


def frame(message: dict[str, Any]) -> bytes:
    body = msgpack.packb(message, use_bin_type=True)
    return _LENGTH.pack(len(body)) + body


PING_FRAME = frame({"t": "ping"})
"""What the active sends on an idle link; the replica answers PONG (a replica of an
earlier build, whose hello does not say "pings", is sent none: it would refuse one)."""
PONG = {"t": "pong"}


class FrameReader:
    """Whole frames out of a trio stream, one bounded frame at a time."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._buffer = bytearray()

    async def _fill(self, size: int) -> None:
        while len(self._buffer) < size:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise LinkClosed("closed by the other end")
            self._buffer += data

    async def next(self, bytes_max: int = REPLICATION_FRAME_BYTES_MAX) -> dict[str, Any]:
        """The next whole message; LinkBroken for a frame over `bytes_max`, refused
        from its length before its bytes are read."""
        await self._fill(_LENGTH.size)
        (length,) = _LENGTH.unpack_from(self._buffer)
        if length > bytes_max:
            raise LinkBroken(f"frame of {length} bytes (at most {bytes_max})")
        await self._fill(_LENGTH.size + length)
        return self._take(length)

    def buffered(self) -> dict[str, Any] | None:
        """The next message if its whole frame is already received, else None (no
        wait): a replica applies a burst of commits in one transaction."""
        if len(self._buffer) < _LENGTH.size:
            return None
        (length,) = _LENGTH.unpack_from(self._buffer)
        if length > REPLICATION_FRAME_BYTES_MAX or len(self._buffer) < _LENGTH.size + length:
            return None  # too long: `next` says so
        return self._take(length)

    def _take(self, length: int) -> dict[str, Any]:
        body = bytes(self._buffer[_LENGTH.size : _LENGTH.size + length])
        del self._buffer[: _LENGTH.size + length]
        try:
            message = msgpack.unpackb(body, raw=False)
        except (ValueError, msgpack.UnpackException) as error:
            raise LinkBroken(f"not msgpack: {str(error) or type(error).__name__}") from None
        if not isinstance(message, dict) or "t" not in message:
            raise LinkBroken("a frame that is not a message")
        return message
