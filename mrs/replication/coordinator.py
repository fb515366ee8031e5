"""Who is active, in which term, and which instances hold every answered commit.

Why a coordinator and not a home-made election: etcd (Raft) already decides one
winner per key under a lease, so an instance only has to create a leader key if it is
absent, with a term counter raised in the same transaction (the fencing token every
replication record carries). As in Patroni's synchronous mode, the active records in
etcd the instances that hold every commit it has answered (`in_sync`, itself
included), written only while it holds its term (a compare in the transaction), and
only those may campaign (`may_campaign`). A replica that falls behind is removed from
that record before the active stops waiting for it.

Two implementations of `Coordinator`: `EtcdCoordinator` (production, tests against a
real etcd) and `MemoryCoordinator` over a shared `MemoryElection` (unit tests and the
simulator), which keeps the same rules.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Protocol

from mrs.replication.etcd import (
    EtcdClient,
    EtcdError,
    absent,
    delete_op,
    holds,
    modified_at,
    put_op,
)


@dataclass(frozen=True, slots=True)
class GroupState:
    """What the coordinator holds for one group."""

    leader: str | None
    """The active instance's name, None while nobody holds the lease."""
    term: int
    """The last term granted (0: never); the leader's term when there is a leader."""
    in_sync: tuple[str, ...] | None
    """Instances holding every answered commit (None: never recorded, a new group)."""


def may_campaign(state: GroupState, name: str, *, holds_journals: bool = True) -> bool:
    """Only with no leader, and only an instance that holds every answered commit; in
    a group that never had a leader, any instance.

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
    return name in state.in_sync and holds_journals


class Coordinator(Protocol):
    """One instance's handle on its group's leadership."""

    name: str

    async def read(self) -> GroupState: ...

    async def campaign(self) -> int | None:
        """Take the leadership if it is free: the new term, or None (someone holds it)."""

    async def renew(self) -> bool:
        """Keep the lease alive; False once it is lost (stop answering at once)."""

    async def set_in_sync(self, term: int, members: tuple[str, ...]) -> bool:
        """Record `members` as in sync, only while holding `term`; whether it was."""

    async def resign(self) -> None:
        """Give the leadership up now (a planned stop)."""

    async def request_failover(self, to: str) -> None:
        """Ask the active to hand over (`mrs failover`): to `to`, or "" to any in sync."""

    async def failover_requested(self) -> str | None:
        """The hand-over asked for (see request_failover), or None."""

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
        self.lease_id: int | None = None
        self.term = 0

    async def read(self) -> GroupState:
        try:
            leader = await self.client.get(self.leader_key)
            term = await self.client.get(self.term_key)
            sync = await self.client.get(self.sync_key)
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        leader_name = json.loads(leader[0])["name"] if leader is not None else None
        members = tuple(json.loads(sync[0])["members"]) if sync is not None else None
        return GroupState(leader_name, int(term[0]) if term is not None else 0, members)

    async def campaign(self) -> int | None:
        try:
            current = await self.client.get(self.term_key)
            term, revision = (int(current[0]), current[1]) if current is not None else (0, 0)
            lease_id = await self.client.grant(self.ttl_s)
            new_term = term + 1
            won = await self.client.txn(
                [absent(self.leader_key), modified_at(self.term_key, revision)],
                [
                    put_op(self.leader_key, self._leader_value(new_term), lease_id),
                    put_op(self.term_key, str(new_term).encode()),
                    put_op(self.sync_key, _sync_value(new_term, (self.name,))),
                    delete_op(self.failover_key),  # a hand-over asked of an old term is done
                ],
            )
            if not won:
                await self.client.revoke(lease_id)
                return None
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None
        self.lease_id, self.term = lease_id, new_term
        return new_term

    async def renew(self) -> bool:
        if self.lease_id is None:
            return False
        try:
            return await self.client.keepalive(self.lease_id) > 0
        except EtcdError:
            return False

    async def set_in_sync(self, term: int, members: tuple[str, ...]) -> bool:
        try:
            return await self.client.txn(
                [holds(self.leader_key, self._leader_value(term))],
                [put_op(self.sync_key, _sync_value(term, members))],
            )
        except EtcdError:
            return False

    async def resign(self) -> None:
        if self.lease_id is not None:
            lease_id, self.lease_id = self.lease_id, None
            with contextlib.suppress(EtcdError):  # else it expires by itself
                await self.client.revoke(lease_id)

    async def request_failover(self, to: str) -> None:
        try:
            await self.client.txn([], [put_op(self.failover_key, to.encode())])
        except EtcdError as error:
            raise CoordinatorUnavailable(str(error)) from None

    async def failover_requested(self) -> str | None:
        try:
            found = await self.client.get(self.failover_key)
        except EtcdError:
            return None
        return found[0].decode() if found is not None else None

    async def aclose(self) -> None:
        await self.client.aclose()

    def _leader_value(self, term: int) -> bytes:
        return json.dumps({"name": self.name, "term": term}, sort_keys=True).encode()


def _sync_value(term: int, members: tuple[str, ...]) -> bytes:
    return json.dumps({"term": term, "members": sorted(members)}).encode()


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
    failover: str | None = None
    reachable: set[str] = field(default_factory=set)
    """Empty: everyone reaches the coordinator; else only these names."""

    def expire(self, name: str) -> None:
        if self.leader == name:
            self.leader = None

    def _reach(self, name: str) -> None:
        if self.reachable and name not in self.reachable:
            raise CoordinatorUnavailable(f"{name} cannot reach the coordinator")


class MemoryCoordinator:
    """`Coordinator` over a shared `MemoryElection`, with etcd's compare rules."""

    def __init__(self, election: MemoryElection, name: str) -> None:
        self.election = election
        self.name = name
        self.term = 0

    async def read(self) -> GroupState:
        election = self.election
        election._reach(self.name)
        return GroupState(election.leader, election.term, election.in_sync)

    async def campaign(self) -> int | None:
        election = self.election
        election._reach(self.name)
        if election.leader is not None:
            return None
        election.term += 1
        election.leader, election.leader_term = self.name, election.term
        election.in_sync = (self.name,)
        election.failover = None
        self.term = election.term
        return self.term

    async def renew(self) -> bool:
        election = self.election
        try:
            election._reach(self.name)
        except CoordinatorUnavailable:
            return False
        return election.leader == self.name and election.leader_term == self.term

    async def set_in_sync(self, term: int, members: tuple[str, ...]) -> bool:
        election = self.election
        try:
            election._reach(self.name)
        except CoordinatorUnavailable:
            return False
        if election.leader != self.name or election.leader_term != term:
            return False
        election.in_sync = tuple(sorted(members))
        return True

    async def resign(self) -> None:
        self.election.expire(self.name)

    async def request_failover(self, to: str) -> None:
        self.election._reach(self.name)
        self.election.failover = to

    async def failover_requested(self) -> str | None:
        return self.election.failover

    async def aclose(self) -> None:
        pass
