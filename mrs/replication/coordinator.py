"""Who is active, in which term, and which instances hold every answered commit.

Why a coordinator and not a home-made election: etcd (Raft) already decides one
winner per key under a lease, so an instance only has to create a leader key if it is
absent, with a term counter raised in the same transaction (the fencing token every
replication record carries).

The in-sync record is Patroni's synchronous mode in its quorum form: the active
records in etcd the replicas whose acknowledgements it counts (`in_sync`, itself
included) and how many of them each answer waits for (`acks_needed`: a majority of
the group with the active, one replica of three). An answered commit is then on
`acks_needed` of the listed replicas, not necessarily on all, so when the active is
gone a listed replica may campaign only once it has seen the positions of enough of
the listed replicas that one of them must hold every answered commit, and it is the
most advanced of them (`may_campaign`). Each listed replica posts its position in
etcd after it has closed the old term (it takes no more of its records,
mrs.replication.replica `close_term`), so a posted position is final. The record is
written only while the active holds its term (a compare in the transaction); a
replica is added to it before its acknowledgements count, and dropped from the count
before it is dropped from the record, so etcd never asks less of a candidate than the
answers given need.

When etcd holds no record the journals can trust (none at all, or a term older than
one an instance's journals have seen: etcd lost its data, was restored from an old
backup, or is another etcd), no instance may promote itself on etcd's word: each posts
a `Census` of what its journals hold, and only the most advanced of a majority of the
instances campaigns (mrs.replication.census), in a term above every term they saw.

Two implementations of `Coordinator`: `EtcdCoordinator` (production, tests against a
real etcd) and `MemoryCoordinator` over a shared `MemoryElection` (unit tests and the
simulator), which keeps the same rules.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import trio

from mrs.limits import REPLICATION_RENEW_FRACTION_DEFAULT
from mrs.replication.census import Census, Position, census_of, census_value
from mrs.replication.etcd import (
    EtcdClient,
    EtcdError,
    absent,
    delete_op,
    holds,
    modified_at,
    put_op,
)
from mrs.replication.lease_keeper import ThreadRenewals


@dataclass(frozen=True, slots=True)
class GroupState:
    """What the coordinator holds for one group."""

    leader: str | None
    """The active instance's name, None while nobody holds the lease."""
    term: int
    """The last term granted (0: never); the leader's term when there is a leader."""
    in_sync: tuple[str, ...] | None
    """Instances whose acknowledgements count, the recording active included (None:
    never recorded, a new group)."""
    sync_leader: str | None = None
    """The active that wrote `in_sync` (it holds every commit it answered)."""
    acks_needed: int | None = None
    """How many replicas of `in_sync` each answer waited for (None: a record of an
    older build, where every listed replica had every answered commit)."""
    positions: Mapping[str, Position] = field(default_factory=dict)
    """Positions posted by listed replicas after closing term `term` (see module)."""
    floors: Mapping[str, Position] = field(default_factory=dict)
    """The last position each replica acknowledged, as an active recorded it
    (`record_floors`): journals that hold less lost records they acknowledged."""


def may_campaign(state: GroupState, name: str, *, holds_journals: bool = True) -> bool:
    """Only with no leader, and only an instance that holds every answered commit; in
    a group that never had a leader, any instance.

    Who holds every answered commit: the active that wrote the in-sync record (it
    answered nothing it had not made durable itself); of the replicas it listed, the
    most advanced of at least `len(listed) - acks_needed + 1` of them, since every
    answer is on `acks_needed` of the listed (a record without `acks_needed`: any
    listed instance, as every one had every answer).

    `holds_journals` False: this instance's journals hold nothing of the group (an
    empty data directory: its disk was lost or replaced). The in-sync record still
    names it until the next active rewrites it, but what made it in sync is gone:
    promoted, it would start empty and hand that emptiness to the others as a full
    copy. It waits for a copy from an active instead (found by the replicated nemesis:
    `mrs sim replicated`, docs/replication.md "Proof under faults")."""
    if state.leader is not None:
        return False
    if state.in_sync is None:
        return True
    if name not in state.in_sync or not holds_journals:
        return False
    if name == state.sync_leader or state.acks_needed is None:
        return True
    return name in most_advanced(state)


