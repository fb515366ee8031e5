"""A linked group's notice waiters stay bounded when their notices never come.

Why a user cares: an AK_DEQ or AK_ACK put to another group waits for that group's
notice (got, confirmed) to send its MRS_ACK, with no deadline. When the receiving
group restarts, its memory messages are gone and so are their notices: every such
put left its waiter (holding its reply and its sender's session) in the sending
group for ever, one more set per restart, until the server ran out of memory.
"""

from __future__ import annotations

import logging

import pytest

from mrs.group.peers import WAITERS_SWEEP_MIN, PeerState


class _Reply:
    done = False


class _Reporter:
    """A put's reporter (mrs.group.reply `PutReply.reporter`) of an unanswered AK put."""

    def __init__(self) -> None:
        self.reply = _Reply()
        self.calls = 0

    def __call__(self, notice: object) -> None:
        self.calls += 1


def test_unanswered_waiters_beyond_the_bound_give_way_oldest_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    peer = PeerState(2, waiters_max=WAITERS_SWEEP_MIN)
    reporters = {seq: _Reporter() for seq in range(3 * WAITERS_SWEEP_MIN)}
    with caplog.at_level(logging.WARNING, logger="mrs.links"):
        for seq, reporter in reporters.items():
            peer.wait_for_notice(seq, reporter)

    assert len(peer.waiters) <= 2 * WAITERS_SWEEP_MIN  # swept at each doubling
    newest = 3 * WAITERS_SWEEP_MIN - 1
    assert newest in peer.waiters and 0 not in peer.waiters  # the oldest gave way
    assert list(peer.waiters) == sorted(peer.waiters)  # arrival order kept
    peer.waiters[newest](None)
    assert reporters[newest].calls == 1  # a notice that comes still finds its put
    given_up = [r for r in caplog.records if "notices given up" in r.getMessage()]
    assert given_up and all(r.levelname == "WARNING" for r in given_up)


def test_answered_waiters_go_first_and_unanswered_ones_under_the_bound_stay() -> None:
    peer = PeerState(2, waiters_max=WAITERS_SWEEP_MIN)
    for seq in range(WAITERS_SWEEP_MIN):
        answered = _Reporter()
        answered.reply.done = seq % 2 == 0  # a WF put timed out: nothing to keep
        peer.wait_for_notice(seq, answered)
    assert sorted(peer.waiters) == list(range(1, WAITERS_SWEEP_MIN, 2))
