"""The operator's side of one running group: status extras, journal watch, endpoints.

Why apart from the server: uptime, version, journal usage, map growth, the metrics
endpoint, the web view and the automatic PCJ archive are what an operator looks at,
not how messages move. The server owns one `GroupOps`, calls `after_commit()` after
each inline commit and runs `run()` in its nursery; everything else lives here.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import uuid
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Protocol

import trio

from mrs import __version__
from mrs.config.addresses import host_port
from mrs.core.refusals import RefusalLog
from mrs.limits import JOURNAL_CHECK_INTERVAL_S, PCJ_ARCHIVE_RUNS_KEPT_MAX, SLOW_COMMIT_S
from mrs.ops.alarms import disk_numbers, group_alarms
from mrs.ops.bound_log import BoundLog
from mrs.ops.queue_rates import QueueCounts
from mrs.storage.journal_usage import UsageWatch

if TYPE_CHECKING:
    from journals import JournalStore
    from mrs.config.bus import BusConfig, GroupConfig
    from mrs.group import Group
    from mrs.ops.pcj_archiver import PcjArchiver

log = logging.getLogger("mrs.ops")


class SessionView(Protocol):
    """What the operator's side reads of one connection: whether it is a link."""

    @property
    def link(self) -> object | None: ...


class OwningServer(Protocol):
    """What the operator's side reads of the server that owns it
    (`mrs.server.group_server.GroupServer`): a protocol, so this module does not import
    the server that imports it."""

    @property
    def bus(self) -> BusConfig: ...
    @property
    def config(self) -> GroupConfig: ...
    @property
    def store(self) -> JournalStore | None: ...
    @property
    def address(self) -> tuple[str, int] | None: ...
    @property
    def sessions(self) -> AbstractSet[SessionView]: ...
    @property
    def group(self) -> Group | None: ...
    def status_info(self) -> dict: ...
    @property
    def pcj_archiver(self) -> PcjArchiver | None: ...


