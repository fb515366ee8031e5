"""The group server: trio TCP sessions in front of a `Group`.

Each connection has one receive loop and one send loop. The receive loop parses
every frame a `recv` brings and dispatches each request synchronously to the group
(no await per message); replies are appended to the session's outbox and the send
loop writes everything ready in one `send_all`. A request that fails is answered
with a Failure frame; a malformed frame gets a Fatal frame and only that connection
closes. Nothing a client sends can stop the server for anyone else.

Where commits run (measured with `mrs bench --seconds 3`, same disk, same run):
a writer thread loses the GIL on every LMDB call and waits to win it back from the
busy event loop, so its 50-put commits took 1.5-2.5 ms against 0.6 ms alone. Commits
inline on the event loop, after every ready receive loop has had its turn, stall the
loop for one fsync but batch more and avoid the hand-offs: 32 connections x 1 put
in flight gave 6.7k puts/s at 15 msgs/commit inline vs 5.5k at 9.8 with the thread;
4 x 32 in flight gave 15.5k vs 12.5k. Inline is the default; `writer_kind="thread"`
(MRS_WRITER=thread for `mrs serve`, see mrs.harness) selects the thread for comparison.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import lmdb
import trio

from journals import GroupCommitWriter, InlineWriter, JournalError, JournalStore
from mrs import gc_tuning, startup
from mrs import protocol as wire
from mrs.admission import Admission
from mrs.client_drains import ClientDrains
from mrs.config import BusConfig, GroupConfig
from mrs.datadir import DataDirError, DataDirGuard
from mrs.delivery import Refused
from mrs.faults import file_fault_hook
from mrs.framed import FramedStream
from mrs.group import Group
from mrs.group.link_driver import dial_forever, new_link, pump
from mrs.group.link_session import FRAME_OVERHEAD_BYTES, TRANSFER_BYTES_MAX, PeerLink
from mrs.group_ops import GroupOps
from mrs.harness import ServeOptions
from mrs.journal_check import verify_before_open
from mrs.journal_reserve import ensure_headroom
from mrs.limits import DATA_DIR_CHECK_INTERVAL_S, OUTBOX_BYTES_HIGH
from mrs.model import Status
from mrs.network import TCP, Network, TcpNetwork
from mrs.queues import ByteAccount, TargetQueue
from mrs.refusals import RefusalLog
from mrs.security import session_auth
from mrs.security.tls import check_link_peer, tls_network, transport_socket
from mrs.timers import TrioTimers
from mrs.watchdog import Liveness, next_nonce, watch

log = logging.getLogger("mrs.server")


_session_ids = itertools.count(1)
_LINGER_RST = struct.pack("ii", 1, 0)


@dataclass(eq=False)
class ServerSession(FramedStream):
    """One client connection: its framed stream, plus what the server tracks of it."""

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
    """Metrics (mrs.metrics): called with every reply sent, when metrics are on."""
    principal: str | None = None
    """Who authenticated on this connection (mrs.security), None with auth off."""

    def send(self, event: object) -> None:
        if self.closed:
            return
        if self.observe is not None:
            self.observe(event)
        in_flight = self.in_flight
        if in_flight:  # every request is answered exactly once: the answer ends it
            size = in_flight.pop(getattr(event, "request_id", 0), None)
            if size is not None:
                self.in_flight_bytes -= size
        super().send(event)


class GroupServer:
    """Serves one group on its configured listen address."""

    def __init__(
        self,
        bus: BusConfig,
        group_config: GroupConfig,
        *,
        network: Network = TCP,
        open_store: Callable[[], JournalStore] | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        unsafe: frozenset[str] | None = None,
        writer_kind: str = "inline",
        fault_file: Path | None = None,
    ) -> None:
        self.bus = bus
        self.config = group_config
        self.network = network
        if group_config.tls is not None and network is TCP:
            self.network = tls_network(bus, group_config)
        self.open_store = open_store or self._open_lmdb
        self.clock_ns = clock_ns
        self.unsafe = unsafe or frozenset()
        self.writer_kind = writer_kind
        """Where commits run: "inline" on the event loop between request rounds, or
        "thread" (a long-lived writer thread). See the module docstring for why."""
        self.fault_file = fault_file
        """Journal fault injection for the harness (mrs.faults); None in production."""
        self.crashed = False
        """Set by a simulation before cancelling run(): skip the graceful shutdown, so
        what was not committed is lost, as in a SIGKILL."""
        self.timers = TrioTimers()
        self.store: JournalStore | None = None
        self.group: Group | None = None
        self.sessions: set[ServerSession] = set()
        self.address: tuple[str, int] | None = None
        self.links: dict[int, PeerLink] = {}
        self.data_dir_guard: DataDirGuard | None = None
        self.data_dir_lost: str | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self.ops = GroupOps(self)
        self.frame_bytes_max = (
            max(group_config.limits.message_bytes_max, TRANSFER_BYTES_MAX) + FRAME_OVERHEAD_BYTES
        )
        self.guards = group_config.guards
        self.admission = Admission(self.guards, trio.current_time)
        self.refusals = RefusalLog(log)
        self.client_drains = ClientDrains()
        self.authority, self.gate = session_auth.build(bus, group_config)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Bind, open journals, recover, serve; on cancel, stop and make everything
        durable. Whatever cannot start fails before the epoch is committed."""
        listeners = await self._bind()
        try:
            self.store = self._open_journals()
        except BaseException:
            for listener in listeners or ():
                await listener.aclose()
            raise
        self.ops.attach_store(can_grow=self.writer_kind != "thread")
        writer = self._make_writer()
        self.group = Group(
            self.bus,
            self.config,
            self.store,
            writer,
            self.timers,
            clock_ns=self.clock_ns,
            unsafe=self.unsafe,
        )
        if self.unsafe:
            log.warning("UNSAFE build switches on (harness only): %s", ", ".join(self.unsafe))
        try:
            self.group.recover()
        except JournalError as error:
            self.store.close()
            if self.data_dir_guard is not None:
                self.data_dir_guard.release()
            raise startup.journal_failure(self.bus, self.config, error) from None
        writer.start()
        try:
            async with trio.open_nursery() as nursery:
                self._cancel_scope = nursery.cancel_scope
                await nursery.start(self.timers.run)
                nursery.start_soon(self.ops.run)
                if self.data_dir_guard is not None:
                    nursery.start_soon(self._watch_data_dir)
                if isinstance(writer, InlineWriter):
                    nursery.start_soon(self._commit_loop, writer)
                self._start_links(nursery)
                if listeners is not None:
                    host, port = await nursery.start(
                        functools.partial(self.network.serve_listeners, gate=self._gate),
                        self._serve_connection,
                        self.config.listen_host,
                        listeners,
                    )
                else:
                    host, port = await nursery.start(
                        self.network.serve,
                        self._serve_connection,
                        self.config.listen_host,
                        self.config.listen_port,
                    )
                self.address = (self.config.listen_host, port)
                task_status.started(self.address)
        finally:
            for session in list(self.sessions):
                session.closed = True
            if not self.crashed:
                writer.stop()
                self.store.close()
            if self.data_dir_guard is not None:
                self.data_dir_guard.release()
            log.info("group %d stopped; journals closed", self.config.id)
        if self.data_dir_lost is not None:
            raise DataDirError(self.data_dir_lost)

    def status_info(self) -> dict:
        """The group's status plus the operator's view (version, uptime, journal use)."""
        return {
            **self.group.status_info(),
            **self.ops.status_extra(),
            **self.client_drains.status_info(),
            "guards": {"refused": dict(sorted(self.refusals.by_limit.items()))},
        }

    async def _bind(self) -> list[trio.SocketListener] | None:
        """On real TCP, take the listen address first: a port in use or a foreign host
        must fail the start before the journals (and the epoch) are touched."""
        if not isinstance(self.network, TcpNetwork):
            return None
        try:
            return await self.network.listen(self.config.listen_host, self.config.listen_port)
        except OSError as error:
            raise startup.listen_failure(self.bus, self.config, error) from None

    def _open_journals(self) -> JournalStore:
        """open_store, with the usual operator mistakes as one line each."""
        if self.open_store == self._open_lmdb:
            startup.check_data_dir(self.bus, self.config)
        try:
            return self.open_store()
        except (lmdb.Error, MemoryError, JournalError) as error:
            raise startup.journal_failure(self.bus, self.config, error) from None

    def _open_lmdb(self) -> JournalStore:
        """Lock the data directory (one server per directory), then open its journals
        with the directory's identity checked before every commit."""
        guard = DataDirGuard.acquire(self.config.data_dir)
        # Read it in a child first: a damaged file must not abort this process.
        if (damage := verify_before_open(self.config.data_dir / "journals")) is not None:
            guard.release()
            raise DataDirError(damage)
        token = trio.lowlevel.current_trio_token()
        try:
            store = JournalStore(
                self.config.data_dir / "journals",
                self.config.ops.journal_bytes_initial or self.config.limits.journal_bytes_max,
                fault_hook=guard.commit_hook(
                    file_fault_hook(self.fault_file) if self.fault_file else None,
                    lambda reason: token.run_sync_soon(self._lose_data_dir, reason),
                ),
            )
        except BaseException:
            guard.release()
            raise
        limits = self.config.limits
        ensure_headroom(store, limits.journal_bytes_max, limits.message_bytes_max)
        guard.watch_journal(self.config.data_dir / "journals" / "data.mdb")
        self.data_dir_guard = guard
        return store

    async def _watch_data_dir(self) -> None:
        """Between commits, look at the data directory once a second."""
        while True:
            await trio.sleep(DATA_DIR_CHECK_INTERVAL_S)
            try:
                self.data_dir_guard.check()
            except DataDirError as error:
                self._lose_data_dir(str(error))
                return

    def _lose_data_dir(self, reason: str) -> None:
        """The data directory is gone or replaced: say so loudly and stop serving."""
        if self.data_dir_lost is not None:
            return
        self.data_dir_lost = reason
        log.critical("%s; stopping the server", reason)
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _start_links(self, nursery: trio.Nursery) -> None:
        """One PeerLink per linked group; this group dials the higher-numbered ones."""
        for peer_id in self.group.peers:
            link = new_link(self.group.link_rooms, peer_id)
            self.links[peer_id] = link
            nursery.start_soon(pump, link)
            if self.config.id < peer_id:
                host, port = self._dial_address(peer_id)
                if port == 0:
                    log.error(
                        "cannot dial group %d: its listen port is 0 and the link has no address",
                        peer_id,
                    )
                    continue
                nursery.start_soon(
                    functools.partial(
                        dial_forever,
                        secure=self.authority.dial_link if self.authority is not None else None,
                    ),
                    link,
                    host,
                    port,
                    self.config.id,
                    self.frame_bytes_max,
                    self.network,
                    self.guards,
                )

    def _dial_address(self, peer_id: int) -> tuple[str, int]:
        link_config = self.bus.link_between(self.config.id, peer_id)
        if link_config is not None and link_config.address_host is not None:
            return link_config.address_host, link_config.address_port
        peer = self.bus.group(peer_id)
        return peer.listen_host, peer.listen_port

    def _adopt_link(self, session: ServerSession, hello: wire.Hello) -> None:
        """A lower-numbered peer dialed us: check who it is, then hand it the session."""
        peer_id = hello.group
        link = self.links.get(peer_id)
        if link is None or peer_id >= self.config.id:
            log.warning(
                "refused link from %s claiming group %d (%r): "
                "not a lower-numbered group linked to group %d",
                session.peer,
                peer_id,
                hello.program,
                self.config.id,
            )
            raise wire.RemoteProtocolError(
                f"group {self.config.id} has no link from group {peer_id} ({hello.program!r})"
            )
        if (problem := check_link_peer(session.stream, peer_id)) is not None:
            log.warning("refused link from %s: %s", session.peer, problem)
            raise wire.RemoteProtocolError(problem)
        session_auth.check_link(self.authority, session, peer_id)
        session.send(
            wire.Welcome(
                wire.PROTOCOL_VERSION,
                self.config.id,
                self.config.name,
                self.config.limits.message_bytes_max,
            )
        )
        session.link = link
        link.up(session)

    def _make_writer(self) -> GroupCommitWriter | InlineWriter:
        if self.writer_kind == "thread":
            token = trio.lowlevel.current_trio_token()
            return GroupCommitWriter(self.store, token.run_sync_soon)
        self._commit_wanted = trio.Event()
        return InlineWriter(self.store, lambda: self._commit_wanted.set())

    async def _commit_loop(self, writer: InlineWriter) -> None:
        """Commit whenever something is pending, after letting every task that is
        ready (receive loops holding fresh requests) run once, so one fsync covers
        all of them."""
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted = trio.Event()
            await trio.lowlevel.checkpoint()
            writer.commit_pending()
            self.ops.after_commit()

    async def _serve_connection(self, stream: trio.abc.Stream) -> None:
        connection = wire.Connection("server", frame_bytes_max=self.frame_bytes_max)
        session = ServerSession(stream, connection)
        session.observe = self.ops.reply_observer()
        host = ""
        with contextlib.suppress(OSError, AttributeError):
            host, port = transport_socket(stream).getpeername()[:2]
            session.peer = f"{host}:{port}"
        if host and (refusal := self.admission.admit(host)) is not None:
            await self._refuse_connection(stream, connection, host, refusal)
            return
        session.host = host or session.peer
        self.sessions.add(session)
        try:
            admitted = self.authority is None or await session_auth.admit(
                self.authority, session, self.guards.handshake_s_max, self.refusals
            )
            if admitted and await self._handshake(session):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.send_loop)
                    nursery.start_soon(self._watch, session, nursery.cancel_scope)
                    await self._receive_loop(session)
                    nursery.cancel_scope.cancel()
        except Exception as error:  # noqa: BLE001 - one connection never stops the server
            if not only_connection_errors(error):
                log.exception("connection from %s failed", session.peer)
        finally:
            if host:
                self.admission.release(host)
            self.sessions.discard(session)
            self.client_drains.forget(session.id)
            session.closed = True
            self.group.detach(session)
            if session.link is not None:
                session.link.down("connection closed", session)
            with trio.move_on_after(1):
                await stream.aclose()

    def _gate(self, host: str) -> bool:
        """Before a task exists: close a refused connection that gets no answer."""
        refusal = self.admission.refused_unanswered(host)
        if refusal is None:
            return True
        self.refusals.refused("accept", host, f"connection refused (EXCEEDQUOTA): {refusal}")
        return False

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
                if not await self._receive_once(session):
                    return False
            return True
        why = f"no handshake within handshake_s_max={self.guards.handshake_s_max:g} s"
        self.refusals.refused("deadline", session.host, f"closing connection (TIMEOUT): {why}")
        await self._fatal(session, Status.TIMEOUT, f"closing: {why}")
        return False

    async def _protocol_error(self, session: ServerSession, error: wire.ProtocolError) -> None:
        self.refusals.refused(
            "protocol", session.host, f"protocol error: {error} ({session.peer})"
        )
        await self._fatal(session, error.status, str(error))

    async def _watch(self, session: ServerSession, scope: trio.CancelScope) -> None:
        """Heartbeats and deadlines for one connection; closes it when one passes."""
        guards = self.guards

        def silence_s_max() -> float:
            return guards.link_silence_s_max if session.link else guards.client_idle_s_max

        def ping() -> None:
            with contextlib.suppress(wire.ProtocolError):
                session.send(wire.Ping(next_nonce()))

        why = await watch(session.liveness, guards, silence_s_max, ping)
        if session.link is not None:
            log.warning("link from group %d declared down: %s", session.link.peer_id, why)
        else:
            self.refusals.refused(
                "deadline", session.host, f"closing connection (TIMEOUT): {why} ({session.peer})"
            )
        with contextlib.suppress(wire.ProtocolError):
            session.send(wire.Fatal(int(Status.TIMEOUT), f"closing: {why}"))
        with trio.move_on_after(1):
            await session.flushed()
        scope.cancel()

    async def _receive_loop(self, session: ServerSession) -> None:
        while await self._receive_once(session):
            await session.wait_drained(OUTBOX_BYTES_HIGH)

    async def _receive_once(self, session: ServerSession) -> bool:
        """Read what one recv brings and dispatch every event in it (handshake and
        receive loop alike); False once the connection ended (EOF, protocol error)."""
        try:
            events, still_open = await session.receive_events()
            for event in events:
                self._dispatch(session, event)
        except wire.ProtocolError as error:
            await self._protocol_error(session, error)
            return False
        if not still_open:
            return False
        session.liveness.heard(session.buffered_bytes, len(events))
        return True

    async def _fatal(self, session: ServerSession, status: Status, message: str) -> None:
        with contextlib.suppress(wire.ProtocolError):
            session.send(wire.Fatal(int(status), message))
        with trio.move_on_after(2):
            await session.flush()

    def _begin(self, session: ServerSession, request_id: int, body_bytes: int = 0) -> None:
        """Count a request as in flight until answered, or refuse it (EXCEEDQUOTA)."""
        in_flight = session.in_flight
        guards = self.guards
        if len(in_flight) >= guards.requests_in_flight_max:
            self._over_quota(
                session,
                "requests_in_flight_max",
                f"{len(in_flight)} requests in flight "
                f"(requests_in_flight_max={guards.requests_in_flight_max})",
            )
        if body_bytes:
            held = session.in_flight_bytes + session.account.held_bytes
            if held + body_bytes > guards.connection_bytes_max:
                self._over_quota(
                    session,
                    "connection_bytes_max",
                    f"connection holds {held} bytes of messages "
                    f"(connection_bytes_max={guards.connection_bytes_max})",
                )
            session.in_flight_bytes += body_bytes
        in_flight[request_id] = body_bytes

    def _begin_get(self, session: ServerSession, request: wire.Get) -> None:
        queue = session.attached
        parked_max = self.guards.parked_gets_max
        if queue is not None and request.timeout_ms != 0 and len(queue.waiters) >= parked_max:
            self._over_quota(
                session,
                "parked_gets_max",
                f"{len(queue.waiters)} gets parked on {queue.address} "
                f"(parked_gets_max={parked_max})",
            )
        self._begin(session, request.request_id)

    def _over_quota(self, session: ServerSession, limit: str, problem: str) -> NoReturn:
        self.refusals.refused(
            limit, session.host, f"request refused (EXCEEDQUOTA): {problem} ({session.peer})"
        )
        raise Refused(Status.EXCEEDQUOTA, problem)

    def _dispatch(self, session: ServerSession, event: object) -> None:
        group = self.group
        request_id = getattr(event, "request_id", 0)
        try:
            if self.gate is not None:
                self.gate.check(session, event)
            match event:
                case wire.Put():
                    self._begin(session, request_id, len(event.body))
                    if event.headers:  # a client SAF journal draining? (mrs status)
                        self.client_drains.note(session, event)
                    group.put(session, event)
                case wire.Get():
                    self._begin_get(session, event)
                    group.get(session, event)
                case wire.CancelGet():  # no reply of its own: the get's answer ends both
                    group.cancel_get(session, event)
                case wire.Confirm():
                    self._begin(session, request_id)
                    group.confirm(session, event)
                case wire.Hello(role="link"):
                    session.liveness.handshake_done = True
                    self._adopt_link(session, event)
                case wire.LinkTransfer() | wire.LinkNotice() | wire.LinkAck():
                    if session.link is None:
                        raise wire.RemoteProtocolError(
                            f"{type(event).__name__} on a connection that is not a link"
                        )
                    session.link.handle(event, session)
                case wire.Hello():
                    session.liveness.handshake_done = True
                    session.send(
                        wire.Welcome(
                            wire.PROTOCOL_VERSION,
                            self.config.id,
                            self.config.name,
                            self.config.limits.message_bytes_max,
                        )
                    )
                case wire.Attach():
                    self._begin(session, request_id)
                    group.attach(session, event)
                case wire.StatusRequest():
                    session.send(wire.StatusReply(request_id, self.status_info()))
                case wire.Ping():
                    session.send(wire.Pong(event.nonce))
                case wire.Pong():
                    pass  # heard: the receive loop has noted it
                case _:
                    raise Refused(Status.PROTOCOL_ERROR, f"unexpected {type(event).__name__}")
        except Refused as refused:
            session.send(wire.Failure(request_id, int(refused.status), refused.message))
        except wire.ProtocolError:
            raise
        except Exception as error:  # noqa: BLE001 - one bad request must not stop the server
            log.exception("request %r from %s failed", event, session.peer)
            session.send(
                wire.Failure(
                    request_id, int(Status.SERVER_ERROR), f"{type(error).__name__}: {error}"
                )
            )


