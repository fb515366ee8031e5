"""The checker's MessageQ-conformance invariants (issue 9) on hand-made histories:
each flags the departure it is for, and leaves the legitimate case alone."""

from __future__ import annotations

from mrs.model import DeliveryMode, Status, Uma
from sim.checker import History, Sent, check

MODE = DeliveryMode


def _put(history: History, message_id: str, mode, uma, status, uma_status, seq=0) -> Sent:
    sent = Sent(message_id, message_id.split(":")[0], "2.10", int(mode), int(uma), True)
    history.record_send(sent)
    history.record_outcome(message_id, int(status), int(uma_status), seq)
    return sent


def _delivered_and_confirmed(history: History, message_id: str) -> None:
    history.record_delivery(message_id, "2.10", int(Status.CONFIRMREQ))
    history.record_confirm(message_id, "2.10")


def test_saf_forced_after_a_dqf_full_is_a_wrong_uma() -> None:
    """The issue-9 bug: after one DQF_FULL the next put was SAF_FORCED/NO_UMA."""
    history = History()
    _put(history, "1.20:0", MODE.WF_DQF, Uma.DLJ, Status.DQF_FULL, Status.DLJ_SUCCESS)
    _put(history, "1.20:1", MODE.WF_DQF, Uma.DLJ, Status.SAF_FORCED, Status.NO_UMA)
    history.dead_letter_journal.add("1.20:0")
    _delivered_and_confirmed(history, "1.20:1")
    assert [problem.split(": ")[0] for problem in check(history).wrong_umas] == ["1.20:1"]


def test_saf_forced_behind_a_saf_backlog_is_right() -> None:
    history = History()
    _put(history, "1.20:0", MODE.WF_SAF, Uma.DISC, Status.STORED, Status.NO_UMA)
    _put(history, "1.21:0", MODE.WF_DQF, Uma.DLJ, Status.SAF_FORCED, Status.NO_UMA)
    for message_id in ("1.20:0", "1.21:0"):
        _delivered_and_confirmed(history, message_id)
    assert check(history).ok


def test_a_failed_put_answers_its_own_uma() -> None:
    history = History()
    _put(history, "1.20:0", MODE.WF_DQF, Uma.DLJ, Status.DQF_FULL, Status.SAF_SUCCESS)
    _delivered_and_confirmed(history, "1.20:0")
    assert check(history).wrong_umas == ["1.20:0: DQF_FULL with UMA DLJ answered SAF_SUCCESS"]


def test_an_mrs_ack_arrives_at_most_once() -> None:
    history = History()
    _put(history, "1.20:0", MODE.AK_CONF, Uma.SAF, Status.SUCCESS, Status.UMA_NA, seq=7)
    _delivered_and_confirmed(history, "1.20:0")
    history.record_mrs_ack(7, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).ok
    history.record_mrs_ack(7, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).mrs_ack_violations == ["1.20:0: 2 MRS_ACKs"]


def _ak_put(history: History, message_id: str, mode, seq: int, target: str = "2.10") -> Sent:
    sent = Sent(message_id, message_id.split(":")[0], target, int(mode), int(Uma.DISC), True)
    history.record_send(sent)
    history.record_outcome(message_id, int(Status.SUCCESS), int(Status.UMA_NA), seq)
    return sent


def test_an_mrs_ack_that_never_arrives_is_flagged() -> None:
    """An AK_DQF message delivered and an AK_CONF message confirmed: each must have
    had its MRS_ACK; dropping either one is a violation."""
    history = History()
    _ak_put(history, "1.20:0", MODE.AK_DQF, seq=7)
    _ak_put(history, "1.20:1", MODE.AK_CONF, seq=8)
    for message_id in ("1.20:0", "1.20:1"):
        _delivered_and_confirmed(history, message_id)
    history.record_mrs_ack(7, int(Status.STORED), int(Status.NO_UMA))
    history.record_mrs_ack(8, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).ok
    history.mrs_ack_counts.pop(8)
    history.mrs_acks.pop(8)
    assert check(history).mrs_ack_violations == ["1.20:1: no MRS_ACK (AK_CONF reached its point)"]
    history.mrs_ack_counts.pop(7)
    history.mrs_acks.pop(7)
    assert [p.split(":")[1] for p in check(history).mrs_ack_violations] == ["0", "1"]


def test_an_mrs_ack_is_owed_only_once_the_interest_point_is_reached() -> None:
    """AK_CONF delivered but not confirmed owes nothing yet; a failed put whose UMA
    put it in the DLJ owes its (failure) MRS_ACK."""
    history = History()
    _ak_put(history, "1.20:0", MODE.AK_CONF, seq=7)
    history.record_delivery("1.20:0", "2.10", int(Status.CONFIRMREQ))
    history.record_unsure_confirm("1.20:0")  # the confirm's answer never came
    assert check(history).ok
    _ak_put(history, "1.20:1", MODE.AK_SAF, seq=8)
    history.dead_letter_journal.add("1.20:1")
    assert check(history).mrs_ack_violations == ["1.20:1: no MRS_ACK (AK_SAF reached its point)"]
    history.record_mrs_ack(8, int(Status.SAF_DEVICE_FAIL), int(Status.DLJ_SUCCESS))
    assert check(history).mrs_ack_violations == []