def awaited_instances(
    state: GroupState, name: str, *, holds_journals: bool = True
) -> tuple[str, ...]:
    """The instances `name` waits for while `may_campaign` says no and no instance is
    active: one of them may hold an answered record `name` lacks, so the group stays
    without an active until one of them is back. Empty while an instance is active (or
    `name` waits for nobody: it may campaign).

    Who: journals that hold nothing wait for any other in-sync instance (a copy); an
    instance left out of the in-sync record, for those named in it; a listed replica,
    for the listed replicas that have not posted their position (enough must have
    posted to tell who holds every answer), then for the most advanced of them (they
    campaign, unless they were lost after posting)."""
    if state.leader is not None or state.in_sync is None:
        return ()
    if name not in state.in_sync or not holds_journals:
        return tuple(m for m in state.in_sync if m != name)
    if name == state.sync_leader or state.acks_needed is None:
        return ()
    listed = [m for m in state.in_sync if m != state.sync_leader]
    ahead = most_advanced(state)
    if not ahead:
        return tuple(m for m in listed if m not in state.positions and m != name)
    return () if name in ahead else tuple(sorted(ahead))


def handed_over_unclaimed(state: GroupState, name: str, led_term: int) -> bool:
    """Whether `name` handed its term over (`mrs failover`: it wrote an in-sync record
    without itself) and nobody has taken a term since: no leader, and etcd's term is
    still the one it led. It then holds every answered record of that term (it wrote
    them all; the chosen replica holds them too), so once the chosen replica has left
    the term unclaimed long enough (lost between its acknowledgement and its
    campaign), `name` may campaign instead of leaving the group waiting for it."""
    return (
        state.leader is None
        and state.sync_leader == name
        and state.in_sync is not None
        and name not in state.in_sync
        and state.term == led_term > 0
    )


def must_post_position(state: GroupState, name: str) -> bool:
    """Whether `name` is a listed replica whose position a candidate may need now."""
    return (
        state.leader is None
        and state.acks_needed is not None
        and state.in_sync is not None
        and name in state.in_sync
        and name != state.sync_leader
        and name not in state.positions
    )


def most_advanced(state: GroupState) -> set[str]:
    """The listed replicas that may campaign: empty until enough have posted."""
    listed = [m for m in state.in_sync or () if m != state.sync_leader]
    seen = {m: state.positions[m] for m in listed if m in state.positions}
    needed = len(listed) - (state.acks_needed or len(listed)) + 1
    if not seen or len(seen) < needed:
        return set()
    best = max(seen.values())
    return {m for m, position in seen.items() if position == best}


def same_position_replicas(state: GroupState, name: str, position: Position) -> frozenset[str]:
    """The listed replicas that posted `position`, the one `name` wins the next term
    at: they hold every record it holds, so every answered commit, and they keep
    holding every one until a replica joins its term, since it answers nothing before.
    Its first in-sync record names them (mrs.replication.active `run`), so its loss
    before a replica joins leaves a candidate, not a group waiting for it."""
    if position == (0, 0):  # nothing held: nothing to share
        return frozenset()
    return frozenset(m for m, at in state.positions.items() if m != name and at == position)


@dataclass(frozen=True, slots=True)
class CoHolders:
    """What a campaign was judged on: etcd's term when the candidate read the state
    that allowed it (`closing_term`, the term it closes), and the listed replicas
    that posted, for closing it, the position the candidate wins at
    (`same_position_replicas`), which the win names in sync in the same transaction.

    Why the term: the transaction compares the term key with the candidate's own
    read inside `campaign`, not with the state `may_campaign` judged; a candidate
    stalled between the two could win a term above one that another active led and
    answered in meanwhile, named alone, without those answers (found in review).
    A campaign whose term moved is refused; the next look judges the new state.

    Why the names in the win and not after it: before, the new active wrote them once
    its recovery was done, and lost in between (a SIGKILL, its machine) it left a
    record naming itself alone, so the group waited for it for ever though a replica
    held every record it held (found by a test run under load)."""

    closing_term: int | None
    """None: a campaign not judged on etcd's record (a census: etcd's record is not
    trusted, and the term to campaign above is given instead)."""
    names: frozenset[str]

    def moved(self, term: int) -> bool:
        """Whether etcd's term is no longer the one the campaign was judged on."""
        return self.closing_term is not None and term != self.closing_term

    def members(self, winner: str) -> tuple[tuple[str, ...], int]:
        """The win's in-sync members and how many of them each answer waits for."""
        if self.closing_term is None or not self.names:
            return (winner,), 0
        return (winner, *sorted(self.names)), len(self.names)