CONNECTION_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def only_connection_errors(error: BaseException) -> bool:
    """True when an error (or every error in a group) is the peer going away."""
    if isinstance(error, BaseExceptionGroup):
        return all(only_connection_errors(inner) for inner in error.exceptions)
    return isinstance(error, CONNECTION_ERRORS)


async def serve(
    bus: BusConfig,
    group_id: int,
    ready_file: Path | None = None,
    options: ServeOptions | None = None,
) -> None:
    """Run a group until SIGTERM/SIGINT, then shut down gracefully. `options` are the
    harness switches the CLI read from its environment (mrs.harness)."""
    options = options or ServeOptions()
    server = GroupServer(
        bus,
        bus.group(group_id),
        unsafe=options.unsafe,
        writer_kind=options.writer_kind,
        fault_file=options.fault_file,
    )
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(server.run)
            if options.gc_thresholds is not None:  # recovered: freeze what start-up built
                gc_tuning.tune_gc(options.gc_thresholds)
            line = f"READY {host}:{port}"
            print(line, flush=True)
            if ready_file is not None:
                ready_file.write_text(f"{host}:{port}\n")
            log.info(
                "group %d (%s) listening on %s:%d, pid %d",
                group_id,
                server.config.name,
                host,
                port,
                os.getpid(),
            )
            async for signum in signals:
                if signum == signal.SIGHUP:
                    if server.authority is not None:
                        server.authority.reload("SIGHUP")
                    continue
                log.info("signal %s: shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    print("STOPPED", flush=True, file=sys.stderr)
