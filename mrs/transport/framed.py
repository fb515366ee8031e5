"""One framed stream: a trio stream carrying MRS frames, the I/O half of a wire.Connection.

The server session, the dialed end of a link and the client library all did the same
three things around their sans-I/O `mrs.protocol.Connection` (now done here): queue frames and write
them in one `send_all` per wake-up (so replies ready together share a write), read
what one recv brings and take every complete event out of it, and during a handshake
wait for the next event within a deadline. `FramedStream` does them once.

Bounds: a frame longer than the connection's `frame_bytes_max` is refused from its
header (the Connection raises RemoteProtocolError); one read takes at most
`RECEIVE_BYTES_MAX` bytes; `wait_drained` lets a reader pause while more than a given
number of bytes wait to be written, so a peer that does not read cannot make the
outbox grow without bound.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Final

import trio
from mypy_extensions import mypyc_attr

from mrs import protocol as wire
from mrs.limits import (
    ANSWER_BATCH_ITEMS_MAX,
    PUT_BATCH_ITEMS_MAX,
    PUT_GROUP_BYTES_MAX,
    RECEIVE_BYTES_MAX,
)
from mrs.protocol.base import build_unchecked
from mrs.protocol.event_types import ANSWER_BATCH, PUT, PUT_BATCH
from mrs.transport.plain_socket import receive_plain, send_all_plain
from mrs.transport.tls_stream import TlsStream

GROUPED_ITEMS_MAX: Final = min(ANSWER_BATCH_ITEMS_MAX, PUT_BATCH_ITEMS_MAX)
"""Events one grouped frame (a PutBatch or an AnswerBatch) holds at most."""
# Read per event sent or received: an attribute's alias saves ~20 ns per read once
# compiled (benchmarks/README.md, "Final aliases").
_SOCKET_STREAM: Final = trio.SocketStream
_TLS_STREAM: Final = TlsStream


class StreamClosed(Exception):
    """The peer closed the stream (or sent a Fatal) while an event was awaited."""


@mypyc_attr(allow_interpreted_subclasses=True)  # the client's and links' streams
@dataclass(eq=False)
class FramedStream:
    """A stream and its protocol state, with an outbox written by one send loop."""

    stream: trio.abc.Stream
    connection: wire.Connection
    closed: bool = False
    """Set by the owner when the connection is over: later sends are dropped."""
    _outbox: bytearray = field(default_factory=bytearray)
    """Frames queued, encoded straight into one buffer (no bytes object per frame)."""
    _ready: trio.Event = field(default_factory=trio.Event)
    _ready_set: bool = False
    """`_ready` is set already (kept equal to `_ready.is_set()`): every frame or answer
    queued would otherwise call the interpreted `Event.set`, a Python call per put on
    the client and per answer on the server, where one per wake-up is enough."""
    _drained: trio.Event = field(default_factory=trio.Event)
    _writing: bool = False
    """A write is under way (`write`): `write_now` waits its turn, so the bytes stay
    in order."""
    _writing_bytes: int = 0
    """How many bytes the write under way holds: a peer that does not read keeps them
    here, out of the outbox, and `wait_drained` counts them too."""
    _grouped: list = field(default_factory=list)
    """Events queued to share one frame (`answer`, `send_put`), not yet framed: at
    most GROUPED_ITEMS_MAX, and for puts about PUT_GROUP_BYTES_MAX bytes."""
    _grouped_bytes: int = 0

    # -- sending --------------------------------------------------------------------

    def send(self, event: object) -> None:
        """Queue `event`'s frame for the send loop (dropped once closed).

        Raises LocalProtocolError, as Connection.send does."""
        if self.closed:
            return
        if self._grouped:  # the events queued before it go first
            self._frame_grouped()
        self.connection.send_into(event, self._outbox)  # type: ignore[arg-type]
        if not self._ready_set:  # one Event.set per wake-up (`_ready_set`)
            self.wake()

    def answer(self, event: object) -> None:
        """Queue an answer (PutDone, Confirmed) to share one AnswerBatch frame with the
        answers queued with it. Only for a peer that reads AnswerBatch (its Hello's
        `answer_batches`)."""
        if self.closed:
            return
        self._group(event, 0)

    def send_put(self, put: wire.Put, size_bytes: int) -> None:
        """Queue a Put (about `size_bytes` in a frame) to share one PutBatch frame with
        the puts queued with it: the server handles a PutBatch's puts exactly as if
        each had come alone, and one frame costs both sides one encode and one decode
        instead of one per put (benchmarks/README.md)."""
        if self.closed:
            return
        if self._grouped and self._grouped_bytes + size_bytes > PUT_GROUP_BYTES_MAX:
            self._frame_grouped()
        self._group(put, size_bytes)

    def _group(self, event: object, size_bytes: int) -> None:
        """Queue `event` in the group framed together: when anything else is sent,
        when the outbox is taken or written, or when GROUPED_ITEMS_MAX wait."""
        grouped = self._grouped
        grouped.append(event)
        self._grouped_bytes += size_bytes
        if len(grouped) >= GROUPED_ITEMS_MAX:
            self._frame_grouped()
        if not self._ready_set:  # one Event.set per wake-up (`_ready_set`)
            self.wake()

    def _frame_grouped(self) -> None:
        """Frame the queued group into the outbox: one event alone as itself, more as
        one PutBatch or AnswerBatch (built unchecked: each is an event this side built,
        within the batch's bounds)."""
        grouped = self._grouped
        self._grouped = []
        self._grouped_bytes = 0
        if len(grouped) == 1:
            event = grouped[0]
        elif type(grouped[0]) is PUT:
            event = build_unchecked(PUT_BATCH, grouped)
        else:
            event = build_unchecked(ANSWER_BATCH, grouped)
        if self.connection.can_send(event):  # else the peer broke the protocol: dropped
            self.connection.send_into(event, self._outbox)

    @property
    def outbox_bytes(self) -> int:
        """Bytes queued and not yet handed to the stream."""
        return len(self._outbox)

    @property
    def unsent_bytes(self) -> int:
        """Bytes queued or held by a write under way: what the peer has not taken."""
        return len(self._outbox) + self._writing_bytes

    def take(self) -> bytes | bytearray:
        """Everything queued, as one buffer (handed over, not copied); the outbox is
        empty afterwards."""
        if self._grouped:
            self._frame_grouped()
        data = self._outbox
        self._outbox = bytearray()
        return data

    def drop_queued(self) -> None:
        """Forget every frame queued and not yet handed to the stream (a connection
        being closed for what it left unread); a write under way keeps its own."""
        self._outbox = bytearray()
        self._grouped = []
        self._grouped_bytes = 0

    def wake(self) -> None:
        """Wake whoever waits in `wait_ready` (e.g. to notice the connection is lost)."""
        self._ready_set = True
        self._ready.set()

    async def wait_ready(self) -> None:
        """Wait for a send or a wake: the first step of a custom send loop, which may
        queue more and then `take` everything queued (b"" after a bare wake)."""
        await self._ready.wait()
        self._ready = trio.Event()
        self._ready_set = False

    async def send_loop(self) -> None:
        """Write whatever is queued, one send_all per wake-up, until cancelled."""
        while True:
            await self.wait_ready()
            await self.flush()  # `write` wakes whoever waits in `flushed`

    def write_now(self) -> bool:
        """Hand what is queued to a plain TCP socket (or a TLS stream of
        mrs.transport.tls_stream) at once, as far as it takes it without blocking; the
        send loop writes the rest (and meets any error). True if any of it went.

        Why: a server answers most requests right after a commit, and the send loop
        runs only when the scheduler comes round to it, about 0.14 ms later at low
        load (paced latency, benchmarks/README.md). Nothing is written while another write is
        under way, so the bytes keep their order."""
        if self._grouped:
            self._frame_grouped()
        outbox = self._outbox
        if not outbox or self._writing or self.closed:
            return False
        stream = self.stream
        if type(stream) is _TLS_STREAM:  # encrypted now; it keeps what the socket left
            if stream.send_nowait(bytes(outbox)):  # type: ignore[attr-defined]
                outbox.clear()
                if stream.unsent_bytes:  # type: ignore[attr-defined]
                    self.wake()  # the send loop writes what the socket left (`flush`)
                return True
            return False
        if type(stream) is not trio.SocketStream:
            return False  # another stream (the simulator's): its send loop writes
        try:
            written = os.write(stream.socket.fileno(), outbox)
        except OSError:  # would block, or the peer is gone: the send loop's business
            return False
        del outbox[:written]
        return written > 0

    async def flush(self) -> None:
        """Write everything queued now (when no send loop runs, e.g. a last Fatal), and
        what a TLS stream kept of a `write_now` (its send writes that first)."""
        stream = self.stream
        if (
            self._outbox
            or self._grouped
            or (type(stream) is _TLS_STREAM and stream.unsent_bytes)  # type: ignore[attr-defined]
        ):
            await self.write(self.take())

    async def write(self, data: bytes | bytearray) -> None:
        """Write `data` to the stream; every write goes through here, so `write_now`
        knows when one is under way and waits its turn."""
        self._writing = True
        self._writing_bytes = len(data)
        try:
            stream = self.stream
            if type(stream) is _SOCKET_STREAM:  # plain TCP: send_all, fewer layers
                await send_all_plain(stream.socket, data)
            else:
                await stream.send_all(data)
        finally:
            self._writing = False
            self._writing_bytes = 0
            self._drained.set()  # for `flushed` and `wait_drained`, whichever loop wrote

    async def flushed(self) -> None:
        """Until everything queued so far is handed to the stream whole: nothing in
        the outbox and no write under way (a last Fatal, a client's last GiveBack)."""
        while self._outbox or self._grouped or self._writing:
            self._drained = trio.Event()
            await self._drained.wait()

    async def wait_drained(self, high_bytes: int) -> None:
        """Until at most `high_bytes` wait in the outbox and the write under way
        (backpressure for a reader)."""
        while len(self._outbox) + self._writing_bytes > high_bytes:
            self._drained = trio.Event()
            await self._drained.wait()

    async def send_now(self, event: object) -> None:
        """Write one frame directly (a handshake, before any send loop runs)."""
        await self.write(self.connection.send(event))  # type: ignore[arg-type]

    # -- receiving ------------------------------------------------------------------

    async def receive_events(self) -> tuple[list[wire.Event], bool]:
        """Read what one recv brings: (the complete events in it, False at EOF).

        Raises RemoteProtocolError for a bad frame (the connection is then broken)."""
        stream = self.stream
        data: bytes | bytearray
        if type(stream) is _SOCKET_STREAM:  # plain TCP: receive_some, fewer layers
            data = await receive_plain(stream.socket, RECEIVE_BYTES_MAX)
        else:
            data = await stream.receive_some(RECEIVE_BYTES_MAX)
        self.connection.receive_data(data)
        return self.connection.events(), bool(data)

    async def next_event(self, timeout_s: float = math.inf) -> wire.Event:
        """The next event, reading as needed, within `timeout_s` (trio.TooSlowError).

        Raises StreamClosed at EOF, and RemoteProtocolError for a bad frame."""
        connection = self.connection
        with trio.fail_after(timeout_s):
            while True:
                event = connection.next_event()
                if event is wire.CLOSED:
                    raise StreamClosed("peer closed the connection")
                if event is not wire.NEED_DATA:
                    return event  # type: ignore[return-value]
                connection.receive_data(await self.stream.receive_some(RECEIVE_BYTES_MAX))

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet a complete frame."""
        return self.connection.buffered_bytes


@mypyc_attr(allow_interpreted_subclasses=True)  # the dialer's link channel
@dataclass(eq=False)
class GroupChannel(FramedStream):
    """A group's end of a connection: a client's or a peer group's session, or a link
    the group dialed. Much of what a group sends is an answer its commit made later
    (PutDone, Confirmed, LinkAck, the next LinkTransfer), and between the peer breaking
    the protocol (killed mid-frame) and the channel being closed, such an answer raised
    LocalProtocolError inside the commit loop and stopped the whole group. So an event
    the connection can no longer carry is dropped: the peer is gone, a client's
    requests end with its connection, a peer group sends again what was not
    acknowledged (tests/unit/test_server_session.py). A client's own link keeps
    FramedStream's rule: a send on a closed connection raises to its caller."""

    def send(self, event: object) -> None:
        if self.connection.can_send(event):
            FramedStream.send(self, event)
