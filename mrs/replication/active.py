"""The active instance's side: dial each replica, stream it the commits (or a full copy
first), take its acknowledgements, keep the in-sync record in etcd, keep the lease.

Why the active dials: it alone knows the current term, and a replica learns it from
the hello; a replica that restarted, or an old active that came back, is simply
dialed again and told where to start. A replica whose position is not in the records
kept (another term, or too far behind) gets a full copy of the journals, read in
bounded slices as the link sends them, so the active keeps committing and answering
meanwhile (`_full_copy`).

Stepping down: the lease is renewed every TTL / REPLICATION_RENEW_FRACTION_DEFAULT;
once REPLICATION_STEP_DOWN_FRACTION_DEFAULT of the TTL has passed since the last renewal that
worked, the active stops answering (nothing held is answered any more), asks etcd once
more (a stalled process misses its renewals though etcd still holds its lease: it
answers again if etcd renews it, `_renew_late`), and otherwise asks its owner to stop
serving, well before etcd can let a replica take over.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NoReturn, Protocol

import msgpack
import trio

from journals import JournalError, WriteBatch
from journals.keys import Journal
from mrs.config.addresses import host_port
from mrs.config.instance_types import InstanceConfig
from mrs.core.refusals import clipped
from mrs.limits import (
    REPLICATION_COPY_SLICE_BYTES,
    REPLICATION_COPY_SLICE_ITEMS_MAX,
    REPLICATION_DIAL_S_MAX,
    REPLICATION_DIAL_S_MIN,
    REPLICATION_HANDOVER_WAIT_S,
    REPLICATION_HELLO_ANSWER_S_MAX,
    REPLICATION_LAG_S_MAX,
    REPLICATION_LATE_S,
    REPLICATION_PING_S,
    REPLICATION_RENEW_FRACTION_DEFAULT,
    REPLICATION_REST_HOLD_S,
    REPLICATION_SILENT_S_MAX,
    REPLICATION_STEP_DOWN_FRACTION_DEFAULT,
    REPLICATION_STOP_HANDOVER_S_MAX,
)
from mrs.replication.coordinator import Coordinator, CoordinatorUnavailable, FailoverRequest
from mrs.replication.link_out import LinkOut, write_first
from mrs.replication.stream import CommitStream, RecordingStore
from mrs.replication.wire import (
    ANSWER_BYTES_MAX,
    PING_FRAME,
    CannotStore,
    FrameReader,
    LinkBroken,
    LinkRefused,
    WrongInstance,
    frame,
)
from mrs.transport.network import TCP, Network

log = logging.getLogger("mrs.replication")


class HandOverServer(Protocol):
    """What a planned hand-over asks of the active's server (`Active.hand_over`)."""

    def pause(self) -> None:
        """Take no new request from a client connection (each waits unread)."""

    def resume(self) -> None:
        """Take requests again (the hand-over was refused)."""

    def commit_now(self) -> None:
        """Commit what the requests taken in so far submitted."""

    def owed_acks(self) -> list[tuple[int, int, bytes]]:
        """The MRS_ACKs made and not yet handed to a client: (group, queue, body)."""

    def serves_clients(self) -> bool:
        """Whether a client is attached to one of its queues now."""

    async def written(self) -> None:
        """Until every answer and message handed to a connection is written to it."""


class _NoServer:
    """A bare active (the unit tests' links): nothing to pause, commit or hand over."""

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def commit_now(self) -> None:
        pass

    def owed_acks(self) -> list[tuple[int, int, bytes]]:
        return []

    def serves_clients(self) -> bool:
        return False

    async def written(self) -> None:
        pass


_SETTLE_POLL_S = 0.01
"""How often a hand-over looks whether the last commits are answered (a commit made by
the server's loop wakes no waiter of the stream's)."""

PLANNED_STOP = FailoverRequest("", "planned stop")
"""The hand-over a SIGTERM of the active makes (`Active.stop_handing_over`), to any
replica in sync: asked by no `mrs failover`, so nothing of it is read from, written to
or refused in etcd's request key."""

LINK_ERRORS = (LinkBroken, trio.BrokenResourceError, trio.ClosedResourceError, OSError)
_LAG_CHECK_S = 0.1


