"""Who may campaign when etcd holds no record the journals can trust
(mrs.replication.census): the most advanced of a majority of the instances, never an
instance behind an answered commit, and an empty one only when every instance has said
what it holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mrs.replication.census import (
    Census,
    history_term,
    may_campaign_by_census,
    record_trusted,
)

EMPTY = Census.of(False, (0, 0), 0, 0)
UNREPLICATED = Census.of(True, (0, 0), 0, 0)
"""Journals of a group that was a single instance before it was replicated."""


def test_ranks_order_what_the_journals_hold() -> None:
    replica_term1 = Census.of(True, (1, 40), 0, 1)
    replica_term2_behind = Census.of(True, (2, 3), 0, 2)
    replica_term2_ahead = Census.of(True, (2, 9), 0, 2)
    active_term2 = Census.of(True, (2, 0), 2, 2)  # its position stays (term, 0)
    ranks = [
        EMPTY,
        UNREPLICATED,
        replica_term1,
        replica_term2_behind,
        replica_term2_ahead,
        active_term2,
    ]
    assert [census.rank for census in ranks] == sorted(census.rank for census in ranks)
    assert len({census.rank for census in ranks}) == len(ranks)
    assert not EMPTY.holds and UNREPLICATED.holds


def test_an_instance_that_holds_journals_needs_a_majority_posted() -> None:
    ahead, behind = Census.of(True, (3, 9), 0, 3), Census.of(True, (3, 4), 0, 3)
    assert not may_campaign_by_census({"a": ahead}, "a", 3)  # alone: the other two may hold more
    assert may_campaign_by_census({"a": ahead, "b": behind}, "a", 3)
    assert not may_campaign_by_census({"a": ahead, "b": behind}, "b", 3)  # never the one behind
    assert not may_campaign_by_census({"b": behind}, "a", 3)  # its own census not posted


def test_equal_ranks_may_all_campaign_and_etcd_picks_one() -> None:
    same = Census.of(True, (2, 5), 0, 2)
    census = {"a": same, "b": same}
    assert may_campaign_by_census(census, "a", 3) and may_campaign_by_census(census, "b", 3)


def test_an_empty_instance_waits_for_every_census() -> None:
    """A new group: all three empty, all three must have posted. An empty instance
    never outranks one that holds the group's history (a group replicated later)."""
    assert not may_campaign_by_census({"a": EMPTY, "b": EMPTY}, "a", 3)
    assert may_campaign_by_census({"a": EMPTY, "b": EMPTY, "c": EMPTY}, "a", 3)
    with_history = {"a": EMPTY, "b": EMPTY, "c": UNREPLICATED}
    assert not may_campaign_by_census(with_history, "a", 3)
    assert may_campaign_by_census(with_history, "c", 3)


def test_a_record_is_trusted_only_if_etcd_is_not_behind_the_journals() -> None:
    assert record_trusted(("a", "b"), 5, history_term((5, 12), 3))
    assert record_trusted(("a",), 4, history_term((3, 7), 4))
    assert not record_trusted(None, 0, 0)  # a new group: the census decides
    assert not record_trusted(None, 0, history_term((2, 8), 0))  # etcd wiped
    assert not record_trusted(("a", "b", "c"), 3, history_term((5, 1), 0))  # an older backup


# ------------------------------------------------------- the rule against a model


def holds_every_answered(position, led, answered_max) -> bool:
    """An instance holds every answered commit: nothing was answered, or it led the
    term of the last one answered or a later term (an active holds every answered
    commit when it wins, and all it commits), or it applied up to the last one."""
    if answered_max is None:
        return True
    return led >= answered_max[0] or position >= answered_max


@st.composite
def histories(draw):
    """A three-instance group's terms, as the kept rules let them happen: each term's
    active holds every answered commit of the terms before (the election rule); in a
    term, each replica that joins applies a prefix of its records, and a record is
    answered once the active and one replica have it. Returns each instance's census
    and (position, led) at the end, and the last record answered ((term, number), or
    None)."""
    names = ("a", "b", "c")
    position = {name: (0, 0) for name in names}
    led = dict.fromkeys(names, 0)
    answered_max = None
    for term in range(1, draw(st.integers(1, 5)) + 1):
        holders = [n for n in names if holds_every_answered(position[n], led[n], answered_max)]
        active = draw(st.sampled_from(holders))
        led[active], position[active] = term, (term, 0)
        records = draw(st.integers(0, 20))
        for name in names:
            if name != active and draw(st.booleans()):  # it joined and applied a prefix
                position[name] = (term, draw(st.integers(0, records)))
                if position[name][1] > 0:
                    answered_max = max(answered_max or (0, 0), position[name])
    census = {
        name: Census.of(True, position[name], led[name], max(position[name][0], led[name]))
        for name in names
    }
    return census, position, led, answered_max


@given(histories(), st.sets(st.sampled_from("abc"), min_size=1))
def test_whoever_the_census_lets_campaign_holds_every_answered_commit(history, posted_names):
    """Whichever instances have posted (the others down, or not yet started)."""
    census, position, led, answered_max = history
    posted = {name: census[name] for name in posted_names}
    allowed = [name for name in posted_names if may_campaign_by_census(posted, name, 3)]
    assert bool(allowed) == (len(posted) >= 2)  # with a majority posted, someone may
    for name in allowed:
        assert holds_every_answered(position[name], led[name], answered_max), name
