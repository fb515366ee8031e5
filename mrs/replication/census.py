"""Who may become active when etcd holds no record the journals can trust.

Why: the in-sync record in etcd says which instances hold every answered commit
(mrs.replication.coordinator). If etcd loses its data (a single member's disk, a
member set rebuilt empty, a restore from an older backup, or the bus pointed at
another etcd), it holds no record, or an older one, and a group that never had a
leader looked the same: any instance could campaign. A replica that had fallen behind
then won a new term 1, and the others took a full copy of its journals: thirteen of
twenty answered puts were lost (found by a probe; tests/process/test_replication.py
`test_etcd_that_lost_its_data_does_not_promote_a_stale_replica`).

Now, while the record cannot be trusted (`record_trusted`), each instance posts a
`Census` of what its journals hold, and one campaigns only when it ranks highest of a
majority of the instances (every answered commit was on a majority, so on one of them
at least, and the most advanced holds every one) and in a term above every term they
saw, so no replica refuses it as older. An instance with empty journals waits for every
instance's census: one holding a history it has not seen must not get its emptiness as
a full copy (a new group's instances all start empty, and all post).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

Position = tuple[int, int]
"""(term, number) of the last replication record an instance applied."""

_LED_RANK = 1 << 62
"""A term's own active holds every commit of it: it ranks above any of its replicas."""


@dataclass(frozen=True, slots=True)
class Census:
    """What one instance's journals hold, posted while etcd holds no record they can
    trust (a new group, or etcd's data lost): `rank` orders what they hold, `term_seen`
    is the highest term they saw (the new term must be above every one)."""

    rank: tuple[int, int, int]
    term_seen: int

    @classmethod
    def of(cls, holds: bool, position: Position, led: int, term_seen: int) -> Census:
        """Empty journals rank lowest; then by the term of what they hold, a term's own
        active above its replicas (it holds every commit it made: its position stays
        (term, 0)), replicas of one term by their position; journals of a group that
        was not replicated before rank as the active of term 0."""
        if not holds:
            return cls((0, 0, 0), term_seen)
        term, number = position
        return cls((1, term, _LED_RANK if led == term else number), term_seen)

    @property
    def holds(self) -> bool:
        return self.rank[0] == 1


def history_term(position: Position, led: int) -> int:
    """The highest term granted that an instance's journals hold a trace of (a record
    applied, or a term won): etcd's term is never below it while etcd keeps its data."""
    return max(position[0], led)


def record_trusted(in_sync: tuple[str, ...] | None, term: int, history: int) -> bool:
    """Whether etcd's record (`in_sync`, None if there is none, at `term`) can decide
    who may campaign: one exists, and etcd's term is not older than what these
    journals hold (`history`); else etcd lost or never had the group's history, and
    the census decides (`may_campaign_by_census`)."""
    return in_sync is not None and term >= history


def may_campaign_by_census(census: Mapping[str, Census], name: str, instances: int) -> bool:
    """Without a record to trust, `name` campaigns only if it ranks highest of what is
    posted, and enough is posted: a majority of the instances when it holds journals
    (every answered commit was on a majority, so on one of them at least, and the most
    advanced of them holds every one), all of them when it holds none (an instance
    with a history that has not posted yet must not be handed an empty copy)."""
    mine = census.get(name)
    if mine is None:
        return False
    needed = instances // 2 + 1 if mine.holds else instances
    return len(census) >= needed and all(mine.rank >= other.rank for other in census.values())


def census_value(census: Census) -> bytes:
    return json.dumps({"rank": list(census.rank), "seen": census.term_seen}).encode()


def census_of(raw: bytes) -> Census | None:
    """A posted census; None for a value that is not one (as if not posted)."""
    try:
        posted = json.loads(raw)
        holds, term, number = (int(x) for x in posted["rank"])
        return Census((holds, term, number), int(posted["seen"]))
    except (ValueError, KeyError, TypeError):
        return None
