"""The group server: trio TCP sessions in front of a `Group`.

Each connection has one receive loop and one send loop. The receive loop parses
every frame a `recv` brings and dispatches each request synchronously to the group
(no await per message); replies are appended to the session's outbox and the send
loop writes everything ready in one `send_all`. A request that fails is answered
with a Failure frame; a malformed frame gets a Fatal frame and only that connection
closes. Nothing a client sends can stop the server for anyone else.

`GroupServer` holds one part per job, each with its collaborators given explicitly:
`JournalFiles` (the journals and data directory, mrs.server.journal_files),
`PeerLinks` (mrs.server.links), and once the group exists the `Dispatcher`
(mrs.server.request_dispatch) and `Connections` (mrs.server.connections); this module
starts and stops them and runs the commits.

Commits run inline on the event loop, after every ready receive loop has had its
turn: one fsync then covers all of them, with no hand-off to a thread that must win the
GIL back (benchmarks/README.md, "Where commits run", has the measurements).
`writer_kind="thread"` (MRS_WRITER=thread for `mrs serve`, see mrs.server.harness)
selects a writer thread for comparison.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import trio

from journals import (
    GroupCommitWriter,
    InlineWriter,
    JournalError,
    JournalStore,
    checksum,
)
from mrs.config.addresses import host_port
from mrs.config.bus import BusConfig, GroupConfig
from mrs.config.tls import TlsConfig
from mrs.core.refusals import RefusalLog, flush_all
from mrs.core.timers import TrioTimers
from mrs.group import KEPT, Group, Guarantees
from mrs.group.incarnation import own_incarnation
from mrs.group.link_session import FRAME_OVERHEAD_BYTES, TRANSFER_BYTES_MAX
from mrs.limits import (
    CERT_EXPIRY_CHECK_S,
    COMMIT_COMPANY_WAIT_S,
    PARTIAL_FRAMES_FRAMES_MIN,
    REFUSAL_LOG_INTERVAL_S,
)
from mrs.native import loader as native
from mrs.ops.admin_actions import AdminActions
from mrs.ops.group_ops import GroupOps
from mrs.ops.pcj_archiver import PcjArchiver
from mrs.replication.stream import ReplicatedWriter
from mrs.security import session_auth
from mrs.security.tls import tls_network
from mrs.server import gc_tuning, startup
from mrs.server.client_drains import ClientDrains
from mrs.server.connections import Connections
from mrs.server.harness import ServeOptions, say
from mrs.server.journal_files import JournalFiles
from mrs.server.links import PeerLinks
from mrs.server.request_dispatch import Dispatcher
from mrs.server.session import CONNECTION_ERRORS, ServerSession, only_connection_errors
from mrs.server.status_answers import StatusAnswers
from mrs.storage.commit_pacing import CommitPacing
from mrs.storage.datadir import DataDirError
from mrs.transport.admission import Admission
from mrs.transport.handshake_slots import HandshakeSlots
from mrs.transport.network import TCP, Network, TcpNetwork
from mrs.transport.partial_frames import PartialFrames
from mrs.transport.unread_answers import UnreadAnswers

__all__ = ["CONNECTION_ERRORS", "GroupServer", "ServerSession", "only_connection_errors", "serve"]

log = logging.getLogger("mrs.server")


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
        guarantees: Guarantees = KEPT,
        writer_kind: str = "inline",
        fault_file: Path | None = None,
        replicated_writer: Callable[..., ReplicatedWriter] | None = None,
        pcj_archiver: PcjArchiver | None = None,
        claim_data_dir: Callable[[], None] | None = None,
    ) -> None:
        self.bus = bus
        self.claim_data_dir = claim_data_dir  # mrs.storage.data_dir_owner, in `run`
        self.config = group_config
        self.network = network
        if group_config.tls is not None and network is TCP:
            self.network = tls_network(bus, group_config)
        self.clock_ns = clock_ns
        self.guarantees = guarantees
        """The rules the group keeps (mrs.group.guarantees): KEPT unless a harness
        passed a broken build (mrs.testing.broken_builds)."""
        self.writer_kind = writer_kind
        """Where commits run: "inline" on the event loop between request rounds, or
        "thread" (a long-lived writer thread). See the module docstring for why."""
        self.replicated_writer = replicated_writer
        """An active instance of a replicated group (mrs.server.instance): makes the
        writer from (store, wake, deliver); None: the plain writer, unreplicated."""
        self.replication_status: Callable[[], dict] | None = None
        self.pcj_archiver = pcj_archiver
        """The PCJ archive's steps, which a replicated group's active runs itself."""
        self.crashed = False
        """Set by a simulation before cancelling run(): skip the graceful shutdown, so
        what was not committed is lost, as in a SIGKILL."""
        self.timers = TrioTimers()
        self.store: JournalStore | None = None
        self.group: Group | None = None
        self.sessions: set[ServerSession] = set()
        self.answered_sessions: set[ServerSession] | None = (
            set() if writer_kind == "inline" else None
        )
        """Sessions given answers since the last commit (see `_commit`); None with
        the writer thread, whose commits do not run on the loop."""
        self.address: tuple[str, int] | None = None
        self._cancel_scope: trio.CancelScope | None = None
        self.ops = GroupOps(self)
        self.frame_bytes_max = (
            max(group_config.limits.message_bytes_max, TRANSFER_BYTES_MAX) + FRAME_OVERHEAD_BYTES
        )
        self.guards = group_config.guards
        self.admission = Admission(self.guards, trio.current_time)
        self.handshakes = HandshakeSlots(self.guards.handshakes_max, self.guards.handshakes_max)
        frames_min_bytes = PARTIAL_FRAMES_FRAMES_MIN * self.frame_bytes_max
        self.partial_frames = PartialFrames(
            max(self.guards.partial_frames_bytes_max, frames_min_bytes)
        )
        self.refusals = RefusalLog(log)
        self.client_drains = ClientDrains()
        self.authority, self.gate = session_auth.build(bus, group_config)
        self.journal_files = JournalFiles(
            bus, group_config, self._stop, open_store=open_store, fault_file=fault_file
        )
        self.peer_links = PeerLinks(
            bus, group_config, self.network, self.guards, self.authority, self.frame_bytes_max
        )
        self.connections: Connections | None = None
        """Made in `run` once the group exists, before the first connection."""

    def start_pcj_archive(self, until_ns: int, closed_only: bool) -> str:
        """An archive run on this replicated group's active (mrs.ops.group_ops)."""
        return self.ops.start_pcj_archive(until_ns, closed_only)

    def reset_link(self, peer_id: int, force: bool = False) -> dict:
        """Forget a peer's journals (`mrs admin reset-link`, mrs.group.incarnation)."""
        return self.peer_links.reset(peer_id, force)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Bind, open journals, recover, serve; on cancel, stop and make everything
        durable. Whatever cannot start fails before the epoch is committed."""
        listeners = await self._bind()
        try:
            if self.claim_data_dir is not None:
                # once the ports are this server's: claimed before, a start refused "the
                # port is in use" left a new data directory made and claimed by a group
                # that never served there
                self.claim_data_dir()
            with self.ops.answering_recovering():  # the ops ports say so meanwhile
                writer, connections = self._open_and_recover()
        except BaseException:
            for listener in listeners or ():
                await listener.aclose()
            self.ops.release_endpoints()
            raise
        writer.start()
        try:
            async with trio.open_nursery() as nursery:
                self._cancel_scope = nursery.cancel_scope
                await nursery.start(self.timers.run)
                await self.ops.start_endpoints(nursery)  # before READY: a taken port fails it
                nursery.start_soon(self.ops.run)
                nursery.start_soon(self.partial_frames.trim_loop)
                self._start_watchers(nursery, connections)
                if isinstance(writer, InlineWriter):
                    nursery.start_soon(self._commit_loop, writer)
                self.peer_links.start(self.group, nursery)
                port = await self._serve_clients(nursery, connections, listeners)
                self.address = (self.config.listen_host, port)
                task_status.started(self.address)
        finally:
            for session in list(self.sessions):
                session.closed = True
            if not self.crashed:
                writer.stop()
                self.store.close()
            self.journal_files.release()
            self.ops.release_endpoints()  # taken, never served (the start was cancelled)
            log.info("group %d stopped; journals closed", self.config.id)
        if self.journal_files.lost is not None:
            raise DataDirError(self.journal_files.lost)

    def _open_and_recover(self) -> tuple[GroupCommitWriter | InlineWriter, Connections]:
        """Open the journals, make the group and recover it: the start's long part,
        which never yields to the event loop."""
        self.store = self.journal_files.open()
        self.ops.attach_store(can_grow=self.writer_kind != "thread")
        writer = self._make_writer()
        self.group = Group(
            self.bus,
            self.config,
            writer.recording if isinstance(writer, ReplicatedWriter) else self.store,
            writer,
            self.timers,
            clock_ns=self.clock_ns,
            guarantees=self.guarantees,
        )
        connections = self._connections(self.group)
        if broken := self.guarantees.broken:
            log.warning("UNSAFE build switches on (harness only): %s", ", ".join(sorted(broken)))
        try:
            self.group.recover()
            # A new group's first write of its incarnation (read by `PeerLinks.start`),
            # here while the ops ports answer "recovering": a commit after this holds
            # the event loop with the endpoints served but silent and the client port
            # not yet, and a slow disk made `mrs status` say the group did not answer.
            own_incarnation(self.group.ctx.store)
            if self.group.dqf.reserve is not None:  # started: a disk short of it is said
                self.group.dqf.reserve.say_at_start()
        except JournalError as error:
            self.store.close()
            self.journal_files.release()
            raise startup.journal_failure(self.bus, self.config, error) from None
        return writer, connections

    async def _serve_clients(
        self,
        nursery: trio.Nursery,
        connections: Connections,
        listeners: list[trio.SocketListener] | None,
    ) -> int:
        """Serve the clients on the listeners `_bind` took (real TCP) or on a listen of
        the network's own (the simulator's); returns the bound port."""
        if listeners is not None:
            _host, port = await nursery.start(
                functools.partial(self.network.serve_listeners, gate=connections),
                connections.serve,
                self.config.listen_host,
                listeners,
            )
        else:
            _host, port = await nursery.start(
                self.network.serve,
                connections.serve,
                self.config.listen_host,
                self.config.listen_port,
            )
        return port

    def _connections(self, group: Group) -> Connections:
        """The dispatcher and the connections, made once the group exists; with [auth]
        a change of the credentials file reaches the connections at once."""
        dispatcher = Dispatcher(
            group,
            self.gate,
            self.client_drains,
            self.guards,
            self.refusals,
            self.config,
            StatusAnswers(self.status_info, self.timers.call_later),
            self.peer_links.adopt,
        )
        dispatcher.admin = AdminActions(self)
        dispatcher.incarnation = self.peer_links.durable_incarnation
        self.connections = Connections(
            group,
            dispatcher,
            self.sessions,
            self.answered_sessions,
            self.frame_bytes_max,
            self.ops,
            self.admission,
            self.refusals,
            self.client_drains,
            self.authority,
            self.gate,
            self.guards,
            self.partial_frames,
            self.handshakes,
            UnreadAnswers(self.guards.answers_unread_bytes_max, self.partial_frames.let_go),
        )
        if self.authority is not None:
            self.authority.listeners.append(self.connections.credentials_reloaded)
        return self.connections

    def _connection_counts(self) -> dict[str, int]:
        """The guards' counts kept by `Connections` (0 before the first is served)."""
        connections = self.connections
        if connections is None:
            return {"unread_answer_bytes": 0, "gone_before_served": 0}
        return {
            "unread_answer_bytes": connections.unread_answers.total_bytes,
            "gone_before_served": connections.gone_before_served,
        }

    def _stop(self) -> None:
        """Stop serving (the data directory was lost): `run` raises why once stopped."""
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    def _start_watchers(self, nursery: trio.Nursery, connections: Connections) -> None:
        """The files a running group keeps an eye on: its data directory, and with
        [auth] the credentials file (a revocation applies without a new connection)."""
        if self.journal_files.guard is not None:  # real files (not the simulator's)
            nursery.start_soon(self.journal_files.watch, self.journal_files.guard)
            nursery.start_soon(_flush_refusals)
        if self.authority is not None:
            nursery.start_soon(connections.watch_credentials, self.authority)
        if self.config.tls is not None:
            nursery.start_soon(_watch_certificate_expiry, self.config.tls)

    def status_info(self) -> dict:
        """The group's status plus the operator's view (version, uptime, journal use)."""
        return {
            **self.group.status_info(),
            **self.ops.status_extra(),
            **self.client_drains.status_info(),
            "guards": {
                "refused": dict(sorted(self.refusals.by_limit.items())),
                "handshakes_in_progress": self.handshakes.in_progress(),
                "unfinished_frame_bytes": self.partial_frames.total_bytes,
                **self._connection_counts(),
            },
            **({"replication": self.replication_status()} if self.replication_status else {}),
        }

    async def _bind(self) -> list[trio.SocketListener] | None:
        """On real TCP, take the listen address and the `[group.ops]` endpoints'
        first: a port in use or a foreign host must fail the start before the journals
        (and the epoch) are touched."""
        if not isinstance(self.network, TcpNetwork):
            return None
        try:
            listeners = await self.network.listen(self.config.listen_host, self.config.listen_port)
        except OSError as error:
            raise startup.listen_failure(self.bus, self.config, error) from None
        try:
            await self.ops.bind_endpoints()  # metrics_listen, web_listen: held until served
        except BaseException:
            for listener in listeners:
                await listener.aclose()
            raise
        return listeners

    def _make_writer(self) -> GroupCommitWriter | InlineWriter:
        if self.writer_kind == "thread":
            token = trio.lowlevel.current_trio_token()
            return GroupCommitWriter(self.store, token.run_sync_soon)
        self._commit_wanted = trio.Event()
        if self.replicated_writer is not None:
            return self.replicated_writer(
                self.store, lambda: self._commit_wanted.set(), self._deliver
            )
        return InlineWriter(self.store, lambda: self._commit_wanted.set())

    async def _commit_loop(self, writer: InlineWriter) -> None:
        """Commit whenever something is pending, after letting every task that is
        ready (receive loops holding fresh requests) run once, so one fsync covers
        all of them.

        When all that is pending can wait (confirms whose consumers have gets parked,
        mrs.group.handover), the commit waits up to COMMIT_COMPANY_WAIT_S for a batch
        that cannot, and goes with it. Why: at a steady 1,000 msgs/s every message
        needed two commits (its put, then its confirm), and the loop sat in commits
        more than half of the time, so a put usually arrived during one and waited for
        it to end; a confirm that rides with the next put halves that (benchmarks/README.md)."""
        pacing = CommitPacing()
        while True:
            await self._commit_wanted.wait()
            self._commit_wanted = trio.Event()
            await trio.lowlevel.checkpoint()
            if not writer.urgent:
                with trio.move_on_after(COMMIT_COMPANY_WAIT_S):
                    await self._commit_wanted.wait()  # set by the first urgent batch
                self._commit_wanted = trio.Event()
            wait_s = pacing.wait_s(trio.current_time())
            if wait_s > 0:  # the last commit was busy: take in more first (commit_pacing)
                await self._hold_commit(writer, wait_s, pacing.last_batches)
            batches_before = writer.stats.batches
            self._commit(writer)
            pacing.committed(writer.stats.batches - batches_before, trio.current_time())

    async def _hold_commit(self, writer: InlineWriter, wait_s: float, batches: int) -> None:
        """Let requests come in for up to `wait_s` before committing, but no longer
        than until `batches` are pending: clients that keep a window of requests in
        flight have all sent their next ones by then, and more waiting would only add
        to their latency."""
        if writer.pending_batches >= batches:
            return
        self._commit_wanted = trio.Event()
        writer.wake_at_batches = batches
        try:
            with trio.move_on_after(wait_s):
                await self._commit_wanted.wait()
        finally:
            writer.wake_at_batches = 0
            self._commit_wanted = trio.Event()

    def commit_now(self) -> None:
        """Commit what is pending now, its answers to the sockets (a planned
        hand-over's last commit, mrs.replication.active `Active.hand_over`)."""
        if self.group is not None and isinstance(self.group.writer, InlineWriter):
            self._commit(self.group.writer)

    def _commit(self, writer: InlineWriter) -> None:
        """Commit what is pending, then hand the answers it made to the sockets."""
        self._answer(writer.commit_pending)

    def _deliver(self, dones: list[Callable[[JournalError | None], None]]) -> None:
        """A replicated commit is durable on a majority: its answers now."""
        self._answer(lambda: [done(None) for done in dones])

    def _answer(self, run: Callable[[], object]) -> None:
        assert self.group is not None  # the commit loop runs once the group exists
        with self.group.answers_held():
            run()
        answered = self.answered_sessions
        assert answered is not None  # the inline writer's commits run here
        for session in answered:  # the answers go out now, not at the send loops' turn
            session.write_now()
        answered.clear()
        assert self.store is not None
        self.store.start_writeback()  # the commit's pages, now that its answers are out
        self.ops.after_commit()


