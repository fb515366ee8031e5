"""One instance of a replicated group (`mrs serve --instance NAME`): a replica until it
may and does win the leadership, then the active until it must step down.

Why a loop of two roles: promotion is a restart. A replica that wins the term closes
its journals and opens them again through the same `GroupServer.run` a restarted
group runs (recovery: POSSDUPL for what was handed out and not confirmed, SAF drains
resumed), so a promoted replica needs no path of its own. A replica does not listen
on the client address, so a client simply tries the instances' addresses in turn and
finds the one that answers. An active that steps down (lease not renewed) stops
serving and becomes a replica again; the next active sends it a full copy, so
whatever it committed and nobody acknowledged is replaced.

Printed for the harness: `REPLICA name` when serving as a replica, `READY host:port`
when active (as `mrs serve` prints), `STEPPED DOWN name` after a step-down.
"""

from __future__ import annotations

import functools
import gc
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace

import trio

from journals import Journal, JournalError, JournalStore
from mrs.config.addresses import host_port
from mrs.config.bus import BusConfig, ConfigError, GroupConfig, load_config
from mrs.config.instance_types import InstanceConfig
from mrs.core.refusals import RefusalLog
from mrs.errors import OperatorError
from mrs.exit_status import EXIT_RUNTIME, CommandError
from mrs.limits import (
    CENSUS_WAIT_LOG_S,
    COORDINATOR_LOG_INTERVAL_S,
    ELECTION_WAIT_LOG_S,
    REPLICATION_HANDOVER_FALLBACK_S,
    REPLICATION_POLL_S,
    REPLICATION_STOP_HANDOVER_S_MAX,
)
from mrs.ops.bus_file_record import (
    BUS_FILE_KEY,
    CREDENTIALS_FILE_KEY,
    BusFileRecord,
    catch_up,
    catch_up_credentials,
)
from mrs.replication.active import Active
from mrs.replication.census import Census, history_term, may_campaign_by_census, record_trusted
from mrs.replication.coordinator import (
    NO_CO_HOLDERS,
    CoHolders,
    Coordinator,
    CoordinatorUnavailable,
    EtcdCoordinator,
    GroupState,
    awaited_instances,
    etcd_prefix,
    handed_over_unclaimed,
    must_post_position,
    same_position_replicas,
)
from mrs.replication.etcd import EtcdClient, silent_etcd_line
from mrs.replication.replica import Replica
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules
from mrs.replication.stream import Bridge, CommitStream, RecordingStore, ReplicatedWriter
from mrs.security.authority import Authority
from mrs.security.replication_tls import ReplicationTls
from mrs.server import gc_tuning, startup
from mrs.server.group_server import GroupServer
from mrs.server.handover_acks import ServerHandOver, hand_out_owed_acks
from mrs.server.harness import ServeOptions, say
from mrs.server.journal_files import JournalFiles
from mrs.storage.datadir import DataDirError
from mrs.storage.journal_usage import UsageWatch
from mrs.transport.bind_probe import try_bind
from mrs.transport.network import TCP, Network, TcpNetwork

log = logging.getLogger("mrs.server")

Won = tuple[int, frozenset[str]]
"""A term won, and the replicas its in-sync record names beside the winner."""


def _close(listeners: list[trio.SocketListener] | None) -> None:
    """Close listeners at once (closing a closed one does nothing): in a `finally`
    that may run cancelled, where an awaited close would raise over the error."""
    for listener in listeners or ():
        listener.socket.close()


def majority_acks(instances: int) -> int:
    """Replicas an answer waits for so that, with the active, a majority has it."""
    return instances // 2


def instance_config(group: GroupConfig, me: InstanceConfig) -> GroupConfig:
    """The group as this instance serves it: its own client address and data directory."""
    return replace(
        group, listen_host=me.listen_host, listen_port=me.listen_port, data_dir=me.data_dir
    )


