"""The sending side of one replication link: the records go out in order, each either
written by the commit loop straight to the socket the moment it is sealed, or sent by
the link's own task.

Why the commit loop writes: an inline commit holds the loop for the local flush, so a
record handed to the link's task leaves only after it, and the answer waits for two
flushes one after the other (here, then on the replica). Sealed before the flush
(mrs.replication.stream `RecordingStore`) and written to the socket there, the record
is on its way while this instance flushes, and the replica's flush overlaps its own.

At the seal, the loop writes a record to the replicas an answer waits for only
(`write_first`): the `acks_needed` in-sync ones that have acknowledged the most. It
writes it to a replica still catching up once the local flush is done (the stream's
`on_flushed`); the other in-sync replicas get it from their link's task with the
records of the next commits, REPLICATION_REST_HOLD_S later (mrs.replication.active
`_held`). Why: with every instance flushing the same record at once (three on one
disk here), each flush took longer; with one replica flushing beside the active, the
active's commit and the first acknowledgement both came sooner (benchmarks/README.md,
"Only the replicas an answer waits for"). The choice follows the acknowledgements, so
a replica that stalls stops being written first once another one has acknowledged more.

The link's task sends everything else: the catch-up, a bridge or a full copy when
the link starts, the held records, and any record the loop could not write (the task
was sending, the record does not follow the last one out, or the socket took only part
of it, whose rest the task sends first). The two never write at once: the loop writes only while
the task is not sending. A plain TCP stream and the TLS link's stream
(mrs.transport.tls_stream, which encrypts the record there and then) are written from
the loop; over any other stream (the simulator's) the task sends every record.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping

import trio

from mrs.transport.tls_stream import TlsStream


class LinkOut:
    """What has gone out on one replica link, and the two ways of sending more."""

    def __init__(self, stream: trio.abc.Stream, cursor: int) -> None:
        self.stream = stream
        self.cursor = cursor
        """The last record handed to the socket (whole, or its rest in `leftover`)."""
        self.leftover = b""
        """The part of record `cursor` the socket did not take: the task sends it first."""
        self.sending = True
        """The task is in a send (the link's first frames, before `send` runs, count)."""
        self._socket = stream.socket if isinstance(stream, trio.SocketStream) else None
        self._tls = stream if isinstance(stream, TlsStream) else None
        self._wanted = trio.Event()

    def rearm(self) -> trio.Event:
        """A fresh event for the task to wait on, set by the next `want`: taken before
        the task looks whether anything is left to send, so no `want` is missed."""
        self._wanted = trio.Event()
        return self._wanted

    def want(self) -> None:
        """Wake the task: a record the loop did not write (whole) is left to send.
        Why not at every seal: the loop writes nearly every record itself, and a task
        woken for nothing costs the active's loop a scheduler pass per link per record
        (benchmarks/README.md, "What a paced put costs, and three changes to its path")."""
        self._wanted.set()

    def has_work(self, last_sealed: int) -> bool:
        """Whether the task has something to send: a record up to `last_sealed` not yet
        handed to the socket, or the rest of one that the socket (or the TLS stream)
        did not take whole."""
        return (
            self.cursor < last_sealed
            or bool(self.leftover)
            or (self._tls is not None and self._tls.unsent_bytes > 0)
        )

    def write_now(self, number: int, body: bytes) -> None:
        """Write record `number` to the socket now, if it is the next one and the task
        is not sending; what the socket cannot take goes to the task."""
        if self.sending or number != self.cursor + 1:
            return
        if self._tls is not None:  # encrypted now; the stream keeps what the socket left
            if self._tls.send_nowait(body):  # refused while some is left: the task sends
                self.cursor = number
            return
        if self._socket is None or self.leftover:
            return
        try:
            written = os.write(self._socket.fileno(), body)
        except BlockingIOError:
            written = 0
        except OSError:
            return  # closed or broken: the task finds out and the link is dialed again
        self.cursor = number
        if written < len(body):
            self.leftover = body[written:]

    async def send(self, frames: Iterable[bytes]) -> None:
        """Send the rest of a record the loop began, then `frames`, in order."""
        self.sending = True
        try:
            if self.leftover:
                rest, self.leftover = self.leftover, b""
                await self.stream.send_all(rest)
            if self._tls is not None and self._tls.unsent_bytes:
                await self._tls.send_all(b"")  # what the socket left of a record
            for body in frames:
                await self.stream.send_all(body)
        finally:
            self.sending = False


def write_first(
    names: Iterable[str], in_sync: Collection[str], acked: Mapping[str, int], count: int
) -> list[str]:
    """The replicas the loop writes a record to as it is sealed: `count` of them (at
    least one), in-sync ones first, then those that acknowledged the most (ties in
    `names`' order)."""
    ranked = sorted(names, key=lambda name: (name in in_sync, acked.get(name, -1)), reverse=True)
    return ranked[: max(1, count)]