async def serve(
    bus: BusConfig,
    group_id: int,
    ready_file: Path | None = None,
    options: ServeOptions | None = None,
) -> None:
    """Run a group until SIGTERM/SIGINT, then shut down gracefully. `options` are the
    harness switches the CLI read from its environment (mrs.server.harness)."""
    options = options or ServeOptions()
    config = bus.group(group_id)
    server = GroupServer(
        bus,
        config,
        guarantees=options.guarantees,
        writer_kind=options.writer_kind,
        fault_file=options.fault_file,
        claim_data_dir=functools.partial(
            startup.claim_group_data_dir, bus, config, config.data_dir, f"group {group_id}"
        ),
    )
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            host, port = await nursery.start(server.run)
            if options.gc_thresholds is not None:  # recovered: freeze what start-up built
                gc_tuning.tune_gc(options.gc_thresholds)
            if ready_file is not None:  # before READY: a harness reads it then
                ready_file.write_text(f"{host_port(host, port)}\n")
            say(f"READY {host_port(host, port)}")
            log.info(
                "group %d (%s) listening on %s, pid %d",
                group_id,
                server.config.name,
                host_port(host, port),
                os.getpid(),
            )
            log.info("hot path: %s", _hot_path())
            async for signum in signals:
                if signum == signal.SIGHUP:
                    if server.authority is not None:
                        server.authority.reload("SIGHUP")
                    continue
                log.info("signal %s: shutting down", signal.Signals(signum).name)
                nursery.cancel_scope.cancel()
                break
    print("STOPPED", flush=True, file=sys.stderr)


def _hot_path() -> str:
    """Which code the server runs per message (mrs.native.loader), for its log."""
    state = native.install()  # decided at the first import of mrs; this reads it
    crc = "CRC-32 by ISA-L" if checksum.ISAL else "CRC-32 by zlib (isal not installed)"
    if state.compiled:
        return f"compiled ({state.reason}); {crc}"
    return f"pure Python ({state.status}: {state.reason}); {crc}"


async def _flush_refusals() -> None:
    """The log's counts of refusals not shown (mrs.core.refusals): once a burst ends,
    its count is written within REFUSAL_LOG_INTERVAL_S, not at the next refusal."""
    while True:
        await trio.sleep(REFUSAL_LOG_INTERVAL_S)
        flush_all()


async def _watch_certificate_expiry(tls: TlsConfig) -> None:
    """Say in the log, at start and every CERT_EXPIRY_CHECK_S, that this group's
    certificate or CA expires soon or has expired (`TlsConfig.expiry_notice`)."""
    while True:
        if (notice := tls.expiry_notice()) is not None:
            logging.getLogger("mrs.tls").log(*notice)
        await trio.sleep(CERT_EXPIRY_CHECK_S)
