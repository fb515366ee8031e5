"""Serves one TCP connection: admission, handshake, receive loop, watchdog, close.

A junk connection (random bytes, silence, half a Hello) costs one task until its
handshake deadline; a refused one gets at most one Fatal frame a second per peer
and otherwise an RST. Whatever goes wrong closes only that connection.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
from dataclasses import dataclass

import trio

from mrs import protocol as wire
from mrs.config.addresses import host_port
from mrs.config.guards import Guards
from mrs.core.refusals import RefusalLog, clipped
from mrs.group import Group
from mrs.group.link_driver import serve_link
from mrs.limits import CREDENTIALS_CHECK_INTERVAL_S, OUTBOX_BYTES_HIGH
from mrs.model import Status
from mrs.ops.group_ops import GroupOps
from mrs.security import session_auth
from mrs.security.authority import Authority
from mrs.security.gate import Gate
from mrs.security.tls import transport_socket
from mrs.server.client_drains import ClientDrains
from mrs.server.links import LinkHelloRefused
from mrs.server.request_dispatch import Dispatcher
from mrs.server.session import CONNECTION_ERRORS, ServerSession, only_connection_errors
from mrs.transport.admission import Admission
from mrs.transport.handshake_slots import HandshakeSlots
from mrs.transport.partial_frames import PartialFrames
from mrs.transport.unread_answers import UnreadAnswers
from mrs.transport.watchdog import next_nonce, watch

log = logging.getLogger("mrs.server")

_LINGER_RST = struct.pack("ii", 1, 0)


@dataclass(eq=False)
class Connections:
    """The connections of one running server: each served from admission to close, its
    requests handed to the `Dispatcher`. Made once the group exists, so every
    collaborator is here from the first connection on; `sessions` and
    `answered_sessions` are the server's sets (its commits read them)."""

    group: Group
    dispatcher: Dispatcher
    sessions: set[ServerSession]
    answered_sessions: set[ServerSession] | None
    frame_bytes_max: int
    ops: GroupOps
    admission: Admission
    refusals: RefusalLog
    client_drains: ClientDrains
    authority: Authority | None
    gate: Gate | None
    guards: Guards
    partial_frames: PartialFrames
    handshakes: HandshakeSlots
    unread_answers: UnreadAnswers
    gone_before_served: int = 0
    """Connections their peers reset before the accept loop took them (see `gone`)."""
    paused: trio.Event | None = None
    """While a planned hand-over settles (mrs.replication.active `Active.hand_over`):
    what a client sends is read and not dispatched until this is set (`resume`)."""

    def pause(self) -> None:
        if self.paused is None:
            self.paused = trio.Event()

    def resume(self) -> None:
        if self.paused is not None:
            self.paused.set()
            self.paused = None

    async def serve(self, stream: trio.abc.Stream) -> None:
        try:
            address = transport_socket(stream).getpeername()[:2]
        except AttributeError:  # an in-memory stream (the simulation): no address
            address = None
        except OSError:  # reset before it was looked at: gone, and no address to
            await trio.aclose_forcefully(stream)  # admit it by, so no session for it
            return
        connection = wire.Connection("server", frame_bytes_max=self.frame_bytes_max)
        session = ServerSession(stream, connection)
        session.written_after_commit = self.answered_sessions
        session.unread_answers = self.unread_answers
        session.observe = self.ops.reply_observer(session)
        host = ""
        if address is not None:
            host, port = address
            session.peer = host_port(host, port)
        if host and (refusal := self.admission.admit(host)) is not None:
            await self._refuse_connection(stream, connection, host, refusal)
            return
        session.host = host or session.peer
        self.sessions.add(session)
        try:
            with trio.CancelScope() as session.scope:  # `session.evict` ends it
                if await self._prove(session):
                    if session.revoked is not None:  # during the handshake: its Fatal waits
                        with trio.move_on_after(1):
                            await session.flush()
                        return
                    async with trio.open_nursery() as nursery:
                        session.tasks = nursery
                        await self._serve_adopted(session, nursery)
        except Exception as error:  # noqa: BLE001 - one connection never stops the server
            if not only_connection_errors(error):
                log.exception("connection from %s failed", session.peer)
        finally:
            self.partial_frames.forget(session)
            self.unread_answers.forget(session)
            session.connection.discard_buffered()
            if session.evicted_because is not None:
                await self._evicted(session, *session.evicted_because)
            if host:
                self.admission.release(host)
            self.sessions.discard(session)
            self.client_drains.forget(session.id)
            session.closed = True  # from now on its answers join no answered set
            if self.answered_sessions is not None:
                self.answered_sessions.discard(session)
            self.group.detach(session)
            if session.link is not None:
                session.link.down("connection closed", session)
            with trio.move_on_after(1):
                await stream.aclose()

    async def watch_credentials(self, authority: Authority) -> None:
        """Look at the credentials file every CREDENTIALS_CHECK_INTERVAL_S: `mrs creds`
        only rewrites it, and a revocation must not wait for the next connection."""
        while True:
            await trio.sleep(CREDENTIALS_CHECK_INTERVAL_S)
            authority.reload_if_changed()

    def credentials_reloaded(self) -> None:
        """The credentials changed: a principal no longer in them (or removed and
        added again since a connection authenticated) loses its connections at once
        (its parked gets with them, its unconfirmed messages go back to the queue as
        a detach does), and a get no longer granted is answered NOTAUTHORIZED rather
        than left parked to receive the next message."""
        authority, group = self.authority, self.group
        if authority is None or self.gate is None:
            return
        for session in list(self.sessions):
            name = session.principal
            if name is None or session.revoked is not None:
                continue
            if (why := authority.revoked(name, session.principal_incarnation)) is not None:
                self._revoke(session, why)
            elif session.attached is not None and (problem := self.gate.get_problem(session)):
                refused = group.refuse_parked_gets(
                    session, Status.NOTAUTHORIZED, f"{name}: {problem}"
                )
                if refused:
                    log.warning(
                        "refused %d parked gets of %r at %s: %s",
                        refused,
                        name,
                        session.peer,
                        problem,
                    )

    def _revoke(self, session: ServerSession, why: str) -> None:
        """End a session whose principal was removed: detached now (nothing more is
        delivered to it, its unconfirmed messages wait for another reader), told why,
        and closed once that is written (at most a second later)."""
        log.warning("closing the connection from %s (NOTAUTHORIZED): %s", session.peer, why)
        session.revoked = why
        self.group.detach(session)  # no message reaches its parked gets from now on
        with contextlib.suppress(wire.ProtocolError):
            session.send(wire.Fatal(int(Status.NOTAUTHORIZED), f"closing: {why}"))
        if session.tasks is not None:
            session.tasks.start_soon(self._close_revoked, session, session.tasks.cancel_scope)

    @staticmethod
    async def _close_revoked(session: ServerSession, scope: trio.CancelScope) -> None:
        with trio.move_on_after(1):
            await session.flushed()
        scope.cancel()

    def admits(self, host: str) -> bool:
        """The accept loop's `Gate`: before a task exists, close a refused connection
        that gets no answer."""
        refusal = self.admission.refused_unanswered(host)
        if refusal is None:
            return True
        self.refusals.refused("accept", host, f"connection refused (EXCEEDQUOTA): {refusal}")
        return False

    def gone(self) -> None:
        """The accept loop's `Gate`: one more connection closed before it was served."""
        self.gone_before_served += 1

    async def _refuse_connection(
        self, stream: trio.abc.Stream, connection: wire.Connection, host: str, refusal: str
    ) -> None:
        """Admission said no: a Fatal frame (at most once a second per peer), close, and
        a (throttled) log line."""
        self.refusals.refused("accept", host, f"connection refused (EXCEEDQUOTA): {refusal}")
        if self.admission.should_answer(host):
            fatal = connection.send(wire.Fatal(int(Status.EXCEEDQUOTA), refusal))
            with contextlib.suppress(*CONNECTION_ERRORS), trio.move_on_after(0.5):
                await stream.send_all(fatal)
        else:  # close with RST: no FIN exchange, no TIME_WAIT left behind
            with contextlib.suppress(OSError, AttributeError):
                sock = transport_socket(stream)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
        with contextlib.suppress(*CONNECTION_ERRORS), trio.move_on_after(0.5):
            await stream.aclose()

    async def _handshake(self, session: ServerSession) -> bool:
        """Read until the client's Hello, within handshake_s_max; False if it never came.

        No send loop and no watchdog yet: a junk connection (random bytes, silence,
        half a Hello) costs this one task, which is what keeps a flood of them cheap.
        Requests pipelined behind the Hello are dispatched; their answers wait in the
        outbox for the send loop."""
        with trio.move_on_after(self.guards.handshake_s_max):
            while session.connection.their_state is wire.START:
                if not await self.receive_once(session):
                    return False
            return True
        why = f"no handshake within handshake_s_max={self.guards.handshake_s_max:g} s"
        self.refusals.refused("deadline", session.host, f"closing connection (TIMEOUT): {why}")
        await self._fatal(session, Status.TIMEOUT, f"closing: {why}")
        return False

    async def _prove(self, session: ServerSession) -> bool:
        """Authentication (with [auth]) and the Hello, within handshake_s_max, holding
        one of the group's `handshakes_max` slots: at the bound the oldest connection
        still at its handshake gives way, so connections that never authenticate or
        never say Hello cost a bounded amount in all, however many peers send them."""
        assert session.scope is not None
        slot = self.handshakes.take(session.host, session.scope)
        try:
            admitted = self.authority is None or await session_auth.admit(
                self.authority, session, self.guards.handshake_s_max, self.refusals
            )
            return admitted and await self._handshake(session)
        finally:
            self.handshakes.give_back(slot)
            if slot.evicted_because is not None:
                why = f"{slot.evicted_because} (handshakes_max={self.guards.handshakes_max})"
                session.evicted_because = ("handshakes_max", why)

    async def _evicted(self, session: ServerSession, limit: str, why: str) -> None:
        """Closed from outside its task to keep a bound of all connections together
        (`limit`: mrs.transport.partial_frames, mrs.transport.handshake_slots): told why, and a
        (throttled) log line."""
        self.refusals.refused(
            limit, session.host, f"closing connection (EXCEEDQUOTA): {why} ({session.peer})"
        )
        if self.authority is not None and session.principal is None:
            return  # in the middle of authentication, whose frames are not the protocol's
        await self._fatal(session, Status.EXCEEDQUOTA, f"closing: {why}")

    async def _protocol_error(self, session: ServerSession, error: wire.ProtocolError) -> None:
        text = clipped(str(error))
        if not isinstance(error, LinkHelloRefused):  # logged by the links, in its own slot
            self.refusals.refused(
                "protocol", session.host, f"protocol error: {text} ({session.peer})"
            )
        await self._fatal(session, error.status, text)

    async def _serve_adopted(self, session: ServerSession, nursery: trio.Nursery) -> None:
        """After the handshake: a peer group's link is served by the link driver, as
        the dialing end serves it (mrs.group.link_driver.serve_link); a client by this
        module's receive loop and watchdog."""
        if session.link is not None:
            self.partial_frames.forget(session)  # a proven peer: frame_s_max bounds it
            name = f"link from group {session.link.peer_id}"
            await serve_link(session.link, session, self.guards, session.liveness, nursery, name)
            return
        nursery.start_soon(session.send_loop)
        nursery.start_soon(self._watch, session, nursery.cancel_scope)
        await self._receive_loop(session)
        nursery.cancel_scope.cancel()

    async def _watch(self, session: ServerSession, scope: trio.CancelScope) -> None:
        """Heartbeats and deadlines for one client connection; closes it when one passes."""
        guards = self.guards

        def ping() -> None:
            with contextlib.suppress(wire.ProtocolError):
                session.send(wire.Ping(next_nonce()))

        why = await watch(session.liveness, guards, guards.client_idle_s_max, ping)
        self.refusals.refused(
            "deadline", session.host, f"closing connection (TIMEOUT): {why} ({session.peer})"
        )
        with contextlib.suppress(wire.ProtocolError):
            session.send(wire.Fatal(int(Status.TIMEOUT), f"closing: {why}"))
        with trio.move_on_after(1):
            await session.flushed()
        scope.cancel()

    async def _receive_loop(self, session: ServerSession) -> None:
        while await self.receive_once(session):
            await self._room_for_answers(session)

    async def _room_for_answers(self, session: ServerSession) -> None:
        """Until the answers the session's peer has not read are within
        OUTBOX_BYTES_HIGH: those queued, and deliveries whose marks' commit is under
        way (`Dispatcher.answers_bytes`), which reach the outbox only after it. Why
        both: counting the outbox alone, a peer that pipelined gets and read nothing
        was handed a whole queue's journaled messages before the first commit."""
        while True:
            await session.wait_drained(OUTBOX_BYTES_HIGH)
            if self.dispatcher.answers_bytes(session) <= OUTBOX_BYTES_HIGH:
                return
            await session.next_send()  # the commit answers them (or fails them)

    async def receive_once(self, session: ServerSession) -> bool:
        """Read what one recv brings and dispatch every event in it (handshake and
        receive loop alike); False once the connection ended (EOF, protocol error)."""
        try:
            events, still_open = await session.receive_events()
            if self.paused is not None:
                await self.paused.wait()
            dispatched = self.dispatcher.dispatch_all(session, events)
            # Answers that wait for no commit (an AK put's, a get of a message in
            # memory) leave now, not at the send loop's turn, which may come after a
            # commit: an AK producer's next get then reaches the server before the
            # commit that makes its MRS_ACKs ends.
            session.write_now()
            while dispatched < len(events):  # the answers passed their bound mid-read,
                session.wake()  # or its selective gets looked far: the send loop writes,
                await trio.lowlevel.checkpoint()  # and the other connections go first
                await self._room_for_answers(session)
                dispatched = self.dispatcher.dispatch_all(session, events, dispatched)
        except wire.ProtocolError as error:
            await self._protocol_error(session, error)
            return False
        if not still_open:
            return False
        if session.unread_bytes != session.unsent_bytes:  # what it left unread, in all
            session.count_unread()
        buffered_bytes = session.buffered_bytes
        session.liveness.heard(buffered_bytes, len(events))
        if buffered_bytes or session.partial_bytes:
            self.partial_frames.hold(session, buffered_bytes)
        return True

    async def _fatal(self, session: ServerSession, status: Status, message: str) -> None:
        with contextlib.suppress(wire.ProtocolError):
            session.send(wire.Fatal(int(status), message))
        with trio.move_on_after(2):
            await session.flush()