async def serve_instance(
    bus: BusConfig, group_id: int, name: str, options: ServeOptions | None = None
) -> None:
    """Run instance `name` of group `group_id` until SIGTERM/SIGINT."""
    group = bus.group(group_id)
    me = group.instance(name)
    assert bus.coordinator is not None  # the config refuses instances without one
    key = etcd_prefix(bus.coordinator.prefix, group_id)
    client = EtcdClient(bus.coordinator.etcd)
    coordinator = EtcdCoordinator(client, key, name, bus.coordinator.lease_ttl_s)
    runner = InstanceRunner(
        bus,
        group,
        me,
        coordinator,
        options or ServeOptions(),
        replication_network=TCP if group.tls is None else ReplicationTls(group.tls, group_id),
        claim_data_dir=functools.partial(
            startup.claim_group_data_dir,
            bus,
            group,
            me.data_dir,
            f"instance {name} of group {group_id}",
            name,
        ),
    )
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as stopping:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(runner.run)
                async for signum in signals:
                    log.info("signal %s: shutting down", signal.Signals(signum).name)
                    stopping.start_soon(_say_stopping_already, signals, name)
                    await runner.stop()
                    nursery.cancel_scope.cancel()
                    break
            stopping.cancel_scope.cancel()
    await coordinator.aclose()


async def _say_stopping_already(signals: AsyncIterator[int], name: str) -> None:
    """Take each SIGTERM or SIGINT that comes while the instance stops, with one line.

    Why: the stop of an active hands its term over first (up to
    REPLICATION_STOP_HANDOVER_S_MAX), and a second signal in that time (a second
    Ctrl-C, a service manager's and an operator's SIGTERM) stayed pending in trio's
    receiver, which raised it again once the stop was done, with the default handler
    in place: the process was killed by its own SIGTERM after a clean stop (exit -15,
    the refusal counts never logged, the etcd client never closed)."""
    async for signum in signals:
        log.info(
            "signal %s again: instance %s is stopping already (a hand-over of its term "
            "ends within %g s)",
            signal.Signals(signum).name,
            name,
            REPLICATION_STOP_HANDOVER_S_MAX,
        )


