"""One client or link connection as the server holds it: the framed stream and its accounts.

`ServerSession.send` ends a request's in-flight account when its answer goes out,
so every request is counted until answered exactly once (requests_in_flight_max,
connection_bytes_max); the connection errors below are what a peer going away raises.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from mrs import protocol as wire
from mrs.config.guards import Guards
from mrs.core.refusals import clipped
from mrs.group.link_session import PeerLink
from mrs.group.queues import TargetQueue
from mrs.group.shapes import ByteAccount
from mrs.limits import UNREAD_ANSWERS_NOTE_BYTES_MIN
from mrs.transport.framed import FramedStream, GroupChannel
from mrs.transport.unread_answers import UnreadAnswers
from mrs.transport.watchdog import Liveness

log = logging.getLogger("mrs.server")

_session_ids = itertools.count(1)
_UNSENT_BYTES_MAX_DEFAULT = Guards().connection_bytes_max
"""A session's bound on unread answers until its Hello sets the group's own."""


@dataclass(eq=False, repr=False)
class ServerSession(GroupChannel):
    """One client connection: its framed stream, plus what the server tracks of it.

    Its repr is one short line: a generated one would spell out the outbox and every
    request in flight, and anything that formats a session (an error message, a log
    line) would then cost as much as the whole connection's state."""

    id: int = field(default_factory=lambda: next(_session_ids))
    attached: TargetQueue | None = None
    link: PeerLink | None = None
    peer: str = "?"
    host: str = "?"
    """The peer's address without the port: what limits and log throttling key on."""
    liveness: Liveness = field(default_factory=Liveness)
    in_flight: dict[int, int] = field(default_factory=dict)
    """Requests not yet answered: request_id -> body bytes (requests_in_flight_max)."""
    in_flight_bytes: int = 0
    account: ByteAccount = field(default_factory=ByteAccount)
    """Bodies of this connection's messages waiting in memory queues."""
    observe: Callable[[object], None] | None = None
    """Metrics (mrs.ops.metrics): called with every reply sent, when metrics are on."""
    program: str = ""
    """The program its Hello named (`mrs admin connections`)."""
    connected_s: float = field(default_factory=time.monotonic)
    """When it connected (monotonic): its age in `mrs admin connections`."""
    principal: str | None = None
    """Who authenticated on this connection (mrs.security), None with auth off."""
    principal_incarnation: str = ""
    """Which addition of that principal it proved (mrs.security.creds `Principal`):
    one removed and added again since ends it (`Authority.revoked`)."""
    tasks: trio.Nursery | None = None
    """The connection's nursery once its loops run: where a revocation starts the
    task that closes it (mrs.server.connections)."""
    revoked: str | None = None
    """Why its principal's credentials were revoked: the connection is closing."""
    partial_bytes: int = 0
    """Bytes of its unfinished frame counted in the group's total (mrs.transport.partial_frames)."""
    scope: trio.CancelScope | None = None
    """Ends the connection from outside its task (`evict`)."""
    evicted_because: tuple[str, str] | None = None
    """(the limit, why) `evict` closed it, to be told in a Fatal(EXCEEDQUOTA)."""
    written_after_commit: set[ServerSession] | None = None
    """The server's sessions with answers queued: after each commit it hands their
    outboxes to the sockets at once (`FramedStream.write_now`). A closed session
    leaves it (mrs.server.connections), so it holds live connections only."""

    def __repr__(self) -> str:
        return f"<ServerSession {self.id} {self.peer}>"

    answer_batches: bool = False
    """The client's Hello said it reads AnswerBatch frames (`answer` then batches)."""
    unsent_bytes_max: int = _UNSENT_BYTES_MAX_DEFAULT
    """Answers it may leave unread (the guard connection_bytes_max, set at its Hello):
    beyond, the connection is closed (`_unread`)."""
    unread_answers: UnreadAnswers | None = None
    """The group's count of answers left unread by all connections
    (answers_unread_bytes_max), None outside a server (tests of one session)."""
    unread_bytes: int = 0
    """Its unread answers as last counted there (kept by `UnreadAnswers`)."""
    _sent: trio.Event | None = None
    """Set by the next `send` (`next_send`), then forgotten."""

    def stalled_since(self) -> float:
        """When its last bytes arrived (mrs.transport.partial_frames closes the longest stalled)."""
        return self.liveness.heard_at

    def evict(self, limit: str, why: str) -> None:
        """Close this connection from outside its task, for `why` (a bound of `limit`).

        Its task lets go of the unfinished frame as it ends, a moment later: let go
        here, a receive already under way would go on parsing from the middle of that
        frame, break the protocol, and close without saying why."""
        self.evicted_because = (limit, why)
        if self.scope is not None:
            self.scope.cancel()

    async def next_send(self) -> None:
        """Until the next event is sent to this connection (or dropped as it closes):
        the receive loop waits so for deliveries whose marks' commit is under way."""
        sent = self._sent = trio.Event()
        await sent.wait()

    def send(self, event: object) -> None:
        if self._sent is not None:
            self._sent.set()
            self._sent = None
        if self.closed:
            return
        self._answered(event)
        if self.evicted_because is not None and type(event) is not wire.Fatal:
            return  # closing: answers made before its task ends would only pile up
        try:
            super().send(event)
        except wire.LocalProtocolError as error:
            self._cannot_carry(error)
            return
        unsent_bytes = self.unsent_bytes
        if unsent_bytes > self.unsent_bytes_max:
            self._unread()
        elif unsent_bytes - self.unread_bytes > UNREAD_ANSWERS_NOTE_BYTES_MIN:
            self.count_unread()

    def count_unread(self) -> None:
        """Count its unread answers now in the group's total (answers_unread_bytes_max),
        which may close the connection holding most."""
        if self.unread_answers is not None:
            self.unread_answers.hold(self, self.unsent_bytes)

    async def write(self, data: bytes | bytearray) -> None:
        """FramedStream.write, then its count in the group's total of unread answers
        brought down to what its peer has not taken (the peer read)."""
        try:
            await FramedStream.write(self, data)
        finally:
            if self.unread_bytes:  # its peer took some: counted at once
                self.count_unread()

    def _unread(self) -> None:
        """Its peer leaves more answers unread than it may: closed (EXCEEDQUOTA), and
        what waits for it let go at once. Why: the receive loop stops reading a
        connection whose answers pass OUTBOX_BYTES_HIGH, but its parked gets still take
        the messages put meanwhile (a thousand of 1 MiB each, by default), so a client
        that parks gets and never reads held the server's memory for as long as it kept
        the connection. Its unconfirmed messages come back as after any lost connection
        (POSSDUPL); a memory message already handed to it is gone with it, as it would
        be had it read it and died."""
        unsent_bytes = self.unsent_bytes
        self.drop_queued()
        if self.evicted_because is None:
            self.evict(
                "connection_bytes_max",
                f"{unsent_bytes} bytes of answers unread "
                f"(connection_bytes_max={self.unsent_bytes_max})",
            )

    def _cannot_carry(self, error: wire.LocalProtocolError) -> None:
        """An event this connection cannot carry (a frame over its limit: a message
        stored before headers were bounded): this connection ends, not the group,
        whose commit loop made the event. What it held comes back as after any lost
        connection (POSSDUPL)."""
        log.error("connection %s closed: %s", self.peer, clipped(str(error)))
        self.evict("frame_bytes_max", str(error))

    def answer(self, event: object) -> None:
        """Send a PutDone or Confirmed: queued to share one AnswerBatch frame with the
        other answers ready now when the client reads them, else sent alone."""
        if self.closed:
            return
        if not self.answer_batches:
            self.send(event)
            return
        self._answered(event)
        FramedStream.answer(self, event)

    def _answered(self, event: object) -> None:
        """What the server tracks of a frame going out: metrics, the end of the
        request it answers, and the commit's list of sessions to write at once."""
        if self.observe is not None:
            self.observe(event)
        in_flight = self.in_flight
        if in_flight:  # every request is answered exactly once: the answer ends it
            size = in_flight.pop(getattr(event, "request_id", 0), None)
            if size is not None:
                self.in_flight_bytes -= size
        if not self._outbox and not self._grouped and self.written_after_commit is not None:
            self.written_after_commit.add(self)  # once per batch of answers, not per answer


CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def only_connection_errors(error: BaseException) -> bool:
    """True when an error (or every error in a group) is the peer going away."""
    if isinstance(error, BaseExceptionGroup):
        return all(only_connection_errors(inner) for inner in error.exceptions)
    return isinstance(error, CONNECTION_ERRORS)