class GroupOps:
    def __init__(self, server: OwningServer) -> None:
        self.server = server
        self.started_time_s = time.time()
        self._started_monotonic_s = time.monotonic()
        self.watch: UsageWatch | None = None
        self.metrics: Any = None
        """mrs.ops.metrics.GroupMetrics once the endpoint is on."""
        self._slow_commits = RefusalLog(log, line_format="{message}")
        """Slow commits in the log (`_slow_commit`): one line an interval."""
        self.endpoints: dict[str, str] = {}
        self.queue_counts: QueueCounts | None = (
            QueueCounts() if server.config.ops.web_port is not None else None
        )
        """Per-queue deliveries and confirms for the web view's rates."""
        self.last_archive: dict | None = None
        """The last PCJ archive's summary (mrs.ops.pcj_retention)."""
        self.archive_runs: dict[str, dict] = {}
        """The summaries of the last PCJ_ARCHIVE_RUNS_KEPT_MAX runs `mrs pcj archive`
        asked for, by run id: an automatic run right after one (it waited for the lock)
        replaces `last_archive` before the command's next look."""
        self.archive_lock = trio.Lock()
        """One archive run at a time on a replicated group's active."""
        self._nursery: trio.Nursery | None = None
        self._held: dict[str, list[trio.SocketListener]] = {}
        """The endpoints' addresses taken before the journals (`bind_endpoints`),
        by key, until they are served."""

    def attach_store(self, can_grow: bool) -> None:
        """Called once the journals are open (before recovery)."""
        if self.server.config.ops.metrics_port is not None:
            from mrs.ops.metrics import GroupMetrics

            self.metrics = GroupMetrics(self)
        store = self.server.store
        if store is None or not hasattr(store, "env"):
            return  # the simulator's in-memory store: no map to watch
        config = self.server.config
        self.watch = UsageWatch.for_limits(
            store,
            config.limits,
            config.id,
            warn_percents=config.ops.journal_warn_percents,
            can_grow=can_grow,  # off when another thread writes: no set_mapsize here
        )

    def reply_observer(self, session: object = None):
        """What each session calls with every reply it sends (None: metrics and the
        web view off); with the web view, the per-queue counts (mrs.ops.queue_rates)."""
        chain = self.metrics.observe_reply if self.metrics is not None else None
        if self.queue_counts is None or session is None:
            return chain
        return self.queue_counts.observer(session, chain)

    def after_commit(self) -> None:
        """Grow the map between commits, before a burst can fill it; say when the disk
        is slow."""
        if self.metrics is not None:
            self.metrics.after_commit()
        group = self.server.group
        if group is not None and group.writer.stats.commit_s_max > SLOW_COMMIT_S:
            self._slow_commit(group.writer.stats)
        if self.watch is not None and self.watch.can_grow:
            self.watch.grow_if_needed()

    def _slow_commit(self, stats: Any) -> None:
        """A WARNING (at most one a REFUSAL_LOG_INTERVAL_S, with the count of those not
        shown) for a commit longer than SLOW_COMMIT_S. Why: with the default writer
        every answer waits for the commit, and a disk that stalled 18 s left nothing
        in the log while clients said "server silent for 15 s"."""
        took_s, stats.commit_s_max = stats.commit_s_max, 0.0
        self._slow_commits.refused(
            "slow-commit",
            "journal",
            f"group {self.server.config.id}: a journal commit took {took_s:.1f} s: the disk "
            "holding the journals is slow or stalled, and every answer waited for it",
        )

    async def bind_endpoints(self) -> None:
        """Take the opt-in endpoints' addresses (metrics, web) and hold them until
        `start_endpoints` serves them; a port another process holds raises the one line
        naming its key (mrs.ops.http_endpoint.endpoint_failure). The server calls this
        beside the bind of its own `listen`, before it opens the journals. Why: a
        check by a bind let go (the command's, before the server) left the port free
        until the server bound it after committing its boot epoch, and a port taken in
        between failed the start with the epoch bumped and the journals changed. Not
        on a replicated group: its active takes the ports when it wins a term, and
        retries while an old active still holds them (`serve_endpoint`)."""
        from mrs.ops.http_endpoint import bind_endpoint, endpoint_failure

        if self.server.config.instances:
            return
        ops = self.server.config.ops
        for key, host, port in (
            ("metrics_listen", ops.metrics_host, ops.metrics_port),
            ("web_listen", ops.web_host, ops.web_port),
        ):
            if port is None:
                continue
            try:
                self._held[key] = await bind_endpoint(host, port)
            except OSError as error:
                self.release_endpoints()
                raise endpoint_failure(self.server, key, host, port, error) from None

    def answering_recovering(self):  # -> mrs.ops.recovering.RecoveringAnswers
        """Around the journals' opening and recovery (`with`): the endpoints held by
        `bind_endpoints` answer 503 "recovering" at once (mrs.ops.recovering)."""
        from mrs.ops.recovering import RecoveringAnswers

        config = self.server.config
        held = [listener.socket.fileno() for each in self._held.values() for listener in each]
        return RecoveringAnswers(held, f"group {config.id} ({config.name})")

    def release_endpoints(self) -> None:
        """Close the addresses `bind_endpoints` holds and no endpoint serves (a start
        that failed after taking them)."""
        for listeners in self._held.values():
            for listener in listeners:
                listener.socket.close()
        self._held.clear()

    async def start_endpoints(self, nursery: trio.Nursery) -> None:
        """The opt-in endpoints (metrics, web), listening when this returns: the server
        awaits it before READY, so a port they cannot take fails the start in one line
        (it used to fail after READY). Without endpoints it returns at once, without
        a scheduler pass (the simulator's schedules stay as they were)."""
        ops = self.server.config.ops
        if ops.metrics_port is not None:
            from mrs.ops.metrics import serve_metrics

            held = self._held.pop("metrics_listen", None)
            await nursery.start(functools.partial(serve_metrics, listeners=held), self)
        if ops.web_port is not None:
            from mrs.ops.web import serve_group_web

            held = self._held.pop("web_listen", None)
            await nursery.start(functools.partial(serve_group_web, listeners=held), self)

    async def run(self) -> None:
        """Journal checks every second (its usage, and the DQF, SAF and DLJ against
        their bounds: mrs.ops.bound_log), and the PCJ's archive when it is on."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            ops = self.server.config.ops
            if ops.pcj_archive_after_s is not None:
                from mrs.ops.pcj_retention import archive_forever

                nursery.start_soon(archive_forever, self)
            bounds = BoundLog(self.server.config.id)
            while self.watch is not None:
                usage = self.watch.check()
                if self.server.group is not None:
                    bounds.check(self.server.group, usage.records)
                await trio.sleep(JOURNAL_CHECK_INTERVAL_S)

    def start_pcj_archive(self, until_ns: int, closed_only: bool) -> str:
        """Start an archive run on this replicated group's active (`mrs pcj archive`
        through the admin request `pcj_archive`); its id, which the run's summary in
        `mrs status --json` keeps under `pcj_archive_runs` once it is done. Raises
        LookupError when this server cannot run one."""
        from mrs.ops.pcj_retention import run_here

        if not self.server.config.instances:
            raise LookupError("this group is not replicated: run `mrs pcj archive` beside it")
        if self.server.pcj_archiver is None or self._nursery is None:
            raise LookupError("this server was not given the archive's steps (`mrs serve`)")
        run_id = uuid.uuid4().hex[:12]
        self._nursery.start_soon(run_here, self, run_id, until_ns, closed_only)
        return run_id

    def archive_done(self, summary: dict, *, asked: bool) -> None:
        """A PCJ archive run ended: its summary is the last one, and one `mrs pcj
        archive` asked for (`asked`) is kept under its run id too."""
        self.last_archive = summary
        if asked:
            self.archive_runs[summary["run"]] = summary
            while len(self.archive_runs) > PCJ_ARCHIVE_RUNS_KEPT_MAX:
                del self.archive_runs[next(iter(self.archive_runs))]

    def status_extra(self) -> dict:
        """What `mrs status` shows beyond the group's own status_info."""
        server = self.server
        journal = self.watch.check().as_dict() if self.watch is not None else {}
        if self.watch is not None:
            journal["warn_percent"] = list(self.watch.warn_percents)
            journal["map_grown_times"] = self.watch.grown_times
            limits = server.config.limits
            journal.update(
                disk_numbers(
                    str(server.config.data_dir), limits.journal_bytes_max, limits.message_bytes_max
                )
            )
        alarms = (
            group_alarms(server.group, server.config.guards, journal, _held_bytes(server))
            if server.group is not None
            else []
        )
        clients = sum(1 for s in server.sessions if s.link is None)
        links_up = _links_up(server.group)
        return {
            "version": __version__,
            "pid": os.getpid(),
            "started_time_s": round(self.started_time_s, 3),
            "uptime_s": round(time.monotonic() - self._started_monotonic_s, 3),
            "listen": host_port(*server.address) if server.address else None,
            "connections": {"clients": clients, "links": links_up},
            "journal": journal,
            "alarms": [alarm.as_dict() for alarm in alarms],
            "endpoints": dict(self.endpoints),
            **({"pcj_archive": self.last_archive} if self.last_archive is not None else {}),
            **({"pcj_archive_runs": dict(self.archive_runs)} if self.archive_runs else {}),
        }


def _held_bytes(server: OwningServer) -> list[tuple[str, int]]:
    """(peer, bytes of its memory messages waiting in queues) of each connection that
    has some: what the connection_bytes_max guard bounds (mrs.group.memory_quota)."""
    held = []
    for session in server.sessions:
        account = getattr(session, "account", None)
        if account is not None and account.held_bytes:
            held.append((str(getattr(session, "peer", "?")), account.held_bytes))
    return held


def _links_up(group: Group | None) -> int:
    """Links up, counted from the group's peers rather than from the server's sessions:
    the group that dials a link holds it outside its accepted sessions, and it is as
    much a link there as on the group that accepted it."""
    if group is None:
        return 0
    return sum(1 for peer in group.peers.by_id.values() if peer.link is not None)