class InstanceRunner:
    """The two roles of one instance, in turn."""

    def __init__(
        self,
        bus: BusConfig,
        group: GroupConfig,
        me: InstanceConfig,
        coordinator: Coordinator,
        options: ServeOptions,
        *,
        network: Network = TCP,
        replication_network: Network | None = None,
        open_store: Callable[[], JournalStore] | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        rules: ReplicationRules = KEPT_REPLICATION,
        claim_data_dir: Callable[[], None] | None = None,
    ) -> None:
        """`network`, `open_store`, `clock_ns` and `rules` are the simulator's (its
        memory network and journals, its clock, a broken build); production keeps the
        defaults: TCP, the instance's LMDB files, the wall clock, the kept rules.
        `claim_data_dir` (mrs.storage.data_dir_owner) is called each time the journals
        are opened as a replica, once the replication address is bound."""
        self.claim_data_dir = claim_data_dir
        self.network = network
        self.replication_network = network if replication_network is None else replication_network
        """The replication link's: `network`, or TLS between the group's instances
        when it has `[group.tls]` (mrs.security.replication_tls)."""
        self.open_store = open_store
        self.clock_ns = clock_ns
        self.rules = rules
        self.bus = bus
        self.group = group
        self.me = me
        self.config = instance_config(group, me)
        self.coordinator = coordinator
        self.options = options
        self.active: Active | None = None
        self.server: GroupServer | None = None
        """The group server while active (the simulator marks it crashed)."""
        self._coordinator_log = RefusalLog(log, COORDINATOR_LOG_INTERVAL_S, trio.current_time)
        self._coordinator_lost_at_s: float | None = None
        """When the coordinator stopped answering this replica (None: it answers)."""
        self._census_posted = False
        """This replica has closed its term and posted a census (mrs.replication.census)."""
        self._census_missing: tuple[tuple[str, ...], float, bool] = ((), 0.0, False)
        """The instances whose census it waits for, since when, and whether it said so."""
        self._awaited: tuple[tuple[str, ...], float, bool] = ((), 0.0, False)
        """The instances it waits for before it may campaign (coordinator
        `awaited_instances`), since when, and whether it said so (`_say_waiting`)."""
        self._said_empty = False
        """It logged that its journals hold nothing, so it is no candidate."""
        self._said_cannot_listen: str | None = None
        """Why it last said it could not take clients (`_cannot_take_clients`), None: it can."""
        self._said_lost_acknowledged: tuple[int, int] | None = None
        """The acknowledged position it last said its journals lack (`_lost_acknowledged`)."""
        self._unclaimed_since_s: float | None = None
        """Since when the term this instance handed over has stayed unclaimed."""
        self.on_step_down: Callable[[], None] | None = None
        """Told each time an active term ends here: what lived only in its memory
        (nonrecoverable messages, MRS_ACKs waiting) is gone, as in a crash (the
        simulator's checker counts it so); after a planned hand-over, the MRS_ACKs
        waiting were recorded for the next active (mrs.server.handover_acks)."""

    async def run(self) -> None:
        while True:
            try:
                term, bridge, co_holders = await self.run_replica()
                await self.run_active(term, bridge, co_holders)
            finally:  # a win whose lease loop never began (its start failed)
                self.coordinator.stop_renewing_from_thread()
            say(f"STEPPED DOWN {self.me.name}")
            if self.on_step_down is not None:
                self.on_step_down()

    async def stop(self) -> None:
        """A planned stop (SIGTERM): a serving active hands its term over to a replica in
        sync as `mrs failover` does, or, refused, gives its lease up at once with one
        line saying what was not handed over (mrs.replication.active
        `Active.stop_handing_over`). Why: given up at once, the MRS_ACKs its AK senders
        had not got were lost with its memory, though each put was told SUCCESS. An
        active still recovering has answered nothing: it gives the lease up at once."""
        active = self.active
        if active is None:
            return
        if self.server is not None:
            await active.stop_handing_over()
            return
        active.stream.answering = False
        active.resigned = True  # a late renewal in flight answers nothing again
        await self.coordinator.resign()

    def _reread_queues(self) -> None:
        """The group's queues as the bus file says now. Why: `mrs admin add-queue` and
        `set-limits` change the active's queues and write the bus file; a replica
        started before reads it when it becomes active (brought up to the journaled
        change first, `run_replica`: on another machine its copy is older), or the
        messages of a queue added at run time would wait, not delivered, until its
        next restart. The queue table only: the rest of the file (instances,
        coordinator, links) is what the instance started with. A file that cannot be
        read or parsed keeps the queues this instance has, with one line saying why."""
        path = self.bus.path
        if not path.is_file():  # the simulator's bus has no file
            return
        try:
            fresh = load_config(path).group(self.group.id)
        except (ConfigError, LookupError) as error:
            log.error("instance %s keeps the queues it started with: %s", self.me.name, error)
            return
        if fresh.queues != self.config.queues:
            added = sorted(set(fresh.queues) - set(self.config.queues))
            log.info(
                "instance %s takes the queues of %s (added since its start: %s)",
                self.me.name,
                path,
                ", ".join(f"{self.group.id}.{queue_id}" for queue_id in added) or "none",
            )
            queues = dict(fresh.queues)  # one table, as at start (admin actions change it)
            self.group = replace(self.group, queues=queues)
            self.config = replace(self.config, queues=queues)
            self.bus = replace(self.bus, groups={**self.bus.groups, self.group.id: self.group})

    # ------------------------------------------------------------------ replica
    async def run_replica(self) -> tuple[int, Bridge, frozenset[str]]:
        """Serve as a replica until this instance wins a term; the term, the records
        it can bridge the other replicas of its old term with, and the replicas that
        hold every record it holds (coordinator `same_position_replicas`)."""
        lost_scope = trio.CancelScope()  # the data directory lost: the replica stops
        files = JournalFiles(
            self.bus,
            self.config,
            lost_scope.cancel,
            open_store=self.open_store,
            fault_file=self.options.fault_file,
        )
        listeners = await self._bind_replication()
        try:
            if self.claim_data_dir is not None:
                # once the port is this instance's: claimed before, a start refused
                # "the port is in use" left a data directory made, claimed and opened
                self.claim_data_dir()
            store = files.open()
        except BaseException:
            _close(listeners)
            raise
        UsageWatch.for_limits(store, self.config.limits, self.group.id)
        try:
            replica = Replica(
                self.group.id,
                self.me.name,
                store,
                self.rules,
                self.coordinator.read,
                hellos_max=self.config.guards.handshakes_max,
            )
            if self.options.gc_thresholds is not None:  # its recent records: rarely walked
                gc.unfreeze()  # what a term as the active left frozen can be collected
                gc_tuning.tune_gc(self.options.gc_thresholds)
            with lost_scope:
                async with trio.open_nursery() as nursery:
                    await self._serve_replication(replica, nursery, listeners)
                    if files.guard is not None:  # LMDB files (not the simulator's store)
                        nursery.start_soon(files.watch, files.guard)
                    say(f"REPLICA {self.me.name}")
                    term, co_holders = await self._campaign_or_stop(replica, files)
                    replica.stop_link()
                    bridge = replica.bridge()
                    replica.record_term(term)
                    journaled = store.get_raw(Journal.META, BUS_FILE_KEY)
                    granted = store.get_raw(Journal.META, CREDENTIALS_FILE_KEY)
                    nursery.cancel_scope.cancel()
        finally:
            _close(listeners)  # served, they are closed already; else never served
            store.close()
            files.release()
        if files.lost is not None:
            raise DataDirError(f"instance {self.me.name} stops: {files.lost}")
        catch_up(self.bus.path, BusFileRecord.of(journaled), self.group.id)
        if self.bus.auth is not None:
            catch_up_credentials(self.bus.auth.credentials_path, BusFileRecord.of(granted))
        return term, bridge, co_holders

    async def _bind_replication(self) -> list[trio.SocketListener] | None:
        """Bind this instance's replication address (real TCP; None over the
        simulator's network, served by `_serve_replication`) before its data directory
        is claimed and its journals opened, as `mrs serve` binds its ports first: a
        port taken fails the start with the directory as it was. One line naming the
        setting when it cannot be bound."""
        network = self.replication_network
        if not isinstance(network, TcpNetwork):
            return None
        try:
            return await network.listen(self.me.replication_host, self.me.replication_port)
        except OSError as error:
            raise self._replication_listen_failure(error) from None

    def _replication_listen_failure(self, error: OSError) -> CommandError:
        host, port = self.me.replication_host, self.me.replication_port
        setting = f"instance {self.me.name} replication = {host_port(host, port)}"
        return startup.listen_failure(self.bus, self.config, error, setting)

    async def _serve_replication(
        self,
        replica: Replica,
        nursery: trio.Nursery,
        listeners: list[trio.SocketListener] | None,
    ) -> None:
        """Take the active's links on this instance's replication address: on the
        `listeners` `_bind_replication` bound, or on a listen of the network's own."""
        network, host = self.replication_network, self.me.replication_host
        if listeners is not None:
            assert isinstance(network, TcpNetwork)
            await nursery.start(replica.serve_listeners, host, listeners, network)
            return
        try:
            await nursery.start(replica.serve, host, self.me.replication_port, network)
        except OSError as error:
            raise self._replication_listen_failure(error) from None

    def _cannot_take_clients(self) -> str | None:
        """Why this instance could not take clients if it won a term now, or None;
        said once per reason. Why: an instance listens for clients only while active,
        and one that won a term and then could not serve exited and left the group
        with a term and no active: its port taken by another process, or (found by a
        probe: `mrs failover --to` such an instance) its credentials file or link
        secret unusable, or its certificate expired. The in-sync record then named
        only it, and the group stayed down. So it does not campaign meanwhile (a
        hand-over nobody takes goes back to the instance that offered it)."""
        why = self._port_problem() or self._admission_problem()
        if why is not None and why != self._said_cannot_listen:
            log.error("instance %s is not a candidate: %s", self.me.name, why)
        self._said_cannot_listen = why
        return why

    def _port_problem(self) -> str | None:
        """Why the client port cannot be bound now (a TCP bind tried and let go, over
        the real network only), or None."""
        if self.network is not TCP:
            return None
        try:
            try_bind(self.config.listen_host, self.config.listen_port)
        except OSError as error:
            return str(startup.listen_failure(self.bus, self.config, error))
        return None

    def _admission_problem(self) -> str | None:
        """Why the active's server would refuse to start for its [auth] files or its
        certificate (as `GroupServer` and `mrs.security.tls_network` check them), or
        None."""
        if self.bus.auth is not None:
            try:
                Authority(self.bus.auth, self.config.id, self.config.linked_group_ids)
            except OperatorError as error:
                return str(error)
        tls = self.config.tls
        return None if tls is None else tls.start_problem(self.config)

    async def _campaign(
        self, term_at_least: int = 0, co_holders: CoHolders = NO_CO_HOLDERS
    ) -> Won | None:
        """Campaign for a term (above `term_at_least`), unless this instance could not
        take clients as the active (`_cannot_take_clients`): the term won and the
        replicas its in-sync record names beside this instance, or None."""
        if self._cannot_take_clients() is not None:
            return None
        term = await self.coordinator.campaign(term_at_least, co_holders)
        if term is None:
            return None
        # until the term's lease loop begins: what comes before it (the term recorded,
        # the journals reopened and recovered) holds the event loop, longer than the
        # lease's TTL with a large DQF on a cold disk (mrs.replication.lease_keeper)
        self.coordinator.renew_from_thread()
        members, _ = co_holders.members(self.me.name)
        return term, frozenset(members) - {self.me.name}

    async def _campaign_or_stop(self, replica: Replica, files: JournalFiles) -> Won:
        """`_campaign_when_free`, where journals that fail (closing a term, recording a
        census) stop the instance with one line, as the active's do: a replica that
        cannot write cannot become active."""
        try:
            return await self._campaign_when_free(replica)
        except JournalError as error:
            files.lose(f"its journals failed: {error}")
            raise DataDirError(f"instance {self.me.name} stops: {files.lost}") from None

    async def _campaign_when_free(self, replica: Replica) -> Won:
        """Campaign whenever the rules allow; never with journals that hold no record
        once the group had a term: an instance that lost its disk may still be named
        in sync (the active learns it only when it dials it), and must take a copy
        first. (Found by the simulator: a wiped replica promoted when the active was
        lost before it had its copy; and by the replicated nemesis: a wiped active back
        before its lease ran out.)"""
        while True:
            await trio.sleep(REPLICATION_POLL_S)
            try:
                state = await self.coordinator.read()
                self._coordinator_answered()
                won = await self._try_term(replica, state)
            except CoordinatorUnavailable as error:
                self._coordinator_unavailable(error)
                continue
            if won is not None:
                term, co_holders = won
                log.info("instance %s won term %d", self.me.name, term)
                self._census_posted = False
                if co_holders:
                    log.info(
                        "in sync in term %d: %s (they hold every record this instance "
                        "held when it won)",
                        term,
                        ", ".join(sorted({self.me.name, *co_holders})),
                    )
                return won

    def _co_holders(self, replica: Replica, state: GroupState) -> CoHolders:
        """The replicas a win in `state` names in sync beside this instance."""
        position = replica.comparable_position
        return CoHolders(state.term, same_position_replicas(state, self.me.name, position))

    async def _try_term(self, replica: Replica, state: GroupState) -> Won | None:
        """One look at the coordinator: the term won, or None (not now)."""
        history = history_term(replica.position, replica.led)
        if not record_trusted(state.in_sync, state.term, history):
            term_at_least = None if state.leader else await self._census(replica, state, history)
            return None if term_at_least is None else await self._campaign(term_at_least)
        self._census_posted = False  # a later loss of etcd's data is a new census
        if must_post_position(state, self.me.name):
            replica.close_term(state.term)  # the position posted is final
            await self.coordinator.post_position(state.term, replica.candidate_position)
            return None
        if self._lost_acknowledged(replica, state):
            return None
        holds = replica.holds_journals
        if self._take_back_unclaimed(state, replica):
            log.warning(
                "nobody took term %d's hand-over in %g s (%s lost?): instance %s, which "
                "holds every record of it, campaigns",
                state.term,
                REPLICATION_HANDOVER_FALLBACK_S,
                ", ".join(state.in_sync or ()),
                self.me.name,
            )
            return await self._campaign(co_holders=CoHolders(state.term, frozenset()))
        if not self.rules.may_campaign(state, self.me.name, holds_journals=holds) or (
            state.term > 0 and not holds
        ):
            if not (holds or self._said_empty or state.leader or state.in_sync is None):
                self._said_empty = True
                log.info("instance %s holds no journals: not a candidate", self.me.name)
            self._say_waiting(state, replica)
            return None
        self._awaited = ((), 0.0, False)
        return await self._campaign(co_holders=self._co_holders(replica, state))

    def _say_waiting(self, state: GroupState, replica: Replica) -> None:
        """One WARNING once this replica has waited ELECTION_WAIT_LOG_S for the same
        instances (coordinator `awaited_instances`): no instance is active, and it may
        not campaign until one of them is back. Why: with the active and the other
        in-sync replica both down (or the active alone in sync, then lost), the group
        stayed without an active for ever, and no instance's log said why or what to
        start; `mrs status` said only that a failover was under way."""
        awaited = awaited_instances(state, self.me.name, holds_journals=replica.holds_journals)
        now_s = trio.current_time()
        waited, since_s, said = self._awaited
        if awaited != waited:
            self._awaited = (awaited, now_s, False)
            return
        if not awaited or said or now_s - since_s < ELECTION_WAIT_LOG_S:
            return
        self._awaited = (awaited, since_s, True)
        names = ", ".join(awaited)
        start = names
        if not replica.holds_journals:
            why = "its journals hold nothing of the group, and it takes a copy from an active"
            start = f"{names}, or {self._start_empty_advice(names)}"
        elif self.me.name not in (state.in_sync or ()):
            why = f"it is not in sync, and an answered record may be on {names} alone"
        elif all(name in state.positions for name in awaited):
            why = f"{names} posted a position ahead of its own {replica.position} and took no term"
        else:
            why = f"an answered record may be on {names} alone (no position posted since)"
        log.warning(
            "instance %s has waited %.0f s for instance(s) %s: etcd names no active in term "
            "%d (in sync: %s), and it may not become active: %s; start %s",
            self.me.name,
            now_s - since_s,
            names,
            state.term,
            ", ".join(state.in_sync or ()),
            why,
            start,
        )

    def _start_empty_advice(self, names: str) -> str:
        """What to do when `names` run with empty journals too: every copy of the
        group's journals is gone. Why: each such instance waited for the others and
        said to start them, though they ran (all three data directories wiped); only
        the operator may decide to start the group empty, by deleting its record in
        etcd (the instances then start by census, docs/replication.md)."""
        coordinator = self.bus.coordinator
        endpoints = ",".join(coordinator.etcd) if coordinator else "<etcd>"
        where = etcd_prefix(coordinator.prefix if coordinator else "/mrs", self.group.id)
        return (
            f"if {names} run and hold nothing too, every copy of the group's journals is "
            "gone: restore an instance's data directory, or start the group empty by "
            f"deleting its record (etcdctl --endpoints {endpoints} del --prefix {where}/)"
        )

    def _lost_acknowledged(self, replica: Replica, state: GroupState) -> bool:
        """These journals end before a record this instance acknowledged as a replica
        (its floor, mrs.replication.active `_record_floors`): its data directory was
        replaced by an older copy of itself (a backup restored, a snapshot rolled
        back). Then it is no candidate: named alone in the in-sync record it would win
        the next term without what it acknowledged since, and every answer those
        records carried would be lost (before: they were, silently). It waits for an
        instance that holds them, and takes what it lacks from it. Logged once."""
        floor = state.floors.get(self.me.name)
        if state.leader is not None or floor is None or not replica.holds_journals:
            return False  # an active sends it what it lacks; nothing to decide now
        if not self.rules.below_floor(replica.position, floor):
            self._said_lost_acknowledged = None
            return False
        if floor != self._said_lost_acknowledged:
            self._said_lost_acknowledged = floor
            log.error(
                "instance %s is not a candidate: its journals end at %s, before %s, which "
                "it acknowledged (its data directory was replaced by an older copy?); it "
                "waits for an instance that holds those records (start the others)",
                self.me.name,
                replica.position,
                floor,
            )
        return True

    def _take_back_unclaimed(self, state: GroupState, replica: Replica) -> bool:
        """This instance handed its term over and the term has stayed unclaimed for
        REPLICATION_HANDOVER_FALLBACK_S (coordinator `handed_over_unclaimed`)."""
        if not replica.holds_journals or not handed_over_unclaimed(
            state, self.me.name, replica.led
        ):
            self._unclaimed_since_s = None
            return False
        now_s = trio.current_time()
        if self._unclaimed_since_s is None:
            self._unclaimed_since_s = now_s
        return now_s - self._unclaimed_since_s >= REPLICATION_HANDOVER_FALLBACK_S

    async def _census(self, replica: Replica, state: GroupState, history: int) -> int | None:
        """etcd holds no record these journals can trust (mrs.replication.census): close
        the old term (no record of it taken after the census is posted, so the census
        is final), post what the journals hold, and say whether this instance may
        campaign: the term to campaign above (every term the posted instances saw),
        or None. `history`: the highest term its journals hold. Logged once when
        etcd's record is found older than the journals (a new group's instances hold no
        history: nothing to close, nothing to say)."""
        if not self._census_posted:
            if history > 0:
                log.warning(
                    "etcd holds no record of group %d's term %d or later (its data was lost, "
                    "restored from an older backup, or this is another etcd): the instances "
                    "compare their journals, and the most advanced of a majority becomes active",
                    self.group.id,
                    history,
                )
                replica.close_term(max(replica.term_seen, state.term))
            self._census_posted = True
        census = Census.of(replica.holds_journals, replica.position, replica.led, replica.term_seen)
        await self.coordinator.post_census(census)
        names = tuple(instance.name for instance in self.group.instances)
        posted = await self.coordinator.read_census(names)
        if not may_campaign_by_census(posted, self.me.name, len(names)):
            needed = len(names) // 2 + 1 if census.holds else len(names)
            self._say_census_missing(names, posted, needed)
            return None
        return max(other.term_seen for other in posted.values())

    def _say_census_missing(
        self, names: tuple[str, ...], posted: dict[str, Census], needed: int
    ) -> None:
        """One WARNING once the same instances' census has been missing for
        CENSUS_WAIT_LOG_S while too few are posted to decide. Why: a new group starts
        only once all its instances have posted, and an instance started with another
        etcd or [coordinator] prefix (a typo on one machine) posts where the others
        never look; the group then never started, and no log said why."""
        missing = tuple(name for name in names if name not in posted)
        now_s = trio.current_time()
        waited, since_s, said = self._census_missing
        if missing != waited:
            self._census_missing = (missing, now_s, False)
            return
        if said or len(posted) >= needed or now_s - since_s < CENSUS_WAIT_LOG_S:
            return
        self._census_missing = (missing, since_s, True)
        where = "(no [coordinator])"
        if self.bus.coordinator is not None:
            etcd = ", ".join(self.bus.coordinator.etcd)
            where = f"{etcd} under {etcd_prefix(self.bus.coordinator.prefix, self.group.id)}"
        log.warning(
            "instance %s has waited %.0f s for instance(s) %s: etcd holds no record of "
            "group %d it can trust, and the group starts once %d of its %d instances have "
            "posted what their journals hold (census in %s); start them, each with the "
            "same [coordinator] etcd and prefix",
            self.me.name,
            now_s - since_s,
            ", ".join(missing),
            self.group.id,
            needed,
            len(names),
            where,
        )

    def _coordinator_unavailable(self, error: CoordinatorUnavailable) -> None:
        """One WARNING when the coordinator stops answering (and one per other reason),
        then one every COORDINATOR_LOG_INTERVAL_S with the count of tries not shown.
        Why: a replica asks every REPLICATION_POLL_S, and an etcd down for an hour
        logged 18,000 lines per instance, one per try. An etcd none of whose endpoints
        answers is said as `mrs failover` says it (silent_etcd_line): the endpoints and
        the `[coordinator] etcd` key of the config to check, not the client's words."""
        if self._coordinator_lost_at_s is None:
            self._coordinator_lost_at_s = trio.current_time()
        reason = str(error)
        told = reason
        if self.bus.coordinator is not None:
            endpoints = self.bus.coordinator.etcd
            told = silent_etcd_line(reason, endpoints, self.bus.path) or reason
        self._coordinator_log.refused("coordinator", "coordinator unavailable", told, reason)

    def _coordinator_answered(self) -> None:
        """The coordinator answers: one line if it had stopped (its outage is over, and
        the next one is logged at once)."""
        if self._coordinator_lost_at_s is None:
            return
        down_s = trio.current_time() - self._coordinator_lost_at_s
        log.info("coordinator answers again (unavailable for %.1f s)", down_s)
        self._coordinator_lost_at_s = None
        self._coordinator_log = RefusalLog(log, COORDINATOR_LOG_INTERVAL_S, trio.current_time)

    # ------------------------------------------------------------------- active
    async def run_active(self, term: int, bridge: Bridge, co_holders: frozenset[str]) -> None:
        """Serve clients as the active of `term` until stepping down; `co_holders`:
        replicas named in sync from the start (they hold every record it holds)."""
        replicas = tuple(i for i in self.group.instances if i.name != self.me.name)
        made: list[RecordingStore] = []
        self._reread_queues()

        def make_writer(store, wake, deliver) -> ReplicatedWriter:  # type: ignore[no-untyped-def]
            stream = CommitStream(
                term,
                tuple(r.name for r in replicas),
                deliver,
                acks_needed=majority_acks(len(self.group.instances)),
                rules=self.rules,
                bridge=bridge,
            )
            recording = RecordingStore(store, stream)
            made.append(recording)
            self.active = Active(
                group_id=self.group.id,
                me=self.me,
                replicas=replicas,
                coordinator=self.coordinator,
                term=term,
                lease_ttl_s=self.bus.coordinator.lease_ttl_s if self.bus.coordinator else 5,
                store=recording,
                stream=stream,
                on_step_down=lambda reason: scope.cancel(),
                network=self.replication_network,
                co_holders=co_holders,
                server=ServerHandOver(server),
            )
            return ReplicatedWriter(recording, wake, stream)

        server = GroupServer(
            self.bus,
            self.config,
            network=self.network,
            open_store=self.open_store,
            clock_ns=self.clock_ns,
            guarantees=self.options.guarantees,
            fault_file=self.options.fault_file,
            replicated_writer=make_writer,
            pcj_archiver=self.options.pcj_archiver,
        )
        try:
            async with trio.open_nursery() as nursery:
                scope = nursery.cancel_scope  # a step-down stops the server and the links
                host, port = await nursery.start(server.run)
                assert self.active is not None  # made by server.run
                hand_out_owed_acks(server)  # a planned hand-over's, to this term
                if self.options.gc_thresholds is not None:  # as `mrs serve` once recovered
                    gc_tuning.tune_gc(self.options.gc_thresholds)
                self.server = server
                server.replication_status = self.active.status_info
                nursery.start_soon(self.active.run)
                say(f"READY {host_port(host, port)}")
        finally:
            self.active = None
            self.server = None
        if (lost := next((r.lost for r in made if r.lost is not None), None)) is not None:
            # Not a replica again in this process: its device failed, and as the writer
            # of the term it could win the next one at once and fail again. Stopped, it
            # lets a replica with every record take over (docs/replication.md).
            raise CommandError(
                f"instance {self.me.name} stops: {lost}; a replica takes over. Once the "
                "device is fixed, start it again: it takes a copy from the active",
                EXIT_RUNTIME,
            )