NO_CO_HOLDERS = CoHolders(None, frozenset())


@dataclass(frozen=True)
class FailoverRequest:
    """A planned switch-over asked of the active (`mrs failover`): to `to` ("" for
    any replica in sync), told apart from every other request by `request_id`.

    Why an id: a request is answered exactly once, by the hand-over (the in-sync
    record written only while the request still stands, which deletes it) or by a
    refusal the command reads; and the command withdraws its own request when it
    gives up waiting, so no request is carried out after its command said it failed."""

    to: str
    request_id: str

    def encoded(self) -> bytes:
        return json.dumps({"to": self.to, "id": self.request_id}, sort_keys=True).encode()

    @classmethod
    def decoded(cls, raw: bytes) -> FailoverRequest | None:
        """The request etcd holds; None for a value that is not one (written by hand)."""
        try:
            value = json.loads(raw)
            return cls(str(value["to"]), str(value["id"]))
        except (ValueError, KeyError, TypeError):
            return None


class Coordinator(Protocol):
    """One instance's handle on its group's leadership."""

    name: str
    lease_sent_s: float
    """When (trio's clock) the request that granted or last renewed this instance's
    lease was sent: the lease lasts at least its TTL from then. An active's lease loop
    starts from it (`Active._lease_loop`), not from its own start: a new active's
    recovery lies between its win and its first renewal."""

    async def read(self) -> GroupState: ...

    def renew_from_thread(self) -> None:
        """Renew the lease from a thread until `stop_renewing_from_thread`: a new
        active's start (its term recorded, its journals recovered) holds the event
        loop before its lease loop begins (mrs.replication.lease_keeper)."""

    def stop_renewing_from_thread(self) -> None:
        """End `renew_from_thread`'s renewals (none running: nothing), raising
        `lease_sent_s` by those that succeeded."""

    async def campaign(
        self, term_at_least: int = 0, co_holders: CoHolders = NO_CO_HOLDERS
    ) -> int | None:
        """Take the leadership if it is free: the new term (above `term_at_least` and
        every term granted before), or None (someone holds it, or etcd's term is not
        the one `co_holders` was judged on). The win's in-sync record names this
        instance and `co_holders` (`CoHolders.members`)."""

    async def post_census(self, census: Census) -> None:
        """Post what this instance's journals hold (kept only while it keeps posting)."""

    async def read_census(self, names: tuple[str, ...]) -> dict[str, Census]:
        """The censuses posted by `names` that still stand."""

    async def renew(self) -> bool:
        """Keep the lease alive; False once it is lost (stop answering at once)."""

    async def set_in_sync(
        self,
        term: int,
        members: tuple[str, ...],
        acks_needed: int,
        request: FailoverRequest | None = None,
    ) -> bool:
        """Record `members` as in sync (each answer waiting for `acks_needed` of them
        besides this instance), only while holding `term` (and, with `request`, only
        while that request stands, which it then deletes); whether it was."""

    async def post_position(self, closing_term: int, position: Position) -> None:
        """Post this replica's final position in `closing_term` (it has closed it)."""

    async def resign(self) -> None:
        """Give the leadership up now (a planned stop)."""

    async def record_floors(self, term: int, floors: Mapping[str, Position]) -> None:
        """While holding `term`: record the position each replica of `floors` has
        acknowledged (kept per replica at the highest recorded, read as
        `GroupState.floors`)."""

    async def request_failover(self, request: FailoverRequest) -> bool:
        """Ask the active to hand over (`mrs failover`) unless a request already stands
        (two commands at once: the second must not replace the first, whose command
        would then report the other's switch as its own); whether it was asked."""

    async def failover_requested(self) -> FailoverRequest | None:
        """The hand-over asked for (see request_failover), or None."""

    async def refuse_failover(self, request: FailoverRequest, why: str) -> None:
        """While `request` stands: delete it (it is not tried again) and leave why for
        its command (`failover_refusal`)."""

    async def failover_refusal(self, request: FailoverRequest) -> str | None:
        """Why the active refused `request`, or None (not refused)."""

    async def withdraw_failover(self, request: FailoverRequest) -> bool:
        """Delete `request` if it still stands (its command gave up); whether it did."""

    async def aclose(self) -> None: ...