class Active:
    """One term of an active instance: its stream, its replicas, its lease."""

    def __init__(
        self,
        *,
        group_id: int,
        me: InstanceConfig,
        replicas: tuple[InstanceConfig, ...],
        coordinator: Coordinator,
        term: int,
        lease_ttl_s: float,
        store: RecordingStore,
        stream: CommitStream,
        on_step_down: Callable[[str], None],
        network: Network = TCP,
        co_holders: frozenset[str] = frozenset(),
        server: HandOverServer | None = None,
    ) -> None:
        self.server: HandOverServer = _NoServer() if server is None else server
        """The active's server, as a planned hand-over pauses and settles it."""
        self.network = network
        """Where the replicas are dialed: TCP, or the simulator's memory network."""
        self.group_id = group_id
        self.me = me
        self.replicas = replicas
        self.coordinator = coordinator
        self.term = term
        self.lease_ttl_s = lease_ttl_s
        self.store = store
        self.stream = stream
        self.on_step_down = on_step_down
        self.connected: set[str] = set()
        self._down_since: dict[str, float] = {}
        """When each replica's link was last lost (or the term began), while it is not
        connected: one down longer than the lag bound leaves the in-sync set, even in
        a group that writes nothing (`_lag_loop`)."""
        self.stepped_down: str | None = None
        self.resigned = False
        """Set as a planned hand-over gives the lease up: its renewals stop."""
        self._handing_over: FailoverRequest | None = None
        self._stop_refused = ""
        self._owed_recorded = False
        """The MRS_ACKs owed were committed for the next active (`_keep_owed_acks`):
        a refused stop then says so instead of counting them as lost."""
        """Why the hand-over of a planned stop was refused (`stop_handing_over` says it)."""
        self._sync_lock = trio.Lock()
        self.recorded: set[str] = set(co_holders)
        """The replicas etcd names as in sync (a subset of those waited for); at first
        the win's co-holders (coordinator `CoHolders`: they held every record this
        instance held when it won, and etcd names them until a replica joins)."""
        self.links: dict[str, LinkOut] = {}
        self._sent: dict[str, int] = {}
        """The last record of this term handed to each replica's ended links (`LinkOut`
        cursor): a hello may not claim more (`_claims_unsent`)."""
        self._claimed: set[str] = set()
        """Replicas whose hello claimed records never sent to them (logged once)."""
        self.problems: dict[str, str] = {}
        """Why a replica said it cannot store our records ("fail"), until it acknowledges
        one again (`mrs status` shows it)."""
        self._floors_recorded: dict[str, tuple[int, int]] = {}
        """What `_record_floors` last recorded in etcd."""
        self._last_end: dict[str, tuple[str, bool]] = {}
        """Why each replica's last link ended ("" if nobody said) and whether it had
        brought an acknowledgement: after one that had not, the next links are logged
        only when the reason changes (`_link_ended`)."""
        stream.on_sealed = self._write_now
        stream.on_flushed = self._write_rest
        store.on_lost = self.step_down

    async def run(self) -> None:
        began_s = trio.current_time()
        for replica in self.replicas:
            if replica.name not in self.connected:
                self._down_since.setdefault(replica.name, began_s)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._lease_loop, nursery)
            nursery.start_soon(self._lag_loop)
            for replica in self.replicas:
                nursery.start_soon(self._link_loop, replica)

    def step_down(self, reason: str) -> None:
        """Stop answering now; the owner stops serving."""
        if self.stepped_down is not None:
            return
        self.stepped_down = reason
        self.stream.answering = False
        for link in self.links.values():
            link.want()  # each link's task sees the step-down and ends
        level = logging.INFO if reason.startswith("planned") else logging.CRITICAL
        log.log(level, "instance %s steps down from term %d: %s", self.me.name, self.term, reason)
        self.on_step_down(reason)

    # ------------------------------------------------------------------ the lease
    async def _lease_loop(self, nursery: trio.Nursery) -> None:
        """Renew the lease, and take up a hand-over request in a task of its own: the
        lease is renewed while the hand-over waits for a replica (longer than a TTL,
        it would lapse, and a replica take over while this instance still answered)."""
        renew_every_s = self.lease_ttl_s / REPLICATION_RENEW_FRACTION_DEFAULT
        step_down_after_s = self.lease_ttl_s * REPLICATION_STEP_DOWN_FRACTION_DEFAULT
        # From the win's grant (or the last renewal the thread made since), not from
        # now: counted from now, an active whose start took most of the TTL went on
        # answering past its lease's expiry while etcd could not be asked, and a
        # replica could win the next term while it did.
        self.coordinator.stop_renewing_from_thread()
        last_ok_s = self.coordinator.lease_sent_s
        while True:
            sent_s = trio.current_time()
            renewed = False
            with trio.move_on_at(last_ok_s + step_down_after_s):
                renewed = await self.coordinator.renew()
            if self.resigned or self.stepped_down is not None:
                return
            if not renewed and trio.current_time() - last_ok_s >= step_down_after_s:
                sent_s = trio.current_time()
                renewed = await self._renew_late(renew_every_s)
                if self.resigned or self.stepped_down is not None:
                    return
            if renewed:
                last_ok_s = sent_s
                with trio.move_on_after(renew_every_s / 2):
                    await self._record_floors()
                request = await self.coordinator.failover_requested()
                if request is not None and self._handing_over is None:
                    self._handing_over = request
                    nursery.start_soon(self._take_up, request)
            elif trio.current_time() - last_ok_s >= step_down_after_s:
                self.step_down("the lease could not be renewed")
                return
            elif not renewed and await self._lease_lost():
                self.step_down("the lease is lost (another instance may be active)")
                return
            await trio.sleep(renew_every_s if renewed else renew_every_s / 4)

    async def _renew_late(self, within_s: float) -> bool:
        """Past the step-down point with no renewal: stop answering, ask etcd once more
        (within `within_s`) and answer again if it renewed; whether it did.

        Why once more: the renewal may have been missed by this process, not refused by
        etcd. A process stalled past half its TTL (a loaded host, SIGSTOP, a long
        pause) woke with a lease etcd still held for it and stepped down without
        asking, so the group failed over for nothing and this instance won the next
        term itself (found in the clean-clone CI run: the web view's term 1 became 2).
        No answer is given while it asks, so none rests on a lease that may have
        expired; a renewal etcd grants means nobody else can have been active since.
        During a hand-over, which stops and resumes answers itself, it does not ask."""
        if self._handing_over is not None:
            return False
        was_answering, self.stream.answering = self.stream.answering, False
        renewed = False
        with trio.move_on_after(within_s):
            renewed = await self.coordinator.renew()
        if renewed and was_answering and not self.resigned and self.stepped_down is None:
            log.warning("instance %s renewed its lease late: answers again", self.me.name)
            self.stream.answer_again()
        return renewed

    async def _record_floors(self) -> None:
        """Record in etcd the position each replica has acknowledged, once per renewal
        when it moved (`Coordinator.record_floors`). Why: a replica whose data
        directory was replaced by an older copy of itself (a backup restored) says
        nothing of the records it acknowledged since, and named alone in the in-sync
        record it would win the next term without them: every answer they carried
        lost. Against its floor it knows (mrs.server.instance `_lost_acknowledged`).
        At the lease's pace: an etcd write per record would cost more than the commit."""
        floors = {name: (self.term, number) for name, number in self.stream.acked.items()}
        if floors == self._floors_recorded:
            return
        try:
            await self.coordinator.record_floors(self.term, floors)
        except CoordinatorUnavailable:
            return  # the renewals decide what etcd's absence means
        self._floors_recorded = floors

    async def hand_over(self, request: FailoverRequest) -> bool:
        """A planned switch-over (`mrs failover`, or `PLANNED_STOP`: a SIGTERM of the
        active, `stop_handing_over`): once every answer held is out and
        the chosen replica (or every one in sync) has every record, record only them
        as in sync, resign and step down; nothing is lost and nothing handed out is
        marked POSSDUPL that was not. Whether it stepped down; otherwise the request is
        refused, saying why, so it is never carried out later.

        Why a commit first (`HANDOVER_KEY`): a replica that has every record because
        nothing was written since may be paused or cut off, and once only it is named
        in sync nobody else may take over. Its acknowledgement of a record made now
        shows it is there to win the next term.

        Why the server is paused and settled before answers stop (`_settle`): an AK
        put is answered when read, and its MRS_ACK made when its commit is answered;
        a put taken in while answers were stopped was never committed, and a commit
        held then made no MRS_ACK, so the sender, told SUCCESS, never had one. The
        MRS_ACKs made and not yet got are recorded for the next active
        (`HANDOVER_ACKS_KEY`): they lived in this instance's memory only."""
        chosen = await self._answering_replicas(request)
        if chosen is None:
            return False
        asked = None if request is PLANNED_STOP else request  # a stop is in no etcd key
        self.server.pause()
        await self._settle(chosen)
        # Answers stop first: one given while etcd is written could rest on a replica
        # that is not chosen, and the chosen one would win without it.
        self.stream.answering = False
        given = self.stream.answered
        with trio.move_on_after(REPLICATION_HANDOVER_WAIT_S):
            while any(self.stream.acked.get(name, 0) < given for name in chosen):
                await self.stream.released.wait()
        why, owed = "", self.server.owed_acks()
        async with self._sync_lock:  # without this instance: only the chosen may campaign
            if any(self.stream.acked.get(name, 0) < given for name in chosen):
                why = f"{', '.join(sorted(chosen))} did not take the last answered records"
            elif not await self._keep_owed_acks(chosen, owed):
                why = f"{', '.join(sorted(chosen))} did not take the MRS_ACKs owed"
            # each of them has every answered record: any one may campaign on its own
            elif not await self._record_in_sync(
                chosen, "planned hand-over", with_me=False, acks_needed=len(chosen), request=asked
            ):
                why = "the in-sync record was not written (etcd, or the request withdrawn)"
        if why:
            await self._refused_after_settling(request, why, owed)
            return False
        with trio.move_on_after(REPLICATION_HANDOVER_WAIT_S):
            await self.server.written()  # what was handed out reaches its clients
        self.resigned = True
        await self.coordinator.resign()
        what = "planned stop: hand-over" if request is PLANNED_STOP else "planned hand-over"
        self.step_down(f"{what} to {', '.join(sorted(chosen))}")
        return True

    async def stop_handing_over(self) -> None:
        """A planned stop (SIGTERM of the active, mrs.server.instance
        `InstanceRunner.stop`): the hand-over `mrs failover` makes (`hand_over`), to any
        replica in sync, within REPLICATION_STOP_HANDOVER_S_MAX. Refused (no replica in
        sync, none acknowledged) or cut by that bound, the lease is given up at once as
        before, with one WARNING saying what was not handed over.

        Why: a SIGTERM gave the lease up at once, so the MRS_ACKs its AK senders had not
        got (each put told SUCCESS, its MRS_ACK in this instance's memory only) never
        came, and the AK puts it had read and told SUCCESS in its last moments were
        never stored (tens a stop under load, tests/process/test_planned_stop_29.py):
        the hand-over pauses the server and settles what it took in first.

        With no client attached and no MRS_ACK owed there is nothing only a hand-over
        keeps: the lease is given up at once and the replicas elect the next active, as
        before. Why not hand over then too: a hand-over names only the chosen replicas
        in sync, so stopping every instance in turn (a full shutdown) handed the term on
        down the line, and the group could start again only from the last one stopped
        (found by the clean-clone CI run: a stop-all-then-restart test waited for it)."""
        why = f"the hand-over took longer than {REPLICATION_STOP_HANDOVER_S_MAX:g} s"
        with trio.move_on_after(REPLICATION_STOP_HANDOVER_S_MAX):
            while self._handing_over is not None:  # a `mrs failover` under way ends first
                await trio.sleep(_SETTLE_POLL_S)
            if self.resigned:  # handed over by it (or a stop already asked)
                return
            if self.stepped_down is not None:
                why = f"it had stepped down: {self.stepped_down}"
            elif not self.server.owed_acks() and not self.server.serves_clients():
                self._resign_at_once()  # nothing only a hand-over keeps
                await self.coordinator.resign()
                return
            elif not self.connected:  # none could acknowledge: not worth its wait
                why = "no replica is connected"
            else:
                self._handing_over = PLANNED_STOP  # the lease loop takes no request now
                if await self.hand_over(PLANNED_STOP):
                    return
                why = self._stop_refused
        self._resign_at_once()
        acks = f"{len(self.server.owed_acks())} MRS_ACK(s) its senders had not got"
        lost = (
            f"the nonrecoverable messages on its queues ({acks} are in its journals for "
            "the next active)"
            if self._owed_recorded
            else f"{acks}, the nonrecoverable messages on its queues"
        )
        log.warning(
            "instance %s stops without handing term %d over (%s): it gives its lease up, "
            "and what only its memory held goes with it: %s; a message whose delivery was "
            "not yet answered comes again marked POSSDUPL",
            self.me.name,
            self.term,
            why,
            lost,
        )
        await self.coordinator.resign()

    def _resign_at_once(self) -> None:
        """Stop as a stop without a hand-over does: nothing is taken in or answered any
        more, and a late renewal in flight answers nothing again."""
        self.server.pause()  # no AK put is told SUCCESS any more that nobody will store
        self.stream.answering = False
        self.resigned = True

    async def _settle(self, chosen: set[str]) -> None:
        """With no request taken in any more: commit what was taken, and wait (within
        the hand-over's bound) until those commits are answered (an AK put's MRS_ACK
        made) and the chosen replicas have them."""
        self.server.commit_now()
        last = self.stream.number
        with trio.move_on_after(REPLICATION_HANDOVER_WAIT_S):
            while self.stream.answered < last or any(
                self.stream.acked.get(name, 0) < last for name in chosen
            ):
                with trio.move_on_after(_SETTLE_POLL_S):
                    await self.stream.released.wait()

    async def _keep_owed_acks(self, chosen: set[str], owed: list[tuple[int, int, bytes]]) -> bool:
        """Commit the MRS_ACKs owed (`HANDOVER_ACKS_KEY`) and wait until the chosen
        replicas have that record; True once they do (or when none is owed)."""
        if not owed:
            return True
        try:
            self.store.commit_now(_handover_acks_record(self.term, owed))
        except JournalError as error:
            log.error("the MRS_ACKs owed at the hand-over could not be recorded: %s", error)
            return False
        self._owed_recorded = True
        number = self.stream.number
        with trio.move_on_after(REPLICATION_HANDOVER_WAIT_S):
            while any(self.stream.acked.get(name, 0) < number for name in chosen):
                await self.stream.released.wait()
        return all(self.stream.acked.get(name, 0) >= number for name in chosen)

    async def _refused_after_settling(
        self, request: FailoverRequest, why: str, owed: list[tuple[int, int, bytes]]
    ) -> None:
        """The hand-over is refused once the server was paused: the record of the
        MRS_ACKs owed is deleted first (this instance hands them out itself), then
        answers and requests resume. A planned stop's refusal resumes nothing: it stops
        all the same, and that record stays for the next active (if a replica took it,
        it hands them out; this instance hands none out any more)."""
        if request is PLANNED_STOP:
            await self._refuse(request, why)
            return
        if owed and self.stepped_down is None:
            try:
                self.store.commit_now(
                    WriteBatch.empty().delete(Journal.META, HANDOVER_ACKS_KEY.encode())
                )
            except JournalError as error:  # the next active would hand them out again
                log.error("the record of the MRS_ACKs owed could not be deleted: %s", error)
        if self.stepped_down is None:  # else the lease is gone: nothing is answered
            self.stream.answer_again()
            self.server.resume()
        await self._refuse(request, why)

    async def _answering_replicas(self, request: FailoverRequest) -> set[str] | None:
        """The replicas to hand over to: the one asked for (or those in sync) that
        acknowledge a record made now, with every answer held out; None (refused)."""
        chosen = {request.to} if request.to else set(self.recorded)
        if request.to and request.to not in self.recorded:
            await self._refuse(request, f"{request.to} is not in sync")
            return None
        if not chosen:
            await self._refuse(request, "no replica is in sync")
            return None
        try:
            self.store.commit_now(_handover_record(self.term, chosen))
        except JournalError as error:
            await self._refuse(request, f"this instance cannot commit: {error}")
            return None
        with trio.move_on_after(REPLICATION_HANDOVER_WAIT_S):
            while chosen <= self.stream.in_sync and not self._have_every_record(chosen):
                await self.stream.released.wait()
        ready = {n for n in chosen & self.stream.in_sync if self._have_every_record({n})}
        if self.stream.waiting or not ready:
            names = ", ".join(sorted(chosen - ready)) or "a replica"
            why = f"{names} did not acknowledge a new record (paused, cut off, or slow?)"
            await self._refuse(request, why)
            return None
        return ready  # without --to: those in sync that answered

    def _have_every_record(self, names: set[str]) -> bool:
        """Every answer held is out, and each of `names` has every record."""
        if self.stream.waiting:
            return False
        return all(self.stream.acked.get(name, 0) >= self.stream.number for name in names)

    async def _take_up(self, request: FailoverRequest) -> None:
        try:
            await self.hand_over(request)
        finally:
            self._handing_over = None

    async def _refuse(self, request: FailoverRequest, why: str) -> None:
        """Refuse `request` in etcd, saying why; a planned stop's refusal is kept for
        `stop_handing_over` to say (it is no request in etcd, and nothing stays active)."""
        if request is PLANNED_STOP:
            self._stop_refused = why
            return
        log.warning("failover to %s refused: %s; staying active", request.to or "any", why)
        await self.coordinator.refuse_failover(request, why)

    async def _lease_lost(self) -> bool:
        """A renewal answered 'expired' (not a timeout): the lease is gone for good."""
        try:
            state = await self.coordinator.read()
        except Exception:  # unreachable: the step-down clock decides
            return False
        return state.leader != self.me.name or state.term != self.term

    # ----------------------------------------------------------- the in-sync set
    async def _lag_loop(self) -> None:
        while True:
            await trio.sleep(_LAG_CHECK_S)
            now_s = trio.current_time()
            unreachable = {
                name
                for name, since_s in self._down_since.items()
                if now_s - since_s > REPLICATION_LAG_S_MAX
            }
            for name in self.stream.laggards(unreachable):
                why = f"{name}'s link is down" if name in unreachable else f"{name} lags"
                async with self._sync_lock:
                    # its acknowledgements stop counting first, then etcd stops naming it
                    self.stream.in_sync.discard(name)
                    self.stream.wake_waiters()
                    await self._record_in_sync(self.stream.in_sync, why)

    async def _join(self, name: str) -> None:
        """`name` has every record: record it in etcd, then count its acknowledgements
        (counted first, an answer could rest on it while etcd lets a candidate ignore it)."""
        async with self._sync_lock:
            if name in self.stream.in_sync:
                return
            if await self._record_in_sync(self.stream.in_sync | {name}, f"{name} caught up"):
                self.stream.in_sync.add(name)
                self.stream.release()  # it may hold the last answers held: they go now
                self.stream.wake_waiters()  # and whoever waits for them (`wait_answered`)

    async def _record_in_sync(
        self,
        replicas: set[str],
        why: str,
        with_me: bool = True,
        acks_needed: int | None = None,
        request: FailoverRequest | None = None,
    ) -> bool:
        """Write the set to etcd (under `_sync_lock`: one write at a time, each from the
        set as it stands); `acks_needed` defaults to the stream's quorum; with
        `request`, only while that hand-over request stands (not withdrawn)."""
        members = tuple(sorted({self.me.name, *replicas} if with_me else replicas))
        acks = self.stream.acks_needed if acks_needed is None else acks_needed
        if await self.coordinator.set_in_sync(self.term, members, acks, request):
            self.recorded = set(replicas)
            log.info("in sync in term %d: %s (%s)", self.term, ", ".join(members), why)
            return True
        log.warning("could not record the in-sync set %s in term %d", members, self.term)
        return False

    # --------------------------------------------------------------- the links
    async def _link_loop(self, replica: InstanceConfig) -> None:
        """Dial a replica and serve its link, again and again. One that ended without an
        acknowledgement (refused, or a replica that cannot store) is dialled again after
        a pause that doubles up to REPLICATION_DIAL_S_MAX: a failing replica is not sent
        its backlog twenty times a second."""
        name, delay_s = replica.name, REPLICATION_DIAL_S_MIN
        while self.stepped_down is None:
            try:
                stream = await self.network.connect(
                    replica.replication_host, replica.replication_port
                )
            except OSError:
                await trio.sleep(delay_s)
                delay_s = min(2 * delay_s, REPLICATION_DIAL_S_MAX)
                continue
            acked_before = self.stream.acked.get(name, 0)
            ended: BaseException | None = None
            try:
                async with stream:
                    await self._serve(name, stream)
            except LINK_ERRORS as error:
                ended = error
            except BaseExceptionGroup as group:  # from _serve's nursery (sender + acks)
                _, rest = group.split(LINK_ERRORS)
                if rest is not None:
                    raise
                ended = _telling(group)
            finally:
                self.connected.discard(name)
                self._down_since.setdefault(name, trio.current_time())
            progressed = self.stream.acked.get(name, 0) > acked_before
            self._link_ended(name, ended, progressed)
            delay_s = (
                REPLICATION_DIAL_S_MIN if progressed else min(2 * delay_s, REPLICATION_DIAL_S_MAX)
            )
            await trio.sleep(delay_s)

    def _link_ended(self, name: str, ended: BaseException | None, progressed: bool) -> None:
        """Log why a link ended: a refusal or a replica that cannot store as a WARNING,
        a replica that names another instance as an ERROR, a plain loss as INFO;
        while links to it end without an acknowledgement, only when the reason
        changes (one line per state, not per retry)."""
        why = "" if ended is None else str(ended)
        repeated = not progressed and why == self._last_end.get(name, ("", True))[0]
        self._last_end[name] = (why, progressed)
        if ended is None or repeated:
            return
        if isinstance(ended, CannotStore):
            self.problems[name] = why
            log.warning("replica %s cannot store term %d's records: %s", name, self.term, why)
        elif isinstance(ended, WrongInstance):
            log.error("replication link to %s refused: %s", name, why)
        elif isinstance(ended, LinkRefused):
            log.warning("replica %s refuses term %d: %s", name, self.term, why)
        else:
            log.info("replication link to %s lost: %s", name, why)

    async def _serve(self, name: str, stream: trio.abc.Stream) -> None:
        hello = {"t": "hello", "group": self.group_id, "term": self.term, "from": self.me.name}
        await stream.send_all(frame(hello))
        reader = FrameReader(stream)
        answer = await _hello_answered(name, reader)
        if answer["t"] in ("refuse", "fail"):
            await self._refused(name, answer)
        (pos_term, pos_number), led = _hello_answer(name, answer)
        if answer.get("name") != name:
            raise WrongInstance(
                f"the replica at {_address_of(self.replicas, name)} says it is instance "
                f"{clipped(repr(answer.get('name')))}, not {name}: nothing it acknowledges "
                f"counts; check instance {name}'s replication address"
            )
        if self._claims_unsent(name, (pos_term, pos_number)):
            answer = {**answer, "whole": False}
            pos_term, pos_number = 0, 0  # its journals are unknown: a full copy
        if pos_term == self.term and pos_number < self.stream.acked.get(name, 0):
            log.error(
                "replica %s holds records up to %d of term %d, but acknowledged %d: its "
                "journals lost records (its data directory replaced by an older copy?); "
                "it is sent what it lacks",
                name,
                pos_number,
                self.term,
                self.stream.acked[name],
            )
        frames: Iterable[bytes] | None = self.stream.frames_for(
            (pos_term, pos_number), led, bool(answer.get("whole", False))
        )
        how = f"records {pos_number + 1}..{self.stream.number}"
        if frames is not None and pos_term != self.term:
            how = f"a bridge from {(pos_term, pos_number)}, then records 1..{self.stream.number}"
        if frames is None:
            frames = self._full_copy()
            how = f"a full copy at {self.stream.number}"
        link = self.links[name] = LinkOut(stream, self.stream.number)
        self.connected.add(name)
        self._down_since.pop(name, None)
        fruitless = not self._last_end.get(name, ("", True))[1]
        (log.debug if fruitless or name in self.problems else log.info)(
            "replica %s at %s: sending %s", name, (pos_term, pos_number), how
        )
        await self._join_if_whole(name, (pos_term, pos_number), answer.get("whole") is True)
        try:
            await self._stream(name, link, frames, reader, answer.get("pings") is True)
        finally:
            del self.links[name]
            self._sent[name] = max(self._sent.get(name, 0), link.cursor)

    def _claims_unsent(self, name: str, position: tuple[int, int]) -> bool:
        """Whether `name`'s hello claims a record of this term that none of its links
        was handed (logged once a term). Why: the records of a term come from its
        active alone, so such a position is a lie (or a data directory copied from
        another replica); taken at its word, it counted as an acknowledgement at the
        hello (`_join_if_whole`, or the link's cursor set past it), and answers went
        out resting on a disk that never saw their records. It gets a full copy."""
        term, number = position
        link = self.links.get(name)
        sent = max(self._sent.get(name, 0), link.cursor if link is not None else 0)
        if term != self.term or number <= sent:
            return False
        if name not in self._claimed:
            self._claimed.add(name)
            log.error(
                "replica %s says it holds records up to %d of term %d, but was sent "
                "records up to %d: nothing of that counts; it is sent a full copy",
                name,
                number,
                self.term,
                sent,
            )
        return True

    async def _stream(
        self, name: str, link: LinkOut, frames: Iterable[bytes], reader: FrameReader, pings: bool
    ) -> None:
        """Send `name` its records as they are sealed (and read its answers, `_acks`);
        while there are none, a ping every REPLICATION_PING_S to a replica that answers
        them (`pings`, said in its hello)."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._acks, name, reader, pings)
            while True:
                await link.send(frames)
                if self.stepped_down is not None:
                    nursery.cancel_scope.cancel()
                    return
                wanted = link.rearm()
                if not link.has_work(self.stream.number):
                    with trio.move_on_after(REPLICATION_PING_S if pings else math.inf):
                        await wanted.wait()  # `_write_rest` wakes it if the loop could not send
                    if not wanted.is_set():
                        frames = [PING_FRAME]
                        continue
                held = name in self._held()
                if held:  # the records of the next few commits go with it
                    await self._hold_for_company()
                records = self.stream.records_after(link.cursor)
                if records is None:
                    raise LinkBroken(f"{name} fell out of the records kept")
                if held and len(records) > 1:
                    records = [b"".join(records)]  # one write; the replica applies them as one
                frames = records
                link.cursor = self.stream.number

    async def _join_if_whole(self, name: str, position: tuple[int, int], whole: bool) -> None:
        """A replica that says at the hello it holds every record of this term joins
        the in-sync set now. Why: in a group that writes nothing, no record goes out
        and no acknowledgement comes, so a replica back after its link was down (and
        dropped for it, `_lag_loop`) stayed out of the set until the next write."""
        at_end = whole and position == (self.term, self.stream.number)
        if at_end and self.stream.ack(name, position[1]):
            await self._join(name)

    async def _hold_for_company(self) -> None:
        """Wait REPLICATION_REST_HOLD_S for more records to send with the one that woke
        this held link, or less: once an answer has waited REPLICATION_LATE_S since its
        record was sealed, the replica written first is late (a slow flush there, a busy
        core), and this replica's acknowledgement may answer it sooner (what it does
        to the answers' tail: benchmarks/README.md, "A held replica that does not wait
        behind a late one")."""
        stream = self.stream
        hold_end_s = trio.current_time() + REPLICATION_REST_HOLD_S
        while (now_s := trio.current_time()) < hold_end_s:
            late_at_s = stream.unanswered_since_s() + REPLICATION_LATE_S
            if late_at_s <= now_s:
                return
            await trio.sleep_until(min(hold_end_s, late_at_s))

    def _write_now(self, number: int, body: bytes) -> None:
        """A record sealed, before the local flush: out now on the links of the replicas
        an answer waits for (mrs.replication.link_out `write_first`); on the others
        once it is durable here (`_write_rest`)."""
        if self.stepped_down is not None:
            return
        stream, links = self.stream, self.links
        for name in write_first(links, stream.in_sync, stream.acked, stream.acks_needed):
            links[name].write_now(number, body)

    def _held(self) -> set[str]:
        """The replicas whose records wait REPLICATION_REST_HOLD_S for company: in-sync
        ones that no answer waits for (the loop does not write them each record at its
        seal, mrs.replication.link_out `write_first`). One catching up is sent to at
        once: it joins the in-sync set with an acknowledgement of the last record sealed,
        and records held would make that rarer."""
        stream = self.stream
        first = write_first(self.links, stream.in_sync, stream.acked, stream.acks_needed)
        return stream.in_sync.difference(first)

    def _write_rest(self, number: int) -> None:
        """Record `number` is durable here: out now on the links it did not go out on
        at its seal (a link already past it takes nothing; what a socket does not take,
        its task sends), except those `_held`: their tasks are woken, and send it with
        the records of the next commits at most REPLICATION_REST_HOLD_S later. An
        in-sync replica no answer waits for then flushes and acknowledges several
        commits at once, and leaves the two cores to the commits an answer waits for
        (benchmarks/README.md, "The other replica's records held for company")."""
        body = self.stream.frame_of_last(number)
        if self.stepped_down is not None:
            return
        stream, held = self.stream, self._held()
        for name, link in self.links.items():
            if body is not None and name not in held:
                link.write_now(number, body)
            if link.has_work(stream.number):
                link.want()  # its task sends the rest (or finds the records gone)

    async def _acks(self, name: str, reader: FrameReader, pings: bool) -> None:
        """Read `name`'s answers. One that answers pings and has said nothing for
        REPLICATION_SILENT_S_MAX while it had every record sent to it is lost: the link
        ends (LinkBroken), so that `_lag_loop` drops it from the in-sync set. Why: a
        replica gone without its TCP connection closing (its machine powered off, a
        cut that drops packets, a paused process) on a group that writes nothing
        missed no record and kept its link "up", so it stayed in sync for good, and a
        failover after the active's loss waited for its position."""
        while True:
            message: dict[str, Any] | None = None
            with trio.move_on_after(REPLICATION_SILENT_S_MAX if pings else math.inf):
                message = await reader.next(ANSWER_BYTES_MAX)
            if message is None:
                if self._owes_nothing(name):
                    raise LinkBroken(
                        f"{name} answered no ping for {REPLICATION_SILENT_S_MAX:g} s "
                        "(its machine or process stopped, or the network drops its packets)"
                    )
                continue  # records in flight: `_lag_loop` watches those
            if message["t"] in ("refuse", "fail"):
                await self._refused(name, message)
            if message["t"] == "ack":
                if name in self.problems:
                    log.info("replica %s stores and acknowledges records again", name)
                    del self.problems[name]
                if self.stream.ack(name, self._acked(name, message)):
                    await self._join(name)

    def _owes_nothing(self, name: str) -> bool:
        """Whether `name` has acknowledged every record its link sent (an idle link,
        where only pings and their answers cross)."""
        link = self.links.get(name)
        return link is None or self.stream.acked.get(name, 0) >= link.cursor

    def _acked(self, name: str, message: dict[str, Any]) -> int:
        """The record an acknowledgement names, if a replica can hold it: one this
        active sealed and handed to that replica's link (its `cursor`). A replica that
        names a later one (a lie, or a bug) would make records count as durable on a
        majority before any replica had them; its link is cut instead (LinkBroken), and
        nothing it said is counted. Why the link's cursor too: a record sealed but not
        yet sent to it (held for company, or behind a full socket) is one it cannot
        hold either, and before it was counted for it."""
        number = message.get("n")
        if type(number) is not int or not 0 <= number <= self.stream.number:
            raise LinkBroken(
                f"{name} acknowledged record {number!r}; the last sealed in term "
                f"{self.term} is {self.stream.number}"
            )
        link = self.links.get(name)
        if link is not None and number > link.cursor:
            raise LinkBroken(
                f"{name} acknowledged record {number} of term {self.term}; it was sent "
                f"records up to {link.cursor}"
            )
        return number

    async def _refused(self, name: str, message: dict[str, Any]) -> NoReturn:
        """A replica refused the link or a record ("refuse"), or cannot store ("fail"):
        the link ends (logged by `_link_ended`); one that has seen a newer term makes
        this active step down, once the coordinator confirms that this term is over
        (`_term_over`)."""
        why = clipped(str(message.get("why")))
        if message["t"] == "fail":
            raise CannotStore(why)
        if "older term" in why and await self._term_over():
            self.step_down(f"{name} has seen a newer term")
        raise LinkRefused(why)

    async def _term_over(self) -> bool:
        """Whether the coordinator no longer names this instance the leader of its
        term. Why ask: "older term" is only what the peer at a replica's address says,
        and one that lies (or a stranger on a reused port) made the active step down
        with one frame while its lease stood, and the next active too: the group
        without an active for a lease at every dial. A replica that has really seen a
        newer term saw it from the leader etcd names; etcd unreachable: the lease's
        renewals decide (the active steps down at half the TTL)."""
        try:
            state = await self.coordinator.read()
        except CoordinatorUnavailable:
            return False
        return (state.leader, state.term) != (self.me.name, self.term)

    def _full_copy(self) -> Iterator[bytes]:
        """Every journal, in slices of at most REPLICATION_COPY_SLICE_BYTES (and
        REPLICATION_COPY_SLICE_ITEMS_MAX records), read as the link sends them: the
        copy is numbered with the last record sealed (a commit is sealed in its
        transaction, and this runs between commits), and each slice is read (one
        short read transaction) when the one before is sent, so commits go on in
        between (the writer is inline: not during a read).

        So a slice may already hold some commits after the copy's number; the replica
        replays every record after that number, and since a record's operations are
        plain puts and deletes of keys, the copy and those records end as the state at
        the last one. Until it has replayed the records up to the number sealed when
        the last slice was read (`upto` in the last frame) its journals are a mix, and
        it is no candidate (mrs.replication.replica `holds_journals`)."""
        return self._copy_slices(self.stream.number)

    def _copy_slices(self, number: int) -> Iterator[bytes]:
        """The copy's frames: records of one journal after another, a frame each time
        a slice is full (small journals travel in the last frame, with `upto`)."""
        items: list[list[object]] = []
        size = 0
        for journal in Journal:
            after: bytes | None = None
            while pairs := self.store.items_after(
                journal,
                b"",
                after,
                REPLICATION_COPY_SLICE_ITEMS_MAX - len(items),
                REPLICATION_COPY_SLICE_BYTES - size,
            ):
                items.extend([str(journal), key, value] for key, value in pairs)
                size += sum(len(value) for _, value in pairs)
                after = pairs[-1][0]
                if len(items) >= REPLICATION_COPY_SLICE_ITEMS_MAX or (
                    size >= REPLICATION_COPY_SLICE_BYTES
                ):
                    yield self._copy_frame(number, items)
                    items, size = [], 0
        yield self._copy_frame(number, items, upto=self.stream.number)

    def _copy_frame(self, number: int, items: list[list[object]], upto: int | None = None) -> bytes:
        """A slice of the copy at `number`; the last one (`upto` given) says up to which
        record the replica must replay before its journals are whole again."""
        message = {"t": "copy", "term": self.term, "n": number, "items": items}
        if upto is None:
            return frame({**message, "last": False})
        return frame({**message, "last": True, "upto": upto})

    def status_info(self) -> dict:
        replicas = {}
        for replica in self.replicas:
            records, size = self.stream.backlog(replica.name)
            replicas[replica.name] = {
                "connected": replica.name in self.connected,
                "in_sync": replica.name in self.recorded,
                "waited_for": replica.name in self.stream.in_sync,
                "acked": self.stream.acked.get(replica.name, 0),
                "backlog_records": records,
                "backlog_bytes": size,
                "problem": self.problems.get(replica.name),
            }
        return {
            "instance": self.me.name,
            "role": "active",
            "term": self.term,
            "commit": self.stream.number,
            "acks_needed": self.stream.acks_needed,
            "replicas": replicas,
        }


