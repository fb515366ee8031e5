"""Replication builds broken on purpose, one promise each, for the simulator's checker.

Why: `mrs sim swarm --replicated` must show it would catch a replicated group that
loses an acknowledged message, so it runs builds that break one replication promise
(docs/sim.md, "The replicated group"). As with `mrs.testing.broken_builds`, the
production code tests no switch: each build is a `ReplicationRules` part
(mrs.replication.rules) handed to the instances by constructor.

Layer: testing (top, beside `tools`): may import everything below it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Final

from mrs.exit_status import EXIT_USAGE, CommandError
from mrs.replication.coordinator import GroupState
from mrs.replication.rules import KEPT_REPLICATION, ReplicationRules, StreamView

UNSAFE_ANSWER_BEFORE_MAJORITY: Final = "answer-before-majority"
UNSAFE_PROMOTE_NOT_IN_SYNC: Final = "promote-not-in-sync"
UNSAFE_ACCEPT_OLDER_TERM: Final = "accept-older-term"


class BrokenReplication(ReplicationRules):
    """Keeps every rule of the part it wraps but the one a subclass replaces."""

    switch: ClassVar[str]

    def __init__(self, kept: ReplicationRules) -> None:
        self.kept = kept
        self.broken = kept.broken | {self.switch}

    def answerable(self, stream: StreamView) -> int:
        return self.kept.answerable(stream)

    def may_campaign(self, state: GroupState, name: str, *, holds_journals: bool = True) -> bool:
        return self.kept.may_campaign(state, name, holds_journals=holds_journals)

    def refuses_term(self, term: int, seen: int) -> bool:
        return self.kept.refuses_term(term, seen)

    def below_floor(self, position: tuple[int, int], floor: tuple[int, int]) -> bool:
        return self.kept.below_floor(position, floor)


class AnswerBeforeMajority(BrokenReplication):
    """A commit is answered once durable on the active alone: caught as lost."""

    switch = UNSAFE_ANSWER_BEFORE_MAJORITY

    def answerable(self, stream: StreamView) -> int:
        return stream.number


class PromoteNotInSync(BrokenReplication):
    """Any instance campaigns once the leader is gone: caught as lost."""

    switch = UNSAFE_PROMOTE_NOT_IN_SYNC

    def may_campaign(self, state: GroupState, name: str, *, holds_journals: bool = True) -> bool:
        return state.leader is None


class AcceptOlderTerm(BrokenReplication):
    """A replica takes an old active's records after a newer term, and campaigns with
    them: caught as lost. Both fences against stale journals go (the term and the
    acknowledged floor): with the floor kept, the floor alone stopped the loss on 28
    of 40 proof seeds (docs/sim.md), which proves the floor, not the checker."""

    switch = UNSAFE_ACCEPT_OLDER_TERM

    def refuses_term(self, term: int, seen: int) -> bool:
        return False

    def below_floor(self, position: tuple[int, int], floor: tuple[int, int]) -> bool:
        return False


REPLICATION_BUILDS: Final = (AnswerBeforeMajority, PromoteNotInSync, AcceptOlderTerm)
REPLICATION_SWITCHES: Final = frozenset(build.switch for build in REPLICATION_BUILDS)


def broken_replication(switches: Iterable[str], where: str = "--unsafe") -> ReplicationRules:
    """The part that breaks each replication promise named (KEPT_REPLICATION for none)."""
    words = frozenset(switches)
    unknown = words - REPLICATION_SWITCHES
    if unknown:
        raise CommandError(f"{where}: unknown switches {sorted(unknown)}", EXIT_USAGE)
    part: ReplicationRules = KEPT_REPLICATION
    for build in REPLICATION_BUILDS:
        if build.switch in words:
            part = build(part)
    return part