class CoordinatorUnavailable(Exception):
    """The coordinator could not be asked (etcd down or unreachable)."""


# ------------------------------------------------------------------------- etcd


class EtcdCoordinator:
    """Leadership of one group in etcd under `<prefix>/<group id>/`."""

    def __init__(self, client: EtcdClient, prefix: str, name: str, ttl_s: int) -> None:
        self.client = client
        self.name = name
        self.ttl_s = ttl_s
        self.leader_key = f"{prefix}/leader".encode()
        self.term_key = f"{prefix}/term".encode()
        self.sync_key = f"{prefix}/sync".encode()
        self.failover_key = f"{prefix}/failover".encode()
        self.refused_key = f"{prefix}/failover-refused".encode()
        self.position_prefix = f"{prefix}/position/"
        self.census_prefix = f"{prefix}/census/"
        self.floors_key = f"{prefix}/acknowledged".encode()
        self.lease_id: int | None = None
        self.lease_sent_s = 0.0
        self._thread_renewals: ThreadRenewals | None = None
        self._census_lease: int | None = None
        """The lease this instance's census is posted under: it vanishes TTL after the
        instance stops posting (a stopped instance's says nothing of its journals)."""
        self.term = 0

    async def read(self) -> GroupState:
        try:
            leader, term, sync, floors = await self.client.get_many(
                [self.leader_key, self.term_key, self.sync_key, self.floors_key]
            )
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        leader_name = json.loads(leader[0])["name"] if leader is not None else None
        record = json.loads(sync[0]) if sync is not None else {}
        members = tuple(record["members"]) if sync is not None else None
        state = GroupState(
            leader_name,
            int(term[0]) if term is not None else 0,
            members,
            record.get("leader"),
            record.get("acks"),
            floors=_floors(floors[0]) if floors is not None else {},
        )
        if state.leader is not None or state.acks_needed is None:
            return state  # positions matter only to an election under a quorum record
        return replace(state, positions=await self._positions(state))

    async def _positions(self, state: GroupState) -> dict[str, Position]:
        """The listed replicas' positions posted for closing `state.term`."""
        members = list(state.in_sync or ())
        keys = [f"{self.position_prefix}{member}".encode() for member in members]
        try:
            posted = await self.client.get_many(keys) if keys else []
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        positions: dict[str, Position] = {}
        for member, found in zip(members, posted, strict=True):
            if found is not None and (position := _posted(found[0], state.term)) is not None:
                positions[member] = position
        return positions

    async def campaign(
        self, term_at_least: int = 0, co_holders: CoHolders = NO_CO_HOLDERS
    ) -> int | None:
        try:
            current = await self.client.get(self.term_key)
            term, revision = (int(current[0]), current[1]) if current is not None else (0, 0)
            if co_holders.moved(term):
                return None
            grant_sent_s = trio.current_time()
            lease_id = await self.client.grant(self.ttl_s)
            new_term = max(term, term_at_least) + 1
            members, acks = co_holders.members(self.name)
            won = await self.client.txn(
                [absent(self.leader_key), modified_at(self.term_key, revision)],
                [
                    put_op(self.leader_key, self._leader_value(new_term), lease_id),
                    put_op(self.term_key, str(new_term).encode()),
                    put_op(self.sync_key, _sync_value(new_term, members, self.name, acks)),
                    delete_op(self.failover_key),  # a hand-over asked of an old term is done
                ],
            )
            if not won:
                await self.client.revoke(lease_id)
                return None
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        self.lease_id, self.term, self.lease_sent_s = lease_id, new_term, grant_sent_s
        return new_term

    def renew_from_thread(self) -> None:
        lease_id = self.lease_id
        if lease_id is None or self._thread_renewals is not None:
            return
        every_s = self.ttl_s / REPLICATION_RENEW_FRACTION_DEFAULT
        self._thread_renewals = ThreadRenewals(
            lambda: self.client.keepalive_blocking(lease_id) > 0, every_s
        )
        self._thread_renewals.start()

    def stop_renewing_from_thread(self) -> None:
        renewals, self._thread_renewals = self._thread_renewals, None
        if renewals is None:
            return
        renewals.stop()
        if renewals.renewed_mono_s is not None:  # its age, on trio's clock
            renewed_s = trio.current_time() - (time.monotonic() - renewals.renewed_mono_s)
            self.lease_sent_s = max(self.lease_sent_s, renewed_s)

    async def post_census(self, census: Census) -> None:
        try:
            if self._census_lease is None or await self.client.keepalive(self._census_lease) <= 0:
                self._census_lease = await self.client.grant(self.ttl_s)
            key = f"{self.census_prefix}{self.name}".encode()
            await self.client.txn([], [put_op(key, census_value(census), self._census_lease)])
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def read_census(self, names: tuple[str, ...]) -> dict[str, Census]:
        found: dict[str, Census] = {}
        for name in names:
            try:
                posted = await self.client.get(f"{self.census_prefix}{name}".encode())
            except EtcdError as error:
                raise CoordinatorUnavailable(str(error)) from None
            if posted is not None and (census := census_of(posted[0])) is not None:
                found[name] = census
        return found

    async def renew(self) -> bool:
        if self.lease_id is None:
            return False
        try:
            return await self.client.keepalive(self.lease_id) > 0
        except EtcdError:
            return False

    async def set_in_sync(
        self,
        term: int,
        members: tuple[str, ...],
        acks_needed: int,
        request: FailoverRequest | None = None,
    ) -> bool:
        compare = [holds(self.leader_key, self._leader_value(term))]
        success = [put_op(self.sync_key, _sync_value(term, members, self.name, acks_needed))]
        if request is not None:
            compare.append(holds(self.failover_key, request.encoded()))
            success.append(delete_op(self.failover_key))
        try:
            return await self.client.txn(compare, success)
        except EtcdError:
            return False

    async def post_position(self, closing_term: int, position: Position) -> None:
        value = json.dumps({"closing": closing_term, "pos": list(position)}).encode()
        try:
            key = f"{self.position_prefix}{self.name}".encode()
            await self.client.txn([], [put_op(key, value)])
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def resign(self) -> None:
        if self.lease_id is not None:
            lease_id, self.lease_id = self.lease_id, None
            with contextlib.suppress(EtcdError):  # else it expires by itself
                await self.client.revoke(lease_id)

    async def record_floors(self, term: int, floors: Mapping[str, Position]) -> None:
        try:
            found = await self.client.get(self.floors_key)
            merged = _merged_floors(_floors(found[0]) if found is not None else {}, floors)
            await self.client.txn(
                [holds(self.leader_key, self._leader_value(term))],
                [put_op(self.floors_key, json.dumps(merged, sort_keys=True).encode())],
            )
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def request_failover(self, request: FailoverRequest) -> bool:
        try:
            return await self.client.txn(
                [absent(self.failover_key)], [put_op(self.failover_key, request.encoded())]
            )
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def failover_requested(self) -> FailoverRequest | None:
        try:
            found = await self.client.get(self.failover_key)
        except EtcdError:
            return None
        return FailoverRequest.decoded(found[0]) if found is not None else None

    async def refuse_failover(self, request: FailoverRequest, why: str) -> None:
        refusal = json.dumps({"id": request.request_id, "why": why}).encode()
        with contextlib.suppress(EtcdError):  # unanswered: the command says it timed out
            await self.client.txn(
                [holds(self.failover_key, request.encoded())],
                [put_op(self.refused_key, refusal), delete_op(self.failover_key)],
            )

    async def failover_refusal(self, request: FailoverRequest) -> str | None:
        try:
            found = await self.client.get(self.refused_key)
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        if found is None:
            return None
        try:
            refusal = json.loads(found[0])
            return str(refusal["why"]) if refusal["id"] == request.request_id else None
        except (ValueError, KeyError, TypeError):
            return None

    async def withdraw_failover(self, request: FailoverRequest) -> bool:
        try:
            return await self.client.txn(
                [holds(self.failover_key, request.encoded())], [delete_op(self.failover_key)]
            )
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def aclose(self) -> None:
        await self.client.aclose()

    def _leader_value(self, term: int) -> bytes:
        return json.dumps({"name": self.name, "term": term}, sort_keys=True).encode()