def test_a_crash_of_the_response_queues_group_excuses_a_missing_mrs_ack() -> None:
    """The MRS_ACK waits in a memory queue: a crash of its group after the put may
    have emptied it. A crash of another group excuses nothing for a recoverable put."""
    history = History()
    _ak_put(history, "1.20:0", MODE.AK_DQF, seq=7)
    _delivered_and_confirmed(history, "1.20:0")
    history.record_crash(2)
    assert check(history).mrs_ack_violations == ["1.20:0: no MRS_ACK (AK_DQF reached its point)"]
    history.record_crash(1)
    assert check(history).ok


def test_a_crash_of_the_target_group_excuses_only_a_nonrecoverable_notice() -> None:
    """AK_DEQ to another group: the notice of its get is kept in memory there, so a
    crash of the target group after the put excuses a missing MRS_ACK; a link fault
    does not (the notice is sent again), and the crash excuses nothing for AK_DQF."""
    history = History()
    _ak_put(history, "1.20:0", MODE.AK_DEQ, seq=7)
    _ak_put(history, "1.20:1", MODE.AK_DQF, seq=8)
    for message_id in ("1.20:0", "1.20:1"):
        _delivered_and_confirmed(history, message_id)
    history.record_fault("partition", "g1")
    assert [problem.split(":")[1] for problem in check(history).mrs_ack_violations] == ["0", "1"]
    history.record_crash(2)
    assert check(history).mrs_ack_violations == ["1.20:1: no MRS_ACK (AK_DQF reached its point)"]


def test_an_mrs_ack_must_say_what_its_mode_reached() -> None:
    history = History()
    _ak_put(history, "1.20:0", MODE.AK_CONF, seq=7)
    _delivered_and_confirmed(history, "1.20:0")
    history.record_mrs_ack(7, int(Status.STORED), int(Status.NO_UMA))
    assert check(history).ok  # STORED: the first copy of a duplicate
    _ak_put(history, "1.20:1", MODE.AK_CONF, seq=8)
    history.record_delivery("1.20:1", "2.10", int(Status.CONFIRMREQ))
    history.record_mrs_ack(8, int(Status.SUCCESS), int(Status.NO_UMA))
    assert check(history).mrs_ack_violations == [
        "1.20:1: AK_CONF's MRS_ACK says confirmed, but no confirm was ever sent"
    ]
    history.mrs_acks[8] = (int(Status.ENQUEUED), int(Status.NO_UMA))
    assert check(history).mrs_ack_violations == ["1.20:1: AK_CONF's MRS_ACK says ENQUEUED"]


def test_an_ak_conf_mrs_ack_is_collected_after_the_drain_that_confirms_it() -> None:
    """Regression (issue 9, "seed 2's missing AK_CONF MRS_ACK"): the final drain
    collected group 1's response queues before it drained group 2's queues, so an
    AK_CONF message from 1.20 to 2.10 confirmed in that drain had its MRS_ACK (sent
    when the confirm notice reached group 1) arrive after the collection. Seed 25 is
    such a run (seed 2 was, before the swarm's scheduling was seeded the same way in
    the shell as under pytest)."""
    import logging

    from sim.swarm import run_seed

    logging.disable(logging.CRITICAL)
    try:
        history, verdict = run_seed(25)
    finally:
        logging.disable(logging.NOTSET)
    sent = history.sent["1.20:42"]
    assert DeliveryMode(sent.mode) is MODE.AK_CONF and sent.target == "2.10"
    assert "1.20:42" in {message_id for message_id, _, _ in history.confirms}
    assert history.mrs_ack_counts[sent.seq] == 1
    assert history.mrs_acks[sent.seq][0] == int(Status.SUCCESS)
    assert verdict.ok, verdict.counts()


def test_a_build_that_drops_mrs_acks_is_caught_in_the_swarm(monkeypatch) -> None:
    """A broken build that loses one MRS_ACK in seven (the server's own send_mrs_ack,
    patched): the checker reports each of three quick seeds."""
    import logging

    import mrs.group.umas
    from sim.swarm import QUICK_WORKLOAD, run_seed

    send = mrs.group.umas.Umas.send_mrs_ack

    def lossy(group, response_queue, psb) -> None:
        if psb.seq % 7:
            send(group, response_queue, psb)

    monkeypatch.setattr(mrs.group.umas.Umas, "send_mrs_ack", lossy)
    logging.disable(logging.CRITICAL)
    try:
        verdicts = [run_seed(seed, shape=QUICK_WORKLOAD)[1] for seed in range(3)]
    finally:
        logging.disable(logging.NOTSET)
    for verdict in verdicts:
        assert any("no MRS_ACK" in problem for problem in verdict.mrs_ack_violations)