def _telling(group: BaseExceptionGroup) -> BaseException:
    """The error of a link's nursery that says why it ended: the replica's own reason
    ("refuse", "fail") before the broken socket it left behind."""
    errors = list(group.exceptions)
    told = [error for error in errors if isinstance(error, CannotStore | LinkRefused)]
    return (told or errors)[0]


def _address_of(replicas: tuple[InstanceConfig, ...], name: str) -> str:
    """Instance `name`'s replication address as this active dials it ("its address"
    for a name it does not list: a test's bare link)."""
    for replica in replicas:
        if replica.name == name:
            return host_port(replica.replication_host, replica.replication_port)
    return "its address"


async def _hello_answered(name: str, reader: FrameReader) -> dict[str, Any]:
    """A replica's answer to the hello, within REPLICATION_HELLO_ANSWER_S_MAX; LinkBroken
    (the link is dialled again) otherwise. Why: the wait had no bound, and the idle
    link's silence check (`_acks`) starts only after it, so a peer that took the
    connection and never answered (a replica's machine powered off or cut off just
    then, no TCP close coming; a process that lies) held that replica's link loop for
    good: the true replica, back at its address, was never dialled again this term."""
    with trio.move_on_after(REPLICATION_HELLO_ANSWER_S_MAX):
        return await reader.next(ANSWER_BYTES_MAX)
    raise LinkBroken(f"{name} did not answer the hello in {REPLICATION_HELLO_ANSWER_S_MAX:g} s")