def _posted(raw: bytes, closing_term: int) -> Position | None:
    """A position posted for closing `closing_term`; None for another term's, or for a
    value that is not one (written by hand into etcd): as if not posted, so no
    candidate is chosen on it and the instance does not stop on a traceback."""
    try:
        posted = json.loads(raw)
        if posted["closing"] != closing_term:
            return None
        term, number = posted["pos"]
        return (int(term), int(number))
    except (ValueError, KeyError, TypeError):
        return None


def _floors(raw: bytes) -> dict[str, Position]:
    """The acknowledged positions etcd holds; a value that is not one (written by
    hand) counts as none, so no instance stops on a traceback."""
    try:
        value = json.loads(raw)
        return {str(name): (int(at[0]), int(at[1])) for name, at in value.items()}
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return {}


def _merged_floors(
    before: Mapping[str, Position], floors: Mapping[str, Position]
) -> dict[str, Position]:
    """Each replica's highest acknowledged position of `before` and `floors`: a new
    active that has not heard from a replica yet keeps the old term's floor for it."""
    merged = dict(before)
    for name, position in floors.items():
        merged[name] = max(position, merged.get(name, (0, 0)))
    return merged


def _sync_value(term: int, members: tuple[str, ...], leader: str, acks_needed: int) -> bytes:
    record = {"term": term, "members": sorted(members), "leader": leader, "acks": acks_needed}
    return json.dumps(record).encode()


