"""The inline writer's commit pacing (mrs.storage.commit_pacing): a busy commit makes the next
one wait for the gap, a light one never does."""

from __future__ import annotations

import pytest

from mrs.storage.commit_pacing import CommitPacing


def test_first_commit_goes_at_once() -> None:
    assert CommitPacing(gap_s=0.002, busy_batches_min=32).wait_s(now_s=5.0) == 0.0


def test_after_a_busy_commit_the_next_waits_out_the_gap() -> None:
    pacing = CommitPacing(gap_s=0.002, busy_batches_min=32)
    pacing.committed(batches=200, end_s=10.0)
    assert pacing.wait_s(now_s=10.0005) == pytest.approx(0.0015)
    assert pacing.wait_s(now_s=10.002) == 0.0
    assert pacing.wait_s(now_s=11.0) == 0.0  # long past: no wait, never negative


def test_a_light_commit_never_holds_the_next_back() -> None:
    """A lightly loaded group (the paced latency shape) answers as soon as it can."""
    pacing = CommitPacing(gap_s=0.002, busy_batches_min=32)
    pacing.committed(batches=200, end_s=10.0)
    pacing.committed(batches=31, end_s=10.001)
    assert pacing.wait_s(now_s=10.001) == 0.0
    pacing.committed(batches=32, end_s=10.002)
    assert pacing.wait_s(now_s=10.002) == pytest.approx(0.002)


def test_it_remembers_how_many_batches_the_last_commit_carried() -> None:
    """The committer holds a commit back only until as many are pending again."""
    pacing = CommitPacing(gap_s=0.002, busy_batches_min=32)
    assert pacing.last_batches == 0
    pacing.committed(batches=200, end_s=10.0)
    assert pacing.last_batches == 200
    pacing.committed(batches=7, end_s=10.5)
    assert pacing.last_batches == 7