def _hello_answer(name: str, answer: dict[str, Any]) -> tuple[tuple[int, int], int]:
    """A replica's position and the term it last led, from its answer to the hello;
    LinkBroken (the link is dropped and dialled again, the active serves on) for an
    answer that does not hold two whole numbers and one."""
    position, led = answer.get("pos", (0, 0)), answer.get("led", 0)
    if (
        not isinstance(position, (list, tuple))
        or len(position) != 2
        or not all(type(x) is int and x >= 0 for x in (*position, led))
    ):
        raise LinkBroken(f"{name} answered the hello with position {position!r}, led {led!r}")
    return (position[0], position[1]), led


HANDOVER_KEY = "replication.handover"
"""META: the last planned hand-over's term and chosen replicas (`Active.hand_over`)."""


HANDOVER_ACKS_KEY = "replication.handover_acks"
"""META: the MRS_ACKs a planned hand-over's old active had made and not handed out,
msgpack [term, [[group, queue, body], ...]]: the next active hands them out once it
has deleted the record (mrs.server.instance `_hand_out_owed_acks`)."""


def _handover_acks_record(term: int, owed: list[tuple[int, int, bytes]]) -> WriteBatch:
    value = msgpack.packb([term, [list(ack) for ack in owed]])
    return WriteBatch.empty().put_raw(Journal.META, HANDOVER_ACKS_KEY.encode(), value)


def _handover_record(term: int, chosen: set[str]) -> WriteBatch:
    value = json.dumps({"term": term, "to": sorted(chosen)}).encode()
    return WriteBatch.empty().put_raw(Journal.META, HANDOVER_KEY.encode(), value)