def etcd_prefix(bus_prefix: str, group_id: int) -> str:
    """One group's keys: `<[coordinator] prefix>/<group id>`."""
    return f"{bus_prefix}/{group_id}"


# ------------------------------------------------------------------------ memory


@dataclass
class MemoryElection:
    """One group's leadership held in memory: what etcd holds, for unit tests and the
    simulator. `expire(name)` is a lease lost (etcd's TTL ran out)."""

    leader: str | None = None
    leader_term: int = 0
    term: int = 0
    in_sync: tuple[str, ...] | None = None
    sync_leader: str | None = None
    acks_needed: int | None = None
    positions: dict[str, tuple[int, Position]] = field(default_factory=dict)
    """Each replica's last posted (closing term, position)."""
    failover: FailoverRequest | None = None
    refused: tuple[str, str] | None = None
    """The last refused request's id and why."""
    census: dict[str, Census] = field(default_factory=dict)
    """Each instance's posted census (the simulator's instances post while they run)."""
    reachable: set[str] = field(default_factory=set)
    """Empty: everyone reaches the coordinator; else only these names."""
    floors: dict[str, Position] = field(default_factory=dict)
    """Each replica's acknowledged position as its active recorded it."""

    def expire(self, name: str) -> None:
        if self.leader == name:
            self.leader = None

    def wipe(self) -> None:
        """etcd lost its data: no leader, no term, no record, nothing posted."""
        self.leader, self.leader_term, self.term = None, 0, 0
        self.in_sync, self.sync_leader, self.acks_needed = None, None, None
        self.positions, self.census, self.failover = {}, {}, None
        self.floors = {}

    def _reach(self, name: str) -> None:
        if self.reachable and name not in self.reachable:
            raise CoordinatorUnavailable(f"{name} cannot reach the coordinator")


