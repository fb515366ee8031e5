"""The three replication promises as one part, so a harness can break one on purpose.

Why a part and not flags: the simulator proves its checker by running builds that
break a promise (mrs.testing.replication_builds); the production code tests no
switch, it calls the part it was handed (`KEPT_REPLICATION` unless a harness says
otherwise), as the group does with `mrs.group.Guarantees`.

- `answerable`: the last commit whose answers may go out (durable on `acks_needed`
  in-sync replicas: with the active, a majority);
- `may_campaign`: whether an instance may try to become active (no leader, and the
  instance holds every answered commit: the recording active, or the most advanced
  of enough replicas named in the in-sync record);
- `refuses_term`: whether a replica refuses a record or hello of `term` after seeing
  `seen` (an older term: the fencing token);
- `below_floor`: whether an instance whose journals end at `position` lacks records
  it acknowledged (`floor`, recorded in etcd by the active): no candidate then. The
  second fence against stale journals (an old term's records taken, a backup
  restored), so the build that breaks the fencing token breaks this one too.
"""

from __future__ import annotations

from typing import Protocol

from mrs.replication.coordinator import GroupState, may_campaign


class StreamView(Protocol):
    """What `answerable` reads of a commit stream (mrs.replication.stream.CommitStream)."""

    number: int

    def durable_on_majority(self) -> int: ...


class ReplicationRules:
    """The rules a correct build keeps; a broken build subclasses one method."""

    broken: frozenset[str] = frozenset()

    def answerable(self, stream: StreamView) -> int:
        return stream.durable_on_majority()

    def may_campaign(self, state: GroupState, name: str, *, holds_journals: bool = True) -> bool:
        return may_campaign(state, name, holds_journals=holds_journals)

    def refuses_term(self, term: int, seen: int) -> bool:
        return term < seen

    def below_floor(self, position: tuple[int, int], floor: tuple[int, int]) -> bool:
        return position < floor


KEPT_REPLICATION = ReplicationRules()
