"""The replicated nemesis's figures from what the clients saw (sim.replicated_nemesis)."""

from __future__ import annotations

from sim.replicated_nemesis import failover_times_s, outages_s


def test_a_failover_is_the_last_answer_of_the_old_active_to_the_first_of_the_new() -> None:
    answers = [(1.0, "a"), (2.0, "a"), (5.5, "b"), (6.0, "b"), (6.5, "b"), (9.0, "c")]
    assert failover_times_s(list(reversed(answers))) == [3.5, 2.5]  # sorted by time first
    assert failover_times_s([(1.0, "a"), (7.0, "a")]) == []  # same instance: no failover


def test_the_longest_gap_of_a_fault_runs_to_the_first_answer_after_the_heal() -> None:
    answers = [(1.0, "a"), (2.0, "a"), (3.0, "a"), (8.0, "a"), (8.5, "a")]
    windows = [("restart-etcd", 2.5, 6.0), ("kill-active", 8.2, 8.3)]
    assert outages_s(answers, windows) == {"restart-etcd": [5.0], "kill-active": [0.5]}