class MemoryCoordinator:
    """`Coordinator` over a shared `MemoryElection`, with etcd's compare rules."""

    def __init__(self, election: MemoryElection, name: str) -> None:
        self.election = election
        self.name = name
        self.term = 0
        self.lease_sent_s = 0.0

    async def read(self) -> GroupState:
        election = self.election
        election._reach(self.name)
        positions = {
            name: position
            for name, (closing, position) in election.positions.items()
            if closing == election.term
        }
        return GroupState(
            election.leader,
            election.term,
            election.in_sync,
            election.sync_leader,
            election.acks_needed,
            positions,
            dict(election.floors),
        )

    async def campaign(
        self, term_at_least: int = 0, co_holders: CoHolders = NO_CO_HOLDERS
    ) -> int | None:
        election = self.election
        election._reach(self.name)
        if election.leader is not None or co_holders.moved(election.term):
            return None
        members, acks = co_holders.members(self.name)
        election.term = max(election.term, term_at_least) + 1
        election.leader, election.leader_term = self.name, election.term
        election.in_sync, election.sync_leader, election.acks_needed = members, self.name, acks
        election.failover = None
        self.term, self.lease_sent_s = election.term, trio.current_time()
        return self.term

    def renew_from_thread(self) -> None:
        """Nothing to do: the simulator's clock stands still while the loop is held."""

    def stop_renewing_from_thread(self) -> None:
        pass

    async def renew(self) -> bool:
        election = self.election
        try:
            election._reach(self.name)
        except CoordinatorUnavailable:
            return False
        return election.leader == self.name and election.leader_term == self.term

    async def set_in_sync(
        self,
        term: int,
        members: tuple[str, ...],
        acks_needed: int,
        request: FailoverRequest | None = None,
    ) -> bool:
        election = self.election
        try:
            election._reach(self.name)
        except CoordinatorUnavailable:
            return False
        if election.leader != self.name or election.leader_term != term:
            return False
        if request is not None:
            if election.failover != request:
                return False
            election.failover = None
        election.in_sync = tuple(sorted(members))
        election.sync_leader, election.acks_needed = self.name, acks_needed
        return True

    async def record_floors(self, term: int, floors: Mapping[str, Position]) -> None:
        election = self.election
        election._reach(self.name)
        if election.leader == self.name and election.leader_term == term:
            election.floors = _merged_floors(election.floors, floors)

    async def post_position(self, closing_term: int, position: Position) -> None:
        self.election._reach(self.name)
        self.election.positions[self.name] = (closing_term, position)

    async def post_census(self, census: Census) -> None:
        self.election._reach(self.name)
        self.election.census[self.name] = census

    async def read_census(self, names: tuple[str, ...]) -> dict[str, Census]:
        self.election._reach(self.name)
        return {name: self.election.census[name] for name in names if name in self.election.census}

    async def resign(self) -> None:
        self.election.expire(self.name)

    async def request_failover(self, request: FailoverRequest) -> bool:
        self.election._reach(self.name)
        if self.election.failover is not None:
            return False
        self.election.failover = request
        return True

    async def failover_requested(self) -> FailoverRequest | None:
        return self.election.failover

    async def refuse_failover(self, request: FailoverRequest, why: str) -> None:
        if self.election.failover == request:  # a withdrawn request is not answered
            self.election.refused = (request.request_id, why)
            self.election.failover = None

    async def failover_refusal(self, request: FailoverRequest) -> str | None:
        self.election._reach(self.name)
        refused = self.election.refused
        return refused[1] if refused is not None and refused[0] == request.request_id else None

    async def withdraw_failover(self, request: FailoverRequest) -> bool:
        self.election._reach(self.name)
        if self.election.failover != request:
            return False
        self.election.failover = None
        return True

    async def aclose(self) -> None:
        pass
